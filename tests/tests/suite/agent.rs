//! The interception adapter (semantics §H2.3, behaviours 65–78): chains, decisions,
//! fault isolation. Real plugins, real loader.

use bub_abi::{
    types::{LlmCallRequest, ToolAction, ToolCall, ToolCallResult},
    TurnState,
};
use bub_tests::{block_on, capture_logs, lib, Home};
use serde_json::{json, Value};

fn request() -> LlmCallRequest {
    LlmCallRequest {
        run_id: "run-1".into(),
        model: "openai:gpt".into(),
        messages: vec![json!({"role": "user", "content": "hi"})],
        tool_names: vec![],
        max_tokens: None,
    }
}

fn tool_call(args: Value) -> ToolCall {
    ToolCall {
        run_id: "run-1".into(),
        tool: "bash".into(),
        arguments: bub_abi::Value::from(args),
        ..Default::default()
    }
}

/// Behaviour 65: AppendMessage then SwapModel registered: SwapModel runs first
/// and AppendMessage sees its model; the result carries both, no decision.
#[test]
fn b65_before_llm_call_chains_rewrites() {
    let home = Home::new();
    home.scripted("1-append", "", json!({"before_llm_call": {"trace_arg": 0, "request_ops": {"append_message": {"role": "system", "content": "extra"}}}}));
    home.scripted("2-swap", "", json!({"before_llm_call": {"request_ops": {"set_model": "anthropic:claude"}}}));
    let rt = home.host().runtime();
    let (req, decision) = block_on(rt.before_llm_call(request(), &TurnState::new()));
    assert!(decision.is_none());
    assert_eq!(req.model, "anthropic:claude");
    assert_eq!(req.messages.len(), 2);
    let seen = home.trace().into_iter().find(|l| l.starts_with("1-append")).unwrap();
    assert!(seen.contains("anthropic:claude"), "{seen}");
}

/// Behaviour 66: None and a wrong-typed answer leave the request unchanged,
/// with a bad-return warning.
#[test]
fn b66_bad_returns_are_skipped_with_warning() {
    let home = Home::new();
    home.scripted("1-none", "", json!({"before_llm_call": {"return": null}}));
    home.scripted("2-bad", "", json!({"before_llm_call": {"return": "not-a-request"}}));
    let rt = home.host().runtime();
    let ((req, decision), logs) = capture_logs(|| block_on(rt.before_llm_call(request(), &TurnState::new())));
    assert_eq!(req, request());
    assert!(decision.is_none());
    assert!(
        logs.iter().any(|l| l.contains("hook.agent_hook_bad_return hook=before_llm_call adapter=2-bad got=str expected=LLMCallRequest | LLMCallDecision | None")),
        "{logs:?}"
    );
}

/// Behaviour 67: Boom (raises) registered before After (sets the model):
/// the result has After's model and Boom's failure is logged, not raised.
#[test]
fn b67_failing_interceptors_are_isolated() {
    let home = Home::new();
    home.scripted("1-boom", "", json!({"before_llm_call": {"error": "kaput"}}));
    home.scripted("2-panic", "", json!({"before_llm_call": {"panic": "kaboom"}}));
    home.scripted("3-after", "", json!({"before_llm_call": {"request_ops": {"set_model": "fallback:model"}}}));
    let rt = home.host().runtime();
    let ((req, _), logs) = capture_logs(|| block_on(rt.before_llm_call(request(), &TurnState::new())));
    assert_eq!(req.model, "fallback:model");
    assert!(
        logs.iter()
            .any(|l| l.contains("hook.agent_hook_failed hook=before_llm_call adapter=1-boom") && l.contains("kaput")),
        "{logs:?}"
    );
    assert!(
        logs.iter()
            .any(|l| l.contains("hook.agent_hook_failed hook=before_llm_call adapter=2-panic") && l.contains("kaboom")),
        "{logs:?}"
    );
}

/// Behaviours 68/69: a finish decision stops the chain.
#[test]
fn b68_finish_decision_stops_the_chain() {
    let home = Home::new();
    home.scripted("1-other", "", json!({"before_llm_call": {"request_ops": {"set_model": "x:y"}}}));
    home.scripted("2-limit", "", json!({"before_llm_call": {"finish": "call budget exhausted"}}));
    let rt = home.host().runtime();
    let (req, decision) = block_on(rt.before_llm_call(request(), &TurnState::new()));
    let decision = decision.unwrap();
    assert_eq!((decision.action.as_str(), decision.text.as_str()), ("finish", "call budget exhausted"));
    assert_eq!(req.model, "openai:gpt");
    assert_eq!(home.trace(), ["2-limit:before_llm_call"]);
}

/// Behaviour 70: Rewrite proceeds with {cmd: ls, safe: true}; Verify, later,
/// sees safe=true; the final call carries it and the decision is proceed.
#[test]
fn b70_proceed_arguments_chain() {
    let home = Home::new();
    home.scripted("1-verify", "", json!({"before_tool_call": {"trace_arg": 0}}));
    home.scripted(
        "2-rewrite",
        "",
        json!({"before_tool_call": {"tool_ops": {"set_args": {"cmd": "ls", "safe": true}}}}),
    );
    let rt = home.host().runtime();
    let (call, decision) = block_on(rt.before_tool_call(tool_call(json!({"cmd": "rm -rf /"})), &TurnState::new()));
    assert_eq!(decision.action, ToolAction::Proceed);
    assert!(decision.arguments.is_none());
    assert_eq!(Value::from(call.arguments), json!({"cmd": "ls", "safe": true}));
    let seen = home.trace().into_iter().find(|l| l.starts_with("1-verify")).unwrap();
    assert!(seen.contains("\"safe\":true"), "{seen}");
}

