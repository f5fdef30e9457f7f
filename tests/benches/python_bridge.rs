//! The python bridge's cost per hook: `bub_rs_bench.BenchPlugin` (a Python
//! plugin, `tests/python/bub-rs-bench`) called by bub-rs through the
//! release-built bridge, case for case with `tests/python/bench_bub.py`,
//! which times Bub 0.6.0a3 calling the very same plugin. The venv is
//! `<target>/python-bench-venv` (Bub and that plugin only); without a
//! Python 3.12+ and pip the benchmark says so and measures nothing.
//! `scripts/bench-python-bridge.sh` runs both and prints the table.

mod common;

use std::{future::Future, hint::black_box};

use bub_abi::{
    types::{StateMap, ToolCall},
    HookId, TurnState,
};
use bub_host::{framework::Framework, CallArgs, HostBuilder, PluginStatus};
use bub_tests::{lib_release, python, Home};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use serde_json::{json, Value};

fn run<F: Future>(f: F) -> F::Output {
    bub_tests::poll_ready(f)
}

fn message() -> Value {
    json!({"content": "hello", "channel": "bench", "chat_id": "42"})
}

fn bridge(c: &mut Criterion) {
    let venv = match python::bench_venv() {
        Ok(v) => v,
        Err(why) => {
            eprintln!("python_bridge benchmark skipped: {why}");
            return;
        }
    };
    let home = Home::new();
    home.install("python-bridge", &lib_release("python-bridge"), json!({"venv": venv}));
    let host = HostBuilder::new().discovered(&home.search()).build();
    let plugins = host.registry().plugins();
    assert!(plugins.iter().all(|p| p.status == PluginStatus::Loaded), "{plugins:?}");
    assert!(plugins.iter().any(|p| p.name == "bench"), "the bench venv's plugin is registered: {plugins:?}");
    let rt = host.runtime();
    let counts = || -> Value {
        let args = CallArgs::onboard_config(&StateMap::new()).unwrap();
        let replies = rt.call_many_sync(HookId::OnboardConfig, &args).unwrap();
        replies.iter().flatten().map(|r| r.parse::<Value>().unwrap()).next().expect("the bench plugin's counts")
    };
    let mut group = |name: &str, hook: &str, call: &mut dyn FnMut()| {
        let before = counts()[hook].as_u64().unwrap();
        let mut made = 0u64;
        let mut g = c.benchmark_group(name);
        g.bench_function(BenchmarkId::from_parameter(1), |b| {
            b.iter(|| {
                made += 1;
                call()
            })
        });
        g.finish();
        let ran = counts()[hook].as_u64().unwrap() - before;
        assert_eq!(ran, made, "{name}: the Python hook ran {ran} times for {made} calls");
    };

    let args = CallArgs::resolve_session(&message()).unwrap();
    let first = run(rt.call_first(HookId::ResolveSession, &args)).unwrap().map(|r| r.parse::<String>().unwrap());
    assert_eq!(first.as_deref(), Some("bench:42"));
    group("python_bridge/call_first/resolve_session/sync_impl", "resolve_session", &mut || {
        black_box(run(rt.call_first(HookId::ResolveSession, &args)).unwrap().map(|r| r.parse::<String>().unwrap()));
    });

    let args = CallArgs::load_state(&message(), &"bench:42".to_owned()).unwrap();
    group("python_bridge/call_many/load_state/small_dict/async_impl", "load_state", &mut || {
        black_box(run(rt.call_many(HookId::LoadState, &args)).unwrap());
    });

    let state = TurnState::new();
    state.set("session_id", "bench:42").unwrap();
    let args = CallArgs::system_prompt(&json!("hello"), &state).unwrap();
    group("python_bridge/call_many_sync/system_prompt/str/sync_impl", "system_prompt", &mut || {
        black_box(rt.call_many_sync(HookId::SystemPrompt, &args).unwrap());
    });

    let call = ToolCall {
        run_id: "run-1".into(),
        tool: "fs.read".into(),
        arguments: bub_abi::Value::from(&json!({"path": "README.md", "limit": 100, "hops": 0})),
        ..Default::default()
    };
    let (out, _) = run(rt.before_tool_call(call.clone(), &state));
    assert_eq!(Value::from(out.arguments.clone())["hops"], 1);
    group("python_bridge/before_tool_call/proceed_args/sync_impl", "before_tool_call", &mut || {
        black_box(run(rt.before_tool_call(call.clone(), &state)));
    });

    let framework = Framework::new(&host, "/bench");
    let turn = || {
        let mut inbound = message();
        run(framework.process_inbound(&mut inbound, false)).unwrap()
    };
    assert_eq!(turn().model_output, "pong");
    group("python_bridge/process_inbound/all_stages", "run_model", &mut || {
        black_box(turn());
    });
}

criterion_group! {
    name = benches;
    config = common::criterion();
    targets = bridge
}
criterion_main!(benches);
