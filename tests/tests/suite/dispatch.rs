//! Dispatch semantics (semantics §H3, behaviours 1–13) through real plugins.

use bub_abi::{types::ErrorInfo, HookId, TurnState};
use bub_host::{CallArgs, HostBuilder, Reply};
use bub_tests::{block_on, capture_logs, message, Home};
use serde_json::json;

fn strings(replies: &[Option<Reply>]) -> Vec<Option<String>> {
    replies.iter().map(|r| r.as_ref().map(|r| r.parse::<String>().unwrap())).collect()
}

fn resolve_args() -> CallArgs {
    CallArgs::resolve_session(&message("42")).unwrap()
}

/// Behaviour 1: low→"low", mid→"mid", high→None registered in that order:
/// `call_first` answers "mid", calls high then mid, never low.
#[test]
fn b01_call_first_stops_at_first_non_none() {
    let home = Home::new();
    home.scripted("1-low", "", json!({"resolve_session": {"return": "low"}}));
    home.scripted("2-mid", "", json!({"resolve_session": {"return": "mid"}}));
    home.scripted("3-high", "", json!({"resolve_session": {"return": null}}));
    let rt = home.host().runtime();
    let reply = block_on(rt.call_first(HookId::ResolveSession, &resolve_args())).unwrap().unwrap();
    assert_eq!(reply.parse::<String>().unwrap(), "mid");
    assert_eq!(&*reply.plugin, "2-mid");
    assert_eq!(home.trace(), ["3-high:resolve_session", "2-mid:resolve_session"]);
}

/// Behaviour 2: `call_many_sync` keeps the sync answer and skips the async
/// one with `hook.async_not_supported hook=system_prompt adapter=async`.
#[test]
fn b02_sync_dispatch_skips_async_results() {
    let home = Home::new();
    home.scripted("sync", "", json!({"system_prompt": {"return": "sync"}}));
    home.scripted("async", "", json!({"system_prompt": {"return": "async", "async": true}}));
    let rt = home.host().runtime();
    let args = CallArgs::system_prompt(&json!("p"), &TurnState::new()).unwrap();
    let (out, logs) = capture_logs(|| rt.call_many_sync(HookId::SystemPrompt, &args).unwrap());
    assert_eq!(strings(&out), [Some("sync".to_owned())]);
    assert!(logs.iter().any(|l| l.contains("hook.async_not_supported hook=system_prompt adapter=async")), "{logs:?}");
    // The skipped future was dropped unpolled: its body never ran.
    assert_eq!(home.trace(), ["sync:system_prompt"]);

    // The same under call_first_sync: the async answer is skipped, the next one wins.
    let (first, _) = capture_logs(|| rt.call_first_sync(HookId::SystemPrompt, &args).unwrap());
    assert_eq!(first.unwrap().parse::<String>().unwrap(), "sync");
    // Under async dispatch both are awaited, in call order ("sync" was
    // discovered after "async", so it runs first).
    let all = block_on(rt.call_many(HookId::SystemPrompt, &args)).unwrap();
    assert_eq!(strings(&all), [Some("sync".to_owned()), Some("async".to_owned())]);
}

/// Behaviour 3: a failing `on_error` observer is logged as
/// `hook.on_error_failed stage=turn adapter=raise`; the others still observe.
#[test]
fn b03_notify_error_isolates_failing_observers() {
    let home = Home::new();
    home.scripted("record", "", json!({"on_error": {"async": true, "trace_arg": 0}}));
    home.scripted("raise", "", json!({"on_error": {"async": true, "error": "observer broke"}}));
    home.scripted("boom", "", json!({"on_error": {"panic": "observer panicked"}}));
    let rt = home.host().runtime();
    let err = ErrorInfo { kind: "RuntimeError".into(), message: "bad".into(), details: None };
    let ((), logs) = capture_logs(|| block_on(rt.notify_error("turn", &err, Some(&message("1")))));
    assert!(home.trace().contains(&"record:on_error:\"turn\"".to_owned()), "{:?}", home.trace());
    assert!(logs.iter().any(|l| l.contains("hook.on_error_failed stage=turn adapter=raise")), "{logs:?}");
    assert!(logs.iter().any(|l| l.contains("hook.on_error_failed stage=turn adapter=boom")), "{logs:?}");

    // Sync path: async observers are skipped with a warning; sync ones still run.
    home.clear_trace();
    let ((), logs) = capture_logs(|| rt.notify_error_sync("turn", &err, None));
    assert!(logs.iter().any(|l| l.contains("hook.async_not_supported hook=on_error adapter=record")), "{logs:?}");
    assert_eq!(home.trace(), ["boom:on_error"]);
}

