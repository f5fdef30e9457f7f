//! The framework: Bub's turn pipeline, the `running()` scope and the app
//! hooks, over a host's plugins.
//!
//! - [`turn`](Framework::process_inbound) — `resolve_session → load_state →
//!   build_prompt → model → save_state (finally) → render_outbound →
//!   dispatch_outbound` (spec §1.1);
//! - [`scope`] — `running()`: lifespans, tape store, steering inbox, the
//!   per-session environment cache (spec §1.2, §5);
//! - [`app`] — the app-hook accessors (system prompt, model options,
//!   channels, tools, sidecars, tape context, admission, steering);
//! - [`envelope`], [`prompt`] — Bub's loose message and prompt shapes
//!   (re-exported from `bub_abi`, where plugins read them too).

pub mod app;
pub use bub_abi::envelope;
mod error;
pub use bub_abi::prompt;
pub mod scope;
mod turn;

use std::{path::PathBuf, sync::Arc};

use bub_abi::types::{Envelope, StateMap};
use serde::Serialize;
use serde_json::Value;

pub use self::{error::FrameworkError, scope::Running};
use crate::{resources::Channel, Host, Runtime};

/// What one turn produced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnResult {
    /// The resolved session.
    pub session_id: String,
    /// The prompt, as user content.
    pub prompt: Vec<Value>,
    /// The model's output (or the fallback).
    pub model_output: String,
    /// The rendered outbound messages, in dispatch order.
    pub outbounds: Vec<Envelope>,
    /// The turn state at the end.
    pub state: StateMap,
    /// The model's stream events, in order (streamed turns only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<bub_abi::types::StreamEvent>,
}

/// Runs turns and scopes over a host's plugins. Cheap to clone; clones share
/// the scope (tape store, inbox, environment cache).
#[derive(Clone)]
pub struct Framework {
    runtime: Runtime,
    home: PathBuf,
    workspace: PathBuf,
    // The workspace as turn states and providers receive it, made once.
    workspace_text: Arc<str>,
    scope: Arc<scope::Shared>,
}

impl Framework {
    /// A framework over `host`, working in `workspace`.
    pub fn new(host: &Host, workspace: impl Into<PathBuf>) -> Self {
        let workspace = workspace.into();
        let workspace_text = workspace.display().to_string().into();
        Framework {
            runtime: host.runtime(),
            home: host.places().home.clone(),
            workspace,
            workspace_text,
            scope: Default::default(),
        }
    }

    /// The dispatcher.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Binds `channels` as the stream router: a streamed turn shows each
    /// model event to the channel its message names (`output_channel`, else
    /// `channel`), as Bub's channel manager does. Replaces earlier bindings.
    /// Outbounds of turns and errors go to the bound channel they name
    /// (see `runtime::router`).
    pub fn bind_channels(&self, channels: Vec<Channel>) {
        self.runtime.bind_channels(channels);
    }

    /// The deadline of a resource's scope methods (the host's
    /// `RuntimeSettings::lifespan_timeout`).
    pub fn lifespan_timeout(&self) -> Option<std::time::Duration> {
        self.runtime.registry().settings().lifespan_timeout
    }

    /// The host's home (`$BUB_HOME`): config, tapes.
    pub fn home(&self) -> &std::path::Path {
        &self.home
    }

    /// The workspace (`-w/--workspace`).
    pub fn workspace(&self) -> &std::path::Path {
        &self.workspace
    }
}
