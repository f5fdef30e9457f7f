//! The interception adapter (Bub's `PluginAgentHooks`): the four agent hooks.
//!
//! `before_*` hooks form a chain in call order: each implementation sees the
//! request or call as rewritten by the earlier ones; a `finish`, `replace` or
//! `deny` decision stops the chain. `after_*` hooks observe. Unlike other
//! hooks, a failing implementation never stops the run: it is logged as
//! `hook.agent_hook_failed` (an error) or `hook.agent_hook_bad_return` (a
//! value of the wrong type) and skipped. A policy must *return* a decision
//! to block a call.

use bub_abi::{
    types::{
        BeforeLlmCall, LlmCallDecision, LlmCallRequest, LlmCallResult, ToolCall, ToolCallDecision, ToolCallResult,
    },
    HookError, HookId, TurnState, Value, ValueKind, ValueRef,
};

use super::{answer, answer_type_name, Answer, CallArgs, Done, Runtime};
use crate::registry::Impl;

fn failed(hook: HookId, imp: &Impl, e: &HookError) {
    tracing::warn!(target: "bub::hooks", "hook.agent_hook_failed hook={hook} adapter={}: {e}", imp.plugin);
}

fn bad_return(hook: HookId, imp: &Impl, got: &str, expected: &str) {
    tracing::warn!(
        target: "bub::hooks",
        "hook.agent_hook_bad_return hook={hook} adapter={} got={got} expected={expected}",
        imp.plugin,
    );
}

fn to_value<T: serde::Serialize>(value: &T) -> Value {
    Value::from_serialize(value).expect("payload types always serialize")
}

impl Runtime {
    async fn run_agent_hook(&self, hook: HookId, imp: &Impl, args: &CallArgs) -> Option<Answer> {
        let views = args.views();
        let mut call = args.call(&views, bub_abi::abi::DispatchMode::Async);
        match answer!(imp, &mut call) {
            Done::None => None,
            Done::Error(e) => {
                failed(hook, imp, &e);
                None
            }
            Done::Answer(a) => Some(a),
        }
    }

    /// `before_llm_call`: returns the request as rewritten by the chain and
    /// the decision that stopped it, if any.
    pub async fn before_llm_call(
        &self,
        request: LlmCallRequest,
        state: &TurnState,
    ) -> (LlmCallRequest, Option<LlmCallDecision>) {
        if !self.has(HookId::BeforeLlmCall) {
            return (request, None);
        }
        let (rewritten, decision) = self.before_llm_call_value(to_value(&request), state).await;
        (rewritten.unwrap_or(request), decision)
    }

    /// [`before_llm_call`](Self::before_llm_call) over a request already
    /// built as a host value (an agent that keeps its messages as host
    /// values builds it without converting them): the request as the last
    /// rewriting implementation returned it (None when none did) and the
    /// decision that stopped the chain, if any.
    pub async fn before_llm_call_value(
        &self,
        request: Value,
        state: &TurnState,
    ) -> (Option<LlmCallRequest>, Option<LlmCallDecision>) {
        const HOOK: HookId = HookId::BeforeLlmCall;
        const REQUEST: usize = bub_abi::args::before_llm_call::index::request;
        let impls = self.registry.impls(HOOK);
        if impls.is_empty() {
            return (None, None);
        }
        let mut args = CallArgs::from_values(vec![request, Value::null()]).with_state(state.clone());
        let mut rewritten = None;
        for imp in impls {
            let Some(answer) = self.run_agent_hook(HOOK, imp, &args).await else { continue };
            let parsed = match &answer {
                Answer::Value(v) => v.deserialize::<BeforeLlmCall>().ok(),
                _ => None,
            };
            match parsed {
                Some(BeforeLlmCall::Request(r)) => {
                    args.set(REQUEST, to_value(&r));
                    rewritten = Some(r);
                }
                Some(BeforeLlmCall::Decision(d)) => return (rewritten, Some(d)),
                None => bad_return(HOOK, imp, answer_type_name(&answer), "LLMCallRequest | LLMCallDecision | None"),
            }
        }
        (rewritten, None)
    }

    /// `after_llm_call`: every observer; failures are logged and skipped.
    pub async fn after_llm_call(&self, request: &LlmCallRequest, result: &LlmCallResult, state: &TurnState) {
        if !self.has(HookId::AfterLlmCall) {
            return;
        }
        self.after_llm_call_value(to_value(request), result, state).await
    }

