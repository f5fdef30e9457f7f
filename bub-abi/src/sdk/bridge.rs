//! Runs plugin futures with the plugin's own tokio runtime.
//!
//! A cdylib has its own copy of every static, tokio's runtime context
//! included: a plugin future that calls `tokio::time::sleep` while the host
//! polls it would find "no reactor running". So every plugin future is polled
//! with a plugin-local runtime *entered*: timers and sockets register with that
//! runtime's driver (run by its one worker thread), which wakes the host's
//! waker. Each poll also catches panics, and dropping the future (the host
//! cancelling it) drops the inner future inside the runtime too, which
//! cancels its timers and closes its sockets.

use std::{
    future::Future,
    panic::{catch_unwind, AssertUnwindSafe},
    pin::Pin,
    sync::OnceLock,
    task::{Context, Poll},
};

use abi_stable::std_types::RResult;
use async_ffi::FfiFuture;
use pin_project_lite::pin_project;

use crate::{
    abi::{ErrorKind, HookError, HookReturn},
    sdk::guard::panic_message,
    Value,
};

static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();

/// The plugin's tokio runtime (created on first use; never shut down, as the
/// library is never unloaded).
pub fn runtime() -> Result<&'static tokio::runtime::Runtime, HookError> {
    let rt = RUNTIME.get_or_init(|| {
        // IO and timers, not signals: a plugin has no business with the
        // host's signals, and tokio's signal driver panics (rather than
        // failing) when it cannot get its socket pair (no file descriptors
        // left). A panic here is caught too: it would otherwise unwind out
        // of the plugin's poll and take the host down.
        let built = catch_unwind(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("bub-plugin-rt")
                .enable_io()
                .enable_time()
                .build()
        });
        match built {
            Ok(Ok(rt)) => Ok(rt),
            Ok(Err(e)) => Err(e.to_string()),
            Err(payload) => Err(panic_message(&*payload)),
        }
    });
    rt.as_ref().map_err(|e| HookError::new(ErrorKind::INIT, format!("the plugin's tokio runtime could not start: {e}")))
}

thread_local! {
    static ENTERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this copy of the SDK lives in a dlopen'd plugin (its own tokio).
/// Plugins compiled into the host (the builtin) share the host's tokio, whose
/// thread-local guards must nest: they never keep a guard.
static IN_CDYLIB: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Marks this SDK copy as a cdylib's (called when a cdylib plugin initialises).
pub(crate) fn mark_cdylib() {
    IN_CDYLIB.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Runs `f` with the plugin runtime current: entered once per thread in a
/// cdylib; in the host's own copy, only if no runtime is current, and
/// scoped to the call.
fn with_runtime<R>(rt: &'static tokio::runtime::Runtime, f: impl FnOnce() -> R) -> R {
    if IN_CDYLIB.load(std::sync::atomic::Ordering::Relaxed) {
        enter_once(rt);
        return f();
    }
    if tokio::runtime::Handle::try_current().is_ok() {
        return f();
    }
    let _guard = rt.enter();
    f()
}

/// Makes the plugin's runtime the current tokio handle of this thread, once.
///
/// Entering on every poll costs an `Arc` clone and several thread-local
/// accesses, which in a dlopen'd library go through `__tls_get_addr`. The
/// guard is kept for the life of the thread instead. This only sets tokio's
/// *current handle* (what `tokio::time`, `tokio::net` and `tokio::spawn`
/// use); it does not mark the thread as running a runtime, so a sync hook may
/// still `block_on` a runtime of its own. The handle is this plugin's copy of
/// tokio only: the host and other plugins are unaffected.
fn enter_once(rt: &'static tokio::runtime::Runtime) {
    ENTERED.with(|entered| {
        if !entered.get() {
            std::mem::forget(rt.enter());
            entered.set(true);
        }
    });
}

/// A future output that can carry a failure of the bridge itself (a panic,
/// a runtime that cannot start) as an error.
pub trait FromPanic {
    /// The value reporting `error`.
    fn from_error(error: HookError) -> Self;

    /// The value reporting a panic with `message`.
    fn from_panic(message: String) -> Self
    where
        Self: Sized,
    {
        Self::from_error(HookError::new(ErrorKind::PANIC, message))
    }
}

impl FromPanic for HookReturn {
    fn from_error(error: HookError) -> Self {
        HookReturn::error(error)
    }
}

impl FromPanic for RResult<Value, HookError> {
    fn from_error(error: HookError) -> Self {
        RResult::RErr(error)
    }
}

/// Wraps a plugin future for the host (one allocation).
pub fn to_ffi<T, F>(future: F) -> FfiFuture<T>
where
    T: FromPanic + Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    FfiFuture::new(Bridged { inner: Some(future), started: false })
}

pin_project! {
    struct Bridged<F> {
        #[pin]
        inner: Option<F>,
        // Whether the future was ever polled. An unstarted future holds only
        // its captured values, so dropping it needs no runtime (the common
        // case: sync dispatch skips an async implementation).
        started: bool,
    }

    impl<F> PinnedDrop for Bridged<F> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            if this.inner.is_some() && *this.started {
                // Drop inside the runtime (timers and sockets deregister
                // there); a panicking destructor must not unwind into the host.
                match runtime() {
                    Ok(rt) => with_runtime(rt, || {
                        let _ = catch_unwind(AssertUnwindSafe(|| this.inner.set(None)));
                    }),
                    Err(_) => {
                        let _ = catch_unwind(AssertUnwindSafe(|| this.inner.set(None)));
                    }
                }
            }
        }
    }
}

impl<T: FromPanic, F: Future<Output = T>> Future for Bridged<F> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut this = self.project();
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            return Poll::Ready(T::from_panic("future polled after it finished".into()));
        };
        let rt = match runtime() {
            Ok(rt) => rt,
            Err(e) => return Poll::Ready(T::from_error(e)),
        };
        *this.started = true;
        match with_runtime(rt, || catch_unwind(AssertUnwindSafe(|| inner.poll(cx)))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => {
                let _ = catch_unwind(AssertUnwindSafe(|| this.inner.set(None)));
                Poll::Ready(v)
            }
            Err(payload) => {
                let _ = catch_unwind(AssertUnwindSafe(|| this.inner.set(None)));
                Poll::Ready(T::from_panic(panic_message(&*payload)))
            }
        }
    }
}
