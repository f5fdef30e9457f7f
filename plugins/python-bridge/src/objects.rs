//! Objects across the bridge, both ways.
//!
//! - A Python object that is not data (a scheduler, an MCP manager) becomes
//!   a live host object of kind `python`: the host keeps it in the turn
//!   state and hands it back, and the bridge turns it into the same Python
//!   object again (by the id in its name, from a table an entry of which
//!   lives exactly as long as the host holds the object). Other plugins may
//!   call its methods (`invoke(method, kwargs)` runs it on the loop).
//! - Python channels and tools become host channels and tools
//!   ([`PyChannel`], [`PyTool`]).
//! - A host object handed to Python (the message handler, another plugin's
//!   live object) becomes a [`HostObject`] whose methods are awaitables.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
};

use bub_abi::{
    resources::{Channel, Fut, Tool},
    types::{ChannelInfo, Envelope, ToolCallContext, ToolSpec},
    BoxError, HookError, Object, ObjectFuture, ObjectImpl, Value, ValueRef,
};
use pyo3::{prelude::*, types::PyDict};
use serde_json::Map;

use crate::{
    call::{dispatch, host_call},
    convert,
    interp::Interp,
};

/// The kind of a live Python object in the host.
pub const PYTHON_KIND: &str = "python";

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static LIVE: Mutex<Option<HashMap<u64, Py<PyAny>>>> = Mutex::new(None);

/// A live Python object as a host object.
pub fn live(obj: &Bound<'_, PyAny>, interp: &'static Interp) -> Object {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let type_name = obj.get_type().qualname().map(|n| n.to_string()).unwrap_or_else(|_| "object".into());
    bub_abi::sync::lock(&LIVE).get_or_insert_with(HashMap::new).insert(id, obj.clone().unbind());
    Object::new(LivePython { id, name: format!("{type_name}#{id}"), obj: obj.clone().unbind(), interp })
}

/// A Python result as JSON, for the objects whose methods answer JSON
/// (live objects, tools, resources): converted where the call finished.
fn json_result(
    interp: &'static Interp,
) -> impl FnOnce(Python<'_>, &Bound<'_, PyAny>) -> Result<serde_json::Value, HookError> {
    move |py, v| {
        let value = convert::from_py(v, interp).map_err(|e| py_error(py, &e))?;
        value.deserialize::<serde_json::Value>().map_err(|e| HookError::plugin(e.to_string()))
    }
}

/// Hands `message` (a map: `bridge.inbound_form` made it from a
/// `ChannelMessage` field by field) to a host message handler's `method`
/// (`handle`, `submit`).
pub fn handle_message(
    handler: Object,
    message: &Bound<'_, PyAny>,
    interp: &'static Interp,
    method: &'static str,
) -> PyResult<impl std::future::Future<Output = Result<Value, HookError>> + Send + 'static> {
    let mut args = Value::object();
    args.insert("message", convert::from_py(message, interp)?);
    Ok(async move { handler.invoke_value(method, args).await })
}

/// The Python object behind a live host object this bridge made, if it is
/// one and still held.
fn lookup(name: &str) -> Option<Py<PyAny>> {
    let id: u64 = name.rsplit_once('#')?.1.parse().ok()?;
    let live = bub_abi::sync::lock(&LIVE);
    live.as_ref()?.get(&id).map(|o| Python::attach(|py| o.clone_ref(py)))
}

/// A live object read back as its marker map `{"$object": "python",
/// "name": …}` (a tool context's state is such a copy): the Python object.
pub fn marker_to_py<'py>(py: Python<'py>, value: ValueRef<'_>) -> Option<Bound<'py, PyAny>> {
    if value.get("$object")?.as_str()? != PYTHON_KIND {
        return None;
    }
    lookup(value.get("name")?.as_str()?).map(|o| o.into_bound(py))
}

/// Bub's `state["_runtime_agent"]` marker (`{"$agent": "bub"}`, set by the
/// framework for every turn) as Python: the facade's agent, whose
/// `framework` is the facade (`bridge.Agent`).
pub fn agent_marker_to_py<'py>(
    py: Python<'py>,
    interp: &'static Interp,
    value: ValueRef<'_>,
) -> Option<PyResult<Bound<'py, PyAny>>> {
    value.get("$agent")?;
    Some(interp.module(py).call_method0("runtime_agent"))
}

