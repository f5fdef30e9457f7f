//! Dispatch with Bub's semantics: `call_first`, `call_many`, their `_sync`
//! variants, `notify_error(_sync)`, and the agent interception adapter
//! ([`agent`]).
//!
//! Rules (semantics §H3.3): implementations run in call order; `None` means "no
//! answer"; an error from an implementation stops the dispatch and propagates
//! (as a Python exception does in Bub), except in `on_error` observers and
//! agent hooks, whose failures are logged and skipped. Sync dispatch drops a
//! pending (async) result unpolled and logs `hook.async_not_supported`.

pub mod agent;
pub mod args;
mod host_object;
pub(crate) mod rest;
mod router;
pub mod special;
pub mod stream;
pub mod typed;
#[allow(unsafe_code)]
pub(crate) mod watchdog;

use std::sync::Arc;

use abi_stable::std_types::RVec;
use bub_abi::async_ffi::FfiFuture;
use bub_abi::{
    abi::{DispatchMode, HookCall, HookReturn, ObjectHandle, Outcome},
    types::{Envelope, ErrorInfo},
    ErrorKind, HookError, HookId, Object, Value, ValueKind, ValueRef,
};
use serde::de::DeserializeOwned;

pub use args::CallArgs;
pub use special::{ModelSelection, OnboardError};
pub use stream::ModelStream;
pub use typed::{Answered, FromAnswer};

use crate::{
    error::HookFailure,
    registry::{Impl, Registry},
};

/// A non-None answer.
pub enum Answer {
    /// A host value.
    Value(Value),
    /// One object.
    Object(ObjectHandle),
    /// A list of objects.
    Objects(RVec<ObjectHandle>),
}

/// One implementation's non-None answer.
pub struct Reply {
    /// The plugin that answered.
    pub plugin: Arc<str>,
    /// The answer.
    pub value: Answer,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            Answer::Value(v) => write!(f, "{}: {v:?}", self.plugin),
            Answer::Object(o) => write!(f, "{}: Object({})", self.plugin, o.kind()),
            Answer::Objects(v) => write!(f, "{}: Objects({})", self.plugin, v.len()),
        }
    }
}

impl Reply {
    /// A value answer.
    pub fn value(&self) -> Option<ValueRef<'_>> {
        match &self.value {
            Answer::Value(v) => Some(v.as_ref()),
            _ => None,
        }
    }

    /// Reads a value answer as `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, String> {
        match &self.value {
            Answer::Value(v) => v.deserialize().map_err(|e| e.to_string()),
            other => Err(format!("expected a value, got {}", answer_type_name(other))),
        }
    }

    /// An object answer.
    pub fn object(&self) -> Option<Object> {
        match &self.value {
            Answer::Object(o) => Some(Object::from_handle(o.clone())),
            _ => None,
        }
    }

    /// A list-of-objects answer.
    pub fn objects(&self) -> Option<Vec<Object>> {
        match &self.value {
            Answer::Objects(v) => Some(v.iter().map(|o: &ObjectHandle| Object::from_handle(o.clone())).collect()),
            _ => None,
        }
    }

    /// Python's type name of the answer, for messages that match Bub's.
    pub fn type_name(&self) -> &'static str {
        answer_type_name(&self.value)
    }
}

/// Python's type name of a value, for messages that match Bub's.
pub fn value_type_name(value: ValueRef<'_>) -> &'static str {
    match value.kind() {
        ValueKind::Null => "NoneType",
        ValueKind::Bool => "bool",
        ValueKind::Int | ValueKind::UInt => "int",
        ValueKind::Float => "float",
        ValueKind::Str => "str",
        ValueKind::Array => "list",
        ValueKind::Object => "dict",
    }
}

/// Python's type name of an answer (`object` and `list` for objects).
pub(crate) fn answer_type_name(answer: &Answer) -> &'static str {
    match answer {
        Answer::Value(v) => value_type_name(v.as_ref()),
        Answer::Object(_) => "object",
        Answer::Objects(_) => "list",
    }
}

/// A finished call, read.
pub(crate) enum Done {
    None,
    Error(HookError),
    Answer(Answer),
}

