//! `python-bridge`: Bub's Python plugins, unchanged, as plugins of bub-rs.
//!
//! The bridge is a [plugin set](bub_abi::sdk::set): pointed at a venv (its
//! `venv` setting, else `VIRTUAL_ENV`, else `$BUB_HOME/python/venv`), it
//! embeds CPython, loads the venv's `bub` entry points as Bub 0.6 does, and
//! contributes each Python plugin as a plugin of its own, under its entry
//! point's name, with the pluggy markers of its hookimpls: `bub plugins
//! list`, `bub hooks` and the call order show them by name, and a Python
//! `tryfirst` outranks a normal Rust implementation exactly as in Bub.
//!
//! Every hook is forwarded generically (one table entry, [`for_each_hook!`]
//! with the hook's argument kinds): host values become Python objects
//! ([`convert`]), only the arguments the Python function declares are
//! passed (pluggy's rule), the call runs on the one asyncio loop thread
//! ([`interp`], [`call`]), and the result comes back as a host value, a
//! live object, or a channel / tool ([`objects`]).

mod call;
mod convert;
mod event_loop;
mod held_up;
mod host;
mod interception;
mod interp;
mod objects;
mod runner;
mod state;

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use bub_abi::abi_stable::std_types::ROption;
use bub_abi::{
    abi::{DispatchMode, HookCall, HookReturn},
    args::*,
    hooks::HookId,
    resources::kinds,
    sdk::set::{Member, PluginSet},
    BoxError, Hook, HookDecl, HookError, HookMarker, Object, Plugin, PluginContext, TurnState, Value,
};
use pyo3::{
    prelude::*,
    types::{PyDict, PyTuple},
};

use interp::Interp;

/// A map keyed by pointers or short strings, hashed without SipHash's
/// per-lookup cost (nothing in the bridge is keyed by outside input).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use state::StateDict;

/// How the bridge reads a hook's argument.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ArgKind {
    Value,
    State,
    Object,
}

/// Argument names and kinds of every hook, from the hook table.
fn hook_args(id: HookId) -> &'static [(&'static str, ArgKind, usize)] {
    macro_rules! gen_args {
        ($( ($name:ident $Pascal:ident {
            kind: $kind:ident,
            args: [$($idx:literal $ak:ident $arg:ident : $aty:ty),* $(,)?],
            returns: $ret:ty,
            doc: $doc:literal $(,)?
        }) )*) => {
            match id {
                $(HookId::$Pascal => &[$((stringify!($arg), gen_args!(@kind $ak), $idx)),*],)*
            }
        };
        (@kind value) => { ArgKind::Value };
        (@kind state) => { ArgKind::State };
        (@kind object) => { ArgKind::Object };
    }
    bub_abi::for_each_hook!(gen_args)
}

/// One Python hookimpl.
struct PyHook {
    func: Py<PyAny>,
    /// An `async def`: called on the runner thread, never on the caller's
    /// (see `runner`).
    coroutine: bool,
    argnames: Vec<String>,
    /// `argnames` as a tuple of interned strings: the call's keyword names.
    names: Py<PyTuple>,
}

/// One Python plugin (an entry point of group `bub`).
struct PyMember {
    name: String,
    hooks: HashMap<HookId, PyHook>,
    /// The `bub.tool` tools it registered while it loaded.
    tools: Vec<Object>,
    /// The venv's skill folders (Bub's `skills` namespace package), which
    /// the first Python plugin names for the bridge (`provide_skill_roots`).
    skill_roots: Option<Vec<String>>,
    /// The instance the host registered for it (`self` of its hook calls):
    /// what names it when it calls the rest of a chain (`host`).
    instance: host::InstanceCell,
}

/// The bridge: the set's own instance (no member), or one Python plugin.
pub struct PythonBridge {
    member: Option<Arc<PyMember>>,
    setup: Arc<Setup>,
}

struct Setup {
    venv: Option<PathBuf>,
    home: PathBuf,
    workspace: PathBuf,
}

/// The message handler the host gave the bridge's channels: what the
/// framework facade's `process_inbound` submits to.
pub(crate) static HANDLER: Mutex<Option<Object>> = Mutex::new(None);

