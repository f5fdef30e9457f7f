//! Running a call as one callback of the bridge's asyncio loop, from the
//! caller's own thread.
//!
//! Why: Bub runs every hook on its one loop, so a Python plugin may rely on
//! a running loop (`asyncio.get_running_loop()`, tasks that outlive the
//! call, an `AsyncIOScheduler`). Handing each call to the loop thread costs
//! two thread hops (tens of µs); instead a host thread takes the loop's
//! *turn* — a lock the loop thread holds except while it sleeps in its
//! selector (`bridge._Selector`) — marks the loop as running, and calls the
//! function right there: as exclusive as one of the loop's own callbacks.
//! A coroutine starts as an eager task, so one that never waits finishes
//! here too. Everything is done from Rust with the objects looked up once
//! (no Python frame of the bridge's own per call), because this path is
//! the whole cost of a cheap hook.

use std::{cell::Cell, sync::Mutex};

use pyo3::{
    ffi,
    prelude::*,
    types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType},
};

use crate::{call::Invocation, FastMap};

// `PyGen_GetCode` (CPython 3.12+; pyo3-ffi does not declare it): a
// generator's or a coroutine's code object, as a new reference. The two
// share their layout, and CPython's own `cr_code` getter reads the code
// through the same internal function. Unlike `getattr(coro, "cr_code")`
// it raises no audit event and looks nothing up.
extern "C" {
    fn PyGen_GetCode(gen: *mut ffi::PyObject) -> *mut ffi::PyObject;
}

/// The loop and what a call made beside it needs, looked up once.
pub struct EventLoop {
    loop_: Py<PyAny>,
    /// `loop._ready` and `loop._scheduled`: work a call queued is seen by
    /// their lengths, and the sleeping loop is then woken for it.
    ready: Py<PyAny>,
    scheduled: Py<PyAny>,
    acquire: Py<PyAny>,
    release: Py<PyAny>,
    get_running: Py<PyAny>,
    set_running: Py<PyAny>,
    task: Py<PyAny>,
    task_kwargs: Py<PyDict>,
    ensure_future: Py<PyAny>,
    isawaitable: Py<PyAny>,
    coroutine: Py<PyType>,
    cancelled: Py<PyType>,
    wake: Py<PyAny>,
    /// For coroutines that never wait: run in one step, inside the
    /// bridge's host task (`bridge._host`), without a task of their own.
    host_task: Py<PyAny>,
    current_task: Py<PyAny>,
    enter_task: Py<PyAny>,
    leave_task: Py<PyAny>,
    never_suspends: Py<PyAny>,
    /// `never_suspends` per code object (kept alive here, so its address
    /// stays its own); bounded.
    inline: Mutex<FastMap<usize, (Py<PyAny>, bool)>>,
}

/// How many coroutine functions' "never waits" answers are remembered.
const INLINE_CACHE_ENTRIES: usize = 4096;

