//! App hooks through the framework (semantics §H2.2; behaviours 37, 38, 42–44,
//! 49–52, 56, 57), with real plugins through the real loader.

use bub_abi::{
    types::{AdmitAction, StreamState, TapeInfo, TurnSnapshot},
    TurnState,
};
use bub_host::{
    framework::{Framework, FrameworkError},
    HostBuilder,
};
use bub_tests::{block_on, capture_logs, Home};
use serde_json::{json, Value};

fn framework(home: &Home) -> Framework {
    Framework::new(&HostBuilder::new().discovered(&home.search()).build(), "/ws")
}

fn type_error(r: Result<impl std::fmt::Debug, FrameworkError>) -> String {
    match r {
        Err(FrameworkError::Type(m)) => m,
        other => panic!("expected a TypeError, got {other:?}"),
    }
}

fn named(kind: &str, names: &[&str]) -> Value {
    Value::Array(names.iter().map(|n| json!({"kind": kind, "name": n})).collect())
}

/// Behaviour 42: channels flattened in priority order, deduplicated by name.
#[test]
fn b42_channels_deduplicated() {
    let home = Home::new();
    home.scripted("1-low", "", json!({"provide_channels": {"objects": named("channel", &["shared", "low-only"])}}));
    home.scripted("2-high", "", json!({"provide_channels": {"objects": named("channel", &["shared", "high-only"])}}));
    home.scripted("3-none", "", json!({"provide_channels": {"return": null}}));
    let channels = framework(&home).get_channels(&bub_tests::message_handler()).unwrap();
    let got: Vec<(String, String)> =
        channels.iter().map(|c| (c.name().to_owned(), c.resource().plugin().to_owned())).collect();
    assert_eq!(
        got,
        [
            ("shared".into(), "2-high".into()),
            ("high-only".into(), "2-high".into()),
            ("low-only".into(), "1-low".into())
        ]
    );
}

/// Behaviour 44: sidecars deduplicated by name, the higher priority's kept.
#[test]
fn b44_sidecars_deduplicated() {
    let home = Home::new();
    home.scripted(
        "1-low",
        "",
        json!({"provide_tape_sidecar": {"objects": named("tape_sidecar", &["shared", "low-only"])}}),
    );
    home.scripted(
        "2-high",
        "",
        json!({"provide_tape_sidecar": {"objects": named("tape_sidecar", &["shared", "high-only"])}}),
    );
    let sidecars = framework(&home).get_tape_sidecars().unwrap();
    let names: Vec<&str> = sidecars.iter().map(|s| s.name()).collect();
    assert_eq!(names, ["shared", "high-only", "low-only"]);
    assert_eq!(sidecars[0].resource().plugin(), "2-high");
}

/// Behaviour 57: tools deduplicated by name (higher priority wins); async
/// implementations are skipped with `hook.async_not_supported`.
#[test]
fn b57_tools_deduplicated_async_skipped() {
    let home = Home::new();
    home.scripted("1-low", "", json!({"provide_tools": {"objects": named("tool", &["x", "low"])}}));
    home.scripted("2-high", "", json!({"provide_tools": {"objects": named("tool", &["x"])}}));
    home.scripted("3-async", "", json!({"provide_tools": {"async": true, "objects": named("tool", &["async"])}}));
    let (tools, logs) = capture_logs(|| framework(&home).get_tools().unwrap());
    let got: Vec<(&str, &str)> = tools.iter().map(|t| (t.name(), t.resource().plugin())).collect();
    assert_eq!(got, [("x", "2-high"), ("low", "1-low")]);
    assert!(logs.iter().any(|l| l.contains("hook.async_not_supported") && l.contains("3-async")), "{logs:?}");
    // A wrong kind is Bub's TypeError.
    home.scripted("4-bad", "", json!({"provide_tools": {"objects": named("channel", &["c"])}}));
    assert_eq!(type_error(framework(&home).get_tools()), "hook.provide_tools must return a list of Tool");
}

/// Behaviour 43: system prompt blocks, low priority first, empty dropped.
#[test]
fn b43_system_prompt_joined() {
    let home = Home::new();
    home.scripted("1-low", "", json!({"system_prompt": {"return": "low"}}));
    home.scripted("2-high", "", json!({"system_prompt": {"return": "high"}}));
    home.scripted("3-empty", "", json!({"system_prompt": {"return": null}}));
    let prompt = framework(&home).system_prompt(&json!("hi"), &TurnState::new()).unwrap();
    assert_eq!(prompt, "low\n\nhigh");
}