impl PythonBridge {
    fn interp(&self) -> Result<&'static Interp, HookError> {
        interp::running().ok_or_else(|| HookError::plugin("the python bridge has no interpreter"))
    }

    /// The arguments of one call, in the order of the hook's `names` (only
    /// those the function declares, as pluggy passes them), the state dict
    /// to write back, and the Typer app of `register_cli_commands`.
    fn arguments<'py>(
        &self,
        py: Python<'py>,
        interp: &'static Interp,
        id: HookId,
        hook: &PyHook,
        call: &HookCall<'_>,
        state: Option<&TurnState>,
    ) -> PyResult<Arguments<'py>> {
        let mut values = Vec::with_capacity(hook.argnames.len());
        let mut state_dict = None;
        let mut typer = None;
        for name in &hook.argnames {
            let Some(&(_, kind, idx)) = hook_args(id).iter().find(|(n, _, _)| n == name) else {
                // Never: a plugin declaring an argument the hook lacks is
                // refused when it loads. Keeps values and names in step.
                values.push(py.None().into_bound(py));
                continue;
            };
            if name == "call" && is_interception(id) {
                // The hot case, Bub's `ToolCall` built without a helper frame.
                if let Some(v) = call.args.get(idx) {
                    if let Some(tool_call) = interception::tool_call(py, interp, *v)? {
                        values.push(tool_call);
                        continue;
                    }
                }
            }
            let value = match kind {
                ArgKind::Value => match call.args.get(idx) {
                    Some(v) => convert::to_py(py, interp, *v)?,
                    None => py.None().into_bound(py),
                },
                ArgKind::State => match state {
                    Some(s) => {
                        let d = StateDict::for_state(py, interp, s)?;
                        let dict = d.dict(py);
                        state_dict = Some(d);
                        dict
                    }
                    None => PyDict::new(py).into_any(),
                },
                ArgKind::Object => match call.object {
                    ROption::RSome(h) => objects::object_to_py(py, interp, &Object::from_handle(h.clone()))?,
                    ROption::RNone => py.None().into_bound(py),
                },
            };
            let value = if is_interception(id) && kind == ArgKind::Value {
                interp.module(py).call_method1(
                    convert::key(py, "interception_arg"),
                    (convert::key(py, id.name()), convert::key(py, name), value),
                )?
            } else if id == HookId::OnError && name == "error" {
                error_to_py(py, interp, &value)?
            } else if id == HookId::RegisterCliCommands && name == "app" {
                // A Typer app of its own, as Bub hands plugins; what the
                // plugin adds to it becomes `bub` subcommands.
                let app = interp.module(py).call_method0("typer_app")?;
                typer = Some(app.clone().unbind());
                app
            } else {
                value
            };
            values.push(value);
        }
        Ok((values, state_dict, typer))
    }

    /// `onboard_config`, called right here, off the loop thread: Bub calls
    /// it outside any event loop, and its prompts (Bub's `inquirer`, on
    /// textual) start one of their own with `asyncio.run`, which fails on a
    /// thread whose loop is running. Onboarding is interactive and runs
    /// alone, so holding the interpreter meanwhile costs nothing.
    fn onboard(&self, interp: &'static Interp, hook: &PyHook, call: &HookCall<'_>) -> Result<Answer, HookError> {
        let owner = self.member.as_ref().map(|m| m.name.as_str()).unwrap_or_default();
        Python::attach(|py| {
            let failed = |e: PyErr| HookError::plugin(format!("{owner}.onboard_config: {}", interp::traceback(py, &e)));
            let (values, _, _) = self.arguments(py, interp, HookId::OnboardConfig, hook, call, None).map_err(failed)?;
            let kwargs = PyDict::new(py);
            for (name, value) in hook.names.bind(py).iter().zip(values) {
                kwargs.set_item(name, value).map_err(failed)?;
            }
            let mut value = hook.func.bind(py).call((), Some(&kwargs)).map_err(failed)?;
            if hook.coroutine {
                value = py.import("asyncio").and_then(|a| a.call_method1("run", (value,))).map_err(failed)?;
            }
            answer(py, interp, HookId::OnboardConfig, &value)
        })
    }

    /// Forwards one hook call to the member's Python implementation.
    fn dispatch(&'static self, id: HookId, call: &HookCall<'_>) -> HookReturn {
        let Some(member) = &self.member else { return HookReturn::NONE };
        member.instance.get_or_init(|| self);
        if id == HookId::ProvideTools {
            return if member.tools.is_empty() { HookReturn::NONE } else { hook_objects(member.tools.clone()) };
        }
        if id == HookId::ProvideSkillRoots {
            use bub_abi::ToHookValue;
            return match &member.skill_roots {
                Some(roots) => roots.clone().to_hook_value().unwrap_or_else(HookReturn::error),
                None => HookReturn::NONE,
            };
        }
        let Some(hook) = member.hooks.get(&id) else { return HookReturn::NONE };
        let interp = match self.interp() {
            Ok(i) => i,
            Err(e) => return HookReturn::error(e),
        };
        if id == HookId::ProvideChannels {
            if let ROption::RSome(h) = call.object {
                *bub_abi::sync::lock(&HANDLER) = Some(Object::from_handle(h.clone()));
            }
        }
        let owner = &member.name;
        if id == HookId::OnboardConfig {
            return into_return(self.onboard(interp, hook, call), owner, id);
        }
        let state = match call.state {
            ROption::RSome(h) => Some(TurnState::from_handle(h.clone())),
            ROption::RNone => None,
        };
        let sync = id.kind().is_sync_only() || call.mode == DispatchMode::Sync;
        // One GIL acquisition for the whole call (a thread keeps its Python
        // thread state between calls: `interp::keep_thread_state`).
        interp::keep_thread_state();
        let prepared = Python::attach(|py| -> Result<Prepared, HookError> {
            let (values, state_dict, typer) =
                self.arguments(py, interp, id, hook, call, state.as_ref()).map_err(|e| {
                    HookError::plugin(format!("{owner}.{}: arguments: {}", id.name(), interp::traceback(py, &e)))
                })?;
            let state_for_finish = state.clone();
            let finish = move |py: Python<'_>, value: &Bound<'_, PyAny>| -> Result<Answer, HookError> {
                if let (Some(d), Some(s)) = (state_dict, &state_for_finish) {
                    d.write_back(py, interp, s);
                }
                if let Some(app) = &typer {
                    return typer_commands(py, interp, app);
                }
                answer(py, interp, id, value)
            };
            let name = (owner.as_str(), id.name());
            if hook.coroutine && !sync && !event_loop::is_loop_thread() {
                // On the runner thread (see `runner`): the deadline holds.
                let func = hook.func.clone_ref(py);
                let names = hook.names.clone_ref(py);
                let values: Vec<Py<PyAny>> = values.into_iter().map(Bound::unbind).collect();
                return Ok(Prepared::Runner(Box::new(move || {
                    interp::keep_thread_state();
                    Python::attach(|py| {
                        let values = values.into_iter().map(|v| v.into_bound(py)).collect();
                        let invocation = call::Invocation::Named { values, names: names.into_bound(py) };
                        let mut pending =
                            call::dispatch_with(py, interp, func.bind(py), invocation, false, Some(name), finish);
                        match pending.try_take() {
                            Some(result) => runner::Outcome::Done(result),
                            None => runner::Outcome::Later(pending),
                        }
                    })
                })));
            }
            let invocation = call::Invocation::Named { values, names: hook.names.bind(py).clone() };
            Ok(Prepared::Now(call::dispatch_with(py, interp, hook.func.bind(py), invocation, sync, Some(name), finish)))
        });
        let mut pending =
            match prepared {
                Ok(Prepared::Now(p)) => p,
                Ok(Prepared::Runner(job)) => {
                    return match runner::run(call::label(owner, id.name()), job) {
                        Ok(result) => into_return(result, owner, id),
                        Err(later) => HookReturn::pending(bub_abi::sdk::bridge::to_ffi(async move {
                            into_return(later.await, owner, id)
                        })),
                    };
                }
                Err(e) => return into_return(Err(e), owner, id),
            };
        // Finished on this thread (the common case): answered at once.
        if let Some(r) = pending.try_take() {
            return into_return(r, owner, id);
        }
        if sync {
            return into_return(pending.wait(interp::SYNC_CALL_LIMIT), owner, id);
        }
        HookReturn::pending(bub_abi::sdk::bridge::to_ffi(async move { into_return(pending.await, owner, id) }))
    }
}

