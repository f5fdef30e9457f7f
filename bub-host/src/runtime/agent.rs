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
    abi::{DispatchMode, HookResult},
    types::{
        BeforeLlmCall, LlmCallDecision, LlmCallRequest, LlmCallResult, ToolAction, ToolCall, ToolCallDecision,
        ToolCallResult,
    },
    HookError, HookId, TurnState,
};

use super::{finish, value_type_name, CallArgs, Runtime};
use crate::registry::Impl;

fn failed(hook: HookId, imp: &Impl, e: &HookError) {
    tracing::warn!(target: "bub::hooks", "hook.agent_hook_failed hook={hook} adapter={}: {e}", imp.plugin);
}

fn bad_return(hook: HookId, imp: &Impl, value: &HookResult, expected: &str) {
    tracing::warn!(
        target: "bub::hooks",
        "hook.agent_hook_bad_return hook={hook} adapter={} got={} expected={expected}",
        imp.plugin,
        value_type_name(value)
    );
}

/// A decision as read by the chain: the arguments stay raw JSON.
#[derive(serde::Deserialize)]
struct DecisionView<'a> {
    #[serde(default)]
    action: ToolAction,
    #[serde(borrow, default)]
    arguments: Option<&'a serde_json::value::RawValue>,
}

fn apply_arguments(call: &mut ToolCall, raw: Option<&str>) {
    if let Some(map) = raw.and_then(|r| serde_json::from_str(r).ok()) {
        call.arguments = map;
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("payload types always serialize")
}

impl Runtime {
    async fn run_agent_hook(&self, hook: HookId, imp: &Impl, args: &CallArgs) -> Option<HookResult> {
        let views = args.views();
        let call = args.call(&views, DispatchMode::Async);
        match finish(imp, &call).await {
            HookResult::None => None,
            HookResult::Error(e) => {
                failed(hook, imp, &e);
                None
            }
            v => Some(v),
        }
    }

    /// `before_llm_call`: returns the request as rewritten by the chain and
    /// the decision that stopped it, if any.
    pub async fn before_llm_call(
        &self,
        mut request: LlmCallRequest,
        state: &TurnState,
    ) -> (LlmCallRequest, Option<LlmCallDecision>) {
        const HOOK: HookId = HookId::BeforeLlmCall;
        let impls = self.registry.impls(HOOK);
        if impls.is_empty() {
            return (request, None);
        }
        let mut args = CallArgs::from_json(vec![to_json(&request), "null".into()]).with_state(state.clone());
        for imp in impls {
            let Some(value) = self.run_agent_hook(HOOK, imp, &args).await else { continue };
            let parsed = match &value {
                HookResult::Json(s) => serde_json::from_str::<BeforeLlmCall>(s).ok(),
                _ => None,
            };
            match parsed {
                Some(BeforeLlmCall::Request(r)) => {
                    request = r;
                    args.set_json(0, to_json(&request));
                }
                Some(BeforeLlmCall::Decision(d)) => return (request, Some(d)),
                None => bad_return(HOOK, imp, &value, "LLMCallRequest | LLMCallDecision | None"),
            }
        }
        (request, None)
    }

    /// `after_llm_call`: every observer; failures are logged and skipped.
    pub async fn after_llm_call(&self, request: &LlmCallRequest, result: &LlmCallResult, state: &TurnState) {
        const HOOK: HookId = HookId::AfterLlmCall;
        let impls = self.registry.impls(HOOK);
        if impls.is_empty() {
            return;
        }
        let args =
            CallArgs::from_json(vec![to_json(request), to_json(result), "null".into()]).with_state(state.clone());
        for imp in impls {
            let _ = self.run_agent_hook(HOOK, imp, &args).await;
        }
    }

    /// `before_tool_call`: returns the call as rewritten by `proceed`
    /// decisions and the final decision (`proceed()` when the chain ran out).
    ///
    /// Each implementation sees the arguments as rewritten by the earlier
    /// ones. The host reads a decision through a borrowed view and splices
    /// the new arguments' JSON into the next call, parsing them into a map
    /// only once, at the end.
    pub async fn before_tool_call(&self, mut call: ToolCall, state: &TurnState) -> (ToolCall, ToolCallDecision) {
        const HOOK: HookId = HookId::BeforeToolCall;
        let impls = self.registry.impls(HOOK);
        if impls.is_empty() {
            return (call, ToolCallDecision::proceed(None));
        }
        let head = format!("{{\"run_id\":{},\"tool\":{},\"arguments\":", to_json(&call.run_id), to_json(&call.tool));
        let mut args = CallArgs::from_json(vec![to_json(&call), "null".into()]).with_state(state.clone());
        let mut rewritten: Option<String> = None;
        for imp in impls {
            let Some(value) = self.run_agent_hook(HOOK, imp, &args).await else { continue };
            let text = match &value {
                HookResult::Json(s) => s.as_str(),
                other => {
                    bad_return(HOOK, imp, other, "ToolCallDecision | None");
                    continue;
                }
            };
            let Ok(view) = serde_json::from_str::<DecisionView<'_>>(text) else {
                bad_return(HOOK, imp, &value, "ToolCallDecision | None");
                continue;
            };
            match view.action {
                ToolAction::Proceed => match view.arguments.map(|raw| raw.get()) {
                    None | Some("null") => {}
                    Some(raw) if raw.starts_with('{') => {
                        args.set_json(0, format!("{head}{raw}}}"));
                        rewritten = Some(raw.to_owned());
                    }
                    Some(_) => bad_return(HOOK, imp, &value, "ToolCallDecision(arguments: dict) | None"),
                },
                ToolAction::Replace | ToolAction::Deny => {
                    apply_arguments(&mut call, rewritten.as_deref());
                    let decision = serde_json::from_str::<ToolCallDecision>(text).unwrap_or_default();
                    return (call, decision);
                }
            }
        }
        apply_arguments(&mut call, rewritten.as_deref());
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
        let mut args =
            CallArgs::from_json(vec![to_json(call), to_json(&result), "null".into()]).with_state(state.clone());
        for imp in impls {
            let Some(value) = self.run_agent_hook(HOOK, imp, &args).await else { continue };
            match &value {
                HookResult::Json(s) => match serde_json::from_str::<serde_json::Value>(s) {
                    Ok(v) => {
                        result.result = Some(v);
                        args.set_json(1, to_json(&result));
                    }
                    Err(_) => bad_return(HOOK, imp, &value, "a JSON value | None"),
                },
                other => bad_return(HOOK, imp, other, "a JSON value | None"),
            }
        }
        result
    }
}