/// Behaviour 4: the hook report maps a hook to its plugins.
#[test]
fn b04_hook_report() {
    let home = Home::new();
    home.install("session", &bub_tests::lib("prev-minor-plugin"), json!({}));
    let host = HostBuilder::new().discovered(&home.search()).build();
    let report = host.registry().hook_report();
    assert_eq!(report, [("resolve_session", vec!["session"]), ("system_prompt", vec!["session"])]);
}

/// Behaviours 7 and 8 (semantics §H3.5): base, A, B(tryfirst), C(trylast), E(trylast)
/// registered in that order run B, A, base, C, E; the stored order (what
/// `bub hooks` prints) is E, C, base, A, B.
#[test]
fn b07_b08_pluggy_priority_order() {
    let home = Home::new();
    let hooks = |v: &str| {
        json!({
            "resolve_session": {"return": null},
            "load_state": {"return": {"by": v, v: true}},
            "system_prompt": {"return": v},
        })
    };
    home.scripted("1-base", "", hooks("base"));
    home.scripted("2-a", "", hooks("a"));
    home.scripted("3-b", "first", hooks("b"));
    home.scripted("4-c", "last", hooks("c"));
    home.scripted("5-e", "last", hooks("e"));
    let host = HostBuilder::new().discovered(&home.search()).build();
    let rt = host.runtime();

    let calls: Vec<&str> = host.registry().impls(HookId::ResolveSession).iter().map(|i| &*i.plugin).collect();
    assert_eq!(calls, ["3-b", "2-a", "1-base", "4-c", "5-e"]);
    let report = host.registry().hook_report();
    let resolve = report.iter().find(|(h, _)| *h == "resolve_session").unwrap();
    assert_eq!(resolve.1, ["5-e", "4-c", "1-base", "2-a", "3-b"]);

    // call_first with everyone answering None walks the whole call order.
    assert!(block_on(rt.call_first(HookId::ResolveSession, &resolve_args())).unwrap().is_none());
    assert_eq!(
        home.trace(),
        [
            "3-b:resolve_session",
            "2-a:resolve_session",
            "1-base:resolve_session",
            "4-c:resolve_session",
            "5-e:resolve_session"
        ]
    );

    // call_many collects in call order.
    let args = CallArgs::system_prompt(&json!("p"), &TurnState::new()).unwrap();
    let many = rt.call_many_sync(HookId::SystemPrompt, &args).unwrap();
    let got: Vec<String> = strings(&many).into_iter().flatten().collect();
    assert_eq!(got, ["b", "a", "base", "c", "e"]);
}

/// Behaviour 11: `call_many` returns every value, None included, in call order.
#[test]
fn b11_call_many_keeps_none() {
    let home = Home::new();
    home.scripted("1-x", "", json!({"dispatch_outbound": {"return": true}}));
    home.scripted("2-none", "", json!({"dispatch_outbound": {"return": null, "async": true}}));
    let rt = home.host().runtime();
    let args = CallArgs::dispatch_outbound(&message("1")).unwrap();
    let out = block_on(rt.call_many(HookId::DispatchOutbound, &args)).unwrap();
    assert_eq!(out.len(), 2);
    assert!(out[0].is_none());
    assert!(out[1].as_ref().unwrap().parse::<bool>().unwrap());
}

/// Behaviour 12: the first implementation fails (error, panic, or panic
/// inside its future): the failure propagates, naming plugin and hook, and
/// later implementations are not called.
#[test]
fn b12_errors_and_panics_propagate_and_stop_dispatch() {
    for (script, kind, text) in [
        (json!({"error": "nope"}), "failed in hook 'resolve_session'", "nope"),
        (json!({"panic": "sync boom"}), "panicked in hook 'resolve_session'", "sync boom"),
        (json!({"async": true, "panic_in_future": "async boom"}), "panicked in hook 'resolve_session'", "async boom"),
    ] {
        let home = Home::new();
        home.scripted(
            "1-later",
            "",
            json!({"resolve_session": {"return": "later"}, "load_state": {"return": {"a": 1}}}),
        );
        home.scripted("2-first", "", json!({"resolve_session": script.clone(), "load_state": script}));
        let rt = home.host().runtime();

        let (err, _) = capture_logs(|| block_on(rt.call_first(HookId::ResolveSession, &resolve_args())).unwrap_err());
        let msg = err.to_string();
        assert!(msg.contains("plugin '2-first'") && msg.contains(kind) && msg.contains(text), "{msg}");

        let args = CallArgs::load_state(&message("1"), &"s".to_owned()).unwrap();
        let (err, _) = capture_logs(|| block_on(rt.call_many(HookId::LoadState, &args)).unwrap_err());
        assert!(err.to_string().contains("2-first"), "{err}");
        assert!(!home.trace().iter().any(|l| l.starts_with("1-later")), "{:?}", home.trace());

        // The host is unharmed: the next dispatch works.
        let ok = rt.call_first_sync(HookId::ProvideTapeStore, &CallArgs::provide_tape_store().unwrap()).unwrap();
        assert!(ok.is_none());
    }
}

