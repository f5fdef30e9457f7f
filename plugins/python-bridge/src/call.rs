//! Calls across the loop thread, both ways.
//!
//! Host → Python ([`dispatch`]): when the loop is idle
//! the call runs on the caller's thread, holding the loop's turn (so it is
//! as exclusive as a callback of the loop, and costs no thread hop); when
//! the loop is busy it is handed to the loop thread. Whoever finishes it
//! turns the result into a host value (holding the GIL anyway) and puts it
//! in the call's slot. Dropping the pending call (the host cancelled its
//! future) cancels the Python task.
//!
//! Python → host ([`host_call`]): a host future runs on the plugin's tokio
//! runtime; its answer completes an asyncio future on the loop.
//! Neither side ever blocks waiting for the other's thread, so a Python
//! hook that calls back into the host cannot deadlock.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Condvar, Mutex},
    task::{Context, Poll, Waker},
    time::Duration,
};

use bub_abi::{HookError, Value};
use pyo3::{
    prelude::*,
    types::{PyDict, PyString, PyTuple},
};

use crate::{convert, interp::Interp};

type Finish = Box<dyn FnOnce(Python<'_>, bool, &Bound<'_, PyAny>) + Send>;

/// The completion callback Python calls once, on whichever thread ran the
/// call (the loop thread, or the caller's for a call that finished at once).
#[pyclass(frozen, name = "Done", module = "bub_rs_bridge")]
struct Done {
    finish: Mutex<Option<Finish>>,
}

#[pymethods]
impl Done {
    fn __call__(&self, py: Python<'_>, ok: bool, value: &Bound<'_, PyAny>) {
        if let Some(finish) = bub_abi::sync::lock(&self.finish).take() {
            finish(py, ok, value);
        }
    }
}

/// The result, once there, and the waker of a future awaiting it.
type SlotState<T> = (Option<Result<T, HookError>>, Option<Waker>);

/// Where a call's converted result lands: read at once, awaited, or
/// waited for on a thread.
struct Slot<T> {
    value: Mutex<SlotState<T>>,
    ready: Condvar,
}

