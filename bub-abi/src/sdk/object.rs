//! [`Object`]: an object that crosses the boundary (tape store, channel, tool, …).

use std::{future::Future, pin::Pin, sync::Arc};

use abi_stable::{
    sabi_trait::TD_Opaque,
    std_types::{RArc, RResult, RStr, RString},
};
use async_ffi::FfiFuture;
use serde_json::Value;

use crate::{
    abi::{ForeignObject, ForeignObject_TO, HookError, ObjectHandle},
    sdk::bridge,
};

/// A boxed future returned by [`ObjectImpl::invoke`].
pub type ObjectFuture = Pin<Box<dyn Future<Output = Result<Value, HookError>> + Send + 'static>>;

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
        let fut = self.handle.invoke(RStr::from_str(method), RStr::from_str(&args.to_string()));
        match fut.await {
            RResult::ROk(s) => serde_json::from_str(&s)
                .map_err(|e| HookError::new("type", format!("{method}: result is not JSON: {e}"))),
            RResult::RErr(e) => Err(e),
        }
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

    fn invoke(&self, method: RStr<'_>, args: RStr<'_>) -> FfiFuture<RResult<RString, HookError>> {
        let parsed = serde_json::from_str::<Value>(args.as_str());
        let fut = match parsed {
            Ok(v) => Some(self.0.invoke(method.as_str(), v)),
            Err(_) => None,
        };
        let method = method.as_str().to_owned();
        bridge::to_ffi(async move {
            let Some(fut) = fut else {
                return RResult::RErr(HookError::new("args", format!("{method}: arguments are not JSON")));
            };
            match fut.await {
                Ok(v) => RResult::ROk(RString::from(v.to_string())),
                Err(e) => RResult::RErr(e),
            }
        })
    }
}
