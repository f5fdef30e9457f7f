//! One turn through `process_inbound` (semantics §H1.1, behaviours 15–32), with
//! real plugins through the real loader.

use bub_host::{
    framework::{Framework, FrameworkError},
    HostBuilder,
};
use bub_tests::{block_on, capture_logs, lib, Home};
use serde_json::{json, Value};

fn framework(home: &Home) -> Framework {
    Framework::new(&HostBuilder::new().discovered(&home.search()).build(), "/ws")
}

fn turn(
    home: &Home,
    mut inbound: Value,
    stream: bool,
) -> (Result<bub_host::framework::TurnResult, FrameworkError>, Value) {
    let fw = framework(home);
    let r = block_on(fw.process_inbound(&mut inbound, stream));
    (r, inbound)
}

/// Behaviour 15: a high resolver's "" stops the chain; the default id is used.
#[test]
fn b15_falsy_session_falls_back_to_default() {
    let home = Home::new();
    home.scripted("1-low", "", json!({"resolve_session": {"return": "low"}}));
    home.scripted("2-high", "", json!({"resolve_session": {"return": ""}}));
    let (r, _) = turn(&home, json!({"channel": "tg", "chat_id": "42", "content": "hi"}), false);
    assert_eq!(r.unwrap().session_id, "tg:42");
    assert!(!home.trace().iter().any(|l| l.starts_with("1-low:resolve_session")));
}

/// Behaviours 16 and 17: the default id rules; a map inbound gets the
/// resolved id only if it has none.
#[test]
fn b16_b17_default_session_and_inbound_update() {
    let home = Home::new();
    let (r, inbound) = turn(&home, json!({"session_id": "abc", "content": "x"}), false);
    assert_eq!(r.unwrap().session_id, "abc");
    assert_eq!(inbound["session_id"], "abc");
    let (r, inbound) = turn(&home, json!({"content": "x"}), false);
    assert_eq!(r.unwrap().session_id, "default:default");
    assert_eq!(inbound["session_id"], "default:default");
    home.scripted("r", "", json!({"resolve_session": {"return": "resolved"}}));
    let (r, inbound) = turn(&home, json!({"session_id": "kept", "content": "x"}), false);
    assert_eq!(r.unwrap().session_id, "resolved");
    assert_eq!(inbound["session_id"], "kept");
}

/// Behaviours 18 and 19: load_state merged low priority first (high wins),
/// None values stored, None/non-map results ignored, runtime keys present.
#[test]
fn b18_b19_load_state_merge() {
    let home = Home::new();
    home.scripted("1-low", "", json!({"load_state": {"return": {"a": 1, "b": 1}}}));
    home.scripted("2-high", "", json!({"load_state": {"return": {"b": 2, "c": null}}}));
    home.scripted("3-none", "", json!({"load_state": {"return": null}}));
    home.scripted("4-list", "", json!({"load_state": {"return": [1, 2]}}));
    let (r, _) = turn(&home, json!({"content": "x"}), false);
    let state = Value::Object(r.unwrap().state);
    assert_eq!(state, json!({"_runtime_workspace": "/ws", "_runtime_steering_inbox": null, "a": 1, "b": 2, "c": null}));
}

/// Behaviour 20: a high build_prompt's "" stops the chain; the content is the prompt.
#[test]
fn b20_falsy_prompt_falls_back_to_content() {
    let home = Home::new();
    home.scripted("1-low", "", json!({"build_prompt": {"return": "LOW"}}));
    home.scripted("2-high", "", json!({"build_prompt": {"return": ""}}));
    let (r, _) = turn(&home, json!({"content": "the content"}), false);
    assert_eq!(r.unwrap().prompt, [json!("the content")]);
    assert!(!home.trace().iter().any(|l| l.starts_with("1-low:build_prompt")));
}

