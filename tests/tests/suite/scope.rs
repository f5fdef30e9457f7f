//! The `running()` scope (semantics §H1.2, §H5.1–H5.2; behaviours 45, 53–55,
//! 58–63): resource order observed by real plugins through the real loader.

use bub_host::{
    framework::{Framework, FrameworkError},
    HostBuilder,
};
use bub_tests::{block_on, capture_logs, Home};
use serde_json::{json, Value};

fn framework(home: &Home) -> Framework {
    Framework::new(&HostBuilder::new().discovered(&home.search()).build(), "/ws")
}

fn lifespan(name: &str) -> Value {
    json!({"provide_lifespan": {"object": {"kind": "lifespan", "name": name}}})
}

/// Object method calls only (lines like `plugin:Name.method`).
fn object_calls(home: &Home) -> Vec<String> {
    home.trace().into_iter().filter(|l| l.contains('.')).collect()
}

/// Behaviour 58: lifespans entered in priority order, then store, then
/// inbox; exited in reverse; references None afterwards.
#[test]
fn b58_entry_and_exit_order() {
    let home = Home::new();
    home.scripted("1-l1", "", lifespan("L1"));
    home.scripted(
        "2-async",
        "",
        json!({"provide_lifespan": {"object": {"kind": "lifespan", "name": "A",
            "methods": {"enter": {"sleep_ms": 5}, "exit": {"sleep_ms": 5}}}}}),
    );
    home.scripted("3-l2", "", lifespan("L2"));
    home.scripted(
        "4-res",
        "",
        json!({
            "provide_tape_store": {"object": {"kind": "tape_store", "name": "store"}},
            "provide_steering_inbox": {"object": {"kind": "steering_inbox", "name": "inbox"}},
        }),
    );
    let fw = framework(&home);
    assert!(fw.get_tape_store().is_none());
    block_on(async {
        let scope = fw.running().await.unwrap();
        assert_eq!(fw.get_tape_store().unwrap().resource().name(), "store");
        assert_eq!(fw.get_steering_inbox().unwrap().resource().name(), "inbox");
        scope.exit(None).await.unwrap();
    });
    assert!(fw.get_tape_store().is_none() && fw.get_steering_inbox().is_none());
    assert_eq!(
        object_calls(&home),
        [
            "3-l2:L2.enter",
            "2-async:A.enter",
            "1-l1:L1.enter",
            "4-res:store.enter",
            "4-res:inbox.enter",
            "4-res:inbox.exit(none)",
            "4-res:store.exit(none)",
            "1-l1:L1.exit(none)",
            "2-async:A.exit(none)",
            "3-l2:L2.exit(none)",
        ]
    );
    // Every provider is called before any lifespan is entered.
    let trace = home.trace();
    let first_enter = trace.iter().position(|l| l.ends_with(".enter")).unwrap();
    assert_eq!(trace.iter().position(|l| l == "1-l1:provide_lifespan").map(|p| p < first_enter), Some(true));
}

/// Behaviour 59: a lifespan failing on entry: those entered exit seeing its
/// error, the error is returned, later providers are never entered.
#[test]
fn b59_entry_failure_unwinds() {
    let home = Home::new();
    home.scripted(
        "1-b",
        "",
        json!({"provide_lifespan": {"object": {"kind": "lifespan", "name": "B", "methods": {"enter": {"error": "boom"}}}},
               "provide_tape_store": {"object": {"kind": "tape_store", "name": "store"}}}),
    );
    home.scripted("2-a", "", lifespan("A"));
    let fw = framework(&home);
    let err = block_on(fw.running()).unwrap_err();
    assert!(err.to_string().contains("boom"), "{err}");
    let calls = object_calls(&home);
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(calls[..2], ["2-a:A.enter", "1-b:B.enter"]);
    assert!(calls[2].starts_with("2-a:A.exit(") && calls[2].contains("boom"), "{calls:?}");
    assert!(!home.trace().iter().any(|l| l.contains("provide_tape_store")));
    // The failed entry left no scope open.
    assert!(block_on(fw.running()).is_err());
    assert!(fw.get_tape_store().is_none());
}

/// Behaviour 60: the body's error reaches every provider at exit and is
/// returned.
#[test]
fn b60_body_error_reaches_providers() {
    let home = Home::new();
    home.scripted("1-l", "", lifespan("L"));
    home.scripted("2-s", "", json!({"provide_tape_store": {"object": {"kind": "tape_store", "name": "S"}}}));
    let fw = framework(&home);
    let r: Result<(), _> = block_on(fw.scoped(|_| async { Err(FrameworkError::Value("body failed".into())) }));
    assert!(matches!(r, Err(FrameworkError::Value(ref m)) if m == "body failed"));
    assert_eq!(
        object_calls(&home),
        ["1-l:L.enter", "2-s:S.enter", "2-s:S.exit(body failed)", "1-l:L.exit(body failed)"]
    );
}

/// Behaviour 61: an async (non-generator) store provider is skipped with a
/// warning; the next provider's store is used.
#[test]
fn b61_async_store_provider_skipped() {
    let home = Home::new();
    home.scripted("1-sync", "", json!({"provide_tape_store": {"object": {"kind": "tape_store", "name": "sync"}}}));
    home.scripted(
        "2-async",
        "",
        json!({"provide_tape_store": {"async": true, "object": {"kind": "tape_store", "name": "async"}}}),
    );
    let fw = framework(&home);
    let (name, logs) = capture_logs(|| {
        block_on(async {
            let scope = fw.running().await.unwrap();
            let name = fw.get_tape_store().unwrap().resource().name().to_owned();
            scope.exit(None).await.unwrap();
            name
        })
    });
    assert_eq!(name, "sync");
    assert!(logs.iter().any(|l| l.contains("hook.async_not_supported") && l.contains("2-async")), "{logs:?}");
}

