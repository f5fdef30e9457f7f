//! What the framework facade a Python plugin holds can ask of the host.
//!
//! Bub hands each plugin its `BubFramework`; plugins call
//! `process_inbound` on it (a scheduler's reminder, an MCP server's
//! `run_model`) and reach the rest of a hook's chain through
//! `framework._plugin_manager.subset_hook_caller(name, [self])` (Bub's
//! documented call-parent idiom). The facade (`bridge.Framework`) does
//! both through [`Host`]: messages go to the message handler the host gave
//! the bridge's channels, and the rest of a chain is
//! [`bub_abi::host::call_rest`] from the calling plugin's place in it.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
};

use bub_abi::{
    host::{call_rest, Rest},
    HookError, HookId, Value,
};
use pyo3::{prelude::*, types::PyDict};

use crate::{call::host_call, convert, interp::Interp, objects, PyMember, PythonBridge, HANDLER};

/// The instance the host registered for each Python plugin, by name: what
/// `call_rest` names the caller by. Known once the host first called one
/// of the plugin's hooks (the instance is the `self` of that call).
static MEMBERS: Mutex<Option<HashMap<String, Arc<PyMember>>>> = Mutex::new(None);

/// Remembers `member` under its name (at discovery).
pub fn remember(member: &Arc<PyMember>) {
    bub_abi::sync::lock(&MEMBERS).get_or_insert_with(HashMap::new).insert(member.name.clone(), member.clone());
}

/// Where a member's registered instance is kept.
pub type InstanceCell = OnceLock<&'static PythonBridge>;

/// A Python plugin's instance that does not implement `hook`: the rest of
/// the chain "after" it is the whole chain (`call_rest`'s rule).
fn outsider_of(hook: HookId) -> Result<&'static PythonBridge, String> {
    let members = bub_abi::sync::lock(&MEMBERS);
    members
        .iter()
        .flat_map(|m| m.values())
        .filter(|m| !implements(m, hook))
        .find_map(|m| m.instance.get().copied())
        .ok_or_else(|| {
            format!(
                "the whole chain of `{}` cannot be called: every Python plugin the host has called implements it",
                hook.name()
            )
        })
}

/// Whether the bridge answers `hook` for `member`: its Python hookimpl,
/// the `bub.tool` tools it registered, or the venv's skill folders it names.
fn implements(member: &PyMember, hook: HookId) -> bool {
    member.hooks.contains_key(&hook)
        || (hook == HookId::ProvideTools && !member.tools.is_empty())
        || (hook == HookId::ProvideSkillRoots && member.skill_roots.is_some())
}

fn instance_of(plugin: &str) -> Result<&'static PythonBridge, String> {
    let members = bub_abi::sync::lock(&MEMBERS);
    let member = members
        .as_ref()
        .and_then(|m| m.get(plugin))
        .ok_or_else(|| format!("no Python plugin named {plugin:?} is loaded by the bridge"))?;
    member.instance.get().copied().ok_or_else(|| {
        format!(
            "the host has not called a hook of plugin {plugin:?} yet: the rest of a chain can be called from inside \
             one of its hooks"
        )
    })
}

/// The host services of the framework facade (`Framework._host`).
#[pyclass(frozen, module = "bub_rs_bridge")]
pub struct Host {
    pub(crate) interp: &'static Interp,
}

fn handler() -> PyResult<bub_abi::Object> {
    bub_abi::sync::lock(&HANDLER).clone().ok_or_else(|| {
        pyo3::exceptions::PyRuntimeError::new_err(
            "process_inbound needs a running channel host (`bub gateway` or `bub chat`): no message handler yet",
        )
    })
}

#[pymethods]
impl Host {
    /// Hands `message` to the host's message handler; the awaitable ends
    /// once it is queued.
    fn handle<'py>(&self, py: Python<'py>, message: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let handled = objects::handle_message(handler()?, message, self.interp, "handle")?;
        host_call(py, self.interp, async move {
            handled.await?;
            Ok(Value::null())
        })
    }

    /// Hands `message` to the host's message handler; the awaitable ends
    /// with what became of it (the gateway's `Delivery`: status, session,
    /// model output, outbounds, error) once its turn is over.
    fn submit<'py>(&self, py: Python<'py>, message: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let submitted = objects::handle_message(handler()?, message, self.interp, "submit")?;
        host_call(py, self.interp, submitted)
    }

    /// The implementations of `hook` after `plugin` (a Python plugin's
    /// name), in call order, with `kwargs` (the hook's arguments by name):
    /// their first non-None answer for a first-result hook, else the list.
    /// An awaitable, except for a sync-only hook, whose chain answers at
    /// once.
    fn call_rest<'py>(
        &self,
        py: Python<'py>,
        plugin: &str,
        hook: &str,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let error = pyo3::exceptions::PyRuntimeError::new_err;
        let id = HookId::from_name(hook).ok_or_else(|| error(format!("no hook is named {hook:?}")))?;
        let instance = instance_of(plugin).map_err(error)?;
        self.call_from(py, instance, id, kwargs)
    }

    /// Every implementation of `hook`, in call order, with `kwargs`: as
    /// [`call_rest`](Self::call_rest), from no plugin's place (what Bub's
    /// framework methods such as `get_model_options` call).
    fn call_all<'py>(&self, py: Python<'py>, hook: &str, kwargs: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyAny>> {
        let error = pyo3::exceptions::PyRuntimeError::new_err;
        let id = HookId::from_name(hook).ok_or_else(|| error(format!("no hook is named {hook:?}")))?;
        let instance = outsider_of(id).map_err(error)?;
        self.call_from(py, instance, id, kwargs)
    }
}

impl Host {
    fn call_from<'py>(
        &self,
        py: Python<'py>,
        instance: &'static PythonBridge,
        id: HookId,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let error = pyo3::exceptions::PyRuntimeError::new_err;
        let args: serde_json::Value =
            convert::from_py(kwargs.as_any(), self.interp)?.deserialize().map_err(|e| error(e.to_string()))?;
        let call = call_rest(instance, id, args);
        if id.info().kind.is_sync_only() {
            let value = call.now().and_then(rest_value).map_err(|e| error(e.message.to_string()))?;
            return convert::to_py(py, self.interp, value.as_ref());
        }
        host_call(py, self.interp, async move { rest_value(call.await?) })
    }
}

/// What the rest of a chain answered, as one host value.
fn rest_value(rest: Rest) -> Result<Value, HookError> {
    Ok(match rest {
        Rest::None => Value::null(),
        Rest::Value(v) => Value::from(&v),
        Rest::Object(o) => Value::from_live_object(&o)?,
        Rest::Objects(list) => {
            let mut out = Value::array();
            for o in &list {
                out.push(Value::from_live_object(o)?);
            }
            out
        }
    })
}
