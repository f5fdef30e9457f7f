//! The floor under the dispatch targets: `hooks.rs`'s cases done by plain
//! in-process Rust, with no plugin host at all.
//!
//! Each implementation is a boxed closure in a `Vec` (an `async` one returns
//! a boxed future, polled once, as an in-process async trait does), called
//! in order with Bub's rules. There is no library boundary, no host value,
//! no panic guard, no watchdog, no answer cap. Dict-like values come two
//! ways:
//! - `floor/…`: `serde_json` maps, the insertion-ordered counterpart of
//!   Python's dicts that a Rust host would reach for first;
//! - `floor/lean/…` (the cases that build maps): a list of inline-keyed
//!   entries searched in order, one allocation a map and nothing hashed,
//!   as the host's own small maps are.
//!
//! The ratio Python ÷ lean floor is about the most any host of native
//! plugins can reach on this machine: a ratio target above it is out of
//! reach for every design, ours included; the gap between the floor and
//! `hooks.rs` is what our boundary and our values cost.
//!
//! The case names are `hooks.rs`'s with a `floor/` prefix; `cargo bench -p
//! bub-tests --bench floor` runs them (see BENCHMARKS.md).

mod common;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use futures_util::future::BoxFuture;
use serde_json::{json, Map, Value};
use smol_str::SmolStr;

/// One async implementation: `message` in, a boxed future out.
type AsyncImpl<T> = Box<dyn for<'a> Fn(&'a Value) -> BoxFuture<'a, Option<T>> + Send + Sync>;
/// One sync implementation.
type SyncImpl<T> = Box<dyn Fn(&Value) -> Option<T> + Send + Sync>;

// As `hooks.rs` and the `bub` binary: the same allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn run<F: std::future::Future>(f: F) -> F::Output {
    bub_tests::poll_ready(f)
}

fn message() -> Value {
    json!({"content": "hello", "channel": "bench", "chat_id": "42"})
}

/// `{"plugin": idx, "loaded": true}`, as `LoadStateSync` returns it.
fn loaded(idx: usize) -> Map<String, Value> {
    let mut m = Map::with_capacity(2);
    m.insert("plugin".into(), json!(idx));
    m.insert("loaded".into(), Value::Bool(true));
    m
}

/// The lean floor's values: what the benchmarks' payloads hold.
#[derive(Clone, Debug, PartialEq)]
enum Leaf {
    Int(i64),
    Bool(bool),
    Str(SmolStr),
}

/// The lean floor's map: entries in order, searched in order.
type LeanMap = Vec<(SmolStr, Leaf)>;

fn lean_get<'a>(map: &'a LeanMap, key: &str) -> Option<&'a Leaf> {
    map.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// A copy of `map` with `key` set (replaced in place, else appended).
fn lean_with(map: &LeanMap, key: &str, value: Leaf) -> LeanMap {
    let mut out = Vec::with_capacity(map.len() + 1);
    out.extend(map.iter().cloned());
    match out.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value,
        None => out.push((SmolStr::new_inline(key), value)),
    }
    out
}

fn lean_loaded(idx: usize) -> LeanMap {
    vec![(SmolStr::new_inline("plugin"), Leaf::Int(idx as i64)), (SmolStr::new_inline("loaded"), Leaf::Bool(true))]
}

fn lean_message() -> LeanMap {
    vec![
        (SmolStr::new_inline("content"), Leaf::Str(SmolStr::new_inline("hello"))),
        (SmolStr::new_inline("channel"), Leaf::Str(SmolStr::new_inline("bench"))),
        (SmolStr::new_inline("chat_id"), Leaf::Str(SmolStr::new_inline("42"))),
    ]
}

/// Plugins p0…p(N-1), p(N-1) called first (registration order reversed,
/// as pluggy and `hooks.rs` do).
fn plugins<T>(n: usize, make: impl Fn(usize) -> T) -> Vec<T> {
    (0..n).rev().map(make).collect()
}