/// A hook call made ready under the GIL: running (or answered) here, or a
/// job for the runner thread (an `async def` hook).
enum Prepared {
    Now(call::Pending<Answer>),
    Runner(Box<dyn FnOnce() -> runner::Outcome<Answer> + Send>),
}

/// A call's arguments (by the hook's `names`), the state dict to write
/// back, the Typer app of `register_cli_commands`.
type Arguments<'py> = (Vec<Bound<'py, PyAny>>, Option<StateDict>, Option<Py<PyAny>>);

/// A hook's converted result.
enum Answer {
    None,
    Value(Value),
    Object(Object),
    Objects(Vec<Object>),
}

fn hook_objects(objects: Vec<Object>) -> HookReturn {
    HookReturn::objects(objects.into_iter().map(Object::into_handle).collect())
}

fn into_return(r: Result<Answer, HookError>, owner: &str, id: HookId) -> HookReturn {
    match r {
        Ok(Answer::None) => HookReturn::NONE,
        Ok(Answer::Value(v)) => HookReturn::value(v),
        Ok(Answer::Object(o)) => HookReturn::object(o.into_handle()),
        Ok(Answer::Objects(o)) => hook_objects(o),
        // Held up behind another call (see `held_up`): not this plugin's
        // failure, and said as such, its kind kept.
        Err(e) if e.kind == bub_abi::ErrorKind::CLOSED => HookReturn::error(e),
        Err(e) => {
            let hook = id.name();
            tracing::error!("python plugin {owner}.{hook} failed:\n{}", e.message);
            HookReturn::error(HookError::plugin(format!("{owner}.{hook}: {}", last_line(&e.message))))
        }
    }
}

