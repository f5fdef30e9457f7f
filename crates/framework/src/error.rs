//! [`FrameworkError`]: why a turn, a scope or an app hook failed.

use bub_abi::types::ErrorInfo;

use bub_runtime::{error::HookFailure, resources::ResourceError};

/// Why a turn, a `running()` scope or an app-hook accessor failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FrameworkError {
    /// A plugin failed in a hook.
    #[error(transparent)]
    Hook(#[from] HookFailure),
    /// A resource (tape store, lifespan, environment, …) failed in a method
    /// (boxed: rare, and large).
    #[error(transparent)]
    Resource(Box<ResourceError>),
    /// A hook returned a value of the wrong type (Bub's `TypeError`).
    #[error("TypeError: {0}")]
    Type(String),
    /// A prompt or envelope that cannot be used (Bub's `invalid_input`).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A lookup Bub answers with `ValueError` (an unknown plugin name, …).
    #[error("ValueError: {0}")]
    Value(String),
    /// `running()` was entered while a scope of the same framework is open.
    #[error(
        "a running() scope is already open on this framework; scopes must not overlap. Exit the first scope, or use a second Framework"
    )]
    ScopeOverlap,
}

impl FrameworkError {
    /// As handed to `on_error` observers.
    pub fn info(&self) -> ErrorInfo {
        let kind = match self {
            FrameworkError::Hook(f) => f.error.kind.to_string(),
            FrameworkError::Resource(r) => r.error.kind.to_string(),
            FrameworkError::Type(_) => "TypeError".into(),
            FrameworkError::InvalidInput(_) => "invalid_input".into(),
            FrameworkError::Value(_) => "ValueError".into(),
            FrameworkError::ScopeOverlap => "RuntimeError".into(),
        };
        let message = match self {
            FrameworkError::Type(m) | FrameworkError::InvalidInput(m) | FrameworkError::Value(m) => m.clone(),
            other => other.to_string(),
        };
        ErrorInfo { kind, message, details: None }
    }
}

impl From<ResourceError> for FrameworkError {
    fn from(e: ResourceError) -> Self {
        FrameworkError::Resource(Box::new(e))
    }
}

impl From<serde_json::Error> for FrameworkError {
    fn from(e: serde_json::Error) -> Self {
        FrameworkError::InvalidInput(format!("a value could not be serialized: {e}"))
    }
}