/// Behaviour 13: unknown hook names answer None / [].
#[test]
fn b13_unknown_hook_names() {
    let home = Home::new();
    home.scripted("x", "", json!({"resolve_session": {"return": "x"}}));
    let rt = home.host().runtime();
    assert!(block_on(rt.call_first_named("no_such_hook", &resolve_args())).unwrap().is_none());
    assert!(block_on(rt.call_many_named("no_such_hook", &resolve_args())).unwrap().is_empty());
    assert!(block_on(rt.call_first_named("resolve_session", &resolve_args())).unwrap().is_some());
}

/// Behaviours 9/10 (argument pruning): an implementation receives only what it
/// declares. `tp-sdk`'s `load_state` declares nothing, so unreadable arguments
/// do not bother it, while `resolve_session`, which reads `message`, reports
/// exactly which argument of which hook it could not read.
#[test]
fn b09_b10_only_declared_arguments_are_read() {
    let home = Home::new();
    home.install("sdk", &bub_tests::lib("tp-sdk"), json!({}));
    let rt = home.host().runtime();
    // A number where a message map belongs, a bool for the session id.
    let garbage = CallArgs::from_values(vec![bub_abi::Value::from(42), bub_abi::Value::from(true)]);
    let out = block_on(rt.call_many(HookId::LoadState, &garbage)).unwrap();
    assert_eq!(out[0].as_ref().unwrap().parse::<serde_json::Value>().unwrap(), json!({"from_sdk": true}));

    let err = block_on(rt.call_first(HookId::ResolveSession, &garbage)).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("could not read the arguments of hook 'resolve_session'") && msg.contains("`message`"),
        "{msg}"
    );
}

/// Malformed results: text that is not JSON cannot become a host value (the
/// plugin's SDK reports it as a TypeError naming plugin and hook); a value
/// of the wrong type is reported when read; nothing crashes.
#[test]
fn malformed_results_are_reported() {
    let home = Home::new();
    home.scripted("bad", "", json!({"resolve_session": {"raw": "{{{ not json"}, "system_prompt": {"return": 123}}));
    let rt = home.host().runtime();
    let err = block_on(rt.call_first(HookId::ResolveSession, &resolve_args())).unwrap_err();
    assert!(err.to_string().contains("plugin 'bad' returned an invalid value from hook 'resolve_session'"), "{err}");
    assert!(err.to_string().contains("not valid JSON"), "{err}");

    let args = CallArgs::system_prompt(&json!("p"), &TurnState::new()).unwrap();
    let out = rt.call_many_sync(HookId::SystemPrompt, &args).unwrap();
    let err = bub_host::runtime::parse_reply::<String>(HookId::SystemPrompt, out[0].as_ref().unwrap()).unwrap_err();
    assert!(err.to_string().contains("invalid type: integer"), "{err}");
    assert_eq!(out[0].as_ref().unwrap().type_name(), "int");
}

/// A plugin's error in one dispatch does not stop the host: notify, then carry on.
#[test]
fn async_hooks_are_awaited_in_call_order() {
    let home = Home::new();
    home.scripted("1-slow", "", json!({"load_state": {"async": true, "sleep_ms": 30, "return": {"slow": 1}}}));
    home.scripted("2-fast", "", json!({"load_state": {"return": {"fast": 1}}}));
    let rt = home.host().runtime();
    let args = CallArgs::load_state(&message("1"), &"s".to_owned()).unwrap();
    let out = block_on(rt.call_many(HookId::LoadState, &args)).unwrap();
    let keys: Vec<serde_json::Value> = out.iter().map(|r| r.as_ref().unwrap().parse().unwrap()).collect();
    assert_eq!(keys, [json!({"fast": 1}), json!({"slow": 1})]);
    assert_eq!(home.trace(), ["2-fast:load_state", "1-slow:load_state", "1-slow:load_state:done"]);
}
