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
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Condvar, Mutex,
    },
    task::{Context, Poll, Waker},
    time::Duration,
};

use bub_abi::{HookError, Value};
use pyo3::{
    prelude::*,
    types::{PyDict, PyString, PyTuple},
};

use crate::{convert, event_loop::Outcome, interp::Interp};

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

impl Drop for Done {
    fn drop(&mut self) {
        // Freed unanswered (the callback that held it failed or was
        // dropped): the host must not wait for ever.
        if let Some(finish) = bub_abi::sync::lock(&self.finish).take() {
            Python::attach(|py| {
                let why = PyString::new(py, "the Python call ended without an answer (see the log)");
                finish(py, false, why.as_any());
            });
        }
    }
}

/// The result, once there, and the waker of a future awaiting it.
type SlotState<T> = (Option<Result<T, HookError>>, Option<Waker>);

/// Where a still-running call's converted result lands: awaited, or
/// waited for on a thread.
struct Slot<T> {
    value: Mutex<SlotState<T>>,
    ready: Condvar,
    /// The host gave up on the call and asked Python to cancel it
    /// (counted in [`CANCELLING`] until Python answers).
    abandoned: AtomicBool,
}

/// Cancellations asked of Python and not yet answered. While there are
/// any, calls go to the loop thread and wait there behind them: a hook
/// called after a hook the host cancelled runs after that hook saw its
/// `CancelledError`, as under asyncio's `wait_for`.
static CANCELLING: AtomicUsize = AtomicUsize::new(0);

/// Whether a cancellation is still on its way to Python.
pub fn cancelling() -> bool {
    CANCELLING.load(Ordering::Acquire) > 0
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
    state: State<T>,
}

enum State<T> {
    /// Finished where it was called (a plain function, or a coroutine that
    /// never waited): no slot, no callback, no future.
    Ready(Option<Result<T, HookError>>),
    /// Running on the loop: `call` cancels it while the host still waits.
    /// A call handed to the loop thread knows its `plugin.hook` label, to
    /// name what held the loop if the host gives up on it.
    Running { slot: Arc<Slot<T>>, call: Option<Py<PyAny>>, waited: Option<Waited> },
}

/// A call handed to the loop thread: what it is and since when it waits.
pub struct Waited {
    label: String,
    since: std::time::Instant,
    interp: &'static Interp,
    // Whether the alarm is set to wake the wait at its give-up time.
    alarmed: bool,
}

/// How long a loop busy past a call's end must have been busy to be named.
const NAMED_AFTER: Duration = Duration::from_secs(1);

/// How a hook call is named in the log: `plugin 'p' hook 'h'`.
pub fn label(plugin: &str, hook: &str) -> String {
    format!("plugin '{plugin}' hook '{hook}'")
}

impl Waited {
    fn new(plugin: &str, hook: &str, interp: &'static Interp) -> Waited {
        Waited { label: label(plugin, hook), since: std::time::Instant::now(), interp, alarmed: false }
    }

    /// What holds the loop now, and for how many seconds.
    fn holder(&self, py: Python<'_>) -> Option<(String, f64)> {
        let on_loop = self.interp.module(py).call_method0("holder").ok();
        let on_loop = on_loop.and_then(|h| h.extract::<Option<(String, f64)>>().ok()).flatten();
        on_loop.or_else(crate::runner::holder)
    }

    /// The host gave up on this call: if the loop was held by something
    /// else all that time, name it (the call's own error names only the
    /// call, which may be innocent: it never got the loop).
    fn name_the_holder(&self, py: Python<'_>) {
        let Some((what, held)) = self.holder(py) else { return };
        let waited = self.since.elapsed();
        if held < NAMED_AFTER.as_secs_f64() || what == self.label {
            return;
        }
        tracing::warn!(
            "python bridge: {} was given up after waiting {:.1} s for the Python loop, which {what} has held for \
             {held:.1} s: a blocking call (time.sleep, a blocking read) inside an `async def` hook holds up every \
             Python plugin; make it `await` or run it in a thread (asyncio.to_thread)",
            self.label,
            waited.as_secs_f64()
        );
    }
}

impl<T> Pending<T> {
    fn ready(result: Result<T, HookError>) -> Self {
        Pending { state: State::Ready(Some(result)) }
    }

    /// The result, if the call already finished (it often does: a plain
    /// function, or a coroutine that never waited, runs on the caller's
    /// thread).
    pub fn try_take(&mut self) -> Option<Result<T, HookError>> {
        match &mut self.state {
            State::Ready(r) => r.take(),
            State::Running { slot, call, .. } => {
                let taken = bub_abi::sync::lock(&slot.value).0.take();
                if taken.is_some() {
                    *call = None;
                }
                taken
            }
        }
    }

