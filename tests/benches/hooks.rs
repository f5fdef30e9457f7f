//! Dispatch and loading benchmarks, case for case with `bench/python/hook_bench.py`.
//!
//! Every implementation lives in a real release-built cdylib (`tp-bench`),
//! loaded through the real loader; N copies are N libraries. As in the Python
//! harness: N plugins p0…p(N-1) registered in order (p(N-1) runs first), one
//! checked call before timing, and after timing every plugin's call counter
//! must equal the calls made times the expected pattern. Results are made
//! usable inside the timed loop (JSON replies parsed), as Python's are objects.
//! `scripts/bench.sh` turns criterion's estimates into hook_bench.py's JSON lines.

mod common;

use bub_host::WithBuiltin as _;
use std::{
    future::Future,
    hint::black_box,
    time::{Duration, Instant},
};

use bub_abi::{
    types::{StateMap, ToolCall},
    HookId, TurnState,
};
use bub_host::{CallArgs, Host, HostBuilder, PluginStatus, Runtime};
use bub_tests::{install_into, lib_release, Home};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode};
use serde_json::{json, Value};

// As the `bub` binary: the host's values are allocated by the allocator
// `bub` runs with (the plugins' own allocations by theirs, as in `bub`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Drives a future that never really waits (every hook here finishes at once),
/// like one coroutine on one event loop in the Python harness.
fn run<F: Future>(f: F) -> F::Output {
    bub_tests::poll_ready(f)
}

struct Setup {
    _home: Home,
    host: Host,
    rt: Runtime,
    n: usize,
}

fn setup(n: usize, answer: impl Fn(usize) -> bool, is_async: bool) -> Setup {
    let home = Home::new();
    let lib = lib_release("tp-bench");
    for i in 0..n {
        home.install(&format!("p{i:03}"), &lib, json!({"idx": i, "answer": answer(i), "async": is_async}));
    }
    let host = HostBuilder::new().discovered(&home.search()).build();
    assert!(host.registry().plugins().iter().all(|p| p.status == PluginStatus::Loaded));
    let rt = host.runtime();
    Setup { _home: home, host, rt, n }
}

impl Setup {
    /// Per-plugin call counters, indexed by plugin idx.
    fn counts(&self) -> Vec<u64> {
        let out = self
            .rt
            .call_many_sync(HookId::OnboardConfig, &CallArgs::onboard_config(&StateMap::new()).unwrap())
            .unwrap();
        let mut counts = vec![0; self.n];
        for r in out.iter().flatten() {
            let v: Value = r.parse().unwrap();
            counts[v["idx"].as_u64().unwrap() as usize] = v["calls"].as_u64().unwrap();
        }
        counts
    }

    /// Times `call`; checks its result once first, then the call counts.
    fn bench<R>(
        &self,
        c: &mut Criterion,
        case: &str,
        ran: impl Fn(usize) -> bool,
        call: impl Fn(&Runtime) -> R,
        check: impl Fn(&R),
    ) {
        let before = self.counts();
        check(&call(&self.rt));
        let mut made = 1u64;
        let mut group = c.benchmark_group(case);
        group.bench_function(BenchmarkId::from_parameter(self.n), |b| {
            b.iter(|| {
                made += 1;
                black_box(call(&self.rt))
            })
        });
        group.finish();
        let after = self.counts();
        for i in 0..self.n {
            let expected = if ran(i) { made } else { 0 };
            assert_eq!(
                after[i] - before[i],
                expected,
                "{case} N={}: plugin {i} ran {} times",
                self.n,
                after[i] - before[i]
            );
        }
        let _ = &self.host;
    }
}

fn message() -> Value {
    json!({"content": "hello", "channel": "bench", "chat_id": "42"})
}

fn call_first(c: &mut Criterion) {
    for n in [1, 10, 100] {
        let args = CallArgs::resolve_session(&message()).unwrap();
        for (case, is_async) in [
            ("call_first/resolve_session/all_run/sync_impl", false),
            ("call_first/resolve_session/all_run/async_impl", true),
        ] {
            let s = setup(n, |i| i == 0, is_async);
            s.bench(
                c,
                case,
                |_| true,
                |rt| run(rt.call_first(HookId::ResolveSession, &args)).unwrap().map(|r| r.parse::<String>().unwrap()),
                |r| assert_eq!(r.as_deref(), Some("session-0")),
            );
        }
        let s = setup(n, |_| true, false);
        s.bench(
            c,
            "call_first/resolve_session/first_answers/sync_impl",
            |i| i == n - 1,
            |rt| run(rt.call_first(HookId::ResolveSession, &args)).unwrap().map(|r| r.parse::<String>().unwrap()),
            |r| assert_eq!(r.as_deref(), Some(format!("session-{}", n - 1).as_str())),
        );
        let s = setup(n, |i| i == 0, false);
        s.bench(
            c,
            "call_first_sync/resolve_session/all_run/sync_impl",
            |_| true,
            |rt| rt.call_first_sync(HookId::ResolveSession, &args).unwrap().map(|r| r.parse::<String>().unwrap()),
            |r| assert_eq!(r.as_deref(), Some("session-0")),
        );
    }
}

