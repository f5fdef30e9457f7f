//! `onboard_config`'s loop (behaviours 46–48) and the model adapter's hook
//! choice (behaviours 33–35), through real plugins.

use bub_abi::HookId;
use bub_host::{HostBuilder, OnboardError};
use bub_tests::{capture_logs, lib, Home};
use serde_json::{json, Value};

/// Behaviour 46: first (earlier) sees {}, second sees first's fragment; the
/// result has both. Low priority runs first, so higher priority overrides.
#[test]
fn b46_onboard_fragments_accumulate_low_priority_first() {
    let home = Home::new();
    home.scripted(
        "1-first",
        "",
        json!({"onboard_config": {"trace_arg": 0, "return": {"first": {"enabled": true}, "who": "first"}}}),
    );
    home.scripted(
        "2-second",
        "",
        json!({"onboard_config": {"trace_arg": 0, "return": {"second": {"enabled": true}, "who": "second"}}}),
    );
    home.scripted("3-async", "", json!({"onboard_config": {"async": true, "return": {"async": true}}}));
    let rt = home.host().runtime();
    let (config, logs) = capture_logs(|| rt.onboard_config(&Default::default(), None).unwrap());
    assert_eq!(
        Value::Object(config),
        json!({"first": {"enabled": true}, "second": {"enabled": true}, "who": "second"})
    );
    assert_eq!(
        home.trace(),
        ["1-first:onboard_config:{}", "2-second:onboard_config:{\"first\":{\"enabled\":true},\"who\":\"first\"}"]
    );
    assert!(
        logs.iter().any(|l| l.contains("hook.async_not_supported hook=onboard_config adapter=3-async")),
        "{logs:?}"
    );
}

/// Behaviour 47: an unknown plugin name lists the available ones.
#[test]
fn b47_onboard_unknown_plugin() {
    let home = Home::new();
    home.scripted("b", "", json!({}));
    home.scripted("a", "", json!({}));
    let rt = home.host().runtime();
    let err = rt.onboard_config(&Default::default(), Some("nope")).unwrap_err();
    assert!(matches!(err, OnboardError::NoSuchPlugin { .. }));
    assert_eq!(err.to_string(), "No onboard_config hook found for plugin 'nope'. Available plugins: a, b");
    let only = rt.onboard_config(&Default::default(), Some("a")).unwrap();
    assert!(only.is_empty());
    assert_eq!(home.trace(), ["a:onboard_config"]);
}

/// Behaviour 48: a non-map answer is Bub's TypeError.
#[test]
fn b48_onboard_non_map_is_type_error() {
    let home = Home::new();
    home.scripted("bad", "", json!({"onboard_config": {"return": "a string"}}));
    let err = home.host().runtime().onboard_config(&Default::default(), None).unwrap_err();
    assert!(err.to_string().contains("hook.onboard_config must return dict or None"), "{err}");
}

/// Behaviours 33–35: the latest-registered plugin declaring a model hook
/// decides, markers ignored; text prefers run_model, stream run_model_stream.
#[test]
fn b33_b35_model_hook_selection() {
    let home = Home::new();
    // 1-both declares both model hooks (the scripted plugin declares every hook);
    // 2-text (tp-sdk) declares only run_model; 3-none declares neither.
    home.scripted("1-both", "first", json!({}));
    home.install("2-text", &lib("tp-sdk"), json!({}));
    home.install("3-none", &lib("session-router"), json!({}));
    let host = HostBuilder::new().discovered(&home.search()).build();
    let rt = host.runtime();
    let text = rt.select_model(false).unwrap();
    let stream = rt.select_model(true).unwrap();
    assert_eq!((text.hook, host.registry().plugins()[text.chosen_by].name.as_str()), (HookId::RunModel, "2-text"));
    assert_eq!((stream.hook, host.registry().plugins()[stream.chosen_by].name.as_str()), (HookId::RunModel, "2-text"));

    let only_both = Home::new();
    only_both.scripted("1-both", "", json!({}));
    let rt = only_both.host().runtime();
    assert_eq!(rt.select_model(false).unwrap().hook, HookId::RunModel);
    assert_eq!(rt.select_model(true).unwrap().hook, HookId::RunModelStream);

    assert!(Home::new().host().runtime().select_model(false).is_none());
}

/// Behaviour 36: `run_model_stream` answering anything but a stream is a TypeError.
#[test]
fn b36_run_model_stream_must_return_a_stream() {
    let home = Home::new();
    home.scripted("bad", "", json!({"run_model_stream": {"return": "not a stream"}}));
    let rt = home.host().runtime();
    let args = bub_host::CallArgs::run_model_stream(&json!("p"), &"s".to_owned(), &bub_abi::TurnState::new()).unwrap();
    let err = bub_tests::block_on(rt.run_model_stream(&args)).err().expect("a type error");
    assert!(err.to_string().contains("hook.run_model_stream must return AsyncStreamEvents or None"), "{err}");
}
