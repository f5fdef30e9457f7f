//! [`Hook<T>`]: what an SDK hook method returns, and how values cross.

use std::{future::Future, marker::PhantomData, pin::Pin};

use abi_stable::std_types::RVec;

use crate::{
    abi::{DispatchMode, ErrorKind, HookError, HookReturn},
    sdk::bridge,
    Object, Value,
};

/// The result of one SDK hook method: ready now, or a future.
///
/// You rarely build it by hand: `#[bub_abi::plugin]` turns a plain `fn` into
/// [`Hook::ready`] and an `async fn` into [`Hook::future`]. A ready value is
/// converted to its FFI form as soon as it is built. A future is boxed once
/// and, when the host will await it, polled once before the call returns:
/// one that finishes then (most `async fn` hooks) goes back as a ready value,
/// with no `FfiFuture` built, polled through the boundary and dropped.
pub struct Hook<T> {
    ret: Ret,
    _t: PhantomData<fn() -> T>,
}

/// What a hook method built.
enum Ret {
    /// The FFI return itself.
    Return(Words),
    /// An async result not yet polled.
    Future(Pin<Box<dyn Future<Output = HookReturn> + Send>>),
}

impl<T: IntoHookValue> Hook<T> {
    /// The default of every trait method: the plugin does not implement it.
    pub fn not_implemented() -> Self {
        Self::from_return(HookReturn::NONE)
    }

    /// A result available now.
    #[inline]
    pub fn ready(value: T) -> Self {
        Self::from_return(finish(value.into_hook_value()))
    }

    /// Any serializable value, for a hook whose standard return type is a
    /// value (a typed struct instead of a `serde_json::Map`, say). It is
    /// built as a host value; the host checks its shape when it reads it.
    pub fn json<V: serde::Serialize + ?Sized>(value: &V) -> Self {
        Self::from_return(finish(json_value(value)))
    }

    /// A fallible result available now; `Err` becomes a hook error.
    pub fn ready_result<E: std::fmt::Display>(value: Result<T, E>) -> Self {
        let r = value.map_err(|e| HookError::plugin(e.to_string())).and_then(IntoHookValue::into_hook_value);
        Self::from_return(finish(r))
    }

    /// An error.
    pub fn error(error: HookError) -> Self {
        Self::from_return(HookReturn::error(error))
    }

    /// An async result. The future runs with the plugin's own tokio runtime
    /// entered, so `tokio::time`, `tokio::net` and `tokio::spawn` work (the
    /// runtime's thread starts only once a future waits or spawns).
    pub fn future<F>(future: F) -> Self
    where
        F: Future<Output = T> + Send + 'static,
    {
        Self::deferred(async move { finish(future.await.into_hook_value()) })
    }

    /// An async result of any serializable value (see [`json`](Self::json)).
    pub fn future_json<F, V>(future: F) -> Self
    where
        F: Future<Output = V> + Send + 'static,
        V: serde::Serialize,
    {
        Self::deferred(async move { finish(json_value(&future.await)) })
    }

    /// A fallible async result; `Err` becomes a hook error.
    pub fn future_result<F, E>(future: F) -> Self
    where
        F: Future<Output = Result<T, E>> + Send + 'static,
        E: std::fmt::Display,
    {
        Self::deferred(async move {
            finish(future.await.map_err(|e| HookError::plugin(e.to_string())).and_then(IntoHookValue::into_hook_value))
        })
    }

    fn deferred(future: impl Future<Output = HookReturn> + Send + 'static) -> Self {
        Hook { ret: Ret::Future(Box::pin(future)), _t: PhantomData }
    }

    /// Returns exactly this FFI value, bypassing the typed conversion. For
    /// plugins that build results themselves (and tests of malformed ones).
    #[inline]
    pub fn from_return(ret: HookReturn) -> Self {
        Hook { ret: Ret::Return(Words(ret.into_words())), _t: PhantomData }
    }

    /// Converts into the FFI return value: a future is polled once first
    /// when the host will await it (it would poll it at once anyway: hooks
    /// are awaited one by one, as soon as they are called). Sync dispatch
    /// gets it unpolled, and drops it with a warning, as Bub skips an
    /// awaitable there; its body never runs.
    #[doc(hidden)]
    #[inline]
    pub fn into_return(self, mode: DispatchMode) -> HookReturn {
        match (self.ret, mode) {
            (Ret::Return(words), _) => words.into_return(),
            (Ret::Future(future), DispatchMode::Async) => bridge::start(future),
            (Ret::Future(future), DispatchMode::Sync) => HookReturn::pending(bridge::to_ffi(future)),
        }
    }
}

/// A [`HookReturn`] kept as two words between the hook method and its
/// entry point, which are often separate functions: see
/// `HookReturn::into_words`.
struct Words((usize, *mut std::ffi::c_void));

// SAFETY: it is a `HookReturn`, which is Send.
unsafe impl Send for Words {}

impl Words {
    #[inline]
    fn into_return(self) -> HookReturn {
        let words = std::mem::ManuallyDrop::new(self);
        // SAFETY: the words came from `into_words` and are read once
        // (`words` is not dropped).
        unsafe { HookReturn::from_words(words.0) }
    }
}

impl Drop for Words {
    fn drop(&mut self) {
        // SAFETY: as in `into_return`; dropped once.
        drop(unsafe { HookReturn::from_words(self.0) });
    }
}

#[inline]
fn finish(r: Result<HookReturn, HookError>) -> HookReturn {
    match r {
        Ok(v) => v,
        Err(e) => HookReturn::error(e),
    }
}

/// A value a hook may return. `None` (and `()`) is Python's `None`.
pub trait IntoHookValue: Send + 'static {
    /// Converts into the FFI value.
    fn into_hook_value(self) -> Result<HookReturn, HookError>;
}

