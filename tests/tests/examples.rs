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
