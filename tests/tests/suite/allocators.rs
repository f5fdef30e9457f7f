//! Plugins with a global allocator of their own (mimalloc, jemalloc, …):
//! memory that crosses the ABI is always freed by the allocator that made it
//! (values through the host's table, objects, errors, futures and strings
//! through their maker's functions). `tp-scripted-alloc` aborts the process
//! if that ever fails in either direction, so these tests die on the first
//! block freed by the wrong side.

use bub_abi::types::{TapeEntry, TapeQuery};
use bub_host::{framework::Framework, HostBuilder};
use bub_tests::{block_on, capture_logs, lib, run_bub, Home};
use serde_json::{json, Value};

fn alloc_plugin(home: &Home, name: &str, hooks: Value) {
    home.install(name, &lib("tp-scripted-alloc"), json!({"trace": home.trace_file(), "hooks": hooks}));
}

fn entry(id: u64) -> Value {
    json!({"id": id, "kind": "message", "date": "2026-12-01T00:00:00Z", "payload": {"content": "x".repeat(300)}, "meta": {}})
}

/// A whole turn with every stage answered by the plugin (values, async
/// values, a list of outbounds, a log line, a panic and an error in
/// observers), its channel shown a stream by another plugin, and its tape
/// store's methods called (an unsupported `append_many` falling back to
/// `append`).
#[test]
fn a_plugin_with_its_own_allocator_exchanges_everything_with_the_host() {
    let home = Home::new();
    alloc_plugin(
        &home,
        "1-alloc",
        json!({
            "resolve_session": {"return": "s-alloc"},
            "load_state": {"async": true, "sleep_ms": 1, "return": {"big": "y".repeat(5000), "list": [1, 2, 3]}},
            "build_prompt": {"return": "a prompt ".repeat(100)},
            "system_prompt": {"return": "a system block"},
            "save_state": {"async": true, "log": "saved by the plugin"},
            "render_outbound": {"return": [{"channel": "tg", "chat_id": "1", "content": "out"}]},
            "dispatch_outbound": {"return": true},
            "on_error": {"panic": "an observer that panics"},
            "provide_channels": {"objects": [{"kind": "channel", "name": "tg"}]},
            "provide_tape_store": {"object": {"kind": "tape_store", "name": "store", "methods": {
                "list_tapes": {"return": ["t"]},
                "fetch_all": {"return": [entry(1), entry(2)]},
                "append": {"return": entry(3)},
                "append_many": {"unsupported": true},
            }}},
        }),
    );
    home.install("2-echo", &lib("echo-model"), json!({"prefix": ""}));
    let fw = Framework::new(&HostBuilder::new().discovered(&home.search()).build(), "/ws");
    let handler = bub_tests::message_handler();
    fw.bind_channels(fw.get_channels(&handler).unwrap());

    for stream in [false, true] {
        let mut inbound = json!({"content": "hello", "channel": "tg", "chat_id": "1"});
        let (r, logs) = capture_logs(|| block_on(fw.process_inbound(&mut inbound, stream)));
        let r = r.unwrap();
        assert_eq!(r.session_id, "s-alloc");
        assert!(r.model_output.contains("a prompt"), "{}", r.model_output);
        assert_eq!(r.outbounds.len(), 1);
        assert!(logs.iter().any(|l| l.contains("saved by the plugin")), "{logs:?}");
    }
    let shown = home.trace().into_iter().filter(|l| l.contains("tg.stream_event")).count();
    assert!(shown > 0, "the plugin's channel saw the stream");

    // A failing turn: the model's error reaches the plugin's on_error,
    // which panics (caught, logged).
    alloc_plugin(
        &home,
        "3-fails",
        json!({"run_model": {"error": "the model failed"}, "run_model_stream": {"return": null}}),
    );
    let fw = Framework::new(&HostBuilder::new().discovered(&home.search()).build(), "/ws");
    let (r, logs) = capture_logs(|| block_on(fw.process_inbound(&mut json!({"content": "x"}), false)));
    assert!(r.unwrap_err().to_string().contains("the model failed"));
    assert!(logs.iter().any(|l| l.contains("an observer that panics")), "{logs:?}");

    block_on(fw.scoped(|fw| async move {
        let store = fw.get_tape_store().expect("the plugin's store");
        assert_eq!(store.list_tapes().await?, ["t"]);
        let all = store.fetch_all(&TapeQuery { tape: "t".into(), ..Default::default() }).await?;
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].payload["content"], "x".repeat(300));
        let e = TapeEntry { kind: "message".into(), ..Default::default() };
        let stored = store.append_many("t", &[e.clone(), e]).await?;
        assert_eq!(stored.len(), 2);
        Ok(())
    }))
    .unwrap();
    let appends = home.trace().into_iter().filter(|l| l.ends_with("store.append")).count();
    assert_eq!(appends, 2, "append_many fell back to append");
}

/// The same plugin through the `bub` binary: installed (its manifest read
/// from the library), listed, its hooks shown, a turn run with its model.
#[test]
fn the_binary_loads_lists_and_runs_a_plugin_with_its_own_allocator() {
    let home = Home::new();
    let (out, err, ok) = run_bub(&home, &["plugins", "install", lib("tp-scripted-alloc").to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    let hooks = json!({"run_model": {"return": "from the plugin"}, "run_model_stream": {"return": null}});
    let (out, err, ok) = run_bub(&home, &["plugins", "config", "tp-scripted-alloc", &format!("hooks={hooks}")]);
    assert!(ok, "{out}{err}");
    let (out, err, ok) = run_bub(&home, &["plugins", "list"]);
    assert!(ok && out.contains("tp-scripted-alloc"), "{out}{err}");
    let (out, err, ok) = run_bub(&home, &["hooks"]);
    assert!(ok && out.contains("tp-scripted-alloc"), "{out}{err}");
    let (out, err, ok) = run_bub(&home, &["run", "hi"]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("from the plugin"), "{out}{err}");
}