/// The last line of a traceback (the exception itself), for error messages;
/// the whole traceback goes to the log.
fn last_line(text: &str) -> &str {
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(text).trim()
}

/// Converts a Python hook result for hook `id`.
fn answer(py: Python<'_>, interp: &'static Interp, id: HookId, value: &Bound<'_, PyAny>) -> Result<Answer, HookError> {
    if value.is_none() {
        return Ok(Answer::None);
    }
    let err = |e: PyErr| objects::py_error(py, &e);
    if id == HookId::BeforeToolCall {
        // The hot case, Bub's `ToolCallDecision` read without a helper frame.
        if let Some(decision) = interception::tool_decision(py, interp, value).map_err(err)? {
            return Ok(Answer::Value(decision));
        }
    }
    match id {
        HookId::ProvideChannels => {
            let mut out = Vec::new();
            for channel in value.try_iter().map_err(err)? {
                let channel = channel.map_err(err)?;
                out.push(Object::channel(objects::PyChannel::new(&channel, interp).map_err(err)?));
            }
            Ok(Answer::Objects(out))
        }
        HookId::RegisterCliCommands => Ok(Answer::None),
        HookId::BeforeLlmCall | HookId::BeforeToolCall => {
            let host_form = interp
                .module(py)
                .call_method1(convert::key(py, "interception_result"), (convert::key(py, id.name()), value))
                .map_err(err)?;
            if host_form.is_none() {
                return Ok(Answer::None);
            }
            convert::from_py(&host_form, interp).map(Answer::Value).map_err(err)
        }
        HookId::ProvideTapeStore => Ok(resource(kinds::TAPE_STORE, value, interp)),
        HookId::ProvideLifespan => Ok(resource(kinds::LIFESPAN, value, interp)),
        HookId::ProvideSteeringInbox => Ok(resource(kinds::STEERING_INBOX, value, interp)),
        HookId::ProvideEnvironment => Ok(resource(kinds::ENVIRONMENT, value, interp)),
        HookId::RunModelStream => {
            let stream = interp.module(py).call_method1("stream_of", (value,)).map_err(err)?;
            Ok(resource(kinds::STREAM, &stream, interp))
        }
        HookId::ProvideTapeSidecar => {
            let name: String = value.getattr("name").and_then(|n| n.str()?.extract()).map_err(err)?;
            Ok(Answer::Object(Object::tape_sidecar(name)))
        }
        HookId::BuildTapeContext => {
            let spec = interp.module(py).call_method1("tape_context", (value,)).map_err(err)?;
            if spec.is_none() {
                tracing::warn!(
                    "python bridge: build_tape_context returned a TapeContext with a `select` function, which \
                     bub-rs cannot run; it is ignored (see docs/python-plugins.md)"
                );
                return Ok(Answer::None);
            }
            let anchor: Option<String> = spec.get_item("anchor").and_then(|a| a.extract()).map_err(err)?;
            Ok(Answer::Object(Object::tape_context(bub_abi::types::TapeContextSpec { anchor })))
        }
        _ => convert::from_py(value, interp).map(Answer::Value).map_err(err),
    }
}