fn group<R>(c: &mut Criterion, case: &str, n: usize, mut f: impl FnMut() -> R) {
    let mut g = c.benchmark_group(format!("floor/{case}"));
    g.bench_function(BenchmarkId::from_parameter(n), |b| b.iter(|| black_box(f())));
    g.finish();
}

fn call_first(c: &mut Criterion) {
    let msg = message();
    for n in [10, 100] {
        // All run: only p0, called last, answers.
        let sync: Vec<SyncImpl<String>> = plugins(n, |i| -> SyncImpl<String> {
            let answer = (i == 0).then(|| format!("session-{i}"));
            Box::new(move |_m| answer.clone())
        });
        group(c, "call_first/resolve_session/all_run/sync_impl", n, || sync.iter().find_map(|f| f(&msg)));
        let asynch: Vec<AsyncImpl<String>> = plugins(n, |i| -> AsyncImpl<String> {
            let answer = (i == 0).then(|| format!("session-{i}"));
            Box::new(move |_m| {
                let answer = answer.clone();
                Box::pin(async move { answer })
            })
        });
        group(c, "call_first/resolve_session/all_run/async_impl", n, || asynch.iter().find_map(|f| run(f(&msg))));
    }
}

fn call_many(c: &mut Criterion) {
    let msg = message();
    for n in [10, 100] {
        let sync: Vec<SyncImpl<Map<String, Value>>> =
            plugins(n, |i| -> SyncImpl<Map<String, Value>> { Box::new(move |_m| Some(loaded(i))) });
        group(c, "call_many/load_state/small_dict/sync_impl", n, || sync.iter().map(|f| f(&msg)).collect::<Vec<_>>());
        let asynch: Vec<AsyncImpl<Map<String, Value>>> = plugins(n, |i| -> AsyncImpl<Map<String, Value>> {
            Box::new(move |_m| Box::pin(async move { Some(loaded(i)) }))
        });
        group(c, "call_many/load_state/small_dict/async_impl", n, || {
            asynch.iter().map(|f| run(f(&msg))).collect::<Vec<_>>()
        });
        let sync: Vec<SyncImpl<LeanMap>> =
            plugins(n, |i| -> SyncImpl<LeanMap> { Box::new(move |_m| Some(lean_loaded(i))) });
        group(c, "lean/call_many/load_state/small_dict/sync_impl", n, || {
            sync.iter().map(|f| f(&msg)).collect::<Vec<_>>()
        });
        let asynch: Vec<AsyncImpl<LeanMap>> =
            plugins(n, |i| -> AsyncImpl<LeanMap> { Box::new(move |_m| Box::pin(async move { Some(lean_loaded(i)) })) });
        group(c, "lean/call_many/load_state/small_dict/async_impl", n, || {
            asynch.iter().map(|f| run(f(&msg))).collect::<Vec<_>>()
        });
        let prompt: Vec<SyncImpl<String>> = plugins(n, |i| -> SyncImpl<String> {
            let block = format!("<plugin_{i}>be helpful</plugin_{i}>");
            Box::new(move |_m| Some(block.clone()))
        });
        group(c, "call_many_sync/system_prompt/str/sync_impl", n, || {
            prompt.iter().map(|f| f(&msg)).collect::<Vec<_>>()
        });
    }
}

/// A tool call as the chain passes it on.
#[derive(Clone)]
struct ToolCall {
    tool: String,
    arguments: Map<String, Value>,
}

/// The lean floor's tool call.
#[derive(Clone)]
struct LeanCall {
    tool: SmolStr,
    arguments: LeanMap,
}

/// As [`one_more_hop`], on the lean call.
fn lean_hop(call: &LeanCall) -> Option<LeanMap> {
    let hops = match lean_get(&call.arguments, "hops") {
        Some(Leaf::Int(h)) => *h,
        _ => 0,
    };
    Some(lean_with(&call.arguments, "hops", Leaf::Int(hops + 1)))
}

/// `ToolCallDecision.proceed(arguments=…)`.
enum Decision {
    Proceed(Option<Map<String, Value>>),
}