/// Behaviours 21, 22 and 29: no model → on_error(run_model) and the prompt
/// as output (the content for a media prompt); save/render/dispatch still
/// run; the default outbound copies channel and chat_id.
#[test]
fn b21_b22_b29_no_model_fallback_and_default_outbound() {
    let home = Home::new();
    home.scripted(
        "obs",
        "",
        json!({"on_error": {"trace_arg": 1}, "save_state": {"trace_arg": 3}, "dispatch_outbound": {"trace_arg": 0},
               "render_outbound": {"return": []}}),
    );
    let (r, _) = turn(&home, json!({"channel": "cli", "chat_id": "room", "content": "ping"}), false);
    let r = r.unwrap();
    assert_eq!(r.model_output, "ping");
    assert_eq!(
        r.outbounds,
        [json!({"content": "ping", "session_id": "cli:room", "channel": "cli", "chat_id": "room"})]
    );
    let trace = home.trace();
    assert!(
        trace
            .iter()
            .any(|l| l.contains("on_error:{\"kind\":\"RuntimeError\",\"message\":\"no model skill returned output\"}")),
        "{trace:?}"
    );
    assert!(trace.contains(&"obs:save_state:\"ping\"".to_owned()), "{trace:?}");
    assert!(trace.iter().any(|l| l.starts_with("obs:dispatch_outbound:")), "{trace:?}");

    let media = Home::new();
    media.scripted("p", "", json!({"build_prompt": {"return": ["look", {"type": "image", "url": "https://x/y.png"}]}}));
    let (r, _) = turn(&media, json!({"content": "inbound text"}), false);
    assert_eq!(r.unwrap().model_output, "inbound text");
}

/// Behaviours 23, 24, 33–35 in a turn: a model plugin registered after
/// another decides; text path uses run_model, stream path run_model_stream.
#[test]
fn b23_b24_model_output_text_and_stream() {
    let home = Home::new();
    home.scripted("1-obs", "", json!({"save_state": {"trace_arg": 3}}));
    home.install("2-echo", &lib("echo-model"), json!({"prefix": ""}));
    let (r, _) = turn(&home, json!({"content": "plain text"}), false);
    assert_eq!(r.unwrap().model_output, "plain text");
    assert!(home.trace().contains(&"1-obs:save_state:\"plain text\"".to_owned()));
    let (r, _) = turn(&home, json!({"content": "streamed words"}), true);
    assert_eq!(r.unwrap().model_output, "streamed words");
}

/// Behaviour 25: a stream's error event goes to on_error(run_model); the turn completes.
#[test]
fn b25_stream_error_events_are_reported() {
    let home = Home::new();
    home.scripted("1-obs", "", json!({"on_error": {"trace_arg": 1}}));
    home.install("2-echo", &lib("echo-model"), json!({"prefix": ""}));
    let (r, _) = turn(&home, json!({"content": "[provider-error] hi"}), true);
    assert_eq!(r.unwrap().model_output, "[provider-error] hi");
    assert!(
        home.trace().iter().any(|l| l.contains("{\"kind\":\"provider\",\"message\":\"simulated provider error\"}")),
        "{:?}",
        home.trace()
    );
}

/// A stream-only model plugin whose stream carries an error event. Bub's text path joins the text deltas only, so
/// `on_error` hears nothing of it; in stream mode it does.
#[test]
fn stream_error_events_reach_on_error_in_stream_mode_only() {
    let events = json!([
        {"kind": "text", "data": {"delta": "half "}},
        {"kind": "error", "data": {"kind": "provider", "message": "cut off"}},
        {"kind": "text", "data": {"delta": "an answer"}},
    ]);
    for stream_output in [false, true] {
        let home = Home::new();
        home.scripted("1-obs", "", json!({"on_error": {"trace_arg": 1}}));
        home.install("2-model", &lib("tp-stream-model"), json!({"events": events}));
        let (r, _) = turn(&home, json!({"content": "hi"}), stream_output);
        assert_eq!(r.unwrap().model_output, "half an answer");
        let told = home.trace().iter().any(|l| l.starts_with("1-obs:on_error") && l.contains("cut off"));
        assert_eq!(told, stream_output, "stream_output={stream_output}: {:?}", home.trace());
    }
}