    /// [`after_llm_call`](Self::after_llm_call) over a request already
    /// built as a host value.
    pub async fn after_llm_call_value(&self, request: Value, result: &LlmCallResult, state: &TurnState) {
        const HOOK: HookId = HookId::AfterLlmCall;
        let impls = self.registry.impls(HOOK);
        if impls.is_empty() {
            return;
        }
        let args = CallArgs::from_values(vec![request, to_value(result), Value::null()]).with_state(state.clone());
        for imp in impls {
            let _ = self.run_agent_hook(HOOK, imp, &args).await;
        }
    }

    /// `before_tool_call`: returns the call as rewritten by `proceed`
    /// decisions and the final decision (`proceed()` when the chain ran out).
    ///
    /// Each implementation sees the arguments as rewritten by the earlier
    /// ones. Nothing is copied along the chain: the call is a host value,
    /// a `proceed` decision's arguments are a host value (often the previous
    /// arguments plus a key, sharing the rest), and the next call is the
    /// previous one with its `arguments` entry replaced.
    pub async fn before_tool_call(&self, mut call: ToolCall, state: &TurnState) -> (ToolCall, ToolCallDecision) {
        const HOOK: HookId = HookId::BeforeToolCall;
        const EXPECTED: &str = "ToolCallDecision | None";
        let impls = self.registry.impls(HOOK);
        if impls.is_empty() {
            return (call, ToolCallDecision::proceed(None));
        }
        const CALL: usize = bub_abi::args::before_tool_call::index::call;
        let Ok(mut args) = CallArgs::before_tool_call(&call, state) else {
            return (call, ToolCallDecision::proceed(None));
        };
        for imp in impls {
            let Some(answer) = self.run_agent_hook(HOOK, imp, &args).await else { continue };
            let Answer::Value(decision) = &answer else {
                bad_return(HOOK, imp, answer_type_name(&answer), EXPECTED);
                continue;
            };
            let d = decision.as_ref();
            let action = match d.kind() {
                ValueKind::Object => d.get("action").map_or(Some("proceed"), ValueRef::as_str),
                _ => None,
            };
            match action {
                Some("proceed") => match d.get("arguments") {
                    None => {}
                    Some(a) if a.is_null() => {}
                    Some(a) if a.is_object() => {
                        let next = args.value(CALL).with("arguments", a);
                        call.arguments = a.to_owned();
                        args.set(CALL, next);
                    }
                    Some(_) => bad_return(HOOK, imp, "dict", "ToolCallDecision(arguments: dict) | None"),
                },
                Some("replace" | "deny") => match decision.deserialize::<ToolCallDecision>() {
                    Ok(decision) => return (call, decision),
                    Err(_) => bad_return(HOOK, imp, "dict", EXPECTED),
                },
                _ => bad_return(HOOK, imp, super::value_type_name(d), EXPECTED),
            }
        }
        (call, ToolCallDecision::proceed(None))
    }

    /// `after_tool_call`: every observer sees the shared result; a returned
    /// value replaces `result.result` for later observers and the model.
    pub async fn after_tool_call(
        &self,
        call: &ToolCall,
        mut result: ToolCallResult,
        state: &TurnState,
    ) -> ToolCallResult {
        const HOOK: HookId = HookId::AfterToolCall;
        let impls = self.registry.impls(HOOK);
        if impls.is_empty() {
            return result;
        }
        const RESULT: usize = bub_abi::args::after_tool_call::index::result;
        let Ok(mut args) = CallArgs::after_tool_call(call, &result, state) else { return result };
        for imp in impls {
            let Some(answer) = self.run_agent_hook(HOOK, imp, &args).await else { continue };
            match &answer {
                Answer::Value(v) => match v.deserialize::<serde_json::Value>() {
                    Ok(json) => {
                        result.result = Some(json);
                        args.set(RESULT, args.value(RESULT).with("result", v));
                    }
                    Err(_) => bad_return(HOOK, imp, answer_type_name(&answer), "a JSON value | None"),
                },
                other => bad_return(HOOK, imp, answer_type_name(other), "a JSON value | None"),
            }
        }
        result
    }
}
