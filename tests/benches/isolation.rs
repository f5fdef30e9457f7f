//! What isolation costs: the same hook call to the same release-built
//! `tp-bench` library, loaded in process and isolated (in a child `bub`
//! process, over its socket), side by side. Reported in BENCHMARKS.md.
//!
//! Both run on a current-thread tokio runtime (an isolated call really
//! waits for its answer, so it cannot be polled by hand as the dispatch
//! benchmarks do).

mod common;

use std::hint::black_box;

use bub_abi::{HookId, TurnState};
use bub_host::{CallArgs, Host, HostBuilder, PluginStatus, RuntimeSettings};
use bub_tests::{bub_bin_release, lib_release, Home};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use serde_json::json;

fn host(home: &Home, isolated: bool, is_async: bool) -> Host {
    home.install("p000", &lib_release("tp-bench"), json!({"idx": 0, "answer": true, "async": is_async}));
    if isolated {
        home.isolate("p000", json!({"enabled": true}));
    }
    let settings = RuntimeSettings { plugin_runner: Some(bub_bin_release()), ..Default::default() };
    let host = HostBuilder::new().settings(settings).home(home.path()).discovered(&home.search()).build();
    assert!(host.registry().plugins().iter().all(|p| p.status == PluginStatus::Loaded));
    host
}

fn isolation(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for (mode, isolated) in [("in_process", false), ("isolated", true)] {
        for (case, is_async) in [("resolve_session/sync_impl", false), ("resolve_session/async_impl", true)] {
            let home = Home::new();
            let host = host(&home, isolated, is_async);
            let runtime = host.runtime();
            for size in [16usize, 65_536] {
                let message = json!({"content": "x".repeat(size), "channel": "bench", "chat_id": "42"});
                let args = CallArgs::resolve_session(&message).unwrap();
                let mut group = c.benchmark_group(format!("{mode}/{case}/content_bytes"));
                group.bench_function(BenchmarkId::from_parameter(size), |b| {
                    b.iter(|| black_box(rt.block_on(runtime.call_first(HookId::ResolveSession, &args)).unwrap()))
                });
                group.finish();
            }
        }
        // A sync hook with the live turn state (`system_prompt`).
        let home = Home::new();
        let host = host(&home, isolated, false);
        let runtime = host.runtime();
        let state = TurnState::new();
        let args = CallArgs::system_prompt(&json!("p"), &state).unwrap();
        c.bench_function(&format!("{mode}/call_many_sync/system_prompt/1"), |b| {
            b.iter(|| black_box(runtime.call_many_sync(HookId::SystemPrompt, &args).unwrap()))
        });
    }
}

criterion_group! {
    name = benches;
    config = common::criterion();
    targets = isolation
}
criterion_main!(benches);
