//! The example plugins in `plugins/`, through the real loader.

use bub_abi::{HookId, TurnState};
use bub_host::CallArgs;
use bub_tests::{block_on, lib, Home};
use serde_json::json;

#[test]
fn echo_model_answers_with_the_prompt() {
    let home = Home::new();
    home.install("echo", &lib("echo-model"), json!({"prefix": "> "}));
    let rt = home.host().runtime();
    let args =
        CallArgs::run_model(&json!(["hello", {"type": "text", "text": "world"}]), &"s".to_owned(), &TurnState::new())
            .unwrap();
    let reply = block_on(rt.call_first(HookId::RunModel, &args)).unwrap().unwrap();
    assert_eq!(reply.parse::<String>().unwrap(), "> hello\nworld");
}

/// Spec behaviour 90's resolver: aliases map a raw id to a canonical one;
/// explicit non-blank session ids win, blank ones are ignored.
#[test]
fn session_router_resolves_and_seeds_state() {
    let home = Home::new();
    home.install("router", &lib("session-router"), json!({"aliases": {"telegram:raw": "tenant:canonical"}}));
    let rt = home.host().runtime();
    let resolve = |m: serde_json::Value| {
        let r = block_on(rt.call_first(HookId::ResolveSession, &CallArgs::resolve_session(&m).unwrap())).unwrap();
        r.unwrap().parse::<String>().unwrap()
    };
    assert_eq!(resolve(json!({"channel": "telegram", "chat_id": "raw"})), "tenant:canonical");
    assert_eq!(resolve(json!({"channel": "cli", "chat_id": 42})), "cli:42");
    assert_eq!(resolve(json!({"session_id": "  keep  ", "channel": "cli"})), "  keep  ");
    assert_eq!(resolve(json!({"session_id": "   ", "channel": "telegram", "chat_id": "42"})), "telegram:42");
    assert_eq!(resolve(json!({})), "default:default");

    let args = CallArgs::load_state(&json!({}), &"cli:42".to_owned()).unwrap();
    let out = block_on(rt.call_many(HookId::LoadState, &args)).unwrap();
    assert_eq!(
        out[0].as_ref().unwrap().parse::<serde_json::Value>().unwrap(),
        json!({"session_id": "cli:42", "routed_by": "session-router"})
    );
}

#[test]
fn router_rejects_bad_config_at_load() {
    let home = Home::new();
    home.install("router", &lib("session-router"), json!({"aliases": ["not", "a", "map"]}));
    let host = home.host();
    match &host.registry().plugin("router").unwrap().status {
        bub_host::PluginStatus::Failed { detail } => {
            assert!(detail.contains("config `aliases` must map strings to strings"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
}

/// tool-policy: deny, replace and rewrite by rules, first match wins; it runs
/// first (tryfirst), so a later plugin sees the rewritten arguments.
#[test]
fn tool_policy_rules() {
    use bub_abi::types::{ToolAction, ToolCall};
    let home = Home::new();
    home.install(
        "policy",
        &lib("tool-policy"),
        json!({"rules": [
            {"tool": "bash", "argument": "cmd", "contains": "rm -rf", "deny": "destructive command"},
            {"tool": "web.*", "replace": "network access is disabled here"},
            {"tool": "bash", "set": {"timeout": 30}},
        ]}),
    );
    home.scripted("later", "", json!({"before_tool_call": {"trace_arg": 0}}));
    let rt = home.host().runtime();
    let call = |tool: &str, args: serde_json::Value| ToolCall {
        run_id: "r".into(),
        tool: tool.into(),
        arguments: bub_abi::Value::from(args),
        ..Default::default()
    };
    let (_, d) = block_on(rt.before_tool_call(call("bash", json!({"cmd": "rm -rf /"})), &TurnState::new()));
    assert_eq!((d.action, d.message.as_deref()), (ToolAction::Deny, Some("blocked by policy: destructive command")));
    let (_, d) = block_on(rt.before_tool_call(call("web.fetch", json!({"url": "x"})), &TurnState::new()));
    assert_eq!((d.action, d.result), (ToolAction::Replace, Some(json!("network access is disabled here"))));
    let (c, d) = block_on(rt.before_tool_call(call("bash", json!({"cmd": "ls"})), &TurnState::new()));
    assert_eq!(d.action, ToolAction::Proceed);
    assert_eq!(serde_json::Value::from(c.arguments), json!({"cmd": "ls", "timeout": 30}));
    assert_eq!(
        home.trace(),
        ["later:before_tool_call:{\"run_id\":\"r\",\"tool\":\"bash\",\"arguments\":{\"cmd\":\"ls\",\"timeout\":30}}"]
    );
    let (c, d) = block_on(rt.before_tool_call(call("fs.read", json!({"path": "a"})), &TurnState::new()));
    assert_eq!((d.action, serde_json::Value::from(c.arguments)), (ToolAction::Proceed, json!({"path": "a"})));

    let bad = Home::new();
    bad.install("policy", &lib("tool-policy"), json!({"rules": [{"tool": "bash"}]}));
    match &bad.host().registry().plugin("policy").unwrap().status {
        bub_host::PluginStatus::Failed { detail } => {
            assert!(detail.contains("exactly one of deny, replace, set"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
}

/// audit-log: one JSON line per model call, tool call and error, written
/// with async file IO, after every other implementation (trylast).
#[test]
fn audit_log_appends_jsonl() {
    use bub_abi::types::{ErrorInfo, LlmCallRequest, LlmCallResult, ToolCall, ToolCallResult};
    let home = Home::new();
    let path = home.path().join("audit.jsonl");
    home.install("audit", &lib("audit-log"), json!({"path": path}));
    let rt = home.host().runtime();
    let state = TurnState::new();
    let request = LlmCallRequest { run_id: "run-1".into(), model: "echo:model".into(), ..Default::default() };
    let result = LlmCallResult { run_id: "run-1".into(), duration_ms: 7, ..Default::default() };
    block_on(rt.after_llm_call(&request, &result, &state));
    let call = ToolCall {
        run_id: "run-1".into(),
        tool: "bash".into(),
        arguments: bub_abi::Value::from(json!({"cmd": "ls"})),
        ..Default::default()
    };
    let tool_result = ToolCallResult {
        run_id: "run-1".into(),
        tool: "bash".into(),
        error: Some(ErrorInfo { kind: "tool".into(), message: "blocked by policy".into(), details: None }),
        ..Default::default()
    };
    let out = block_on(rt.after_tool_call(&call, tool_result.clone(), &state));
    assert_eq!(out, tool_result, "an observer leaves the result alone");
    let err = ErrorInfo { kind: "RuntimeError".into(), message: "bad".into(), details: None };
    block_on(rt.notify_error("turn", &err, Some(&json!({"session_id": "cli:1"}))));

    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(
        (lines[0]["event"].as_str(), lines[0]["model"].as_str(), lines[0]["ok"].as_bool()),
        (Some("llm_call"), Some("echo:model"), Some(true))
    );
    assert_eq!((lines[1]["event"].as_str(), lines[1]["ok"].as_bool()), (Some("tool_call"), Some(false)));
    assert_eq!(lines[1]["error"]["message"], "blocked by policy");
    assert_eq!((lines[2]["stage"].as_str(), lines[2]["session_id"].as_str()), (Some("turn"), Some("cli:1")));
    assert!(lines.iter().all(|l| l["time"].as_str().unwrap().ends_with('Z')));
}