/// Behaviours 71/73: deny and replace stop the chain.
#[test]
fn b71_b73_deny_and_replace_stop_the_chain() {
    for (ops, action) in [
        (json!({"deny": "blocked by policy"}), ToolAction::Deny),
        (json!({"replace": "cached result"}), ToolAction::Replace),
    ] {
        let home = Home::new();
        home.scripted("1-later", "", json!({"before_tool_call": {"tool_ops": {"set_args": {"x": 1}}}}));
        home.scripted("2-policy", "", json!({"before_tool_call": {"tool_ops": ops}}));
        let rt = home.host().runtime();
        let (_, decision) = block_on(rt.before_tool_call(tool_call(json!({"cmd": "ls"})), &TurnState::new()));
        assert_eq!(decision.action, action);
        match action {
            ToolAction::Deny => assert_eq!(decision.message.as_deref(), Some("blocked by policy")),
            _ => assert_eq!(decision.result, Some(json!("cached result"))),
        }
        assert_eq!(home.trace(), ["2-policy:before_tool_call"]);
    }
}

/// Behaviours 74/75/77: after_tool_call observers share one result; a value
/// returned replaces `result.result` for later observers; none → unchanged.
#[test]
fn b75_after_tool_call_rewrites_result() {
    let home = Home::new();
    home.scripted("1-observer", "", json!({"after_tool_call": {"trace_arg": 1}}));
    home.scripted("2-bound", "", json!({"after_tool_call": {"prefix_result": "bounded:"}}));
    let rt = home.host().runtime();
    let call = tool_call(json!({"cmd": "ls"}));
    let result = ToolCallResult {
        run_id: "run-1".into(),
        tool: "bash".into(),
        arguments: bub_abi::Value::object(),
        result: Some(json!("ran:ls")),
        error: None,
        duration_ms: 3,
    };
    let out = block_on(rt.after_tool_call(&call, result.clone(), &TurnState::new()));
    assert_eq!(out.result, Some(json!("bounded:ran:ls")));
    let seen = home.trace().into_iter().find(|l| l.starts_with("1-observer")).unwrap();
    assert!(seen.contains("bounded:ran:ls"), "{seen}");

    let empty = Home::new();
    let rt = empty.host().runtime();
    assert_eq!(block_on(rt.after_tool_call(&call, result.clone(), &TurnState::new())), result);
}

/// Behaviour 78: a raising after_llm_call observer does not stop the others.
#[test]
fn b78_after_llm_call_observers_are_isolated() {
    let home = Home::new();
    home.scripted("1-record", "", json!({"after_llm_call": {"trace_arg": 1}}));
    home.scripted("2-raise", "", json!({"after_llm_call": {"error": "observer failed"}}));
    let rt = home.host().runtime();
    let result =
        bub_abi::types::LlmCallResult { run_id: "run-1".into(), text: Some("answer".into()), ..Default::default() };
    let ((), logs) = capture_logs(|| block_on(rt.after_llm_call(&request(), &result, &TurnState::new())));
    assert!(logs.iter().any(|l| l.contains("hook.agent_hook_failed hook=after_llm_call adapter=2-raise")), "{logs:?}");
    let seen = home.trace().into_iter().find(|l| l.starts_with("1-record")).unwrap();
    assert!(seen.contains("\"text\":\"answer\""), "{seen}");
}

/// A `proceed` whose arguments are not an object is a bad return: logged,
/// skipped, the call unchanged.
#[test]
fn proceed_with_non_object_arguments_is_a_bad_return() {
    let home = Home::new();
    home.scripted("1-ok", "", json!({"before_tool_call": {"tool_ops": {"set_args": {"safe": true}}}}));
    home.scripted(
        "2-bad",
        "",
        json!({"before_tool_call": {"raw": "{\"action\": \"proceed\", \"arguments\": [1, 2]}"}}),
    );
    let rt = home.host().runtime();
    let ((call, decision), logs) =
        capture_logs(|| block_on(rt.before_tool_call(tool_call(json!({"cmd": "ls"})), &TurnState::new())));
    assert_eq!(decision.action, ToolAction::Proceed);
    assert_eq!(Value::from(call.arguments), json!({"cmd": "ls", "safe": true}));
    assert!(
        logs.iter().any(|l| l.contains("hook.agent_hook_bad_return hook=before_tool_call adapter=2-bad")),
        "{logs:?}"
    );
}

/// ABI 2's point: an argument no plugin reads is never copied. Three real
/// plugins each read `hops` and answer `proceed(arguments + hops)`; the
/// 100 KB string they never read arrives at the end of the chain as the
/// very same bytes (same address), not a copy.
#[test]
fn unread_arguments_cross_the_chain_uncopied() {
    let home = Home::new();
    for i in 0..3 {
        home.install(&format!("p{i}"), &lib("tp-bench"), json!({"idx": i}));
    }
    let rt = home.host().runtime();
    let big = "x".repeat(100 * 1024);
    let arguments = bub_abi::Value::from(json!({"path": "a", "hops": 0, "content": big}));
    let original = arguments.as_ref().get("content").unwrap().as_str().unwrap().as_ptr();
    let call = ToolCall { run_id: "r".into(), tool: "fs.read".into(), arguments, ..Default::default() };
    let (call, decision) = block_on(rt.before_tool_call(call, &TurnState::new()));
    assert_eq!(decision.action, ToolAction::Proceed);
    let args = call.arguments.as_ref();
    assert_eq!(args.get("hops").and_then(|h| h.as_u64()), Some(3));
    assert_eq!(args.get("content").unwrap().as_str().unwrap().as_ptr(), original, "the unread argument was copied");
}
