//! [`Object`]: an object that crosses the boundary (tape store, channel, tool, …).

use std::{future::Future, pin::Pin, sync::Arc};

use abi_stable::{
    sabi_trait::TD_Opaque,
    std_types::{RArc, RResult, RStr, RString},
};
use async_ffi::FfiFuture;
use serde_json::Value;

use crate::{
    abi::{ErrorKind, ForeignObject, ForeignObject_TO, HookError, ObjectHandle},
    sdk::bridge,
};

/// A boxed future returned by [`ObjectImpl::invoke`].
pub type ObjectFuture = Pin<Box<dyn Future<Output = Result<Value, HookError>> + Send + 'static>>;

/// A boxed future returned by [`ObjectImpl::invoke_value`].
pub type ValueFuture = Pin<Box<dyn Future<Output = Result<crate::Value, HookError>> + Send + 'static>>;

/// Implement this to hand an object to the host (or to receive one from it).
pub trait ObjectImpl: Send + Sync + 'static {
    /// What the object is: `tape_store`, `channel`, `tool`, `stream`, ….
    fn kind(&self) -> &str;
    /// Its name, where it has one.
    fn name(&self) -> String {
        String::new()
    }
    /// Calls `method` with JSON `args`.
    fn invoke(&self, method: &str, args: Value) -> ObjectFuture;

    /// Calls `method` with host-value `args` and answers a host value: what
    /// the host calls. The default reads the arguments as JSON and calls
    /// [`invoke`](Self::invoke). The typed objects of [`resources`](crate::sdk::resources)
    /// read each argument and build their answer as host values directly,
    /// with no JSON tree in between (a store's `fetch_all` of a long tape
    /// was converted twice).
    fn invoke_value(&self, method: &str, args: crate::Value) -> ValueFuture {
        match args.deserialize::<Value>() {
            Ok(v) => {
                let fut = self.invoke(method, v);
                Box::pin(async move { fut.await.map(|v| crate::Value::from(&v)) })
            }
            Err(e) => {
                let e = HookError::new(ErrorKind::ARGS, format!("{method}: arguments could not be read: {e}"));
                Box::pin(async move { Err(e) })
            }
        }
    }
}

/// An object crossing the boundary, cheap to clone.
#[derive(Clone)]
pub struct Object {
    handle: ObjectHandle,
}

impl std::fmt::Debug for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Object({}:{})", self.kind(), self.name())
    }
}

impl Object {
    /// Wraps a Rust object.
    pub fn new(object: impl ObjectImpl) -> Self {
        let adapter = Adapter(Arc::new(object));
        Object { handle: ForeignObject_TO::from_ptr(RArc::new(adapter), TD_Opaque) }
    }

    /// Wraps an FFI handle.
    pub fn from_handle(handle: ObjectHandle) -> Self {
        Object { handle }
    }

    /// The FFI handle, borrowed.
    pub fn handle(&self) -> &ObjectHandle {
        &self.handle
    }

    /// The FFI handle.
    pub fn into_handle(self) -> ObjectHandle {
        self.handle
    }

    /// What the object is.
    pub fn kind(&self) -> String {
        self.handle.kind().into_string()
    }

    /// Its name.
    pub fn name(&self) -> String {
        self.handle.name().into_string()
    }

    /// Calls `method` with JSON `args` and awaits the JSON result.
    pub async fn invoke(&self, method: &str, args: &Value) -> Result<Value, HookError> {
        let fut = self.handle.invoke(RStr::from_str(method), crate::Value::from(args));
        match fut.await {
            RResult::ROk(v) => v
                .deserialize()
                .map_err(|e| HookError::new(ErrorKind::TYPE, format!("{method}: the result could not be read: {e}"))),
            RResult::RErr(e) => Err(e),
        }
    }

    /// Calls `method` with host-value `args` and awaits the host-value
    /// result (no conversion on either side).
    pub async fn invoke_value(&self, method: &str, args: crate::Value) -> Result<crate::Value, HookError> {
        self.handle.invoke(RStr::from_str(method), args).await.into_result()
    }
}

#[derive(Clone)]
struct Adapter(Arc<dyn ObjectImpl>);

impl ForeignObject for Adapter {
    fn kind(&self) -> RString {
        RString::from(self.0.kind())
    }

    fn name(&self) -> RString {
        RString::from(self.0.name())
    }

    fn invoke(&self, method: RStr<'_>, args: crate::Value) -> FfiFuture<RResult<crate::Value, HookError>> {
        // The raw arguments stay reachable while the method runs, so live
        // objects in them (which JSON cannot carry) are found with
        // [`live_argument`].
        let raw = args.clone();
        let fut = self.0.invoke_value(method.as_str(), args);
        bridge::to_ffi(LIVE_ARGUMENTS.scope(raw, async move { fut.await.into() }))
    }
}

tokio::task_local! {
    // The arguments of the object method running in this task.
    static LIVE_ARGUMENTS: crate::Value;
}

/// Inside one of your object's methods (a tool's `call_in`, …): the live
/// object at `path` in the method's arguments (ABI 2.2), e.g.
/// `["context", "tape"]`. JSON cannot carry objects, so the typed
/// arguments your method receives show a marker there; this finds the
/// object itself. `None` outside a method, or where there is none.
pub fn live_argument(path: &[&str]) -> Option<Object> {
    LIVE_ARGUMENTS
        .try_with(|args| {
            let mut at = args.as_ref();
            for key in path {
                at = at.get(key)?;
            }
            at.live_object()
        })
        .ok()
        .flatten()
}