impl IntoHookValue for () {
    #[inline]
    fn into_hook_value(self) -> Result<HookReturn, HookError> {
        Ok(HookReturn::NONE)
    }
}

impl<T: ToHookValue> IntoHookValue for Option<T> {
    #[inline]
    fn into_hook_value(self) -> Result<HookReturn, HookError> {
        match self {
            None => Ok(HookReturn::NONE),
            Some(v) => v.to_hook_value(),
        }
    }
}

/// A non-None value a hook may return.
pub trait ToHookValue: Send + 'static {
    /// Converts into the FFI value.
    fn to_hook_value(self) -> Result<HookReturn, HookError>;
}

/// Builds a host value from any serializable value (a [`Value`] inside is
/// passed as a handle, uncopied).
pub fn json_value<T: serde::Serialize + ?Sized>(value: &T) -> Result<HookReturn, HookError> {
    Value::from_serialize(value)
        .map(HookReturn::value)
        .map_err(|e| HookError::new(ErrorKind::TYPE, format!("the result could not be built: {}", e.message)))
}

macro_rules! json_returns {
    ($($t:ty),* $(,)?) => {$(
        impl ToHookValue for $t {
            fn to_hook_value(self) -> Result<HookReturn, HookError> {
                json_value(&self)
            }
        }
    )*};
}

macro_rules! scalar_returns {
    ($($t:ty),* $(,)?) => {$(
        impl ToHookValue for $t {
            #[inline]
            fn to_hook_value(self) -> Result<HookReturn, HookError> {
                Ok(HookReturn::value(Value::from(self)))
            }
        }
    )*};
}

scalar_returns!(String, bool, i64, f64);

json_returns!(
    serde_json::Value,
    serde_json::Map<String, serde_json::Value>,
    Vec<serde_json::Value>,
    Vec<String>,
    crate::types::ModelOptions,
    crate::types::AdmitDecision,
    crate::types::BeforeLlmCall,
    crate::types::ToolCallDecision,
);

impl ToHookValue for Object {
    fn to_hook_value(self) -> Result<HookReturn, HookError> {
        Ok(HookReturn::object(self.into_handle()))
    }
}

impl ToHookValue for Vec<Object> {
    fn to_hook_value(self) -> Result<HookReturn, HookError> {
        Ok(HookReturn::objects(self.into_iter().map(Object::into_handle).collect::<RVec<_>>()))
    }
}

impl ToHookValue for Value {
    #[inline]
    fn to_hook_value(self) -> Result<HookReturn, HookError> {
        Ok(HookReturn::value(self))
    }
}

/// JSON text returned as a value (parsed by the host, once).
#[derive(Debug, Clone)]
pub struct RawJson(pub String);

impl ToHookValue for RawJson {
    fn to_hook_value(self) -> Result<HookReturn, HookError> {
        Value::from_json(&self.0).map(HookReturn::value)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    };

    use super::*;
    use crate::{abi::Outcome, sdk::object::ObjectImpl};

    /// An object that counts how many of its copies are alive.
    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    impl ObjectImpl for Counted {
        fn kind(&self) -> &str {
            "counted"
        }
        fn invoke(&self, _: &str, _: serde_json::Value) -> crate::sdk::object::ObjectFuture {
            Box::pin(async { Ok(serde_json::Value::Null) })
        }
    }

    fn counted(alive: &Arc<AtomicUsize>) -> Object {
        alive.fetch_add(1, Ordering::SeqCst);
        Object::new(Counted(alive.clone()))
    }

    fn outcome<T: IntoHookValue>(hook: Hook<T>) -> Outcome {
        hook.into_return(DispatchMode::Async).into_outcome(crate::value::vtable())
    }

    /// A hook method's return is kept as two words on its way to the entry
    /// point: every kind of return reads back as what was built.
    #[test]
    fn a_return_kept_as_words_reads_back_as_built() {
        assert!(matches!(outcome(Hook::<Option<String>>::ready(None)), Outcome::None));
        match outcome(Hook::ready(Some("session-0".to_owned()))) {
            Outcome::Value(v) => assert_eq!(v.as_ref().as_str(), Some("session-0")),
            _ => panic!("expected a value"),
        }
        match outcome(Hook::<Option<String>>::error(HookError::plugin("no"))) {
            Outcome::Error(e) => assert_eq!(e.message.as_str(), "no"),
            _ => panic!("expected an error"),
        }
        let alive = Arc::new(AtomicUsize::new(0));
        match outcome(Hook::ready(Some(counted(&alive)))) {
            Outcome::Object(o) => assert_eq!(o.kind(), "counted"),
            _ => panic!("expected an object"),
        }
        match outcome(Hook::ready(Some(vec![counted(&alive), counted(&alive)]))) {
            Outcome::Objects(o) => assert_eq!(o.len(), 2),
            _ => panic!("expected objects"),
        }
        assert_eq!(alive.load(Ordering::SeqCst), 0, "the answers were read and dropped");
    }

    /// A hook result dropped before it reaches the host frees what it
    /// carries (the words are a `HookReturn` still).
    #[test]
    fn an_unread_return_frees_what_it_carries() {
        let alive = Arc::new(AtomicUsize::new(0));
        drop(Hook::ready(Some(counted(&alive))));
        drop(Hook::ready(Some(vec![counted(&alive)])));
        assert_eq!(alive.load(Ordering::SeqCst), 0);
        let ret = Hook::ready(Some(counted(&alive))).into_return(DispatchMode::Sync);
        assert_eq!(alive.load(Ordering::SeqCst), 1, "alive while the return is");
        drop(ret);
        assert_eq!(alive.load(Ordering::SeqCst), 0);
    }
}