/// A host object as Python: the Python object itself for this bridge's
/// live objects, else a [`HostObject`] proxy.
pub fn object_to_py<'py>(py: Python<'py>, interp: &'static Interp, object: &Object) -> PyResult<Bound<'py, PyAny>> {
    if object.kind() == PYTHON_KIND {
        if let Some(obj) = lookup(&object.name()) {
            return Ok(obj.into_bound(py));
        }
    }
    Ok(Bound::new(py, HostObject { object: object.clone(), interp })?.into_any())
}

/// The host object behind a [`HostObject`] proxy.
pub fn py_to_host_object(obj: &Bound<'_, PyAny>) -> Option<Object> {
    obj.cast::<HostObject>().ok().map(|h| h.get().object.clone())
}

struct LivePython {
    id: u64,
    name: String,
    obj: Py<PyAny>,
    interp: &'static Interp,
}

impl Drop for LivePython {
    fn drop(&mut self) {
        if let Some(live) = bub_abi::sync::lock(&LIVE).as_mut() {
            live.remove(&self.id);
        }
    }
}

impl ObjectImpl for LivePython {
    fn kind(&self) -> &str {
        PYTHON_KIND
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn invoke(&self, method: &str, args: serde_json::Value) -> ObjectFuture {
        let interp = self.interp;
        let call = Python::attach(|py| -> PyResult<_> {
            let target = self.obj.bind(py).getattr(method)?;
            let kwargs = PyDict::new(py);
            if let serde_json::Value::Object(map) = &args {
                for (k, v) in map {
                    kwargs.set_item(k, convert::json_to_py(py, interp, v)?)?;
                }
            }
            Ok(dispatch(py, interp, &target, (), Some(kwargs), false, json_result(interp)))
        });
        let method = method.to_owned();
        let name = self.name.clone();
        Box::pin(async move { call.map_err(|e| HookError::plugin(format!("{name}.{method}: {e}")))?.await })
    }
}

/// A host object lent to Python; its methods return awaitables.
#[pyclass(frozen, name = "HostObject", module = "bub_rs_bridge")]
pub struct HostObject {
    object: Object,
    interp: &'static Interp,
}

#[pymethods]
impl HostObject {
    /// The object's kind (`message_handler`, `cli_app`, …).
    #[getter]
    fn kind(&self) -> String {
        self.object.kind()
    }

    /// Calls `method` with keyword arguments; an awaitable of its answer.
    #[pyo3(signature = (method, **kwargs))]
    fn call<'py>(
        &self,
        py: Python<'py>,
        method: &str,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = match kwargs {
            Some(k) => convert::from_py(k.as_any(), self.interp)?,
            None => Value::object(),
        };
        let object = self.object.clone();
        let method = method.to_owned();
        host_call(py, self.interp, async move { object.invoke_value(&method, args).await })
    }

    /// A message handler is called with the message (Bub's
    /// `MessageHandler`): `await handler(message)`. The message crosses
    /// field by field (`bridge.deliver`: media fetched, a lifespan kept
    /// live around its turn).
    fn __call__<'py>(slf: &Bound<'py, Self>, message: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        slf.get().interp.module(py).call_method1("deliver", (slf, message))
    }

    /// Hands a message in the host's form to the handler's `method`
    /// (`handle`: queued; `submit`: what became of its turn).
    fn _send<'py>(&self, py: Python<'py>, method: &str, message: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let method = match method {
            "submit" => "submit",
            _ => "handle",
        };
        let handled = handle_message(self.object.clone(), message, self.interp, method)?;
        host_call(py, self.interp, handled)
    }

    fn __repr__(&self) -> String {
        format!("<bub-rs {} {:?}>", self.object.kind(), self.object.name())
    }
}

/// A PyErr as text with its traceback.
pub fn py_error(py: Python<'_>, e: &PyErr) -> HookError {
    HookError::plugin(crate::interp::traceback(py, e))
}

/// A Python channel (Bub's `Channel`: `name`, `start(stop_event)`,
/// `stop()`, `send(message)`).
pub struct PyChannel {
    name: String,
    channel: Py<PyAny>,
    stop_event: Mutex<Option<Py<PyAny>>>,
    interp: &'static Interp,
}

impl PyChannel {
    /// Wraps `channel`; its name is read now.
    pub fn new(channel: &Bound<'_, PyAny>, interp: &'static Interp) -> PyResult<PyChannel> {
        let name: String = channel.getattr("name")?.str()?.extract()?;
        Ok(PyChannel { name, channel: channel.clone().unbind(), stop_event: Mutex::new(None), interp })
    }

