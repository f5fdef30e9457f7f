//! Quick dispatch micro-benchmark (not part of the suite): raw slot calls vs
//! the runtime's call_first, to see where per-implementation time goes.
//! `cargo run --release -p bub-tests --example microbench`

use std::{
    future::Future,
    pin::pin,
    task::{Context, Poll, Waker},
    time::Instant,
};

use abi_stable::std_types::{RSlice, RStr};
use bub_abi::{
    abi::{DispatchMode, HookCall, HookReturn},
    HookId,
};
use bub_host::{CallArgs, HostBuilder};
use bub_tests::{lib_release, Home};
use serde_json::json;

fn run<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fn main() {
    let n = 10;
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
    let msg = args.json(0).to_owned();
    let views = [RStr::from_str(&msg)];
    let call = HookCall {
        args: RSlice::from_slice(&views),
        state: abi_stable::std_types::ROption::RNone,
        object: abi_stable::std_types::ROption::RNone,
        mode: DispatchMode::Sync,
    };
    let t = Instant::now();
    let mut nones = 0u64;
    for _ in 0..iters {
        for imp in &impls {
            match (imp.call)(&call) {
                HookReturn::Ready(bub_abi::abi::HookResult::None) => nones += 1,
                other => drop(std::hint::black_box(other)),
            }
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