/// Behaviours 26 and 28: a model answering 123 is a TypeError; save_state
/// runs with "" before the error propagates; on_error(stage=turn) is told.
#[test]
fn b26_b28_model_type_error() {
    let home = Home::new();
    home.scripted(
        "1-obs",
        "",
        json!({"save_state": {"trace_arg": 3}, "on_error": {"trace_arg": 0}, "render_outbound": {"return": []}}),
    );
    home.scripted("2-model", "last", json!({"run_model": {"return": 123}, "run_model_stream": {"return": null}}));
    let ((r, _), _) = capture_logs(|| turn(&home, json!({"content": "x"}), false));
    match r {
        Err(FrameworkError::Type(m)) => assert_eq!(m, "hook.run_model must return str or None"),
        other => panic!("{other:?}"),
    }
    let trace = home.trace();
    assert!(trace.contains(&"1-obs:save_state:\"\"".to_owned()), "{trace:?}");
    assert!(trace.contains(&"1-obs:on_error:\"turn\"".to_owned()), "{trace:?}");
    assert!(!trace.iter().any(|l| l.contains("render_outbound")), "{trace:?}");
}

/// Behaviours 26 and 36 on the stream path: a `run_model_stream` answering
/// a string fails the turn with Bub's TypeError, prefixed once, and
/// on_error(turn) observers see the same text.
#[test]
fn b26_b36_stream_model_type_error_is_prefixed_once() {
    let home = Home::new();
    home.scripted("1-obs", "", json!({"on_error": {"trace_arg": 1}, "render_outbound": {"return": []}}));
    home.scripted("2-model", "last", json!({"run_model_stream": {"return": "not a stream"}}));
    let ((r, _), _) = capture_logs(|| turn(&home, json!({"content": "x"}), true));
    let err = r.unwrap_err();
    assert_eq!(err.to_string(), "TypeError: hook.run_model_stream must return AsyncStreamEvents or None");
    let seen = home.trace().into_iter().filter(|l| l.contains("on_error")).collect::<Vec<_>>();
    assert!(
        seen.iter().any(|l| l.contains(
            r#"{"kind":"TypeError","message":"hook.run_model_stream must return AsyncStreamEvents or None"}"#
        )),
        "{seen:?}"
    );
}

/// Behaviour 27: build_prompt raising: save_state not called, on_error(turn), re-raised.
#[test]
fn b27_prompt_failure_skips_save_state() {
    let home = Home::new();
    home.scripted("1-obs", "", json!({"save_state": {}, "on_error": {"trace_arg": 0}}));
    home.scripted("2-bad", "", json!({"build_prompt": {"error": "no prompt for you"}}));
    let ((r, _), logs) = capture_logs(|| turn(&home, json!({"content": "x"}), false));
    let err = r.unwrap_err();
    assert!(err.to_string().contains("no prompt for you"), "{err}");
    assert!(!home.trace().iter().any(|l| l.contains("save_state")), "{:?}", home.trace());
    assert!(home.trace().contains(&"1-obs:on_error:\"turn\"".to_owned()));
    assert!(logs.iter().any(|l| l.contains("Error processing inbound message")), "{logs:?}");
}

/// Behaviours 30 and 31: single envelopes and lists are batches; batches are
/// concatenated high priority first.
#[test]
fn b30_b31_render_batches() {
    let home = Home::new();
    home.scripted("1-low", "", json!({"render_outbound": {"return": [{"content": "low-a"}, {"content": "low-b"}]}}));
    home.scripted("2-high", "", json!({"render_outbound": {"return": {"content": "high"}}}));
    let (r, _) = turn(&home, json!({"content": "x"}), false);
    let contents: Vec<Value> = r.unwrap().outbounds.into_iter().map(|o| o["content"].clone()).collect();
    assert_eq!(contents, [json!("high"), json!("low-a"), json!("low-b")]);
}

/// Behaviour 32: two outbounds and two dispatchers: four calls, outbound order kept.
#[test]
fn b32_each_outbound_to_every_dispatcher() {
    let home = Home::new();
    home.scripted("1-d", "", json!({"dispatch_outbound": {"trace_arg": 0}, "render_outbound": {"return": [{"content": "one"}, {"content": "two"}]}}));
    home.scripted("2-d", "", json!({"dispatch_outbound": {"trace_arg": 0}}));
    let (r, _) = turn(&home, json!({"content": "x"}), false);
    r.unwrap();
    let calls: Vec<String> = home.trace().into_iter().filter(|l| l.contains("dispatch_outbound")).collect();
    assert_eq!(
        calls,
        [
            "2-d:dispatch_outbound:{\"content\":\"one\"}",
            "1-d:dispatch_outbound:{\"content\":\"one\"}",
            "2-d:dispatch_outbound:{\"content\":\"two\"}",
            "1-d:dispatch_outbound:{\"content\":\"two\"}",
        ]
    );
}

