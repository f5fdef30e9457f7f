//! Calling back into the host from inside a hook (ABI 2.1).
//!
//! [`call_rest`] is pluggy's `subset_hook_caller` for the common case: a
//! plugin that decorates whatever the rest of the chain would answer. An
//! OpenTelemetry-style store wrapper answers `provide_tape_store` with its
//! own store around the one the lower-priority plugins provide:
//!
//! ```
//! use bub_abi::{
//!     host::{call_rest, Rest},
//!     resources::{clients::TapeStoreClient, Fut, TapeStore},
//!     types::{TapeEntry, TapeQuery},
//!     BoxError, HookId, Object, Plugin, PluginContext,
//! };
//!
//! pub struct Traced;
//!
//! struct TracedStore(Object);
//!
//! impl TapeStore for TracedStore {
//!     fn list_tapes(&self) -> impl Fut<Vec<String>> {
//!         let inner = self.0.clone();
//!         async move { Ok(TapeStoreClient(&inner).list_tapes().await?) }
//!     }
//!     fn reset(&self, tape: String) -> impl Fut<()> {
//!         let inner = self.0.clone();
//!         async move { Ok(TapeStoreClient(&inner).reset(&tape).await?) }
//!     }
//!     fn fetch_all(&self, query: TapeQuery) -> impl Fut<Vec<TapeEntry>> {
//!         let inner = self.0.clone();
//!         async move { Ok(TapeStoreClient(&inner).fetch_all(&query).await?) }
//!     }
//!     fn append(&self, tape: String, entry: TapeEntry) -> impl Fut<TapeEntry> {
//!         let inner = self.0.clone();
//!         async move {
//!             tracing::info!(tape, kind = entry.kind, "append");
//!             Ok(TapeStoreClient(&inner).append(&tape, &entry).await?)
//!         }
//!     }
//! }
//!
//! #[bub_abi::plugin]
//! impl Plugin for Traced {
//!     fn new(_ctx: &PluginContext) -> Result<Self, BoxError> {
//!         Ok(Traced)
//!     }
//!
//!     #[tryfirst]
//!     fn provide_tape_store(&self) -> Option<Object> {
//!         match call_rest(self, HookId::ProvideTapeStore, serde_json::json!({})).now() {
//!             Ok(Rest::Object(inner)) => Some(Object::tape_store(TracedStore(inner))),
//!             _ => None, // nobody else provides one: neither do we
//!         }
//!     }
//! }
//!
//! bub_abi::export_plugin!(Traced);
//! # fn main() {}
//! ```

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use abi_stable::std_types::RStr;
use async_ffi::FfiFuture;

use crate::{
    abi::{ErrorKind, HookError, HookReturn, HostServicesRef, Instance, Outcome},
    HookId, Object,
};

static HOST: crate::sync::SetOnce<HostServicesRef> = crate::sync::SetOnce::new();

/// The host's ABI `(major, minor)`, once a host initialised this plugin.
pub(crate) fn host_minor() -> Option<(u64, u64)> {
    let version = HOST.get()?.abi_version();
    let mut parts = version.as_str().split('.').map(|p| p.parse::<u64>().ok());
    Some((parts.next()??, parts.next()??))
}

/// Remembers the host's services (at `init`).
pub(crate) fn install(host: HostServicesRef) {
    let _ = HOST.set(host);
}

/// What the rest of a chain answered.
#[derive(Debug)]
pub enum Rest {
    /// Nobody answered.
    None,
    /// A value (a first-result hook), or the list of values (a broadcast).
    Value(serde_json::Value),
    /// An object (a first-result hook such as `provide_tape_store`).
    Object(Object),
    /// The objects a broadcast answered (`provide_tools`, …), in call order.
    Objects(Vec<Object>),
}

/// The call in flight: await it in an async hook, or take its answer with
/// [`now`](RestCall::now) in a sync one (sync hooks' chains answer at once).
pub struct RestCall(Result<FfiFuture<HookReturn>, HookError>);

/// Calls `hook`'s implementations that come after `plugin` (the instance
/// the host registered; `self` inside a hook) in call order, with `args`
/// (the hook's arguments by name, as JSON). See the module docs.
pub fn call_rest<P: 'static>(plugin: &P, hook: HookId, args: serde_json::Value) -> RestCall {
    let Some(host) = HOST.get() else {
        return RestCall(Err(HookError::new(ErrorKind::ERROR, "call_rest: the plugin was not initialised by a host")));
    };
    #[cfg(not(feature = "__test-abi-prev-minor"))]
    let call = host.call_rest();
    #[cfg(feature = "__test-abi-prev-minor")]
    let call: Option<fn(Instance, RStr<'_>, crate::Value) -> FfiFuture<HookReturn>> = {
        let _ = host;
        None
    };
    let Some(call) = call else {
        return RestCall(Err(HookError::new(
            ErrorKind::UNSUPPORTED,
            "call_rest needs a host of ABI 2.1 or later; this bub is older: update it",
        )));
    };
    let args = match crate::Value::from_serialize(&args) {
        Ok(v) => v,
        Err(e) => return RestCall(Err(e)),
    };
    let instance = Instance(plugin as *const P as *const std::ffi::c_void);
    RestCall(Ok(call(instance, RStr::from_str(hook.name()), args)))
}

fn read(ret: HookReturn) -> Result<Rest, HookError> {
    match ret.into_outcome(crate::value::vtable()) {
        Outcome::None => Ok(Rest::None),
        Outcome::Value(v) => v
            .deserialize()
            .map(Rest::Value)
            .map_err(|e| HookError::new(ErrorKind::TYPE, format!("call_rest: unreadable answer: {e}"))),
        Outcome::Object(o) => Ok(Rest::Object(Object::from_handle(o))),
        Outcome::Objects(list) => Ok(Rest::Objects(list.into_iter().map(Object::from_handle).collect())),
        Outcome::Error(e) => Err(e),
        Outcome::Pending(_) => Err(HookError::new(ErrorKind::ERROR, "call_rest: the host answered a nested future")),
    }
}

impl RestCall {
    /// The answer of a sync hook's chain, which is ready at once (an async
    /// hook's chain is not: await the call instead).
    pub fn now(self) -> Result<Rest, HookError> {
        let mut fut = self.0?;
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match Pin::new(&mut fut).poll(&mut cx) {
            Poll::Ready(ret) => read(ret),
            Poll::Pending => Err(HookError::new(
                ErrorKind::ERROR,
                "call_rest(..).now(): the rest of this chain is asynchronous; `.await` it from an async hook",
            )),
        }
    }
}

impl Future for RestCall {
    type Output = Result<Rest, HookError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            Err(e) => Poll::Ready(Err(e.clone())),
            Ok(fut) => Pin::new(fut).poll(cx).map(read),
        }
    }
}
