//! Calling the rest of a hook's chain from inside a hook (ABI 2.1,
//! `bub_abi::host::call_rest`; pluggy's `subset_hook_caller`).
//!
//! A plugin names itself by its instance (the pointer its `init` returned,
//! unique in the process: instances are never freed). Each host registers
//! its instances here when its registry is built, so the call finds the
//! right host even with several in one process, and the calling plugin's
//! place in the chain: the implementations after it, in call order, run.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock, Weak},
};

use abi_stable::std_types::{RStr, RVec};
use bub_abi::async_ffi::{FfiFuture, FutureExt};
use bub_abi::{
    abi::{HookReturn, Instance},
    ErrorKind, HookError, HookId, HookKind, Value,
};

use super::{first_of, first_of_sync, many_of, many_of_sync, Answer, CallArgs, Reply, Runtime};
use crate::error::HookFailure;
use crate::registry::Registry;

type Instances = HashMap<usize, (Weak<Registry>, usize)>;

fn instances() -> &'static RwLock<Instances> {
    static INSTANCES: std::sync::OnceLock<RwLock<Instances>> = std::sync::OnceLock::new();
    INSTANCES.get_or_init(Default::default)
}

/// Makes `registry`'s plugins able to call the rest of their chains.
pub(crate) fn register(registry: &Arc<Registry>) {
    let mut map = bub_abi::sync::write(instances());
    map.retain(|_, (r, _)| r.strong_count() > 0);
    for (index, record) in registry.plugins().iter().enumerate() {
        if record.instance != Instance::NONE {
            map.insert(record.instance.0 as usize, (Arc::downgrade(registry), index));
        }
    }
}

fn error(message: impl Into<String>) -> HookError {
    HookError::new(ErrorKind::ERROR, message.into())
}

fn ready(ret: HookReturn) -> FfiFuture<HookReturn> {
    async move { ret }.into_ffi()
}

/// The host service (`HostServices::call_rest`).
pub(crate) extern "C" fn call_rest(instance: Instance, hook: RStr<'_>, args: Value) -> FfiFuture<HookReturn> {
    let hook_name = hook.as_str().to_owned();
    let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| start(instance, &hook_name, args)));
    match started {
        Ok(Ok(fut)) => fut,
        Ok(Err(e)) => ready(HookReturn::error(e)),
        Err(_) => ready(HookReturn::error(error(format!("call_rest of `{hook_name}` panicked in the host")))),
    }
}

/// Where `call_rest` goes for an instance no registry of this process
/// holds: an isolated plugin's runner forwards it to its host.
type Fallback = fn(Instance, &str, Value) -> Option<FfiFuture<HookReturn>>;

static FALLBACK: std::sync::OnceLock<Fallback> = std::sync::OnceLock::new();

/// Sets the [`Fallback`] (once per process).
pub(crate) fn set_fallback(fallback: Fallback) {
    let _ = FALLBACK.set(fallback);
}

fn start(instance: Instance, hook_name: &str, args: Value) -> Result<FfiFuture<HookReturn>, HookError> {
    let entry = bub_abi::sync::read(instances()).get(&(instance.0 as usize)).cloned();
    if entry.is_none() {
        if let Some(fallback) = FALLBACK.get() {
            if let Some(fut) = fallback(instance, hook_name, args.clone()) {
                return Ok(fut);
            }
        }
    }
    let (registry, caller) = entry
        .and_then(|(r, i)| Some((r.upgrade()?, i)))
        .ok_or_else(|| error("call_rest: pass the plugin instance the host registered (`self` inside a hook)"))?;
    let hook =
        HookId::from_name(hook_name).ok_or_else(|| error(format!("call_rest: no hook is named `{hook_name}`")))?;
    let named = match args.deserialize::<serde_json::Value>() {
        Ok(serde_json::Value::Object(m)) => m,
        Ok(serde_json::Value::Null) => Default::default(),
        _ => return Err(error(format!("call_rest: the arguments of `{hook_name}` must be a map of names to values"))),
    };
    if hook.info().kind == HookKind::Chain {
        return Err(error(format!(
            "call_rest: `{hook_name}` is an interception chain (each implementation sees the rewrites before it); \
             return None to let the rest of it run"
        )));
    }
    let call_args = CallArgs::from_named(hook, &named).map_err(error)?;
    let runtime = Runtime::new(registry);
    Ok(if hook.info().kind.is_sync_only() {
        ready(runtime.rest_sync(caller, hook, &call_args))
    } else {
        async move { runtime.rest(caller, hook, &call_args).await }.into_ffi()
    })
}

/// First-result kinds answer the first non-None answer; the others collect.
fn first_result(hook: HookId) -> bool {
    matches!(hook.info().kind, HookKind::First | HookKind::FirstSync | HookKind::Model)
}

impl Runtime {
    /// The implementations after the plugin at `caller` (registration
    /// index), in call order.
    fn after(&self, caller: usize, hook: HookId) -> &[crate::registry::Impl] {
        let impls = self.registry().impls(hook);
        match impls.iter().position(|i| i.plugin_index == caller) {
            Some(at) => &impls[at + 1..],
            // The caller does not implement the hook: everything is "after".
            None => impls,
        }
    }

    async fn rest(&self, caller: usize, hook: HookId, args: &CallArgs) -> HookReturn {
        let impls = self.after(caller, hook);
        if first_result(hook) {
            answer(first_of(impls, hook, args).await)
        } else {
            answers(many_of(impls, hook, args).await)
        }
    }

    fn rest_sync(&self, caller: usize, hook: HookId, args: &CallArgs) -> HookReturn {
        let impls = self.after(caller, hook);
        if first_result(hook) {
            answer(first_of_sync(impls, hook, args))
        } else {
            answers(many_of_sync(impls, hook, args))
        }
    }
}

/// A failure as the calling plugin sees it: the failing plugin's message.
fn failed(f: HookFailure) -> HookReturn {
    HookReturn::error(HookError::new(f.error.kind, format!("{}: {}", f.plugin, f.error.message)))
}

/// A first-result hook's answer.
fn answer(first: Result<Option<Reply>, HookFailure>) -> HookReturn {
    match first {
        Ok(Some(reply)) => single(reply.value),
        Ok(None) => HookReturn::NONE,
        Err(f) => failed(f),
    }
}

/// A broadcast's answers (None left out).
fn answers(many: Result<Vec<Option<Reply>>, HookFailure>) -> HookReturn {
    match many {
        Ok(replies) => combine(replies.into_iter().flatten().map(|r| r.value).collect()),
        Err(f) => failed(f),
    }
}

fn single(answer: Answer) -> HookReturn {
    match answer {
        Answer::Value(v) => HookReturn::value(v),
        Answer::Object(o) => HookReturn::object(o),
        Answer::Objects(o) => HookReturn::objects(o),
    }
}

/// A broadcast's answers: the objects (lists flattened), else the values as a list.
fn combine(answers: Vec<Answer>) -> HookReturn {
    if answers.is_empty() {
        return HookReturn::NONE;
    }
    if answers.iter().any(|a| !matches!(a, Answer::Value(_))) {
        let mut objects = RVec::new();
        for a in answers {
            match a {
                Answer::Object(o) => objects.push(o),
                Answer::Objects(list) => objects.extend(list),
                Answer::Value(_) => {}
            }
        }
        return HookReturn::objects(objects);
    }
    let mut list = Value::array();
    for a in answers {
        if let Answer::Value(v) = a {
            list.push(v);
        }
    }
    HookReturn::value(list)
}
