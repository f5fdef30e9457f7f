//! The tool call of `before_tool_call` / `after_tool_call`, both ways,
//! without a Python helper frame.
//!
//! Interception hooks see Bub's own dataclasses (`bub.core.events`); model
//! requests and results go through a dict and a Python function
//! (`bridge.interception_arg` / `interception_result`). A tool call crosses
//! on every tool a model calls, through every plugin of the chain, so it is
//! converted only here: Bub's `ToolCall` straight from the host value (by
//! the maker `bridge._builder` gives, fields as Bub's agent sets them), and
//! a `ToolCallDecision` read straight into the host's form. Without Bub in
//! the venv (no `bub.core.events`), both answer `None` and the value
//! crosses as it is, as for every interception argument then.

use std::sync::OnceLock;

use bub_abi::{Value, ValueRef};
use pyo3::{
    prelude::*,
    types::{PyDict, PyType},
};

use crate::{convert, interp::Interp};

/// Bub's `ToolCall` maker and `ToolCallDecision` type, looked up once.
struct Events {
    tool_call: Py<PyAny>,
    decision: Py<PyType>,
}

static EVENTS: OnceLock<Option<Events>> = OnceLock::new();

fn events(py: Python<'_>, interp: &'static Interp) -> Option<&'static Events> {
    if let Some(found) = EVENTS.get() {
        return found.as_ref();
    }
    // Looked up without holding a lock: Python may hand the GIL to another
    // thread meanwhile, and a thread blocked in `get_or_init` while holding
    // the GIL would deadlock with us. Two first calls both look it up; the
    // first to finish is kept.
    let lookup = || -> Option<Events> {
        let found = interp.module(py).call_method0("tool_call_types").ok()?;
        let (tool_call, decision): (Bound<'_, PyAny>, Bound<'_, PyAny>) = found.extract().ok()?;
        Some(Events { tool_call: tool_call.unbind(), decision: decision.cast_into::<PyType>().ok()?.unbind() })
    };
    let _ = EVENTS.set(lookup());
    EVENTS.get().and_then(Option::as_ref)
}

/// The host's tool call as Bub's `ToolCall(run_id, tool, arguments)`; None
/// without Bub.
pub fn tool_call<'py>(
    py: Python<'py>,
    interp: &'static Interp,
    value: ValueRef<'_>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Some(events) = events(py, interp) else { return Ok(None) };
    let text = |key: &str| value.get(key).and_then(|v| v.as_str()).unwrap_or("");
    let arguments = PyDict::new(py);
    if let Some(args) = value.get("arguments") {
        for (k, v) in args.entries() {
            arguments.set_item(convert::key(py, k), convert::to_py(py, interp, v)?)?;
        }
    }
    let kwargs = PyDict::new(py);
    kwargs.set_item(convert::key(py, "run_id"), text("run_id"))?;
    kwargs.set_item(convert::key(py, "tool"), text("tool"))?;
    kwargs.set_item(convert::key(py, "arguments"), arguments)?;
    events.tool_call.bind(py).call((), Some(&kwargs)).map(Some)
}

/// A `ToolCallDecision` in the host's form (`{"action", "arguments"?,
/// "result"?, "message"?}`); None for anything else (the general path
/// decides).
pub fn tool_decision(py: Python<'_>, interp: &'static Interp, answer: &Bound<'_, PyAny>) -> PyResult<Option<Value>> {
    let Some(events) = events(py, interp) else { return Ok(None) };
    if !answer.is_instance(events.decision.bind(py))? {
        return Ok(None);
    }
    let mut out = Value::object();
    out.insert("action", convert::from_py(&answer.getattr(convert::key(py, "action"))?, interp)?);
    for field in ["arguments", "result", "message"] {
        let mut v = answer.getattr(convert::key(py, field))?;
        if v.is_none() {
            continue;
        }
        if field == "arguments" && !v.is_instance_of::<PyDict>() {
            // Any mapping, as `dict(decision.arguments)` reads it.
            v = py.get_type::<PyDict>().call1((v,))?;
        }
        out.insert(field, convert::from_py(&v, interp)?);
    }
    Ok(Some(out))
}
