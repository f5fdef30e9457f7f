//! The plugin SDK across the boundary: async hooks with tokio timers and
//! sockets, cancellation, the live turn state, and plugin logs and panics
//! reaching the host's subscriber.

use std::time::{Duration, Instant};

use bub_abi::{HookId, TurnState};
use bub_host::CallArgs;
use bub_tests::{block_on, capture_logs, lib, message, Home};
use serde_json::json;

/// An `async fn` hook using `tokio::time::sleep` works when the host awaits it,
/// and its `tracing` events reach the host's subscriber.
#[test]
fn async_hook_with_tokio_timer_and_logs() {
    let home = Home::new();
    home.install("sdk", &lib("tp-sdk"), json!({}));
    let (host, init_logs) = capture_logs(|| home.host());
    assert!(
        init_logs
            .iter()
            .any(|l| l.contains("bub::plugin") && l.contains("tp-sdk initialised") && l.contains("plugin=\"sdk\"")),
        "{init_logs:?}"
    );
    let rt = host.runtime();
    let args = CallArgs::run_model(&json!("hi"), &"s".to_owned(), &TurnState::new()).unwrap();
    let start = Instant::now();
    let (reply, logs) = capture_logs(|| block_on(rt.call_first(HookId::RunModel, &args)).unwrap().unwrap());
    assert!(start.elapsed() >= Duration::from_millis(20));
    assert_eq!(reply.parse::<String>().unwrap(), "echo: hi");
    assert!(
        logs.iter().any(|l| l.contains("model answered after sleeping") && l.contains("plugin=\"sdk\"")),
        "{logs:?}"
    );
}

/// tokio networking inside a plugin future, against a server in the test.
#[test]
fn async_hook_uses_tokio_networking() {
    let home = Home::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        use std::io::{BufRead, BufReader, Write};
        let (mut s, _) = listener.accept().unwrap();
        let mut line = String::new();
        BufReader::new(s.try_clone().unwrap()).read_line(&mut line).unwrap();
        writeln!(s, "pong for {}", line.trim()).unwrap();
    });
    home.scripted("net", "", json!({"resolve_session": {"async": true, "connect": addr.to_string()}}));
    let rt = home.host().runtime();
    let reply = block_on(rt.call_first(HookId::ResolveSession, &CallArgs::resolve_session(&message("1")).unwrap()))
        .unwrap()
        .unwrap();
    assert_eq!(reply.parse::<String>().unwrap(), "pong for ping net");
    server.join().unwrap();
}

/// Dropping a pending plugin future (the host cancels it) stops it: its
/// timer is cancelled and the rest of its body never runs.
#[test]
fn dropping_a_plugin_future_cancels_it() {
    let home = Home::new();
    home.scripted("slow", "", json!({"load_state": {"async": true, "sleep_ms": 400, "return": {"late": true}}}));
    let rt = home.host().runtime();
    let args = CallArgs::load_state(&message("1"), &"s".to_owned()).unwrap();
    let timed_out = block_on(async {
        tokio::time::timeout(Duration::from_millis(50), rt.call_many(HookId::LoadState, &args)).await
    });
    assert!(timed_out.is_err(), "the dispatch should have been cancelled");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(home.trace(), ["slow:load_state"], "the body after the sleep must never run");
}

/// The turn state is one live object: a change made by one plugin's hook is
/// seen by a later hook of another plugin, and by the host.
#[test]
fn turn_state_is_live_across_plugins() {
    let home = Home::new();
    home.scripted("writer", "", json!({"save_state": {"set_state": {"note": "from writer"}}}));
    home.install("sdk", &lib("tp-sdk"), json!({}));
    let rt = home.host().runtime();
    let state = TurnState::new();
    let msg = message("1");
    let args = CallArgs::save_state(&"s".to_owned(), &state, &msg, &"out".to_owned()).unwrap();
    block_on(rt.call_many(HookId::SaveState, &args)).unwrap();
    assert_eq!(state.get::<String>("note").unwrap().as_deref(), Some("from writer"));

    let args = CallArgs::build_prompt(&msg, &"s".to_owned(), &state).unwrap();
    let prompt = block_on(rt.call_first(HookId::BuildPrompt, &args)).unwrap().unwrap();
    assert_eq!(prompt.parse::<String>().unwrap(), "hello [note=from writer]");
    assert_eq!(state.get::<String>("built_by").unwrap().as_deref(), Some("sdk"));
}