thread_local! {
    /// This thread runs Python calls as the loop (the loop thread itself,
    /// or a host thread inside a call it runs holding the turn): a call
    /// made here runs at once, nested, as a loop callback may call a
    /// function.
    static AS_LOOP: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread acts as the loop now (the loop thread, or a host
/// thread inside a call it runs holding the turn).
pub fn is_loop_thread() -> bool {
    AS_LOOP.with(Cell::get)
}

/// Marks the calling thread as the loop thread.
pub fn mark_loop_thread() {
    AS_LOOP.with(|a| a.set(true));
}

/// The end of a call run on this thread.
pub enum Outcome<'py> {
    /// Its result.
    Done(Bound<'py, PyAny>),
    /// A task still running on the loop.
    Running(Bound<'py, PyAny>),
    /// Its task was cancelled.
    Cancelled,
}

/// The loop's turn, held by this thread for one call.
pub struct Turn<'a, 'py> {
    py: Python<'py>,
    event_loop: &'a EventLoop,
    /// Taken by this call (else the thread already acts as the loop).
    owned: bool,
}

impl Drop for Turn<'_, '_> {
    fn drop(&mut self) {
        if self.owned {
            AS_LOOP.with(|a| a.set(false));
            if let Err(e) = self.event_loop.release.bind(self.py).call0() {
                tracing::error!("python bridge: cannot give the loop its turn back: {e}");
            }
        }
    }
}

impl EventLoop {
    /// Looks the loop's objects up (the loop is running: `bridge._loop`).
    pub fn new(py: Python<'_>, module: &Bound<'_, PyModule>) -> PyResult<EventLoop> {
        let loop_ = module.getattr("_loop")?;
        let turn = module.getattr("_turn")?;
        let asyncio = py.import("asyncio")?;
        let events = py.import("asyncio.events")?;
        let task_kwargs = PyDict::new(py);
        task_kwargs.set_item("loop", &loop_)?;
        task_kwargs.set_item("eager_start", true)?;
        Ok(EventLoop {
            ready: loop_.getattr("_ready")?.unbind(),
            scheduled: loop_.getattr("_scheduled")?.unbind(),
            acquire: turn.getattr("acquire")?.unbind(),
            release: turn.getattr("release")?.unbind(),
            get_running: events.getattr("_get_running_loop")?.unbind(),
            set_running: events.getattr("_set_running_loop")?.unbind(),
            task: asyncio.getattr("Task")?.unbind(),
            task_kwargs: task_kwargs.unbind(),
            ensure_future: asyncio.getattr("ensure_future")?.unbind(),
            isawaitable: py.import("inspect")?.getattr("isawaitable")?.unbind(),
            coroutine: py.import("types")?.getattr("CoroutineType")?.cast_into::<PyType>()?.unbind(),
            cancelled: asyncio.getattr("CancelledError")?.cast_into::<PyType>()?.unbind(),
            wake: module.getattr("wake")?.unbind(),
            host_task: module.getattr("_host_task")?.unbind(),
            current_task: asyncio.getattr("current_task")?.unbind(),
            enter_task: py.import("asyncio.tasks")?.getattr("_enter_task")?.unbind(),
            leave_task: py.import("asyncio.tasks")?.getattr("_leave_task")?.unbind(),
            never_suspends: module.getattr("never_suspends")?.unbind(),
            inline: Mutex::new(FastMap::default()),
            loop_: loop_.unbind(),
        })
    }

    /// The turn, if the loop is idle (or this thread already has it); None
    /// when the loop is busy: then the call goes to the loop thread.
    pub fn take_turn<'a, 'py>(&'a self, py: Python<'py>) -> Option<Turn<'a, 'py>> {
        if AS_LOOP.with(Cell::get) {
            return Some(Turn { py, event_loop: self, owned: false });
        }
        if crate::call::cancelling() {
            return None;
        }
        let taken = self.acquire.bind(py).call1((false,)).and_then(|t| t.is_truthy()).unwrap_or(false);
        if !taken {
            return None;
        }
        AS_LOOP.with(|a| a.set(true));
        Some(Turn { py, event_loop: self, owned: true })
    }

    /// Calls `callable(*args, **kwargs)` holding `turn`, with the loop
    /// marked running; an error is the exception with its traceback.
    pub fn run_here<'py>(
        &self,
        py: Python<'py>,
        turn: &Turn<'_, 'py>,
        callable: &Bound<'py, PyAny>,
        invocation: &Invocation<'py>,
        sync_only: bool,
    ) -> Result<Outcome<'py>, String> {
        if !turn.owned {
            return self.call(py, callable, invocation, sync_only, false).map_err(|e| crate::interp::traceback(py, &e));
        }
        let queued = |py| (self.ready.bind(py).len().unwrap_or(0), self.scheduled.bind(py).len().unwrap_or(0));
        let swap = (|| -> PyResult<_> {
            let previous = self.get_running.bind(py).call0()?;
            self.set_running.bind(py).call1((self.loop_.bind(py),))?;
            Ok(previous)
        })();
        let previous = swap.map_err(|e| crate::interp::traceback(py, &e))?;
        let before = queued(py);
        // Holding the turn from a host thread: the loop sits in its
        // selector, so no task of it is current.
        let outcome =
            self.call(py, callable, invocation, sync_only, true).map_err(|e| crate::interp::traceback(py, &e));
        if let Err(e) = self.set_running.bind(py).call1((previous,)) {
            tracing::error!("python bridge: cannot restore the running loop: {e}");
        }
        if matches!(outcome, Ok(Outcome::Running(_))) || queued(py) != before {
            // Work queued from this thread: the sleeping loop wakes for it.
            if let Err(e) = self.wake.bind(py).call0() {
                tracing::error!("python bridge: cannot wake the loop: {e}");
            }
        }
        outcome
    }

    fn call<'py>(
        &self,
        py: Python<'py>,
        callable: &Bound<'py, PyAny>,
        invocation: &Invocation<'py>,
        sync_only: bool,
        no_task: bool,
    ) -> PyResult<Outcome<'py>> {
        let result = invocation.call(callable)?;
        let coroutine = result.get_type().is(self.coroutine.bind(py));
        if !coroutine && (is_plain(&result) || !self.isawaitable.bind(py).call1((&result,))?.is_truthy()?) {
            return Ok(Outcome::Done(result));
        }
        if sync_only {
            // Bub's call_*_sync skips it; the host sees no answer.
            if coroutine {
                result.call_method0("close")?;
            }
            return Ok(Outcome::Done(py.None().into_bound(py)));
        }
        if coroutine && self.never_waits(py, &result)? {
            return self.run_inline(py, &result, no_task);
        }
        let task = if coroutine {
            // Its first step runs now, as the task it is (current_task()
            // and asyncio.timeout work); one that never waits is done here.
            self.task.bind(py).call((result,), Some(self.task_kwargs.bind(py)))?
        } else {
            let kwargs = PyDict::new(py);
            kwargs.set_item("loop", self.loop_.bind(py))?;
            self.ensure_future.bind(py).call((result,), Some(&kwargs))?
        };
        if !task.call_method0("done")?.is_truthy()? {
            return Ok(Outcome::Running(task));
        }
        match task.call_method0("result") {
            Ok(value) => Ok(Outcome::Done(value)),
            Err(e) if e.is_instance(py, self.cancelled.bind(py)) => Ok(Outcome::Cancelled),
            Err(e) => Err(e),
        }
    }
}