    fn run(&self, helper: &str, extra: impl FnOnce(Python<'_>) -> PyResult<Py<PyAny>>) -> impl Fut<()> {
        let interp = self.interp;
        let pending = Python::attach(|py| -> PyResult<_> {
            let helper = interp.module(py).getattr(helper)?;
            let arg = extra(py)?;
            Ok(dispatch(py, interp, &helper, (self.channel.clone_ref(py), arg), None, false, |_, _| Ok(())))
        });
        let name = self.name.clone();
        async move {
            let pending = pending.map_err(|e| format!("python channel {name}: {e}"))?;
            pending.await.map_err(|e| -> BoxError { format!("python channel {name}: {}", e.message).into() })
        }
    }
}

impl Channel for PyChannel {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn start(&self) -> impl Fut<()> {
        self.run("channel_start", |py| {
            let event = self.interp.module(py).call_method0("new_event")?.unbind();
            *bub_abi::sync::lock(&self.stop_event) = Some(event.clone_ref(py));
            Ok(event)
        })
    }

    fn stop(&self) -> impl Fut<()> {
        self.run("channel_stop", |py| {
            let event = bub_abi::sync::lock(&self.stop_event).take();
            match event {
                Some(e) => Ok(e),
                None => Ok(self.interp.module(py).call_method0("new_event")?.unbind()),
            }
        })
    }

    fn send(&self, message: Envelope) -> impl Fut<()> {
        let interp = self.interp;
        self.run("channel_send", move |py| Ok(convert::json_to_py(py, interp, &message)?.unbind()))
    }

    fn info(&self) -> impl Fut<ChannelInfo> {
        let info = Python::attach(|py| -> PyResult<(bool, bool)> {
            let d = self.interp.module(py).call_method1("channel_info", (self.channel.bind(py),))?;
            Ok((d.get_item("enabled")?.extract()?, d.get_item("needs_debounce")?.extract()?))
        });
        async move {
            let (enabled, needs_debounce) = info.map_err(|e| e.to_string())?;
            Ok(ChannelInfo { enabled, needs_debounce, ..Default::default() })
        }
    }
}

/// A tool of Bub's `REGISTRY` (`bub.tool`), registered by a Python plugin.
pub struct PyTool {
    spec: ToolSpec,
    tool: Py<PyAny>,
    interp: &'static Interp,
}

impl PyTool {
    /// Wraps `tool`; its spec is read now.
    pub fn new(tool: &Bound<'_, PyAny>, interp: &'static Interp) -> PyResult<PyTool> {
        let spec = interp.module(tool.py()).call_method1("tool_spec", (tool,))?;
        let spec: serde_json::Value = convert::from_py(&spec, interp)?
            .deserialize()
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        let spec: ToolSpec =
            serde_json::from_value(spec).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        Ok(PyTool { spec, tool: tool.clone().unbind(), interp })
    }

    fn run(
        &self,
        arguments: Map<String, serde_json::Value>,
        context: Option<ToolCallContext>,
    ) -> impl Fut<serde_json::Value> {
        let interp = self.interp;
        let render = !context.as_ref().is_some_and(|c| c.code_mode);
        let pending = Python::attach(|py| -> PyResult<_> {
            let args = PyDict::new(py);
            for (k, v) in &arguments {
                args.set_item(k, convert::json_to_py(py, interp, v)?)?;
            }
            let ctx = match &context {
                Some(c) => {
                    let state = PyDict::new(py);
                    for (k, v) in &c.state {
                        state.set_item(k, convert::json_to_py(py, interp, v)?)?;
                    }
                    interp
                        .module(py)
                        .call_method1("tool_context", (&c.tape, &c.run_id, state, c.code_mode, c.command))?
                        .unbind()
                }
                None => py.None(),
            };
            let runner = interp.module(py).getattr("run_tool")?;
            let args = (self.tool.clone_ref(py), args, ctx, render);
            Ok(dispatch(py, interp, &runner, args, None, false, json_result(interp)))
        });
        let name = self.spec.name.clone();
        async move {
            let pending = pending.map_err(|e| format!("python tool {name}: {e}"))?;
            pending.await.map_err(|e| -> BoxError { e.message.to_string().into() })
        }
    }
}

impl Tool for PyTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call(&self, arguments: Map<String, serde_json::Value>) -> impl Fut<serde_json::Value> {
        self.run(arguments, None)
    }