/// A live object in the turn state. One
/// plugin's `build_prompt` puts an object into the state; both plugins'
/// `save_state` call it (two libraries' copies of the SDK, through the
/// host's state store), and so does the host; the state's values show a
/// marker for it, and overwriting the key drops it.
#[test]
fn a_live_object_in_the_state_is_called_by_other_plugins_and_the_host() {
    let home = Home::new();
    home.install("a", &lib("tp-sdk"), json!({}));
    home.install("b", &lib("tp-sdk"), json!({}));
    let rt = home.host().runtime();
    let state = TurnState::new();
    let msg = message("1");
    let args = CallArgs::build_prompt(&msg, &"s".to_owned(), &state).unwrap();
    block_on(rt.call_first(HookId::BuildPrompt, &args)).unwrap().unwrap();
    let owner: String = state.get("built_by").unwrap().unwrap();
    assert_eq!(state.get_value("sdk.counter"), Some(json!({"$object": "counter", "name": owner})));

    let args = CallArgs::save_state(&"s".to_owned(), &state, &msg, &"out".to_owned()).unwrap();
    block_on(rt.call_many(HookId::SaveState, &args)).unwrap();
    let mut calls = Vec::new();
    for caller in ["a", "b"] {
        let answer =
            state.get_value(&format!("sdk.counted.{caller}")).unwrap_or_else(|| panic!("{caller} did not call"));
        assert_eq!(answer["owner"], json!(owner), "{caller} called the object {owner} made");
        assert_eq!(answer["caller"], json!(caller));
        calls.push(answer["call"].as_u64().unwrap());
    }
    calls.sort();
    assert_eq!(calls, [1, 2], "one object, called twice");

    let object = state.get_object("sdk.counter").expect("the host gets it too");
    let answer = block_on(object.invoke("next", &json!({"caller": "host"}))).unwrap();
    assert_eq!(answer["call"], 3);
    state.set("sdk.counter", &"plain text").unwrap();
    assert!(state.get_object("sdk.counter").is_none(), "overwriting the key drops the object");
}

/// A panic in a plugin reaches the host's log with its location, and comes
/// back as an error naming plugin and hook (sync, and inside a future).
#[test]
fn panics_are_reported_with_plugin_and_hook() {
    let home = Home::new();
    home.install("sdk", &lib("tp-sdk"), json!({}));
    let rt = home.host().runtime();
    let args = CallArgs::dispatch_outbound(&json!({"content": "boom"})).unwrap();
    let (err, logs) = capture_logs(|| block_on(rt.call_many(HookId::DispatchOutbound, &args)).unwrap_err());
    assert_eq!(err.to_string(), "plugin 'sdk' panicked in hook 'dispatch_outbound': tp-sdk was asked to explode");
    assert!(logs.iter().any(|l| l.contains("plugin panicked") && l.contains("src/lib.rs")), "{logs:?}");

    // In an `async fn`, before its first await: the SDK's first poll, inside
    // the call, catches it the same way.
    let state = TurnState::new();
    state.set("sdk.explode", &true).unwrap();
    let args = CallArgs::save_state(&"s".to_owned(), &state, &message("1"), &"out".to_owned()).unwrap();
    let err = block_on(rt.call_many(HookId::SaveState, &args)).unwrap_err();
    assert_eq!(err.to_string(), "plugin 'sdk' panicked in hook 'save_state': tp-sdk exploded in a future");
    // The plugin still answers.
    let args = CallArgs::save_state(&"s".to_owned(), &TurnState::new(), &message("1"), &"out".to_owned()).unwrap();
    block_on(rt.call_many(HookId::SaveState, &args)).unwrap();

    // A result error through `Result` is a plain failure.
    let args =
        CallArgs::render_outbound(&message("1"), &"s".to_owned(), &TurnState::new(), &"fail".to_owned()).unwrap();
    let err = block_on(rt.call_many(HookId::RenderOutbound, &args)).unwrap_err();
    assert_eq!(err.to_string(), "plugin 'sdk' failed in hook 'render_outbound': cannot render 'fail'");
}