/// Behaviours 49 and 50: admission decisions; a wrong type is a TypeError.
#[test]
fn b49_b50_admit_message() {
    let home = Home::new();
    home.scripted(
        "a",
        "",
        json!({"admit_message": {"trace_arg": 2, "return": {"action": "follow_up", "reason": "busy"}}}),
    );
    let snapshot = TurnSnapshot {
        session_id: "s".into(),
        is_running: true,
        running_count: 1,
        pending_count: 1,
        steering_count: 0,
    };
    let decision = block_on(framework(&home).admit_message("s", &json!({"content": "x"}), &snapshot)).unwrap().unwrap();
    assert_eq!(decision.action, AdmitAction::FollowUp);
    assert_eq!(decision.reason.as_deref(), Some("busy"));
    let line = home.trace().into_iter().find(|l| l.starts_with("a:admit_message:")).unwrap();
    assert!(line.contains("\"pending_count\":1"), "{line}");

    let home = Home::new();
    home.scripted("a", "", json!({"admit_message": {"return": "follow_up"}}));
    let r = block_on(framework(&home).admit_message("s", &json!({}), &snapshot));
    assert_eq!(type_error(r), "hook.admit_message must return AdmitDecision or None");
}

/// Behaviours 51 and 52: model options merged; None skipped; wrong type a TypeError.
#[test]
fn b51_b52_model_options() {
    let home = Home::new();
    home.scripted(
        "1-low",
        "",
        json!({"provide_model_options": {"return": {"models": [{"id": "low"}], "current_model": "low"}}}),
    );
    home.scripted(
        "2-high",
        "",
        json!({"provide_model_options": {"return": {"models": [{"id": "high"}, {"id": "mid"}], "current_model": "high"}}}),
    );
    home.scripted("3-none", "", json!({"provide_model_options": {"return": null}}));
    let options = block_on(framework(&home).get_model_options("s", None)).unwrap();
    let ids: Vec<&str> = options.models.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["high", "mid", "low"]);
    assert_eq!(options.current_model.as_deref(), Some("high"));

    home.scripted("4-bad", "", json!({"provide_model_options": {"return": "gpt"}}));
    let r = block_on(framework(&home).get_model_options("s", None));
    assert_eq!(type_error(r), "hook.provide_model_options must return ModelOptions or None");
}

/// Behaviour 56: no tape context is a TypeError; one is read back.
#[test]
fn b56_build_tape_context() {
    let home = Home::new();
    assert_eq!(type_error(framework(&home).build_tape_context()), "hook.build_tape_context must return TapeContext");
    home.scripted(
        "c",
        "",
        json!({"build_tape_context": {"object": {"kind": "tape_context", "methods": {"describe": {"return": {"anchor": null}}}}}}),
    );
    let ctx = framework(&home).build_tape_context().unwrap();
    assert_eq!(block_on(ctx.describe()).unwrap(), json!({"anchor": null}));
}

/// Behaviours 37 and 38: continue_prompt is first-result (async allowed);
/// a non-string is a TypeError.
#[test]
fn b37_b38_continue_prompt() {
    let home = Home::new();
    home.scripted("1-sync", "", json!({"continue_prompt": {"return": "sync prompt"}}));
    home.scripted("2-async", "", json!({"continue_prompt": {"async": true, "trace_arg": 2, "return": "async prompt"}}));
    let state = StreamState { usage: Some(json!({"total_tokens": 42})), ..Default::default() };
    let tape = TapeInfo { name: "t".into() };
    let next = block_on(framework(&home).continue_prompt(Some(&json!("current prompt")), &tape, &state)).unwrap();
    assert_eq!(next.as_deref(), Some("async prompt"));
    let trace = home.trace();
    assert!(!trace.iter().any(|l| l.starts_with("1-sync:continue_prompt")), "{trace:?}");
    assert!(trace.iter().any(|l| l.contains("\"total_tokens\":42")), "{trace:?}");

    let home = Home::new();
    home.scripted("n", "", json!({"continue_prompt": {"return": 7}}));
    let r = block_on(framework(&home).continue_prompt(None, &tape, &state));
    assert_eq!(type_error(r), "hook.continue_prompt must return str or None");
}