impl EventLoop {
    /// Whether `coroutine` can never suspend (its code has no await).
    fn never_waits(&self, py: Python<'_>, coroutine: &Bound<'_, PyAny>) -> PyResult<bool> {
        // SAFETY: we hold the GIL; `coroutine` is a live object whose type
        // was checked to be exactly `types.CoroutineType`, whose layout is
        // a generator's, as PyGen_GetCode expects; it returns a new
        // (owned) reference, never NULL for a live coroutine.
        let code = unsafe { Bound::from_owned_ptr(py, PyGen_GetCode(coroutine.as_ptr())) };
        let id = code.as_ptr() as usize;
        if let Some((_, answer)) = bub_abi::sync::lock(&self.inline).get(&id) {
            return Ok(*answer);
        }
        let answer = self.never_suspends.bind(py).call1((&code,))?.is_truthy()?;
        let mut cache = bub_abi::sync::lock(&self.inline);
        if cache.len() < INLINE_CACHE_ENTRIES {
            cache.insert(id, (code.unbind(), answer));
        }
        Ok(answer)
    }

    /// Runs a coroutine that never waits in one step, as awaiting it
    /// inline would: inside the current task, or the bridge's host task
    /// when none runs (a call from a host thread). A task of its own would
    /// cost more than the whole call.
    /// `no_task`: the caller knows no task is current (it holds the turn
    /// from a host thread), so the check is skipped.
    fn run_inline<'py>(&self, py: Python<'py>, coroutine: &Bound<'py, PyAny>, no_task: bool) -> PyResult<Outcome<'py>> {
        let loop_ = self.loop_.bind(py);
        let host = self.host_task.bind(py);
        let enter = no_task || self.current_task.bind(py).call1((loop_,))?.is_none();
        if enter {
            self.enter_task.bind(py).call1((loop_, host))?;
        }
        let step = send_none(coroutine);
        if enter {
            self.leave_task.bind(py).call1((loop_, host))?;
        }
        match step {
            Ok(Step::Returned(value)) => Ok(Outcome::Done(value)),
            Ok(Step::Yielded) => {
                coroutine.call_method0("close")?;
                Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "a coroutine without an await suspended (the python bridge's never_suspends is wrong for it)",
                ))
            }
            Err(e) if e.is_instance(py, self.cancelled.bind(py)) => Ok(Outcome::Cancelled),
            Err(e) => Err(e),
        }
    }
}