    fn call_in(
        &self,
        arguments: Map<String, serde_json::Value>,
        context: ToolCallContext,
    ) -> impl Fut<serde_json::Value> {
        self.run(arguments, Some(context))
    }
}

/// A command (or command group) a Python plugin added to its Typer app:
/// `bub <name> …` runs the app with the words after `bub`, on a thread of
/// its own (Typer commands call `asyncio.run`).
pub struct PyCommand {
    /// The subcommand's name.
    pub name: String,
    /// Its one-line help.
    pub about: String,
    /// The plugin's Typer app.
    pub app: Py<PyAny>,
    /// The interpreter.
    pub interp: &'static Interp,
}

impl bub_abi::resources::Command for PyCommand {
    fn spec(&self) -> bub_abi::types::CommandSpec {
        bub_abi::types::CommandSpec {
            name: self.name.clone(),
            about: self.about.clone(),
            args: vec![bub_abi::types::CommandArg {
                name: "args".into(),
                help: "the command's own arguments (see `--help`)".into(),
                trailing: true,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn run(&self, args: Map<String, serde_json::Value>) -> impl Fut<serde_json::Value> {
        let mut argv = vec![self.name.clone()];
        if let Some(serde_json::Value::Array(words)) = args.get("args") {
            argv.extend(words.iter().filter_map(|w| w.as_str().map(str::to_owned)));
        }
        let (app, interp) = (Python::attach(|py| self.app.clone_ref(py)), self.interp);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new().name("bub-python-command".into()).spawn(move || {
            let code = Python::attach(|py| -> Result<i64, String> {
                let module = interp.module(py);
                module
                    .call_method1("run_typer", (app.bind(py), argv))
                    .and_then(|c| c.extract::<i64>())
                    .map_err(|e| crate::interp::traceback(py, &e))
            });
            let _ = tx.send(code);
        });
        let name = self.name.clone();
        async move {
            spawned.map_err(|e| format!("cannot start `{name}`: {e}"))?;
            match rx.await.map_err(|_| format!("`{name}` ended without an answer"))? {
                Ok(0) => Ok(serde_json::Value::Null),
                Ok(code) => Err(format!("`bub {name}` exited with status {code}").into()),
                Err(traceback) => Err(traceback.into()),
            }
        }
    }
}

/// A Python resource of one of the host's object kinds (tape store,
/// lifespan, steering inbox, environment, model stream): each method call
/// goes to `bridge.resource_call`, which calls the Python object as Bub
/// does and answers in the host's shapes.
pub struct PyResource {
    kind: &'static str,
    obj: Py<PyAny>,
    holder: Py<PyDict>,
    interp: &'static Interp,
}

impl PyResource {
    /// Wraps `obj` as a resource of `kind`.
    pub fn object(kind: &'static str, obj: &Bound<'_, PyAny>, interp: &'static Interp) -> Object {
        Object::new(PyResource { kind, obj: obj.clone().unbind(), holder: PyDict::new(obj.py()).unbind(), interp })
    }
}

impl ObjectImpl for PyResource {
    fn kind(&self) -> &str {
        self.kind
    }

    fn invoke(&self, method: &str, args: serde_json::Value) -> ObjectFuture {
        let interp = self.interp;
        let kind = self.kind;
        let pending = Python::attach(|py| -> PyResult<_> {
            let helper = interp.module(py).getattr("resource_call")?;
            let args = convert::json_to_py(py, interp, &args)?;
            let args = (kind, self.obj.clone_ref(py), method, args, self.holder.clone_ref(py));
            Ok(dispatch(py, interp, &helper, args, None, false, json_result(interp)))
        });
        let method = method.to_owned();
        Box::pin(async move {
            let pending = pending.map_err(|e| HookError::plugin(format!("python {kind}.{method}: {e}")))?;
            match pending.await {
                Ok(value) => Ok(value),
                Err(e) if e.message.contains("Unsupported:") => {
                    Err(HookError::new(bub_abi::resources::UNSUPPORTED, format!("python {kind} has no `{method}`")))
                }
                Err(e) => {
                    tracing::error!("python {kind}.{method} failed:\n{}", e.message);
                    Err(HookError::plugin(format!("python {kind}.{method}: {}", crate::last_line(&e.message))))
                }
            }
        })
    }
}