/// The subcommands a plugin added to its Typer app.
fn typer_commands(py: Python<'_>, interp: &'static Interp, app: &Py<PyAny>) -> Result<Answer, HookError> {
    let found: Vec<(String, String)> = interp
        .module(py)
        .call_method1("typer_commands", (app.bind(py),))
        .and_then(|l| l.extract())
        .map_err(|e| objects::py_error(py, &e))?;
    if found.is_empty() {
        return Ok(Answer::None);
    }
    Ok(Answer::Objects(
        found
            .into_iter()
            .map(|(name, about)| {
                Object::cli_command(objects::PyCommand { name, about, app: app.clone_ref(py), interp })
            })
            .collect(),
    ))
}

/// A Python resource as the host object of `kind`.
fn resource(kind: &'static str, value: &Bound<'_, PyAny>, interp: &'static Interp) -> Answer {
    Answer::Object(objects::PyResource::object(kind, value, interp))
}

/// The agent interception hooks: their values cross as Bub's dataclasses.
fn is_interception(id: HookId) -> bool {
    matches!(id, HookId::BeforeLlmCall | HookId::AfterLlmCall | HookId::BeforeToolCall | HookId::AfterToolCall)
}

/// `on_error`'s `error`: the host's error info as the exception Bub passes.
fn error_to_py<'py>(py: Python<'py>, interp: &'static Interp, info: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let get = |k: &str| -> PyResult<Bound<'py, PyAny>> {
        match info.cast::<PyDict>() {
            Ok(d) => Ok(d.get_item(k)?.unwrap_or_else(|| py.None().into_bound(py))),
            Err(_) => Ok(py.None().into_bound(py)),
        }
    };
    interp.module(py).call_method1("error_object", (get("kind")?, get("message")?, get("details")?))
}

macro_rules! gen_bridge_plugin {
    ($( ($name:ident $Pascal:ident {
        kind: $kind:ident,
        args: [$($idx:literal $ak:ident $arg:ident : $aty:ty),* $(,)?],
        returns: $ret:ty,
        doc: $doc:literal $(,)?
    }) )*) => {
        impl Plugin for PythonBridge {
            const HOOKS: &'static [HookDecl] = &[$(
                HookDecl::new(HookId::$Pascal, HookMarker::Normal, !bub_abi::__hook_kind!($kind).is_sync_only()),
            )*];

            fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
                let venv = ctx
                    .config
                    .get("venv")
                    .and_then(|v| v.as_str())
                    .map(PathBuf::from)
                    .or_else(|| std::env::var_os("VIRTUAL_ENV").filter(|v| !v.is_empty()).map(PathBuf::from))
                    .unwrap_or_else(|| ctx.home.join("python").join("venv"));
                let venv = if venv.is_relative() { ctx.workspace.join(venv) } else { venv };
                let venv = venv.exists().then_some(venv);
                Ok(PythonBridge {
                    member: None,
                    setup: Arc::new(Setup { venv, home: ctx.home.clone(), workspace: ctx.workspace.clone() }),
                })
            }

            $(
                fn $name(&'static self, args: $name::Args<'_>) -> Hook<$name::Return> {
                    Hook::from_return(self.dispatch(HookId::$Pascal, args.raw()))
                }
            )*
        }
    };
}
bub_abi::for_each_hook!(gen_bridge_plugin);