    /// Waits for the result on this thread, at most `limit`.
    pub fn wait(mut self, limit: Duration) -> Result<T, HookError> {
        let taken = match &mut self.state {
            State::Ready(r) => r.take(),
            State::Running { slot, call, .. } => {
                let guard = bub_abi::sync::lock(&slot.value);
                let (mut guard, _) = slot
                    .ready
                    .wait_timeout_while(guard, limit, |v| v.0.is_none())
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let taken = guard.0.take();
                drop(guard);
                if taken.is_some() {
                    *call = None;
                }
                taken
            }
        };
        taken.unwrap_or_else(|| {
            Err(HookError::plugin(format!("the Python call did not answer within {} s", limit.as_secs())))
        })
    }
}

// Nothing in a pending call is pinned: its result is moved out by value.
impl<T> Unpin for Pending<T> {}

impl<T> Future for Pending<T> {
    type Output = Result<T, HookError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.state {
            State::Ready(r) => {
                Poll::Ready(r.take().unwrap_or_else(|| Err(HookError::plugin("polled after its answer"))))
            }
            State::Running { slot, call, waited } => {
                let mut v = bub_abi::sync::lock(&slot.value);
                match v.0.take() {
                    Some(r) => {
                        drop(v);
                        *call = None;
                        Poll::Ready(r)
                    }
                    None => {
                        v.1 = Some(cx.waker().clone());
                        drop(v);
                        // Waiting for a loop another call holds: held up,
                        // said before the host's deadline blames this one.
                        if let (Some(w), Some(limit)) = (waited.as_mut(), crate::held_up::limit()) {
                            if w.since.elapsed() >= limit {
                                let holder = Python::attach(|py| w.holder(py));
                                if let Some(error) = crate::held_up::give_up(&w.label, w.since, holder) {
                                    // The Python call is cancelled when this is dropped.
                                    return Poll::Ready(Err(error));
                                }
                            } else if !w.alarmed {
                                w.alarmed = true;
                                crate::held_up::wake_at(w.since + limit, cx.waker().clone());
                            }
                        }
                        Poll::Pending
                    }
                }
            }
        }
    }
}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        if let State::Running { call, slot, waited } = &mut self.state {
            if let Some(call) = call.take() {
                // The host gave up on it: cancel the Python task too. Both
                // this and the completion callback run holding the GIL, so
                // a call that has not answered yet will answer, once.
                Python::attach(|py| {
                    if bub_abi::sync::lock(&slot.value).0.is_some() {
                        return;
                    }
                    slot.abandoned.store(true, Ordering::Release);
                    CANCELLING.fetch_add(1, Ordering::AcqRel);
                    if let Err(e) = call.bind(py).call_method0("cancel") {
                        tracing::warn!("python bridge: cannot cancel a Python call: {e}");
                        CANCELLING.fetch_sub(1, Ordering::AcqRel);
                    }
                    if let Some(waited) = waited {
                        waited.name_the_holder(py);
                    }
                });
            }
        }
    }
}

/// A pending call that has already failed.
pub fn failed<T>(error: HookError) -> Pending<T> {
    Pending::ready(Err(error))
}

/// Calls `callable(*args, **kwargs)` as one callback of the Python loop:
/// on this thread when the loop is idle (holding the loop's turn, so it is
/// as exclusive as a callback; a coroutine runs as an eager task, so one
/// that never waits finishes here), else handed to the loop thread. The
/// common case — a plain function, or a coroutine that never waits — is
/// answered at once, converted by `convert` on this thread. With
/// `sync_only`, an awaitable result is skipped (answered as None), as Bub's
/// sync dispatch does.
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
    let args = match args.into_pyobject(py).map_err(Into::into) {
        Ok(a) => a,
        Err(e) => return failed(HookError::plugin(crate::interp::traceback(py, &e))),
    };
    dispatch_with(py, interp, callable, Invocation::Plain { args, kwargs }, sync_only, None, convert)
}

/// How a callable is called: a tuple and a dict, or values by name (a
/// hook's arguments: one vectorcall with the names as a kept tuple, no
/// dict made and unpacked per call).
pub enum Invocation<'py> {
    /// `callable(*args, **kwargs)`.
    Plain { args: Bound<'py, PyTuple>, kwargs: Option<Bound<'py, PyDict>> },
    /// `callable(name0=values[0], …)`; `names` holds one string per value.
    Named { values: Vec<Bound<'py, PyAny>>, names: Bound<'py, PyTuple> },
}

impl<'py> Invocation<'py> {
    /// Calls `callable` with these arguments.
    pub fn call(&self, callable: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Invocation::Plain { args, kwargs } => callable.call(args, kwargs.as_ref()),
            Invocation::Named { values, names } => {
                let py = callable.py();
                if names.len() != values.len() {
                    return Err(pyo3::exceptions::PyValueError::new_err("one name per argument"));
                }
                let ptrs: Vec<*mut pyo3::ffi::PyObject> = values.iter().map(|v| v.as_ptr()).collect();
                // SAFETY: we hold the GIL (`py`); `ptrs` are borrowed
                // references to live objects (`values` outlives the call);
                // `names` is a tuple of strings with one entry per value,
                // so all are passed by keyword (nargsf = 0); the result is
                // a new reference, or NULL with the Python error set.
                unsafe {
                    let result = pyo3::ffi::PyObject_Vectorcall(callable.as_ptr(), ptrs.as_ptr(), 0, names.as_ptr());
                    Bound::from_owned_ptr_or_err(py, result)
                }
            }
        }
    }

    /// As a tuple and a dict (for a call handed to the loop thread).
    fn into_plain(self, py: Python<'py>) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        match self {
            Invocation::Plain { args, kwargs } => Ok((args, kwargs.unwrap_or_else(|| PyDict::new(py)))),
            Invocation::Named { values, names } => {
                let kwargs = PyDict::new(py);
                for (name, value) in names.iter().zip(values) {
                    kwargs.set_item(name, value)?;
                }
                Ok((PyTuple::empty(py), kwargs))
            }
        }
    }
}