impl<T> Slot<T> {
    fn put(&self, result: Result<T, HookError>) {
        let waker = {
            let mut v = bub_abi::sync::lock(&self.value);
            v.0 = Some(result);
            v.1.take()
        };
        self.ready.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// A Python call; resolves to its converted result.
pub struct Pending<T> {
    slot: Arc<Slot<T>>,
    call: Option<Py<PyAny>>,
}

impl<T> Pending<T> {
    /// The result, if the call already finished (it often does: a plain
    /// function, or a coroutine that never waited, runs on the caller's
    /// thread).
    pub fn try_take(&mut self) -> Option<Result<T, HookError>> {
        let taken = bub_abi::sync::lock(&self.slot.value).0.take();
        if taken.is_some() {
            self.call = None;
        }
        taken
    }

    /// Waits for the result on this thread, at most `limit`.
    pub fn wait(mut self, limit: Duration) -> Result<T, HookError> {
        let guard = bub_abi::sync::lock(&self.slot.value);
        let (mut guard, _) = self
            .slot
            .ready
            .wait_timeout_while(guard, limit, |v| v.0.is_none())
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let taken = guard.0.take();
        drop(guard);
        match taken {
            Some(r) => {
                self.call = None;
                r
            }
            None => Err(HookError::plugin(format!("the Python call did not answer within {} s", limit.as_secs()))),
        }
    }
}

impl<T> Future for Pending<T> {
    type Output = Result<T, HookError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut v = bub_abi::sync::lock(&self.slot.value);
        match v.0.take() {
            Some(r) => {
                drop(v);
                self.call = None;
                Poll::Ready(r)
            }
            None => {
                v.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            // The host gave up on it: cancel the Python task too.
            Python::attach(|py| {
                let _ = call.bind(py).call_method0("cancel");
            });
        }
    }
}

/// A pending call that has already failed.
pub fn failed<T>(error: HookError) -> Pending<T> {
    let slot = Arc::new(Slot { value: Mutex::new((Some(Err(error)), None)), ready: Condvar::new() });
    Pending { slot, call: None }
}

/// Calls `callable(*args, **kwargs)` through `bridge.dispatch`: on this
/// thread when the loop is idle (exclusive, as one loop callback; a
/// coroutine runs as an eager task, so one that never waits finishes here),
/// else handed to the loop thread. `convert` turns the result into `T`, on
/// whichever thread finished it. With `sync_only`, an awaitable result is
/// skipped (answered as None), as Bub's sync dispatch does.
pub fn dispatch<'py, T, F>(
    py: Python<'py>,
    interp: &'static Interp,
    callable: &Bound<'py, PyAny>,
    args: impl IntoPyObject<'py, Target = PyTuple, Output = Bound<'py, PyTuple>>,
    kwargs: Option<Bound<'py, PyDict>>,
    sync_only: bool,
    convert: F,
) -> Pending<T>
where
    T: Send + 'static,
    F: FnOnce(Python<'_>, &Bound<'_, PyAny>) -> Result<T, HookError> + Send + 'static,
{
    let slot = Arc::new(Slot { value: Mutex::new((None, None)), ready: Condvar::new() });
    let target = slot.clone();
    let finish: Finish = Box::new(move |py, ok, value| {
        let result = if ok {
            convert(py, value)
        } else {
            Err(HookError::plugin(value.str().map(|s| s.to_string()).unwrap_or_else(|_| "Python error".into())))
        };
        target.put(result);
    });
    let submitted = (|| -> PyResult<Option<Py<PyAny>>> {
        let args = args.into_pyobject(py).map_err(Into::into)?;
        let done = Bound::new(py, Done { finish: Mutex::new(Some(finish)) })?;
        let kwargs = kwargs.unwrap_or_else(|| PyDict::new(py));
        let call = interp.dispatch(py).call1((callable, args, kwargs, done, sync_only))?;
        Ok((!call.is_none()).then(|| call.unbind()))
    })();
    match submitted {
        Ok(call) => Pending { slot, call },
        Err(e) => failed(HookError::plugin(crate::interp::traceback(py, &e))),
    }
}

/// Runs `future` (a host call made by Python) on the plugin runtime and
/// returns an asyncio future of its answer (a host value as Python).
pub fn host_call<'py, F>(py: Python<'py>, interp: &'static Interp, future: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = Result<Value, HookError>> + Send + 'static,
{
    let module = interp.module(py);
    let fut = module.call_method0("new_future")?;
    let target = fut.clone().unbind();
    let runtime = bub_abi::sdk::bridge::runtime()
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.message.to_string()))?;
    let task = runtime.spawn(async move {
        let result = future.await;
        Python::attach(|py| {
            let module = interp.module(py);
            let answer = result
                .map_err(|e| e.message.to_string())
                .and_then(|v| convert::to_py(py, interp, v.as_ref()).map_err(|e| e.to_string()));
            let (ok, value) = match answer {
                Ok(p) => (true, p),
                Err(text) => (false, PyString::new(py, &text).into_any()),
            };
            let resolve = module.getattr("awaitable_result");
            if let Ok(resolve) = resolve {
                if let Err(e) = module.call_method1("call_soon", (resolve, target.bind(py), ok, value)) {
                    tracing::warn!("python bridge: cannot answer a host call: {e}");
                }
            }
        });
    });
    // Python cancelling its await (`wait_for`, a cancelled task) cancels
    // the host call too.
    let abort = Bound::new(py, AbortOnCancel { handle: task.abort_handle() })?;
    fut.call_method1("add_done_callback", (abort,))?;
    Ok(fut)
}

/// Aborts a host call when the asyncio future awaiting it is cancelled.
#[pyclass(frozen, module = "bub_rs_bridge")]
struct AbortOnCancel {
    handle: tokio::task::AbortHandle,
}

#[pymethods]
impl AbortOnCancel {
    fn __call__(&self, fut: &Bound<'_, PyAny>) {
        if fut.call_method0("cancelled").and_then(|c| c.extract::<bool>()).unwrap_or(false) {
            self.handle.abort();
        }
    }
}
