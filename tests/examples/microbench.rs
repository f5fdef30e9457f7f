//! Quick dispatch micro-benchmark (not part of the suite): raw slot calls vs
//! the runtime's call_first, to see where per-implementation time goes.
//! `cargo run --release -p bub-tests --example microbench`

use std::{future::Future, time::Instant};

use abi_stable::std_types::RSlice;
use bub_abi::{
    abi::{DispatchMode, HookCall},
    HookId,
};
use bub_host::{CallArgs, HostBuilder};
use bub_tests::{lib_release, Home};
use serde_json::json;

// As the `bub` binary: the same allocator, so the same costs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The number in variable `name`, else `default`.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn run<F: Future>(f: F) -> F::Output {
    bub_tests::poll_ready(f)
}

fn main() {
    if std::env::args().any(|a| a == "load") {
        return load_only();
    }
    if std::env::args().any(|a| a == "turn") {
        return turn_only();
    }
    if std::env::args().any(|a| a == "tape") {
        return tape_only();
    }
    if std::env::args().any(|a| a == "state" || a == "chain" || a == "prompt") {
        return values_only();
    }
    let n: usize = env_or("PLUGINS", 10);
    let home = Home::new();
    let lib = lib_release("tp-bench");
    for i in 0..n {
        home.install(
            &format!("p{i:03}"),
            &lib,
            json!({"idx": i, "answer": i == 0, "async": std::env::args().any(|a| a == "async")}),
        );
    }
    let host = HostBuilder::new().discovered(&home.search()).build();
    let home = Box::leak(Box::new(home)); // keep the copies for profilers
    let _ = &home;
    let rt = host.runtime();
    let args = CallArgs::resolve_session(&json!({"content": "hello", "channel": "bench", "chat_id": "42"})).unwrap();
    let iters = 2_000_000u32;

    let impls = host.registry().impls(HookId::ResolveSession).to_vec();
    let views = [args.value(0)];
    let mut call = HookCall {
        args: RSlice::from_slice(&views),
        state: abi_stable::std_types::ROption::RNone,
        object: abi_stable::std_types::ROption::RNone,
        mode: DispatchMode::Sync,
        instance: bub_abi::abi::Instance::NONE,
        _payloads: std::marker::PhantomData,
    };
    let t = Instant::now();
    let mut nones = 0u64;
    for _ in 0..iters {
        for imp in &impls {
            let r = imp.invoke(&mut call);
            if r.is_none() {
                nones += 1;
            }
            drop(std::hint::black_box(r));
        }
    }
    println!("raw slot calls: {:.1} ns/impl ({nones})", t.elapsed().as_nanos() as f64 / (iters as f64 * n as f64));

    let t = Instant::now();
    for _ in 0..iters {
        std::hint::black_box(run(rt.call_first(HookId::ResolveSession, &args)).unwrap());
    }
    println!("call_first N={n}: {:.1} ns/dispatch", t.elapsed().as_nanos() as f64 / iters as f64);

    let t = Instant::now();
    for _ in 0..iters {
        std::hint::black_box(rt.call_first_sync(HookId::ResolveSession, &args).unwrap());
    }
    println!("call_first_sync N={n}: {:.1} ns/dispatch", t.elapsed().as_nanos() as f64 / iters as f64);
}

/// `microbench state` / `chain` / `prompt`: `call_many(load_state)`, the
/// `before_tool_call` chain or `call_many_sync(system_prompt)` over
/// `PLUGINS` (10) tp-bench plugins, sync unless `ASYNC` is set, `ITERS`
/// times, in a loop (the plugin copies are kept, so profilers can read
/// their symbols).
fn values_only() {
    let n: usize = env_or("PLUGINS", 10);
    let home = Home::new();
    let lib = lib_release("tp-bench");
    for i in 0..n {
        home.install(
            &format!("p{i:03}"),
            &lib,
            json!({"idx": i, "answer": true, "async": std::env::var("ASYNC").is_ok()}),
        );
    }
    let host = HostBuilder::new().discovered(&home.search()).build();
    let home = Box::leak(Box::new(home));
    let _ = &home;
    let rt = host.runtime();
    let iters: u32 = env_or("ITERS", (2_000_000 / n) as u32);
    let t = Instant::now();
    if std::env::args().any(|a| a == "chain") {
        let call = bub_abi::types::ToolCall {
            run_id: "r".into(),
            tool: "fs.read".into(),
            arguments: bub_abi::Value::from(json!({"path": "README.md", "limit": 100, "hops": 0})),
            ..Default::default()
        };
        let state = bub_abi::TurnState::new();
        for _ in 0..iters {
            std::hint::black_box(run(rt.before_tool_call(call.clone(), &state)));
        }
        println!("before_tool_call N={n}: {:.1} ns/dispatch", t.elapsed().as_nanos() as f64 / iters as f64);
    } else if std::env::args().any(|a| a == "prompt") {
        let state = bub_abi::TurnState::new();
        let args = CallArgs::system_prompt(&json!("hello"), &state).unwrap();
        for _ in 0..iters {
            std::hint::black_box(rt.call_many_sync(HookId::SystemPrompt, &args).unwrap());
        }
        println!("call_many_sync system_prompt N={n}: {:.1} ns/dispatch", t.elapsed().as_nanos() as f64 / iters as f64);
    } else {
        let args = CallArgs::load_state(&json!({"content": "hi"}), &"s".to_owned()).unwrap();
        for _ in 0..iters {
            std::hint::black_box(run(rt.call_many(HookId::LoadState, &args)).unwrap());
        }
        println!("call_many load_state N={n}: {:.1} ns/dispatch", t.elapsed().as_nanos() as f64 / iters as f64);
    }
}