/// [`dispatch`] with the arguments as an [`Invocation`]; `name` (plugin,
/// hook) labels the call if it has to wait for the loop thread, to name
/// what held the loop should the host give up on it.
pub fn dispatch_with<'py, T, F>(
    py: Python<'py>,
    interp: &'static Interp,
    callable: &Bound<'py, PyAny>,
    invocation: Invocation<'py>,
    sync_only: bool,
    name: Option<(&str, &str)>,
    convert: F,
) -> Pending<T>
where
    T: Send + 'static,
    F: FnOnce(Python<'_>, &Bound<'_, PyAny>) -> Result<T, HookError> + Send + 'static,
{
    let loop_ = interp.event_loop();
    let Some(turn) = loop_.take_turn(py) else {
        let waited = name.map(|(plugin, hook)| Waited::new(plugin, hook, interp));
        return submit_labelled(py, interp, callable, invocation, sync_only, waited, convert);
    };
    let outcome = loop_.run_here(py, &turn, callable, &invocation, sync_only);
    let pending = match outcome {
        Ok(Outcome::Done(value)) => Pending::ready(convert(py, &value)),
        Ok(Outcome::Running(task)) => match watch(py, interp, &task, convert) {
            Ok(p) => p,
            Err(e) => failed(HookError::plugin(crate::interp::traceback(py, &e))),
        },
        Ok(Outcome::Cancelled) => failed(HookError::plugin("cancelled")),
        Err(text) => failed(HookError::plugin(text)),
    };
    drop(turn);
    pending
}

/// A completion callback (`Done`) filling a new slot with `convert`'s result.
fn completion<T, F>(py: Python<'_>, convert: F) -> PyResult<(Arc<Slot<T>>, Bound<'_, Done>)>
where
    T: Send + 'static,
    F: FnOnce(Python<'_>, &Bound<'_, PyAny>) -> Result<T, HookError> + Send + 'static,
{
    let slot =
        Arc::new(Slot { value: Mutex::new((None, None)), ready: Condvar::new(), abandoned: AtomicBool::new(false) });
    let target = slot.clone();
    let finish: Finish = Box::new(move |py, ok, value| {
        if target.abandoned.load(Ordering::Acquire) {
            // Nobody waits for it any more: only the cancellation ended.
            CANCELLING.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let result = if ok {
            convert(py, value)
        } else {
            Err(HookError::plugin(value.str().map(|s| s.to_string()).unwrap_or_else(|_| "Python error".into())))
        };
        target.put(result);
    });
    Ok((slot, Bound::new(py, Done { finish: Mutex::new(Some(finish)) })?))
}

/// A task left running (the turn is still held): its end fills the slot.
fn watch<'py, T, F>(
    py: Python<'py>,
    interp: &'static Interp,
    task: &Bound<'py, PyAny>,
    convert: F,
) -> PyResult<Pending<T>>
where
    T: Send + 'static,
    F: FnOnce(Python<'_>, &Bound<'_, PyAny>) -> Result<T, HookError> + Send + 'static,
{
    let (slot, done) = completion(py, convert)?;
    let call = interp.module(py).call_method1("watch", (task, done))?;
    Ok(Pending { state: State::Running { slot, call: Some(call.unbind()), waited: None } })
}

/// Hands the call to the loop thread (the loop is busy); `waited` names it.
fn submit_labelled<'py, T, F>(
    py: Python<'py>,
    interp: &'static Interp,
    callable: &Bound<'py, PyAny>,
    invocation: Invocation<'py>,
    sync_only: bool,
    waited: Option<Waited>,
    convert: F,
) -> Pending<T>
where
    T: Send + 'static,
    F: FnOnce(Python<'_>, &Bound<'_, PyAny>) -> Result<T, HookError> + Send + 'static,
{
    let submitted = (|| -> PyResult<Pending<T>> {
        let (slot, done) = completion(py, convert)?;
        let (args, kwargs) = invocation.into_plain(py)?;
        let label = waited.as_ref().map_or("", |w| w.label.as_str());
        let call = interp.module(py).call_method1("submit", (callable, args, kwargs, done, sync_only, label))?;
        Ok(Pending { state: State::Running { slot, call: Some(call.unbind()), waited } })
    })();
    submitted.unwrap_or_else(|e| failed(HookError::plugin(crate::interp::traceback(py, &e))))
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