#[inline]
fn done(outcome: Outcome, max_result_bytes: usize) -> Done {
    match outcome {
        Outcome::None => Done::None,
        Outcome::Value(v) => match watchdog::oversized(v.as_ref(), max_result_bytes) {
            None => Done::Answer(Answer::Value(v)),
            Some(error) => Done::Error(error),
        },
        Outcome::Object(o) => Done::Answer(Answer::Object(o)),
        Outcome::Objects(o) => Done::Answer(Answer::Objects(o)),
        Outcome::Error(e) => Done::Error(e),
        Outcome::Pending(_) => unreachable!("futures are resolved before `done`"),
    }
}

/// Dispatches hooks over a [`Registry`].
#[derive(Clone)]
pub struct Runtime {
    registry: Arc<Registry>,
    router: Arc<router::BoundChannels>,
}

/// Calls one implementation with this thread marked for the watchdog.
#[inline]
fn marked_call(imp: &Impl, call: &mut HookCall<'_>) -> HookReturn {
    let _mark = watchdog::mark(imp);
    imp.invoke(call)
}

/// One implementation's [`Done`], awaiting it only if it is pending: a
/// macro, not an `async fn`, so that an answer given at once builds no
/// future of its own (see [`start`]).
macro_rules! answer {
    ($imp:expr, $call:expr) => {
        match $crate::runtime::start($imp, $call) {
            Ok(done) => done,
            Err(fut) => $crate::runtime::wait($imp, fut).await,
        }
    };
}
pub(crate) use answer;

/// Calls one implementation: its answer if it is ready, else its future.
/// The dispatch loops await only the second, so a hook that answers at
/// once (nearly every one) builds no future of its own in the host.
#[inline]
pub(crate) fn start(imp: &Impl, call: &mut HookCall<'_>) -> Result<Done, FfiFuture<HookReturn>> {
    match marked_call(imp, call).into_outcome(bub_abi::value::own_table()) {
        Outcome::Pending(fut) => Err(fut),
        other => Ok(done(other, imp.max_result_bytes)),
    }
}

/// Ends the message of a hook cancelled at its deadline
/// ([`crate::HookFailure::timed_out`] tells such a failure apart).
pub(crate) const DEADLINE_MARK: &str = "(BUB_HOOK_TIMEOUT_SECONDS)";

/// Awaits a pending implementation under its deadline (and the slow
/// warning of the model stage), each poll marked for the watchdog.
#[inline(never)]
pub(crate) async fn wait(imp: &Impl, fut: FfiFuture<HookReturn>) -> Done {
    let fut = watchdog::Watched::new(fut, imp);
    // Only where a tokio runtime (with timers) drives us: the
    // benchmarks poll by hand.
    let timers = tokio::runtime::Handle::try_current().is_ok();
    let deadline = imp.deadline.filter(|_| timers);
    let ret = match deadline {
        None => match imp.slow_warning.filter(|_| timers) {
            Some(every) => watchdog::warn_while_slow(fut, imp, every).await,
            None => fut.await,
        },
        Some(limit) => match tokio::time::timeout(limit, fut).await {
            Ok(ret) => ret,
            Err(_) => {
                return Done::Error(HookError::new(
                    ErrorKind::ERROR,
                    format!("did not finish within {}s and was cancelled {DEADLINE_MARK}", limit.as_secs_f64()),
                ))
            }
        },
    };
    match ret.into_outcome(bub_abi::value::own_table()) {
        Outcome::Pending(_) => Done::Error(HookError::new(ErrorKind::TYPE, "a hook's future yielded another future")),
        other => done(other, imp.max_result_bytes),
    }
}

/// Calls one implementation under sync dispatch: a pending result is
/// dropped unpolled (its body never runs) and reported; `None` is returned.
#[inline]
fn finish_sync(hook: HookId, imp: &Impl, call: &mut HookCall<'_>) -> Option<Done> {
    // Not through `start`: its `Result` around the answer made this path
    // slower (`microbench`, call_first_sync N=10: 300-390 ns against
    // 250-290), the answer read back through memory again.
    match marked_call(imp, call).into_outcome(bub_abi::value::own_table()) {
        Outcome::Pending(fut) => {
            drop(fut);
            tracing::warn!(target: "bub::hooks", "hook.async_not_supported hook={hook} adapter={}", imp.plugin);
            None
        }
        other => Some(done(other, imp.max_result_bytes)),
    }
}