/// `microbench load`: where loading time goes.
#[allow(dead_code)]
fn load_only() {
    let lib = lib_release("tp-bench");
    let home = Home::new();
    for i in 0..100 {
        bub_tests::install_into(&home.path().join("plugins"), &format!("p{i:03}"), &lib, json!({"idx": i}));
    }
    let (mut open, mut header, mut layout, mut rest) = (0u128, 0u128, 0u128, 0u128);
    for dir in home.search().candidates() {
        let path = dir.join("libtp_bench.so");
        let t0 = Instant::now();
        let raw = abi_stable::library::RawLibrary::load_at(&path).unwrap();
        let t1 = Instant::now();
        let h = unsafe { abi_stable::library::lib_header_from_raw_library(&raw) }.unwrap();
        std::mem::forget(raw);
        let t2 = Instant::now();
        let _ = abi_stable::abi_stability::abi_checking::check_layout_compatibility(
            <bub_abi::abi::PluginModRef as abi_stable::StableAbi>::LAYOUT,
            h.layout().unwrap(),
        );
        let t3 = Instant::now();
        let lib = bub_host::loader::open(&path).unwrap();
        bub_host::loader::initialise(&lib, "x", &serde_json::Map::new(), &bub_host::Places::default()).unwrap();
        let t4 = Instant::now();
        open += (t1 - t0).as_micros();
        header += (t2 - t1).as_micros();
        layout += (t3 - t2).as_micros();
        rest += (t4 - t3).as_micros();
    }
    println!(
        "100 plugins: dlopen {open} us, header {header} us, layout check {layout} us, open again + init {rest} us"
    );
    let home2 = Home::new();
    for i in 0..100 {
        bub_tests::install_into(&home2.path().join("plugins"), &format!("p{i:03}"), &lib, json!({"idx": i}));
    }
    let t = Instant::now();
    let host = HostBuilder::new().discovered(&home2.search()).build();
    println!("loaded {} plugins in {:?}", host.registry().plugins().len(), t.elapsed());
    Box::leak(Box::new(home2));
    Box::leak(Box::new(home));
}

/// `process_inbound/model_plus_noops/10` in a loop, for a profiler
/// (`perf record -g target/release/examples/microbench turn`).
fn turn_only() {
    let home = Home::new();
    // MAIN=tp-allstages for all_stages_plus_noops; STREAM=1 for the stream case.
    let main = std::env::var("MAIN").unwrap_or_else(|_| "echo-model".into());
    let stream = std::env::var("STREAM").is_ok();
    home.install("0-model", &lib_release(&main), json!({"prefix": ""}));
    let n: usize = env_or("NOOPS", 10);
    for i in 0..n {
        home.install(&format!("noop{i:03}"), &lib_release("tp-noop"), json!({}));
    }
    let host = HostBuilder::new().discovered(&home.search()).build();
    let framework = bub_host::framework::Framework::new(&host, "/bench");
    let iters: u32 = env_or("ITERS", 300_000);
    let t = Instant::now();
    for _ in 0..iters {
        let mut inbound = json!({"content": "hello", "channel": "bench", "chat_id": "42"});
        std::hint::black_box(run(framework.process_inbound(&mut inbound, stream)).unwrap());
    }
    println!("process_inbound model+{n} noops: {:.0} ns/turn", t.elapsed().as_nanos() as f64 / iters as f64);
    Box::leak(Box::new(home));
}

/// The first read of a tape of `ENTRIES` (1,000) lines, `ITERS` (200) times,
/// each by a new store (nothing parsed before): what starting an agent run
/// on a long session costs before its first step (`agent_bench`'s lines).
fn tape_only() {
    use bub_abi::resources::TapeStore as _;
    let entries: usize = env_or("ENTRIES", 1000);
    let iters: u32 = env_or("ITERS", 200);
    let dir = tempfile::tempdir().unwrap();
    let body: String = (1..=entries).map(bub_tests::prefill_line).collect();
    std::fs::write(dir.path().join("t.jsonl"), body).unwrap();
    let query = bub_abi::types::TapeQuery { tape: "t".into(), ..Default::default() };
    let t = Instant::now();
    for _ in 0..iters {
        let store = bub_host::builtin::tape_store::FileTapeStore::new(dir.path());
        std::hint::black_box(run(store.fetch_all_answer(query.clone())).unwrap());
    }
    println!("first read of {entries} lines: {:.1} us", t.elapsed().as_nanos() as f64 / iters as f64 / 1000.0);
}