fn call_many(c: &mut Criterion) {
    for n in [1, 10, 100] {
        let args = CallArgs::load_state(&message(), &"bench:42".to_owned()).unwrap();
        for (case, is_async) in
            [("call_many/load_state/small_dict/async_impl", true), ("call_many/load_state/small_dict/sync_impl", false)]
        {
            let expected: Vec<Value> = (0..n).rev().map(|i| json!({"plugin": i, "loaded": true})).collect();
            let s = setup(n, |_| true, is_async);
            // As Python's call_many: the values as the plugins produced them.
            s.bench(
                c,
                case,
                |_| true,
                |rt| run(rt.call_many(HookId::LoadState, &args)).unwrap(),
                |r| {
                    let got: Vec<Value> = r.iter().map(|r| r.as_ref().unwrap().parse().unwrap()).collect();
                    assert_eq!(got, expected);
                },
            );
            // The same, with every value parsed into a serde_json map (what a
            // consumer merging them pays on top).
            s.bench(
                c,
                &format!("{case}+parse"),
                |_| true,
                |rt| {
                    let out = run(rt.call_many(HookId::LoadState, &args)).unwrap();
                    out.iter().map(|r| r.as_ref().unwrap().parse::<StateMap>().unwrap()).collect::<Vec<_>>()
                },
                |r| {
                    assert_eq!(r.iter().map(|m| Value::Object(m.clone())).collect::<Vec<_>>(), expected);
                },
            );
        }
        let state = TurnState::new();
        state.set("session_id", "bench:42").unwrap();
        let args = CallArgs::system_prompt(&json!("hello"), &state).unwrap();
        let s = setup(n, |_| true, false);
        let expected: Vec<String> = (0..n).rev().map(|i| format!("<plugin_{i}>be helpful</plugin_{i}>")).collect();
        s.bench(
            c,
            "call_many_sync/system_prompt/str/sync_impl",
            |_| true,
            |rt| rt.call_many_sync(HookId::SystemPrompt, &args).unwrap(),
            |r| {
                let got: Vec<String> = r.iter().map(|r| r.as_ref().unwrap().parse().unwrap()).collect();
                assert_eq!(got, expected);
            },
        );
        s.bench(
            c,
            "call_many_sync/system_prompt/str/sync_impl+parse",
            |_| true,
            |rt| {
                let out = rt.call_many_sync(HookId::SystemPrompt, &args).unwrap();
                out.iter().map(|r| r.as_ref().unwrap().parse::<String>().unwrap()).collect::<Vec<_>>()
            },
            |r| assert_eq!(r, &expected),
        );
    }
}

/// The chain case of hook_bench.py, plus `large_args` and `large_list`: the
/// same chain with a 100 KB string, or a list of 10,000 numbers, in the
/// arguments that no plugin reads (no Python twin; they show what an unread
/// payload costs per implementation).
fn before_tool_call(c: &mut Criterion) {
    let large = "x".repeat(100 * 1024);
    for n in [1, 10, 100] {
        let small = json!({"path": "README.md", "limit": 100, "hops": 0});
        let big = json!({"path": "README.md", "limit": 100, "hops": 0, "content": large});
        let list = json!({"path": "README.md", "limit": 100, "hops": 0, "lines": (0..10_000).collect::<Vec<u32>>()});
        let state = TurnState::new();
        state.set("session_id", "bench:42").unwrap();
        for (case, is_async, arguments) in [
            ("before_tool_call/proceed_args/async_impl", true, &small),
            ("before_tool_call/proceed_args/sync_impl", false, &small),
            ("before_tool_call/proceed_args/large_args", false, &big),
            ("before_tool_call/proceed_args/large_list", false, &list),
        ] {
            // The agent holds tool arguments as a host value (parsed once
            // from the model's answer); building it is not part of a dispatch.
            let call = ToolCall {
                run_id: "run-1".into(),
                tool: "fs.read".into(),
                arguments: bub_abi::Value::from(arguments),
                ..Default::default()
            };
            let mut expected = arguments.clone();
            expected["hops"] = json!(n);
            let s = setup(n, |_| true, is_async);
            s.bench(
                c,
                case,
                |_| true,
                |rt| run(rt.before_tool_call(call.clone(), &state)),
                |(out, decision)| {
                    assert_eq!(Value::from(out.arguments.clone()), expected);
                    assert_eq!(decision.action, bub_abi::types::ToolAction::Proceed);
                },
            );
        }
    }
}

