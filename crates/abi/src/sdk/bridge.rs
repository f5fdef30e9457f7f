//! Runs plugin futures with the plugin's own tokio runtime.
//!
//! A cdylib has its own copy of every static, tokio's runtime context
//! included: a plugin future that calls `tokio::time::sleep` while the host
//! polls it would find "no reactor running". So every plugin future is polled
//! with a plugin-local runtime *entered*: timers and sockets register with that
//! runtime's driver, which wakes the host's waker. The runtime is a
//! current-thread one whose driving thread starts only when a future first
//! waits or leaves tasks behind: a future that finishes in its first poll
//! (most hooks) costs no thread, so loading 100 plugins does not mean 100
//! threads. (One runtime shared by every plugin is not possible: each cdylib
//! has its own copy of tokio, whose context is thread-local to that copy, so
//! a task of one copy could not find its runtime on another copy's worker.)
//! Each poll also catches panics, and dropping the future (the host
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

/// The plugin's runtime: a current-thread tokio runtime, and the thread
/// that drives it once something needs driving.
struct PluginRuntime {
    rt: tokio::runtime::Runtime,
    /// Kept: asking the runtime for it clones its handle (an `Arc`) each time.
    metrics: tokio::runtime::RuntimeMetrics,
    /// Started on first need: `Err` if the thread could not be spawned.
    driver: OnceLock<Result<(), String>>,
}

static RUNTIME: OnceLock<Result<PluginRuntime, String>> = OnceLock::new();

/// The plugin's tokio runtime, driven by its own thread from now on
/// (created on first use; never shut down, as the library is never
/// unloaded). Code that spawns tasks or keeps sockets beyond a hook call
/// (`rt.spawn`, `rt.enter()`) goes through here.
pub fn runtime() -> Result<&'static tokio::runtime::Runtime, HookError> {
    let plugin = built()?;
    plugin.drive()?;
    Ok(&plugin.rt)
}

/// The runtime without its driver thread: what a hook's future needs to
/// register timers and sockets. Most async hooks finish in their first poll
/// without waiting, and then no thread is ever started for the plugin, so a
/// process's threads do not grow with the number of plugins it loads.
fn built() -> Result<&'static PluginRuntime, HookError> {
    let rt = RUNTIME.get_or_init(|| {
        // IO and timers, not signals: a plugin has no business with the
        // host's signals, and tokio's signal driver panics (rather than
        // failing) when it cannot get its socket pair (no file descriptors
        // left). A panic here is caught too: it would otherwise unwind out
        // of the plugin's poll and take the host down.
        let built = catch_unwind(|| tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build());
        match built {
            Ok(Ok(rt)) => Ok(PluginRuntime { metrics: rt.metrics(), rt, driver: OnceLock::new() }),
            Ok(Err(e)) => Err(e.to_string()),
            Err(payload) => Err(panic_message(&*payload)),
        }
    });
    rt.as_ref().map_err(|e| HookError::new(ErrorKind::INIT, format!("the plugin's tokio runtime could not start: {e}")))
}

impl PluginRuntime {
    /// Starts the thread that drives the runtime (its timers, sockets and
    /// spawned tasks), once. It parks in the runtime's driver and wakes the
    /// host's wakers from there, as a one-worker runtime's thread did.
    fn drive(&'static self) -> Result<(), HookError> {
        let started = self.driver.get_or_init(|| {
            std::thread::Builder::new()
                .name("bub-plugin-rt".into())
                .spawn(move || {
                    // A task's panic stays inside its JoinHandle; this catches
                    // what tokio itself might raise, so the thread never
                    // unwinds into nothing.
                    let _ = catch_unwind(AssertUnwindSafe(|| self.rt.block_on(std::future::pending::<()>())));
                })
                .map(drop)
                .map_err(|e| e.to_string())
        });
        started
            .clone()
            .map_err(|e| HookError::new(ErrorKind::INIT, format!("the plugin's runtime thread could not start: {e}")))
    }

    /// Whether the driving thread runs (a thread that could not be spawned
    /// is asked for again, and its error reported, by every waiting future).
    fn driven(&self) -> bool {
        matches!(self.driver.get(), Some(Ok(())))
    }

    /// After a poll: a future that waits, or that left tasks behind, needs
    /// the driver (its timers and sockets fire there, its tasks run there).
    fn after_poll(&'static self, pending: bool) -> Result<(), HookError> {
        if !self.driven() && (pending || self.metrics.num_alive_tasks() > 0) {
            self.drive()?;
        }
        Ok(())
    }
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

/// Polls a hook's future once, as the host's first poll would (runtime
/// entered, panics caught), with a waker that does nothing: the host's own
/// first poll registers its waker, and a future checks its state on every
/// poll, so no wake-up is lost. Finished, it is the answer; else it goes to
/// the host as the started future.
pub(crate) fn start(future: Pin<Box<dyn Future<Output = HookReturn> + Send>>) -> HookReturn {
    let mut bridged = Bridged { inner: Some(future), started: false };
    match Pin::new(&mut bridged).poll(&mut Context::from_waker(std::task::Waker::noop())) {
        Poll::Ready(answer) => answer,
        Poll::Pending => HookReturn::pending(FfiFuture::new(bridged)),
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
                match built() {
                    Ok(plugin) => with_runtime(&plugin.rt, || {
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
        let plugin = match built() {
            Ok(plugin) => plugin,
            Err(e) => return Poll::Ready(T::from_error(e)),
        };
        *this.started = true;
        match with_runtime(&plugin.rt, || catch_unwind(AssertUnwindSafe(|| inner.poll(cx)))) {
            Ok(Poll::Pending) => match plugin.after_poll(true) {
                Ok(()) => Poll::Pending,
                // Nothing would ever drive its timers or sockets: an error
                // now rather than a call that never ends.
                Err(e) => {
                    let _ = with_runtime(&plugin.rt, || catch_unwind(AssertUnwindSafe(|| this.inner.set(None))));
                    Poll::Ready(T::from_error(e))
                }
            },
            Ok(Poll::Ready(v)) => {
                let _ = catch_unwind(AssertUnwindSafe(|| this.inner.set(None)));
                // Tasks it spawned run on the driver; the answer stands even
                // if the driver cannot start (the tasks then never run).
                let _ = plugin.after_poll(false);
                Poll::Ready(v)
            }
            Err(payload) => {
                let _ = catch_unwind(AssertUnwindSafe(|| this.inner.set(None)));
                Poll::Ready(T::from_panic(panic_message(&*payload)))
            }
        }
    }
}