/// `{**call.arguments, "hops": call.arguments["hops"] + 1}`.
fn one_more_hop(call: &ToolCall) -> Option<Decision> {
    let mut arguments = call.arguments.clone();
    let hops = arguments.get("hops").and_then(Value::as_u64).unwrap_or(0);
    arguments.insert("hops".into(), json!(hops + 1));
    Some(Decision::Proceed(Some(arguments)))
}

fn before_tool_call(c: &mut Criterion) {
    let Value::Object(arguments) = json!({"path": "README.md", "limit": 100, "hops": 0}) else { unreachable!() };
    let call = ToolCall { tool: "fs.read".into(), arguments };
    type Policy = Box<dyn for<'a> Fn(&'a ToolCall) -> BoxFuture<'a, Option<Decision>> + Send + Sync>;
    type SyncPolicy = Box<dyn Fn(&ToolCall) -> Option<Decision> + Send + Sync>;
    for n in [10, 100] {
        let sync: Vec<SyncPolicy> = plugins(n, |_| -> SyncPolicy { Box::new(one_more_hop) });
        group(c, "before_tool_call/proceed_args/sync_impl", n, || {
            let mut call = call.clone();
            for policy in &sync {
                if let Some(Decision::Proceed(Some(arguments))) = policy(&call) {
                    call.arguments = arguments;
                }
            }
            assert_eq!(call.tool, "fs.read");
            call
        });
        let lean = LeanCall {
            tool: SmolStr::new_inline("fs.read"),
            arguments: vec![
                (SmolStr::new_inline("path"), Leaf::Str(SmolStr::new_inline("README.md"))),
                (SmolStr::new_inline("limit"), Leaf::Int(100)),
                (SmolStr::new_inline("hops"), Leaf::Int(0)),
            ],
        };
        type LeanPolicy = Box<dyn Fn(&LeanCall) -> Option<LeanMap> + Send + Sync>;
        let policies: Vec<LeanPolicy> = plugins(n, |_| -> LeanPolicy { Box::new(lean_hop) });
        group(c, "lean/before_tool_call/proceed_args/sync_impl", n, || {
            let mut call = lean.clone();
            for policy in &policies {
                if let Some(arguments) = policy(&call) {
                    call.arguments = arguments;
                }
            }
            assert_eq!(call.tool, "fs.read");
            call
        });
        type LeanAsync = Box<dyn for<'a> Fn(&'a LeanCall) -> BoxFuture<'a, Option<LeanMap>> + Send + Sync>;
        let policies: Vec<LeanAsync> =
            plugins(n, |_| -> LeanAsync { Box::new(|call| Box::pin(async move { lean_hop(call) })) });
        group(c, "lean/before_tool_call/proceed_args/async_impl", n, || {
            let mut call = lean.clone();
            for policy in &policies {
                if let Some(arguments) = run(policy(&call)) {
                    call.arguments = arguments;
                }
            }
            call
        });
        let asynch: Vec<Policy> =
            plugins(n, |_| -> Policy { Box::new(|call| Box::pin(async move { one_more_hop(call) })) });
        group(c, "before_tool_call/proceed_args/async_impl", n, || {
            let mut call = call.clone();
            for policy in &asynch {
                if let Some(Decision::Proceed(Some(arguments))) = run(policy(&call)) {
                    call.arguments = arguments;
                }
            }
            call
        });
    }
}