/// Loading N plugins: dlopen + ABI checks + constructor + registration, per
/// batch of N, each batch from fresh files (a library is loaded once per
/// process; the copies are made outside the timed region).
fn loading(c: &mut Criterion) {
    let lib = lib_release("tp-bench");
    let mut group = c.benchmark_group("register/noop_plugin");
    group.sampling_mode(SamplingMode::Flat).sample_size(10).warm_up_time(Duration::from_millis(50));
    group.measurement_time(Duration::from_millis(200));
    for n in [10usize, 100] {
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let home = Home::new();
                    for i in 0..n {
                        install_into(&home.path().join("plugins"), &format!("p{i:03}"), &lib, json!({"idx": i}));
                    }
                    let search = home.search();
                    let start = Instant::now();
                    let host = HostBuilder::new().discovered(&search).build();
                    total += start.elapsed();
                    assert_eq!(host.registry().impls(HookId::LoadState).len(), n);
                    assert!(host.registry().plugins().iter().all(|p| p.status == PluginStatus::Loaded));
                }
                total
            })
        });
    }
    group.finish();
    c.bench_function("plugin_manager/new+add_hookspecs/0", |b| {
        b.iter(|| black_box(HostBuilder::new().builtin().build()))
    });
}

/// One `process_inbound` turn, as hook_bench.py's `process_inbound/*`
/// cases: a main plugin registered first plus N no-op plugins (async
/// load_state, sync render_outbound, both None); a fresh envelope per turn.
/// Main plugins: echo-model (`model_plus_noops`, text and stream: the
/// framework's fallbacks do session, prompt and outbound) and tp-allstages
/// (`all_stages_plus_noops`: every stage implemented, sync/async as Bub's
/// builtin).
fn process_inbound(c: &mut Criterion) {
    use bub_host::framework::Framework;
    let cases = [
        ("process_inbound/model_plus_noops", "echo-model", false),
        ("process_inbound/all_stages_plus_noops", "tp-allstages", false),
        ("process_inbound/stream/model_plus_noops", "echo-model", true),
    ];
    for (case, main, stream) in cases {
        let mut group = c.benchmark_group(case);
        for n in [0usize, 10] {
            let home = Home::new();
            let plugins = home.path().join("plugins");
            bub_tests::install_into(&plugins, "0-main", &lib_release(main), json!({"prefix": ""}));
            for i in 0..n {
                bub_tests::install_into(&plugins, &format!("noop{i:03}"), &lib_release("tp-noop"), json!({}));
            }
            let host = HostBuilder::new().discovered(&home.search()).build();
            assert!(host.registry().plugins().iter().all(|p| p.status == PluginStatus::Loaded));
            let framework = Framework::new(&host, "/bench");
            // Every plugin's call counts, through onboard_config (untimed).
            let counts = || -> Vec<Value> {
                let args = CallArgs::onboard_config(&StateMap::new()).unwrap();
                let replies = host.runtime().call_many_sync(HookId::OnboardConfig, &args).unwrap();
                replies.iter().flatten().map(|r| r.parse::<Value>().unwrap()).collect()
            };
            let turn = || {
                let mut inbound = json!({"content": "hello", "channel": "bench", "chat_id": "42"});
                run(framework.process_inbound(&mut inbound, stream)).unwrap()
            };
            let before = counts();
            let first = turn();
            let output = if main == "tp-allstages" { "pong" } else { "hello" };
            assert_eq!(first.model_output, output);
            assert_eq!(first.session_id, "bench:42");
            assert_eq!(first.prompt, [json!("hello")]);
            let outbound = json!({"content": output, "session_id": "bench:42", "channel": "bench", "chat_id": "42"});
            assert_eq!(first.outbounds, [outbound]);
            let mut made = 1u64;
            group.bench_function(BenchmarkId::from_parameter(n), |b| {
                b.iter(|| {
                    made += 1;
                    black_box(turn())
                })
            });
            // Every implemented stage of every plugin ran exactly once per turn.
            for (b, a) in before.iter().zip(counts()) {
                for (k, v) in a.as_object().unwrap() {
                    let ran = v.as_u64().unwrap() - b[k].as_u64().unwrap();
                    assert_eq!(ran, made, "{case} N={n}: {k} ran {ran} times in {made} turns");
                }
            }
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = common::criterion();
    targets = call_first, call_many, before_tool_call, loading, process_inbound
}
criterion_main!(benches);
