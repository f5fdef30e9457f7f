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

use abi_stable::std_types::{RResult, RString};
use async_ffi::FfiFuture;

use crate::{
    abi::{HookError, HookValue},
    sdk::guard::panic_message,
};

static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();

/// The plugin's tokio runtime (created on first use; never shut down, as the
/// library is never unloaded).
pub fn runtime() -> Result<&'static tokio::runtime::Runtime, HookError> {
    let rt = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("bub-plugin-rt")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    });
    rt.as_ref().map_err(|e| HookError::new("init", format!("plugin tokio runtime could not start: {e}")))
}

/// A future output that can carry a panic as an error.
pub trait FromPanic {
    /// The value reporting `message`.
    fn from_panic(message: String) -> Self;
}

impl FromPanic for RResult<HookValue, HookError> {
    fn from_panic(message: String) -> Self {
        RResult::RErr(HookError::new("panic", message))
    }
}

impl FromPanic for RResult<RString, HookError> {
    fn from_panic(message: String) -> Self {
        RResult::RErr(HookError::new("panic", message))
    }
}

/// Wraps a plugin future for the host.
pub fn to_ffi<T, F>(future: F) -> FfiFuture<T>
where
    T: FromPanic + Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    FfiFuture::new(Bridged::<T> { inner: Some(Box::pin(future)) })
}

struct Bridged<T> {
    inner: Option<Pin<Box<dyn Future<Output = T> + Send>>>,
}

impl<T: FromPanic> Future for Bridged<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(T::from_panic("future polled after it finished".into()));
        };
        let rt = match runtime() {
            Ok(rt) => rt,
            Err(e) => return Poll::Ready(T::from_panic(e.message.into_string())),
        };
        let _entered = rt.enter();
        match catch_unwind(AssertUnwindSafe(|| inner.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => {
                this.drop_inner();
                Poll::Ready(v)
            }
            Err(payload) => {
                this.drop_inner();
                Poll::Ready(T::from_panic(panic_message(&*payload)))
            }
        }
    }
}

impl<T> Bridged<T> {
    fn drop_inner(&mut self) {
        if let Some(inner) = self.inner.take() {
            let _entered = runtime().ok().map(|rt| rt.enter());
            // A panicking destructor must not unwind into the host.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(inner)));
        }
    }
}

impl<T> Drop for Bridged<T> {
    fn drop(&mut self) {
        self.drop_inner();
    }
}