fn failure(imp: &Impl, hook: HookId, e: HookError) -> HookFailure {
    HookFailure::new(&imp.plugin, hook, e)
}

// The dispatch loops, over the implementations given: all of a hook's
// (`call_first`, …) or the rest of its chain after a plugin (`call_rest`).

/// The first answer of `impls`; errors propagate.
async fn first_of(impls: &[Impl], hook: HookId, args: &CallArgs) -> Result<Option<Reply>, HookFailure> {
    if impls.is_empty() {
        return Ok(None);
    }
    let views = args.views();
    let mut call = args.call(&views, DispatchMode::Async);
    for imp in impls {
        match answer!(imp, &mut call) {
            Done::None => {}
            Done::Error(e) => return Err(failure(imp, hook, e)),
            Done::Answer(value) => return Ok(Some(Reply { plugin: imp.plugin.clone(), value })),
        }
    }
    Ok(None)
}

/// Every answer of `impls`, None included; errors propagate.
async fn many_of(impls: &[Impl], hook: HookId, args: &CallArgs) -> Result<Vec<Option<Reply>>, HookFailure> {
    let mut out = Vec::with_capacity(impls.len());
    if impls.is_empty() {
        return Ok(out);
    }
    let views = args.views();
    let mut call = args.call(&views, DispatchMode::Async);
    for imp in impls {
        match answer!(imp, &mut call) {
            Done::None => out.push(None),
            Done::Error(e) => return Err(failure(imp, hook, e)),
            Done::Answer(value) => out.push(Some(Reply { plugin: imp.plugin.clone(), value })),
        }
    }
    Ok(out)
}

/// As [`first_of`], sync: a pending answer is skipped.
fn first_of_sync(impls: &[Impl], hook: HookId, args: &CallArgs) -> Result<Option<Reply>, HookFailure> {
    if impls.is_empty() {
        return Ok(None);
    }
    let views = args.views();
    let mut call = args.call(&views, DispatchMode::Sync);
    for imp in impls {
        match finish_sync(hook, imp, &mut call) {
            None | Some(Done::None) => {}
            Some(Done::Error(e)) => return Err(failure(imp, hook, e)),
            Some(Done::Answer(value)) => return Ok(Some(Reply { plugin: imp.plugin.clone(), value })),
        }
    }
    Ok(None)
}

/// As [`many_of`], sync: a pending answer is left out.
fn many_of_sync(impls: &[Impl], hook: HookId, args: &CallArgs) -> Result<Vec<Option<Reply>>, HookFailure> {
    let mut out = Vec::with_capacity(impls.len());
    if impls.is_empty() {
        return Ok(out);
    }
    let views = args.views();
    let mut call = args.call(&views, DispatchMode::Sync);
    for imp in impls {
        match finish_sync(hook, imp, &mut call) {
            None => {}
            Some(Done::None) => out.push(None),
            Some(Done::Error(e)) => return Err(failure(imp, hook, e)),
            Some(Done::Answer(value)) => out.push(Some(Reply { plugin: imp.plugin.clone(), value })),
        }
    }
    Ok(out)
}

