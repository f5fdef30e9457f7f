//! The benchmark plugin: the same implementations as `hook_bench.py`.
//!
//! Each implementation counts its calls (the script checks the counts after
//! timing, as the Python harness does). Config: `{"idx": i, "answer": bool,
//! "async": bool}`; with `async`, every hook answers through a future (like
//! an `async def` that finishes without suspending). The trait is implemented
//! by hand, without `#[bub_abi::plugin]`, so one library can be sync or async
//! per config.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bub_abi::{
    args,
    types::{StateMap, ToolCallDecision},
    BoxError, Hook, HookDecl, HookId, HookMarker, IntoHookValue, Plugin, PluginContext,
};
use serde_json::{json, Value};

#[derive(serde::Serialize)]
struct Loaded {
    plugin: u64,
    loaded: bool,
}

/// The one field `before_tool_call` reads, as a handle: its contents (a
/// 100 KB string in the large case) are never copied.
#[derive(serde::Deserialize)]
struct CallArguments {
    arguments: bub_abi::Value,
}

pub struct Bench {
    idx: u64,
    answer: bool,
    is_async: bool,
    calls: AtomicU64,
    session: String,
    block: String,
}

impl Bench {
    fn reply<T: IntoHookValue>(&self, value: T) -> Hook<T> {
        // A plain increment, like Python's `self.calls += 1` (calls to one
        // plugin never overlap in the benchmark).
        self.calls.store(self.calls.load(Relaxed) + 1, Relaxed);
        if self.is_async {
            Hook::future(async move { value })
        } else {
            Hook::ready(value)
        }
    }
}

const fn decl(id: HookId) -> HookDecl {
    HookDecl::new(id, HookMarker::Normal, false)
}

impl Plugin for Bench {
    const HOOKS: &'static [HookDecl] = &[
        decl(HookId::ResolveSession),
        decl(HookId::LoadState),
        decl(HookId::SystemPrompt),
        decl(HookId::BeforeToolCall),
        decl(HookId::OnboardConfig),
    ];

    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        let idx = ctx.config.get("idx").and_then(Value::as_u64).unwrap_or(0);
        Ok(Bench {
            idx,
            answer: ctx.config.get("answer") == Some(&Value::Bool(true)),
            is_async: ctx.config.get("async") == Some(&Value::Bool(true)),
            calls: AtomicU64::new(0),
            session: format!("session-{idx}"),
            block: format!("<plugin_{idx}>be helpful</plugin_{idx}>"),
        })
    }

    fn resolve_session(&'static self, _args: args::resolve_session::Args<'_>) -> Hook<Option<String>> {
        self.reply(if self.answer { Some(self.session.clone()) } else { None })
    }

    /// `{"plugin": idx, "loaded": true}`, built as Rust builds a small
    /// record: a serde struct (Python builds a dict literal).
    fn load_state(&'static self, _args: args::load_state::Args<'_>) -> Hook<Option<StateMap>> {
        self.calls.store(self.calls.load(Relaxed) + 1, Relaxed);
        let value = Loaded { plugin: self.idx, loaded: true };
        if self.is_async {
            Hook::future_json(async move { value })
        } else {
            Hook::json(&value)
        }
    }

    fn system_prompt(&'static self, _args: args::system_prompt::Args<'_>) -> Hook<Option<String>> {
        self.reply(Some(self.block.clone()))
    }

    /// `proceed(arguments + {hops: hops + 1})`, as a Python policy writes
    /// `{**call.arguments, "hops": …}`: one key read, one key added, the
    /// rest shared.
    fn before_tool_call(&'static self, args: args::before_tool_call::Args<'_>) -> Hook<Option<ToolCallDecision>> {
        let call: CallArguments = match args.call().parse() {
            Ok(c) => c,
            Err(e) => return Hook::error(e),
        };
        let arguments = call.arguments.as_ref();
        let hops = arguments.get("hops").and_then(|h| h.as_u64()).unwrap_or(0);
        self.reply(Some(ToolCallDecision::proceed(Some(arguments.with("hops", hops + 1)))))
    }

    /// Not timed: reports the call count, for the harness's checks.
    fn onboard_config(&'static self, _args: args::onboard_config::Args<'_>) -> Hook<Option<StateMap>> {
        let mut m = StateMap::new();
        m.insert("idx".into(), json!(self.idx));
        m.insert("calls".into(), json!(self.calls.load(Relaxed)));
        Hook::ready(Some(m))
    }
}

bub_abi::export_plugin!(Bench);