impl PluginSet for PythonBridge {
    fn members(&self) -> Result<Vec<Member<Self>>, BoxError> {
        let Some(venv) = &self.setup.venv else {
            tracing::info!(
                "python bridge: no venv (set `venv` in its config, or VIRTUAL_ENV); no Python plugins loaded"
            );
            return Ok(Vec::new());
        };
        let interp = interp::get(venv)?;
        Python::attach(|py| check_bub(py, venv))?;
        let found = Python::attach(|py| discover(py, interp, &self.setup)).map_err(|e| -> BoxError {
            Python::attach(|py| format!("python bridge: discovery failed: {}", interp::traceback(py, &e))).into()
        })?;
        Ok(found
            .into_iter()
            .map(|(member, version, description, hooks)| {
                let member = Arc::new(member);
                host::remember(&member);
                Member {
                    name: member.name.clone(),
                    version,
                    description,
                    plugin: PythonBridge { member: Some(member), setup: self.setup.clone() },
                    hooks,
                }
            })
            .collect())
    }
}

type Found = (PyMember, String, String, Vec<(HookId, HookMarker)>);

/// The Bub release this bridge runs plugins of: the `bub` package a venv
/// must hold (`bub plugins install --python` installs it beside each
/// requirement). A macro so that the plugin's description can name it.
macro_rules! bub_release {
    () => {
        "0.6.0a3"
    };
}

/// Refuses a venv whose `bub` is of another release line than the one
/// this bridge follows (`bub_release!`): plugins depend on an unpinned
/// `bub`, and pip picks the last stable one (0.5.1, whose `ToolContext`
/// the bridge's calls do not fit), so every tool call would fail later.
fn check_bub(py: Python<'_>, venv: &std::path::Path) -> Result<(), BoxError> {
    let wanted = bub_release!();
    let line = |v: &str| v.split('.').take(2).collect::<Vec<_>>().join(".");
    let found: Option<String> =
        py.import("importlib.metadata").and_then(|m| m.call_method1("version", ("bub",))?.extract()).ok();
    let fix = format!(
        "install it with `bub plugins install --python 'bub[app]=={wanted}'` (or `{}/bin/python -m pip install \
         'bub[app]=={wanted}'`)",
        venv.display()
    );
    match found {
        Some(v) if line(&v) == line(wanted) => Ok(()),
        Some(v) => Err(format!(
            "python bridge: the venv {} holds bub {v}, but this bridge runs plugins of Bub {wanted}: {fix}",
            venv.display()
        )
        .into()),
        None => Err(format!("python bridge: the venv {} has no `bub` package: {fix}", venv.display()).into()),
    }
}

