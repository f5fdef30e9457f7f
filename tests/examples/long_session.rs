//! A long session in one gateway (`scripts/long-session.sh`; a benchmark,
//! not a timed test): one `bub gateway` (release) with the `http-channel`
//! plugin and the builtin agent, on a model served on loopback that
//! answers every turn with a short text (and a fold's summary call with a
//! fixed 500-byte summary), reporting its usage as one token per four
//! bytes of the request. One session gets TURNS messages (10,000 by
//! default), each sent when the last was answered.
//!
//! Every 1,000 turns it prints the gateway's CPU time per turn in that
//! block, its resident and peak memory, the largest request the model
//! saw in the block, and the folds so far. Whether the context is folded
//! is the gateway's setting (`BUB_CONTEXT_BUDGET_TOKENS`, passed through);
//! `BUB_LOAD_BIN=path/to/bub` runs another build, to compare commits.
//!
//! `cargo run --release -p bub-tests --example long_session [TURNS]`

use std::{
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc,
    },
    time::Instant,
};

use bub_tests::{
    bub_bin_release,
    gateway::GatewayProcess,
    install_into, lib_release,
    provider::{chat, Provider},
};
use serde_json::{json, Value};

/// The summary a fold's call gets: about 500 bytes.
const SUMMARY: &str =
    "The user has been sending numbered turns, each a line of filler text, and I have noted each one. \
Nothing else was asked: no tools were used, no decisions were made, no facts were given beyond the turn numbers. \
Work still open: none. The last exchange: the user sent the latest numbered turn, and I answered that I noted it. \
Keep noting the turns the same way, briefly, and keep the count.";

/// The process's CPU time so far, user and system, in ms (`/proc/<pid>/stat`,
/// 10 ms ticks: exact enough over a block of 1,000 turns, and it counts
/// threads that have ended).
fn cpu_ms(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    // Fields 14 and 15 of the line, counted after the command's `)`.
    (ticks(11) + ticks(12)) * 10
}

/// `VmRSS` and `VmHWM` of `pid`, in MB.
fn memory_mb(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (kb("VmRSS:") / 1024.0, kb("VmHWM:") / 1024.0)
}

fn main() {
    let turns: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let (largest, folds) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicUsize::new(0)));
    let (l, f) = (largest.clone(), folds.clone());
    let provider = Provider::respond_forgetting(move |request| {
        let bytes = request.header("content-length").and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
        l.fetch_max(bytes, Ordering::SeqCst);
        let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
        let tokens = bytes / 4;
        if messages.first().is_some_and(|m| m["content"] == bub_host::agent::fold::SUMMARY_PROMPT) {
            f.fetch_add(1, Ordering::SeqCst);
            return chat::text_counted(SUMMARY, tokens);
        }
        chat::text_counted("Noted.", tokens)
    });
    let home = tempfile::tempdir().unwrap();
    install_into(
        &home.path().join("plugins"),
        "http-channel",
        &lib_release("http-channel"),
        json!({"bind": "127.0.0.1:0", "token": "long"}),
    );
    let bin = std::env::var_os("BUB_LOAD_BIN").map_or_else(bub_bin_release, std::path::PathBuf::from);
    let budget = std::env::var("BUB_CONTEXT_BUDGET_TOKENS").ok();
    let mut env = vec![("BUB_MODEL", "openai:m".to_owned()), ("BUB_API_BASE", provider.base_url.clone())];
    env.push(("OPENAI_API_KEY", "none".into()));
    if let Some(b) = &budget {
        env.push(("BUB_CONTEXT_BUDGET_TOKENS", b.clone()));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut gateway = GatewayProcess::start_bin(&bin, home.path(), &[], &env);
    let base = gateway.address(home.path(), "http-channel");
    let pid = gateway.pid().expect("the gateway runs");
    println!("long session: {turns} turns, budget {}", budget.as_deref().unwrap_or("(the binary's default)"));

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = reqwest::Client::new();
        let filler = "a line of filler text that stands for what a user says in one message of a chat; ".repeat(2);
        let (mut cpu, mut started) = (cpu_ms(pid), Instant::now());
        for k in 0..turns {
            let body = json!({"content": format!("turn {k}: {filler}"), "session_id": "long"});
            let response = client
                .post(format!("{base}/v1/messages"))
                .bearer_auth("long")
                .json(&body)
                .send()
                .await
                .expect("request");
            assert_eq!(response.status().as_u16(), 200, "turn {k}");
            let reply: Value = response.json().await.expect("JSON reply");
            assert_eq!(reply["reply"], "Noted.", "turn {k}: {reply}");
            if (k + 1) % 1000 == 0 {
                let now = cpu_ms(pid);
                let (rss, peak) = memory_mb(pid);
                println!(
                    "turns {:>5}-{:>5}: gateway cpu/turn {:>6.2} ms, wall/turn {:>6.2} ms, rss {rss:.0} MB, peak {peak:.0} MB, \
                     largest request {:>5} KB, folds so far {}",
                    k + 1 - 1000,
                    k,
                    (now - cpu) as f64 / 1000.0,
                    started.elapsed().as_secs_f64(),
                    largest.swap(0, Ordering::SeqCst) / 1024,
                    folds.load(Ordering::SeqCst),
                );
                (cpu, started) = (now, Instant::now());
            }
        }
    });
    gateway.signal("TERM");
    let _ = gateway.wait(std::time::Duration::from_secs(30));
}
