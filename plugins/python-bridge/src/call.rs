//! Calls across the loop thread, both ways.
//!
//! Host → Python ([`await_python`], [`block_python`]): the call is handed
//! to the loop (`bridge.submit`); when it finishes, the loop thread turns
//! the result into a host value (it holds the GIL then anyway) and sends it
//! over a oneshot channel. Dropping the pending call (the host cancelled
//! its future) cancels the Python task.
//!
//! Python → host ([`host_call`]): a host future runs on the plugin's tokio
//! runtime; its answer completes an asyncio future on the loop.
//! Neither side ever blocks waiting for the other's thread, so a Python
//! hook that calls back into the host cannot deadlock.

use std::{
    future::Future,
    pin::Pin,
    sync::Mutex,
    task::{Context, Poll},
};

use bub_abi::{HookError, Value};
use pyo3::{
    prelude::*,
    types::{PyDict, PyTuple},
};
use tokio::sync::oneshot;

use crate::{convert, interp::Interp};

type Finish = Box<dyn FnOnce(Python<'_>, bool, &Bound<'_, PyAny>) + Send>;

/// The completion callback `bridge.submit` calls on the loop thread.
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

/// A Python call in flight; resolves to its converted result.
pub struct Pending<T> {
    rx: oneshot::Receiver<Result<T, HookError>>,
    call: Option<Py<PyAny>>,
}

impl<T> Future for Pending<T> {
    type Output = Result<T, HookError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.rx).poll(cx) {
            Poll::Ready(r) => {
                self.call = None;
                Poll::Ready(r.unwrap_or_else(|_| Err(HookError::plugin("the Python call was dropped unanswered"))))
            }
            Poll::Pending => Poll::Pending,
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

/// Hands `callable(*args, **kwargs)` to the loop; `finish` runs on the
/// loop thread with its outcome.
fn submit(
    py: Python<'_>,
    interp: &'static Interp,
    callable: &Bound<'_, PyAny>,
    args: Bound<'_, PyTuple>,
    kwargs: Option<Bound<'_, PyDict>>,
    sync_only: bool,
    finish: Finish,
) -> PyResult<Py<PyAny>> {
    let done = Bound::new(py, Done { finish: Mutex::new(Some(finish)) })?;
    let kwargs = kwargs.unwrap_or_else(|| PyDict::new(py));
    Ok(interp.submit(py).call1((callable, args, kwargs, done, sync_only))?.unbind())
}

fn finisher<T, F>(convert: F, send: impl FnOnce(Result<T, HookError>) + Send + 'static) -> Finish
where
    T: Send + 'static,
    F: FnOnce(Python<'_>, &Bound<'_, PyAny>) -> Result<T, HookError> + Send + 'static,
{
    Box::new(move |py, ok, value| {
        let result = if ok {
            convert(py, value)
        } else {
            Err(HookError::plugin(value.str().map(|s| s.to_string()).unwrap_or_else(|_| "Python error".into())))
        };
        send(result);
    })
}

/// Submits `callable(*args, **kwargs)` to the loop; `convert` turns its
/// result into `T` on the loop thread.
pub fn await_python<'py, T, F>(
    py: Python<'py>,
    interp: &'static Interp,
    callable: &Bound<'py, PyAny>,
    args: impl IntoPyObject<'py, Target = PyTuple, Output = Bound<'py, PyTuple>>,
    kwargs: Option<Bound<'py, PyDict>>,
    convert: F,
) -> Pending<T>
where
    T: Send + 'static,
    F: FnOnce(Python<'_>, &Bound<'_, PyAny>) -> Result<T, HookError> + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let finish = finisher(convert, move |r| {
        let _ = tx.send(r);
    });
    let submitted = match args.into_pyobject(py) {
        Ok(args) => submit(py, interp, callable, args, kwargs, false, finish),
        Err(e) => Err(e.into()),
    };
    match submitted {
        Ok(call) => Pending { rx, call: Some(call) },
        Err(e) => {
            let (tx, rx) = oneshot::channel();
            let _ = tx.send(Err(HookError::plugin(crate::interp::traceback(py, &e))));
            Pending { rx, call: None }
        }
    }
}

/// A pending call that has already failed.
pub fn failed<T>(error: HookError) -> Pending<T> {
    let (tx, rx) = oneshot::channel();
    let _ = tx.send(Err(error));
    Pending { rx, call: None }
}

/// A call waited for on this thread (a sync dispatch): an awaitable result
/// is skipped (answered as None), as Bub's sync dispatch does. On the loop
/// thread itself (a host call made from Python that dispatches a sync hook)
/// the callable runs inline: waiting for the loop would deadlock.
pub fn block_python<T, F>(
    interp: &'static Interp,
    make: impl FnOnce(Python<'_>) -> PyResult<(Bound<'_, PyAny>, Bound<'_, PyDict>)>,
    convert: F,
) -> Result<T, HookError>
where
    T: Send + 'static,
    F: FnOnce(Python<'_>, &Bound<'_, PyAny>) -> Result<T, HookError> + Send + 'static,
{
    if crate::interp::on_loop_thread() {
        return Python::attach(|py| {
            let (callable, kwargs) = make(py).map_err(|e| crate::objects::py_error(py, &e))?;
            let value = callable.call((), Some(&kwargs)).map_err(|e| crate::objects::py_error(py, &e))?;
            let inspect = py.import("inspect").map_err(|e| crate::objects::py_error(py, &e))?;
            if inspect.call_method1("isawaitable", (&value,)).and_then(|b| b.extract::<bool>()).unwrap_or(false) {
                let _ = value.call_method0("close");
                return convert(py, &py.None().into_bound(py));
            }
            convert(py, &value)
        });
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    Python::attach(|py| -> Result<(), HookError> {
        let (callable, kwargs) = make(py).map_err(|e| crate::objects::py_error(py, &e))?;
        let finish = finisher(convert, move |r| {
            let _ = tx.send(r);
        });
        submit(py, interp, &callable, PyTuple::empty(py), Some(kwargs), true, finish)
            .map(drop)
            .map_err(|e| crate::objects::py_error(py, &e))
    })?;
    // The GIL is released here: the loop thread takes it to run the call.
    match rx.recv_timeout(crate::interp::SYNC_CALL_LIMIT) {
        Ok(r) => r,
        Err(_) => Err(HookError::plugin(format!(
            "the Python call did not answer within {} s",
            crate::interp::SYNC_CALL_LIMIT.as_secs()
        ))),
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
            let (ok, value) = match result {
                Ok(v) => match convert::to_py(py, interp, v.as_ref()) {
                    Ok(p) => (true, p),
                    Err(e) => (
                        false,
                        e.to_string()
                            .into_pyobject(py)
                            .map(|s| s.into_any())
                            .unwrap_or_else(|_| py.None().into_bound(py)),
                    ),
                },
                Err(e) => (
                    false,
                    e.message
                        .to_string()
                        .into_pyobject(py)
                        .map(|s| s.into_any())
                        .unwrap_or_else(|_| py.None().into_bound(py)),
                ),
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