/// Behaviours 62 and 45: two scopes enter and exit each lifespan twice; a
/// store is entered once per scope and is the same store throughout it.
#[test]
fn b62_b45_sequential_scopes() {
    let home = Home::new();
    home.scripted("1-l", "", lifespan("L"));
    home.scripted("2-s", "", json!({"provide_tape_store": {"object": {"kind": "tape_store", "name": "S"}}}));
    let fw = framework(&home);
    for _ in 0..2 {
        block_on(async {
            let scope = fw.running().await.unwrap();
            let a = fw.get_tape_store().unwrap();
            let b = fw.get_tape_store().unwrap();
            assert_eq!(a.resource().name(), b.resource().name());
            scope.exit(None).await.unwrap();
        });
    }
    let calls = object_calls(&home);
    assert_eq!(calls.iter().filter(|l| *l == "1-l:L.enter").count(), 2);
    assert_eq!(calls.iter().filter(|l| *l == "1-l:L.exit(none)").count(), 2);
    assert_eq!(calls.iter().filter(|l| *l == "2-s:S.enter").count(), 2);
    assert_eq!(calls.iter().filter(|l| *l == "2-s:S.exit(none)").count(), 2);
    assert_eq!(home.trace().iter().filter(|l| *l == "2-s:provide_tape_store").count(), 2);
}

/// Behaviour 63: a lifespan provider returning None runs, and nothing is entered.
#[test]
fn b63_none_lifespan_runs_but_is_not_entered() {
    let home = Home::new();
    home.scripted("plain", "", json!({"provide_lifespan": {"return": null}}));
    let fw = framework(&home);
    block_on(async { fw.running().await.unwrap().exit(None).await.unwrap() });
    assert!(home.trace().contains(&"plain:provide_lifespan".to_owned()));
    assert!(object_calls(&home).is_empty());
}

/// Scopes must not overlap on one framework.
#[test]
fn overlapping_scopes_are_refused() {
    let home = Home::new();
    let fw = framework(&home);
    block_on(async {
        let scope = fw.running().await.unwrap();
        assert!(matches!(fw.clone().running().await, Err(FrameworkError::ScopeOverlap)));
        scope.exit(None).await.unwrap();
        fw.running().await.unwrap().exit(None).await.unwrap();
    });
}

/// Behaviour 53: an async environment provider runs once per session; both
/// environments close at scope exit, before the store exits.
#[test]
fn b53_environment_cache_and_close() {
    let home = Home::new();
    home.scripted("1-s", "", json!({"provide_tape_store": {"object": {"kind": "tape_store", "name": "S"}}}));
    home.scripted(
        "2-e",
        "",
        json!({"provide_environment": {"async": true, "trace_arg": 0,
            "object": {"kind": "environment", "name": "env"}}}),
    );
    let fw = framework(&home);
    block_on(async {
        let scope = fw.running().await.unwrap();
        let a = fw.get_environment("s1").await.unwrap().unwrap();
        let b = fw.get_environment("s1").await.unwrap().unwrap();
        assert_eq!(a.resource().name(), b.resource().name());
        fw.get_environment("s2").await.unwrap().unwrap();
        scope.exit(None).await.unwrap();
    });
    let trace = home.trace();
    assert_eq!(trace.iter().filter(|l| l.starts_with("2-e:provide_environment:\"s1\"")).count(), 1, "{trace:?}");
    assert_eq!(trace.iter().filter(|l| l.starts_with("2-e:provide_environment:\"s2\"")).count(), 1);
    let calls = object_calls(&home);
    assert_eq!(calls, ["1-s:S.enter", "2-e:env.close", "2-e:env.close", "1-s:S.exit(none)"]);
    // The cache was cleared: a new scope asks again.
    block_on(async {
        let scope = fw.running().await.unwrap();
        fw.get_environment("s1").await.unwrap();
        scope.exit(None).await.unwrap();
    });
    assert_eq!(home.trace().iter().filter(|l| l.starts_with("2-e:provide_environment:\"s1\"")).count(), 2);
}

/// Behaviour 54: a provider answering anything but an environment gets Bub's TypeError.
#[test]
fn b54_environment_type_error() {
    for answer in [json!({"return": "not-an-env"}), json!({"object": {"kind": "tape_store"}})] {
        let home = Home::new();
        home.scripted("e", "", json!({ "provide_environment": answer }));
        let err = block_on(framework(&home).get_environment("s")).unwrap_err();
        match err {
            FrameworkError::Type(m) => {
                assert!(m.starts_with("hook.provide_environment must return Environment or None"), "{m}")
            }
            other => panic!("{other}"),
        }
    }
}

/// Behaviour 55: the turn state refers to the session's environment.
#[test]
fn b55_runtime_environment_in_state() {
    let home = Home::new();
    home.scripted("e", "", json!({"provide_environment": {"object": {"kind": "environment", "name": "local"}}}));
    home.scripted("p", "", json!({"render_outbound": {"get_state": "_runtime_environment"}}));
    let fw = framework(&home);
    let mut inbound = json!({"content": "x"});
    let result = block_on(fw.process_inbound(&mut inbound, false)).unwrap();
    let expected = json!({"$resource": "environment", "plugin": "e", "name": "local"});
    assert_eq!(result.state["_runtime_environment"], expected);
    // render_outbound saw it during the turn (it answered with it).
    assert_eq!(result.outbounds, [expected]);
}