/// The turn of `process_inbound/model_plus_noops/10`: no resolver (the
/// default id), the state built from the runtime's defaults and 10 async
/// `load_state` no-ops, no prompt builder (the content), an async model,
/// 10 sync `render_outbound` no-ops, then the default outbound.
fn process_inbound(c: &mut Criterion) {
    let n = 10;
    let load_state: Vec<AsyncImpl<Map<String, Value>>> =
        plugins(n, |_| -> AsyncImpl<Map<String, Value>> { Box::new(|_m| Box::pin(async { None })) });
    let render: Vec<SyncImpl<Value>> = plugins(n, |_| -> SyncImpl<Value> { Box::new(|_m| None) });
    let model: AsyncImpl<String> =
        Box::new(|prompt| Box::pin(async move { Some(prompt.as_str().unwrap_or_default().to_owned()) }));
    struct TurnResult {
        _session_id: String,
        _prompt: Value,
        _output: String,
        _outbounds: Vec<Value>,
        _state: Map<String, Value>,
    }
    group(c, "process_inbound/model_plus_noops", n, || {
        let mut inbound = message();
        let field = |m: &Value, k: &str| m.get(k).and_then(Value::as_str).unwrap_or("default").to_owned();
        let session_id = format!("{}:{}", field(&inbound, "channel"), field(&inbound, "chat_id"));
        inbound["session_id"] = Value::String(session_id.clone());
        let mut state = Map::new();
        state.insert("_runtime_workspace".into(), json!("/bench"));
        state.insert("_runtime_channel".into(), inbound["channel"].clone());
        for f in load_state.iter().rev() {
            if let Some(fragment) = run(f(&inbound)) {
                state.extend(fragment);
            }
        }
        let prompt = inbound["content"].clone();
        let output = run(model(&prompt)).unwrap_or_default();
        let mut outbounds: Vec<Value> = render.iter().filter_map(|f| f(&inbound)).collect();
        if outbounds.is_empty() {
            let mut out = json!({"content": output, "session_id": session_id});
            for key in ["channel", "chat_id"] {
                out[key] = inbound[key].clone();
            }
            outbounds.push(out);
        }
        TurnResult { _session_id: session_id, _prompt: prompt, _output: output, _outbounds: outbounds, _state: state }
    });
    // The same turn on lean maps.
    let load_state: Vec<AsyncImpl<LeanMap>> =
        plugins(n, |_| -> AsyncImpl<LeanMap> { Box::new(|_m| Box::pin(async { None })) });
    let render: Vec<SyncImpl<LeanMap>> = plugins(n, |_| -> SyncImpl<LeanMap> { Box::new(|_m| None) });
    let model: AsyncImpl<String> =
        Box::new(|prompt| Box::pin(async move { Some(prompt.as_str().unwrap_or_default().to_owned()) }));
    let unit = Value::Null;
    group(c, "lean/process_inbound/model_plus_noops", n, || {
        let mut inbound = lean_message();
        let field = |m: &LeanMap, k: &str| match lean_get(m, k) {
            Some(Leaf::Str(s)) => s.clone(),
            _ => SmolStr::new_inline("default"),
        };
        let (channel, chat_id) = (field(&inbound, "channel"), field(&inbound, "chat_id"));
        let mut session_id = String::with_capacity(channel.len() + 1 + chat_id.len());
        session_id.push_str(&channel);
        session_id.push(':');
        session_id.push_str(&chat_id);
        inbound.push((SmolStr::new_inline("session_id"), Leaf::Str(SmolStr::new(&session_id))));
        let mut state: LeanMap = Vec::with_capacity(4);
        state.push((SmolStr::new_inline("_runtime_workspace"), Leaf::Str(SmolStr::new_inline("/bench"))));
        state.push((SmolStr::new_inline("_runtime_channel"), Leaf::Str(channel.clone())));
        for f in load_state.iter().rev() {
            if let Some(fragment) = run(f(&unit)) {
                state.extend(fragment);
            }
        }
        let prompt = field(&inbound, "content");
        let output = run(model(&unit)).unwrap_or_else(|| prompt.to_string());
        let mut outbounds: Vec<LeanMap> = render.iter().filter_map(|f| f(&unit)).collect();
        if outbounds.is_empty() {
            outbounds.push(vec![
                (SmolStr::new_inline("content"), Leaf::Str(SmolStr::new(&output))),
                (SmolStr::new_inline("session_id"), Leaf::Str(SmolStr::new(&session_id))),
                (SmolStr::new_inline("channel"), Leaf::Str(channel)),
                (SmolStr::new_inline("chat_id"), Leaf::Str(chat_id)),
            ]);
        }
        (session_id, prompt, output, outbounds, state)
    });
}

criterion_group! {
    name = benches;
    config = common::criterion();
    targets = call_first, call_many, before_tool_call, process_inbound
}
criterion_main!(benches);