impl Runtime {
    /// A runtime over `registry`.
    pub fn new(registry: Arc<Registry>) -> Self {
        Runtime { registry, router: Default::default() }
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Whether any plugin implements `hook` (callers skip building
    /// arguments for hooks nobody implements).
    pub fn has(&self, hook: HookId) -> bool {
        !self.registry.impls(hook).is_empty()
    }

    /// `call_first`: the first non-None answer in call order, awaiting async
    /// implementations. Errors propagate.
    pub async fn call_first(&self, hook: HookId, args: &CallArgs) -> Result<Option<Reply>, HookFailure> {
        first_of(self.registry.impls(hook), hook, args).await
    }

    /// `call_many`: every implementation's answer, None included, in call
    /// order. Errors propagate (later implementations do not run).
    pub async fn call_many(&self, hook: HookId, args: &CallArgs) -> Result<Vec<Option<Reply>>, HookFailure> {
        many_of(self.registry.impls(hook), hook, args).await
    }

    /// `call_first_sync`: like [`call_first`](Self::call_first); a pending
    /// answer is skipped with `hook.async_not_supported`.
    pub fn call_first_sync(&self, hook: HookId, args: &CallArgs) -> Result<Option<Reply>, HookFailure> {
        first_of_sync(self.registry.impls(hook), hook, args)
    }

    /// `call_many_sync`: like [`call_many`](Self::call_many); a pending
    /// answer is left out of the results (as Bub does), with
    /// `hook.async_not_supported`.
    pub fn call_many_sync(&self, hook: HookId, args: &CallArgs) -> Result<Vec<Option<Reply>>, HookFailure> {
        many_of_sync(self.registry.impls(hook), hook, args)
    }

    /// By Bub's hook name; an unknown name answers None (behaviour 13).
    pub async fn call_first_named(&self, hook: &str, args: &CallArgs) -> Result<Option<Reply>, HookFailure> {
        match HookId::from_name(hook) {
            Some(h) => self.call_first(h, args).await,
            None => Ok(None),
        }
    }

    /// By Bub's hook name; an unknown name answers `[]` (behaviour 13).
    pub async fn call_many_named(&self, hook: &str, args: &CallArgs) -> Result<Vec<Option<Reply>>, HookFailure> {
        match HookId::from_name(hook) {
            Some(h) => self.call_many(h, args).await,
            None => Ok(Vec::new()),
        }
    }

    /// `notify_error`: tells every `on_error` observer; an observer's failure
    /// is logged as `hook.on_error_failed` and never propagates.
    pub async fn notify_error(&self, stage: &str, error: &ErrorInfo, message: Option<&Envelope>) {
        if !self.has(HookId::OnError) {
            return;
        }
        let Some(args) = on_error_args(self, stage, error, message) else { return };
        let views = args.views();
        let mut call = args.call(&views, DispatchMode::Async);
        for imp in self.registry.impls(HookId::OnError) {
            if let Done::Error(e) = answer!(imp, &mut call) {
                on_error_failed(stage, imp, &e);
            }
        }
    }

    /// `notify_error_sync`: as [`notify_error`](Self::notify_error); async
    /// observers are skipped with `hook.async_not_supported hook=on_error`.
    pub fn notify_error_sync(&self, stage: &str, error: &ErrorInfo, message: Option<&Envelope>) {
        if !self.has(HookId::OnError) {
            return;
        }
        let Some(args) = on_error_args(self, stage, error, message) else { return };
        let views = args.views();
        let mut call = args.call(&views, DispatchMode::Sync);
        for imp in self.registry.impls(HookId::OnError) {
            if let Some(Done::Error(e)) = finish_sync(HookId::OnError, imp, &mut call) {
                on_error_failed(stage, imp, &e);
            }
        }
    }
}

fn on_error_args(rt: &Runtime, stage: &str, error: &ErrorInfo, message: Option<&Envelope>) -> Option<CallArgs> {
    let stage = stage.to_owned();
    let message = message.cloned();
    let framework = Some(host_object::FrameworkObject::object(rt));
    match CallArgs::on_error(&stage, error, &message, &framework) {
        Ok(a) => Some(a),
        Err(e) => {
            tracing::warn!(target: "bub::hooks", "hook.on_error_failed stage={stage} adapter=<host>: arguments not serializable: {e}");
            None
        }
    }
}

fn on_error_failed(stage: &str, imp: &Impl, e: &HookError) {
    tracing::warn!(target: "bub::hooks", "hook.on_error_failed stage={stage} adapter={}: {e}", imp.plugin);
}

/// Reads a JSON reply as `T`, naming plugin and hook on failure.
pub fn parse_reply<T: DeserializeOwned>(hook: HookId, reply: &Reply) -> Result<T, HookFailure> {
    reply.parse().map_err(|detail| HookFailure::new(&reply.plugin, hook, HookError::new(ErrorKind::TYPE, detail)))
}