/// One step of a coroutine.
enum Step<'py> {
    Returned(Bound<'py, PyAny>),
    Yielded,
}

/// Sends None into `coroutine` (its first step): what it returned, or that
/// it yielded. `PyIter_Send` reports a return without raising
/// `StopIteration`, which would cost more than the step.
fn send_none<'py>(coroutine: &Bound<'py, PyAny>) -> PyResult<Step<'py>> {
    let py = coroutine.py();
    let mut out: *mut ffi::PyObject = std::ptr::null_mut();
    // SAFETY: we hold the GIL (`py`); `coroutine` is a live coroutine
    // object (its type was checked) and `None` a live object, both
    // borrowed for the call. PyIter_Send stores a new reference in `out`
    // when it returns PYGEN_RETURN or PYGEN_NEXT, and sets the Python
    // error (leaving `out` NULL) on PYGEN_ERROR.
    let result = unsafe { ffi::PyIter_Send(coroutine.as_ptr(), py.None().as_ptr(), &mut out) };
    match result {
        // SAFETY: `out` is the new (owned) reference PyIter_Send returned.
        ffi::PySendResult::PYGEN_RETURN => Ok(Step::Returned(unsafe { Bound::from_owned_ptr(py, out) })),
        ffi::PySendResult::PYGEN_NEXT => {
            // SAFETY: as above; the yielded value is dropped at once.
            drop(unsafe { Bound::from_owned_ptr(py, out) });
            Ok(Step::Yielded)
        }
        ffi::PySendResult::PYGEN_ERROR => {
            Err(PyErr::take(py).unwrap_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("the coroutine failed")))
        }
    }
}

/// `bridge.run_call(fn, args, kwargs, sync_only)`: a call handed to the
/// loop thread (`bridge._start`) runs the very steps a host thread runs
/// holding the turn: ("done", result), ("running", task), ("cancelled",
/// "cancelled") or ("error", its traceback).
#[pyfunction]
#[pyo3(signature = (callable, args, kwargs, sync_only))]
pub fn run_call<'py>(
    py: Python<'py>,
    callable: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
    sync_only: bool,
) -> PyResult<(&'static str, Bound<'py, PyAny>)> {
    let event_loop = crate::interp::running()
        .ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("the python bridge has no interpreter"))?
        .event_loop();
    let turn = event_loop
        .take_turn(py)
        .ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("run_call is for the loop thread"))?;
    let text = |t: &str| PyString::new(py, t).into_any();
    let invocation = Invocation::Plain { args: args.clone(), kwargs: kwargs.cloned() };
    Ok(match event_loop.run_here(py, &turn, callable, &invocation, sync_only) {
        Ok(Outcome::Done(value)) => ("done", value),
        Ok(Outcome::Running(task)) => ("running", task),
        Ok(Outcome::Cancelled) => ("cancelled", text("cancelled")),
        Err(traceback) => ("error", text(&traceback)),
    })
}

/// Results that are certainly not awaitable, told apart without a call.
fn is_plain(value: &Bound<'_, PyAny>) -> bool {
    value.is_none()
        || value.is_exact_instance_of::<PyString>()
        || value.is_exact_instance_of::<PyDict>()
        || value.is_exact_instance_of::<PyList>()
        || value.is_exact_instance_of::<PyBool>()
        || value.is_exact_instance_of::<PyInt>()
        || value.is_exact_instance_of::<PyFloat>()
        || value.is_exact_instance_of::<PyTuple>()
}