/// Bub's `load_hooks` over the venv, then each plugin's hookimpls checked
/// as pluggy's `register` checks them (an argument its hook does not have
/// fails that plugin, with a warning, and the others load; a hook this bub
/// does not know is never called).
fn discover(py: Python<'_>, interp: &'static Interp, setup: &Setup) -> PyResult<Vec<Found>> {
    let module = interp.module(py);
    let os = py.import("os")?;
    let environ = os.getattr("environ")?;
    if !environ.contains("BUB_HOME")? {
        environ.set_item("BUB_HOME", setup.home.to_string_lossy().as_ref())?;
    }
    // Bub loads its config file before any plugin reads it.
    let config_file = setup.home.join("config.json");
    let config = match bub_kit::files::read_trusted(&config_file, 4 << 20) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(bub_kit::files::TrustError::Missing) => String::new(),
        Err(e) => {
            tracing::warn!("python bridge: not reading {} for Python plugins: {e}", config_file.display());
            String::new()
        }
    };
    if let Err(e) = module.call_method1("load_config", (config,)) {
        tracing::warn!(
            "python bridge: Python plugins do not see {}: {}",
            config_file.display(),
            interp::traceback(py, &e)
        );
    }
    let host = Bound::new(py, host::Host { interp })?;
    let framework = module.getattr("Framework")?.call1((
        setup.workspace.to_string_lossy().as_ref(),
        setup.home.to_string_lossy().as_ref(),
        host,
    ))?;
    let records = module.call_method1("discover", (&framework,))?;
    let mut out: Vec<Found> = Vec::new();
    for rec in records.try_iter()? {
        let rec = rec?;
        let name: String = rec.getattr("name")?.extract()?;
        let value: String = rec.getattr("value")?.extract()?;
        let dist: String = rec.getattr("dist")?.extract()?;
        let version: String = rec.getattr("version")?.extract()?;
        if let Some(error) = rec.getattr("error")?.extract::<Option<String>>()? {
            tracing::warn!("python bridge: failed to load plugin '{name}': {error}");
            continue;
        }
        let plugin = rec.getattr("plugin")?;
        let impls = module.call_method1("hookimpls", (&plugin,))?;
        let mut hooks = HashMap::new();
        let mut markers = Vec::new();
        let mut problem = None;
        for item in impls.try_iter()? {
            let (hook, marker, argnames, func): (String, String, Vec<String>, Bound<'_, PyAny>) = item?.extract()?;
            let Some(id) = HookId::from_name(&hook) else {
                // pluggy registers a hookimpl of an unknown hook and never
                // calls it (only `check_pending` would complain).
                tracing::debug!("python bridge: {name}.{hook} is not a hook of this bub; never called");
                continue;
            };
            if let Some(bad) = argnames.iter().find(|a| !hook_args(id).iter().any(|(n, _, _)| n == *a)) {
                problem = Some(format!("{hook} declares argument '{bad}', which the hook does not have"));
                break;
            }
            let marker = match marker.as_str() {
                "tryfirst" => HookMarker::TryFirst,
                "trylast" => HookMarker::TryLast,
                "wrapper" => {
                    tracing::warn!(
                        "python bridge: {name}.{hook} is a hook wrapper; wrappers are not supported, it is left out"
                    );
                    continue;
                }
                _ => HookMarker::Normal,
            };
            if id == HookId::ProvideTools {
                continue;
            }
            let names = PyTuple::new(py, argnames.iter().map(|n| convert::key(py, n)))?.unbind();
            let coroutine = py.import("inspect")?.call_method1("iscoroutinefunction", (&func,))?.is_truthy()?;
            module.call_method1("register_hook", (&func, &name, &hook))?;
            hooks.insert(id, PyHook { func: func.unbind(), coroutine, argnames, names });
            markers.push((id, marker));
        }
        if let Some(problem) = problem {
            tracing::warn!("python bridge: failed to initialize plugin '{name}': {problem}");
            continue;
        }
        framework.getattr("_plugins")?.set_item(&name, &plugin)?;
        // Tools registered with `bub.tool` while the plugin loaded are its own.
        let mut tools = Vec::new();
        for tool in rec.getattr("tools")?.try_iter()? {
            let tool = tool?;
            match objects::PyTool::new(&tool, interp) {
                Ok(t) => tools.push(Object::tool(t)),
                Err(e) => tracing::warn!("python bridge: a tool of plugin '{name}' cannot be bridged: {e}"),
            }
        }
        if !tools.is_empty() {
            markers.push((HookId::ProvideTools, HookMarker::Normal));
        }
        let description =
            if dist.is_empty() { format!("python: {value}") } else { format!("python: {dist} ({value})") };
        out.push((
            PyMember { name, hooks, tools, skill_roots: None, instance: Default::default() },
            version,
            description,
            markers,
        ));
    }
    // Bub lists the skills of its `skills` namespace package (Bub's own,
    // and those plugins ship) after the project's and the user's: the
    // first Python plugin names its folders for the bridge.
    if let Some((first, _, _, markers)) = out.first_mut() {
        let roots: Vec<String> = module.call_method0("skill_roots")?.extract()?;
        if !roots.is_empty() {
            first.skill_roots = Some(roots);
            markers.push((HookId::ProvideSkillRoots, HookMarker::Normal));
        }
    }
    Ok(out)
}

bub_abi::export_plugin!(
    PythonBridge,
    set,
    description = concat!(
        "Runs Bub's Python plugins (a venv's `bub` entry points) as plugins of bub-rs; built for Bub ",
        bub_release!(),
        " on Python ",
        env!("BUB_BRIDGE_PYTHON_VERSION"),
        " (",
        env!("BUB_BRIDGE_PYTHON"),
        ")"
    )
);