/// A stream object that only answers `next` (a hand-written one, answering
/// `next_many` with the `unsupported` error kind) is read event by event.
#[test]
fn stream_without_next_many_is_read_one_event_at_a_time() {
    let home = Home::new();
    home.scripted(
        "s",
        "",
        json!({"run_model_stream": {"object": {"kind": "stream", "methods": {
            "next_many": {"unsupported": true},
            "next": {"return": null}
        }}}}),
    );
    let (r, _) = turn(&home, json!({"content": "x"}), true);
    assert_eq!(r.unwrap().model_output, "");
    let calls: Vec<String> = home.trace().into_iter().filter(|l| l.starts_with("s:stream.")).collect();
    assert_eq!(calls, ["s:stream.next_many", "s:stream.next"]);
}

/// Behaviour 6: a plugin with only `run_model`, through the stream path of
/// a turn: its text is the output (one text event's worth), no error.
#[test]
fn b06_text_only_model_through_the_stream_path() {
    let home = Home::new();
    home.scripted("0-obs", "", json!({}));
    home.install("1-sdk", &lib("tp-sdk"), json!({}));
    let (r, _) = turn(&home, json!({"content": "hi", "chat_id": "c"}), true);
    assert_eq!(r.unwrap().model_output, "echo: hi [note=]");
    assert!(!home.trace().iter().any(|l| l.starts_with("0-obs:on_error")));
}

/// Behaviour 24: a streamed turn with a bound router: the channel the
/// message names sees every event as it comes (text deltas, then final);
/// the output is the joined text. A text-only model is one text event.
#[test]
fn b24_bound_router_sees_the_stream() {
    let home = Home::new();
    home.scripted("0-chan", "", json!({"provide_channels": {"objects": [{"kind": "channel", "name": "tg"}]}}));
    home.install("1-echo", &lib("echo-model"), json!({"prefix": ""}));
    let fw = framework(&home);
    let handler = bub_tests::message_handler();
    fw.bind_channels(fw.get_channels(&handler).unwrap());
    let mut inbound = json!({"content": "streamed words", "channel": "tg", "chat_id": "1"});
    let r = block_on(fw.process_inbound(&mut inbound, true)).unwrap();
    assert_eq!(r.model_output, "streamed words");
    let shown: Vec<String> = home.trace().into_iter().filter(|l| l.contains("tg.stream_event")).collect();
    assert_eq!(
        shown,
        [
            r#"0-chan:tg.stream_event(text:{"delta":"streamed "})"#,
            r#"0-chan:tg.stream_event(text:{"delta":"words"})"#,
            r#"0-chan:tg.stream_event(final:{"ok":true,"text":"streamed words"})"#,
        ]
    );
    // Another channel's message, or a non-streamed turn: the channel sees nothing.
    home.clear_trace();
    block_on(fw.process_inbound(&mut json!({"content": "x", "channel": "other"}), true)).unwrap();
    block_on(fw.process_inbound(&mut json!({"content": "x", "channel": "tg"}), false)).unwrap();
    assert!(!home.trace().iter().any(|l| l.contains("stream_event")));

    // A text-only model (tp-sdk) through a streamed turn: one text event.
    let home = Home::new();
    home.scripted("0-chan", "", json!({"provide_channels": {"objects": [{"kind": "channel", "name": "tg"}]}}));
    home.install("1-sdk", &lib("tp-sdk"), json!({}));
    let fw = framework(&home);
    fw.bind_channels(fw.get_channels(&handler).unwrap());
    block_on(fw.process_inbound(&mut json!({"content": "hi", "channel": "tg", "chat_id": "c"}), true)).unwrap();
    let shown: Vec<String> = home.trace().into_iter().filter(|l| l.contains("tg.stream_event")).collect();
    assert_eq!(shown, [r#"0-chan:tg.stream_event(text:{"delta":"echo: hi [note=]"})"#]);
}
