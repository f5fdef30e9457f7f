//! [`Hook<T>`]: what an SDK hook method returns, and how values cross.

use std::{future::Future, marker::PhantomData, pin::Pin};

use abi_stable::std_types::{RResult, RString, RVec};

use crate::{
    abi::{DispatchMode, HookError, HookReturn, HookValue},
    sdk::bridge,
    Object,
};

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, HookError>> + Send + 'static>>;

enum Inner<T> {
    NotImplemented,
    Raw(HookReturn),
    Ready(Result<T, HookError>),
    Future(BoxFuture<T>),
}

/// The result of one SDK hook method: ready now, or a future.
///
/// You rarely build it by hand: `#[bub_abi::plugin]` turns a plain `fn` into
/// [`Hook::ready`] and an `async fn` into [`Hook::future`].
pub struct Hook<T> {
    inner: Inner<T>,
    _t: PhantomData<fn() -> T>,
}

impl<T: IntoHookValue> Hook<T> {
    /// The default of every trait method: the plugin does not implement it.
    pub fn not_implemented() -> Self {
        Hook { inner: Inner::NotImplemented, _t: PhantomData }
    }

    /// A result available now.
    pub fn ready(value: T) -> Self {
        Hook { inner: Inner::Ready(Ok(value)), _t: PhantomData }
    }

    /// A fallible result available now; `Err` becomes a hook error.
    pub fn ready_result<E: std::fmt::Display>(value: Result<T, E>) -> Self {
        Hook { inner: Inner::Ready(value.map_err(|e| HookError::plugin(e.to_string()))), _t: PhantomData }
    }

    /// An error.
    pub fn error(error: HookError) -> Self {
        Hook { inner: Inner::Ready(Err(error)), _t: PhantomData }
    }

    /// An async result. The future runs with the plugin's own tokio runtime
    /// entered, so `tokio::time`, `tokio::net` and `tokio::spawn` work.
    pub fn future<F>(future: F) -> Self
    where
        F: Future<Output = T> + Send + 'static,
    {
        Hook { inner: Inner::Future(Box::pin(async move { Ok(future.await) })), _t: PhantomData }
    }

    /// A fallible async result; `Err` becomes a hook error.
    pub fn future_result<F, E>(future: F) -> Self
    where
        F: Future<Output = Result<T, E>> + Send + 'static,
        E: std::fmt::Display,
    {
        Hook {
            inner: Inner::Future(Box::pin(async move { future.await.map_err(|e| HookError::plugin(e.to_string())) })),
            _t: PhantomData,
        }
    }

    /// Returns exactly this FFI value, bypassing the typed conversion. For
    /// plugins that build results themselves (and tests of malformed ones).
    pub fn from_return(ret: HookReturn) -> Self {
        Hook { inner: Inner::Raw(ret), _t: PhantomData }
    }

    /// Whether this is the "not implemented" default.
    pub fn is_not_implemented(&self) -> bool {
        matches!(self.inner, Inner::NotImplemented)
    }

    /// Converts into the FFI return value.
    #[doc(hidden)]
    pub fn into_return(self, _mode: DispatchMode) -> HookReturn {
        match self.inner {
            Inner::NotImplemented => HookReturn::NONE,
            Inner::Raw(r) => r,
            Inner::Ready(r) => HookReturn::Ready(to_result(r)),
            Inner::Future(f) => HookReturn::Pending(bridge::to_ffi(async move { to_result(f.await) })),
        }
    }
}

fn to_result<T: IntoHookValue>(r: Result<T, HookError>) -> RResult<HookValue, HookError> {
    match r.and_then(IntoHookValue::into_hook_value) {
        Ok(v) => RResult::ROk(v),
        Err(e) => RResult::RErr(e),
    }
}

/// A value a hook may return. `None` (and `()`) is Python's `None`.
pub trait IntoHookValue: Send + 'static {
    /// Converts into the FFI value.
    fn into_hook_value(self) -> Result<HookValue, HookError>;
}

impl IntoHookValue for () {
    fn into_hook_value(self) -> Result<HookValue, HookError> {
        Ok(HookValue::None)
    }
}

impl IntoHookValue for HookValue {
    fn into_hook_value(self) -> Result<HookValue, HookError> {
        Ok(self)
    }
}

impl<T: ToHookValue> IntoHookValue for Option<T> {
    fn into_hook_value(self) -> Result<HookValue, HookError> {
        match self {
            None => Ok(HookValue::None),
            Some(v) => v.to_hook_value(),
        }
    }
}

/// A non-None value a hook may return.
pub trait ToHookValue: Send + 'static {
    /// Converts into the FFI value.
    fn to_hook_value(self) -> Result<HookValue, HookError>;
}

/// Serializes a JSON-like value for the host.
pub fn json_value<T: serde::Serialize>(value: &T) -> Result<HookValue, HookError> {
    serde_json::to_string(value)
        .map(|s| HookValue::Json(RString::from(s)))
        .map_err(|e| HookError::new("type", format!("result could not be serialized: {e}")))
}

macro_rules! json_returns {
    ($($t:ty),* $(,)?) => {$(
        impl ToHookValue for $t {
            fn to_hook_value(self) -> Result<HookValue, HookError> {
                json_value(&self)
            }
        }
    )*};
}

json_returns!(
    String,
    bool,
    i64,
    f64,
    serde_json::Value,
    serde_json::Map<String, serde_json::Value>,
    Vec<serde_json::Value>,
    crate::types::ModelOptions,
    crate::types::AdmitDecision,
    crate::types::BeforeLlmCall,
    crate::types::ToolCallDecision,
);

impl ToHookValue for Object {
    fn to_hook_value(self) -> Result<HookValue, HookError> {
        Ok(HookValue::Object(self.into_handle()))
    }
}

impl ToHookValue for Vec<Object> {
    fn to_hook_value(self) -> Result<HookValue, HookError> {
        Ok(HookValue::Objects(self.into_iter().map(Object::into_handle).collect::<RVec<_>>()))
    }
}

/// A raw JSON text returned as-is (the host validates it). Lets a plugin
/// return exactly the bytes it wants, e.g. in tests of malformed results.
#[derive(Debug, Clone)]
pub struct RawJson(pub String);

impl ToHookValue for RawJson {
    fn to_hook_value(self) -> Result<HookValue, HookError> {
        Ok(HookValue::Json(RString::from(self.0)))
    }
}