/// A sync-only hook written with the SDK is a plain `fn` and answers sync
/// dispatch (an `async fn` there is a compile error: see the `compile_fail`
/// example in `bub_abi`'s crate docs; sync dispatch still skips a pending
/// answer from a hand-written plugin, behaviour 12 in `dispatch.rs`).
#[test]
fn sdk_sync_only_hook_answers_sync_dispatch() {
    let home = Home::new();
    home.install("sdk", &lib("tp-sdk"), json!({}));
    let rt = home.host().runtime();
    let args = CallArgs::system_prompt(&json!("p"), &TurnState::new()).unwrap();
    let out = rt.call_many_sync(HookId::SystemPrompt, &args).unwrap();
    assert_eq!(out[0].as_ref().unwrap().parse::<String>().unwrap(), "from a plain fn");
}

/// After an async hook ran on a thread (the SDK made its runtime current
/// there), a sync hook of the same plugin may still `block_on` a runtime of
/// its own on that thread.
#[test]
fn sync_hook_can_block_on_after_async_hooks() {
    let home = Home::new();
    home.install("sdk", &lib("tp-sdk"), json!({}));
    let rt = home.host().runtime();
    let args = CallArgs::run_model(&json!("hi"), &"s".to_owned(), &TurnState::new()).unwrap();
    block_on(rt.call_first(HookId::RunModel, &args)).unwrap().unwrap();
    let out = rt
        .call_many_sync(HookId::OnboardConfig, &CallArgs::onboard_config(&bub_abi::types::StateMap::new()).unwrap())
        .unwrap();
    let v: serde_json::Value = out[0].as_ref().unwrap().parse().unwrap();
    assert_eq!(v, json!({"sdk": {"blocking": "slept"}}));
}

/// The threads of this process named as plugin runtime threads.
fn plugin_runtime_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "bub-plugin-rt")
        .count()
}

/// Plugin async hooks that finish in their first poll (most
/// do) start no thread, so N loaded and called plugins are not N threads. A
/// future that waits on its plugin's tokio timer, or that leaves a task
/// behind, starts that plugin's one driving thread, and both still run to
/// the end. It counts the process's threads, so it runs alone in a child
/// test process.
#[test]
fn plugin_threads_start_only_when_a_future_waits() {
    const CHILD: &str = "BUB_TEST_PLUGIN_THREADS_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let name = "sdk::plugin_threads_start_only_when_a_future_waits";
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--test-threads=1", "--nocapture"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("1 passed"), "{text}");
        return;
    }
    let home = Home::new();
    for i in 0..20 {
        home.scripted(&format!("p{i:02}"), "", json!({"load_state": {"async": true, "return": {"i": i}}}));
    }
    home.scripted("sleeper", "", json!({"resolve_session": {"async": true, "sleep_ms": 5, "return": "slept"}}));
    home.scripted("spawner", "", json!({"run_model": {"async": true, "spawn_ms": 5, "return": "at once"}}));
    let host = home.host();
    let rt = host.runtime();
    let args = CallArgs::load_state(&message("1"), &"s".to_owned()).unwrap();
    // The two others answer None at once (no script for the hook).
    let states = block_on(rt.call_many(HookId::LoadState, &args)).unwrap();
    assert_eq!(states.len(), 22);
    assert_eq!(plugin_runtime_threads(), 0, "futures that finished at once started threads");

    let args = CallArgs::resolve_session(&message("1")).unwrap();
    let reply = block_on(rt.call_first(HookId::ResolveSession, &args)).unwrap().unwrap();
    assert_eq!(reply.parse::<String>().unwrap(), "slept");
    assert_eq!(plugin_runtime_threads(), 1, "the sleeping plugin's timer needed its driver");

    let args = CallArgs::run_model(&json!("hi"), &"s".to_owned(), &TurnState::new()).unwrap();
    let reply = block_on(rt.call_first(HookId::RunModel, &args)).unwrap().unwrap();
    assert_eq!(reply.parse::<String>().unwrap(), "at once");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !home.trace().iter().any(|l| l == "spawner:run_model:spawned") {
        assert!(Instant::now() < deadline, "the task the plugin spawned never ran: {:?}", home.trace());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(plugin_runtime_threads(), 2);
}
