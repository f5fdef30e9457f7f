//! The gateway load test (`scripts/gateway-load.sh`; a benchmark, not a
//! timed test): one `bub gateway` (release) with the `http-channel` plugin
//! and the builtin agent's offline echo model; 1,000 messages over 100
//! sessions, all sent concurrently (each session's messages 10 ms apart,
//! none waiting for a reply). Checks that
//!
//! - every message gets exactly one reply, its own (the echo ends with it);
//! - per session, turns run in the order the messages reached the gateway
//!   (the channel numbers requests as it receives them, `_http_seq`; two
//!   requests 10 ms apart may still overtake each other on the wire, which
//!   is counted, not failed);
//! - no turn of a session overlaps another of the same session (the
//!   channel's `follow_up` admission): a traced plugin records each turn's
//!   `load_state` (start) and `save_state` (end), which must alternate;
//!
//! and reports throughput, p50/p99 latency (request sent → reply) and the
//! gateway's CPU time during the load (its threads' `schedstat`).
//!
//! With `PREFILL_TURNS=N`, every session first holds N turns, sent through
//! the gateway one after another per session (all sessions at once) and
//! not measured: the load then meets sessions with long tapes, as a
//! gateway that has run for a while does (throughput on 100-turn
//! sessions against fresh ones).
//!
//! `cargo run --release -p bub-tests --example gateway_load [MESSAGES] [SESSIONS]`
//! (`BUB_LOAD_BIN=path/to/bub` runs another build of `bub`, to compare two
//! commits back to back, or a script that runs it under
//! `perf record -D -1 --control fifo:$PERF_CTL`: the load alone is sampled).

use std::time::{Duration, Instant};

use bub_tests::{bub_bin_release, gateway::GatewayProcess, install_into, lib_release};
use serde_json::{json, Value};

/// Sends `content` to session `load-<s>` and returns the reply's body.
async fn send(client: &reqwest::Client, base: &str, s: usize, content: &str) -> Value {
    let response = client
        .post(format!("{base}/v1/messages"))
        .bearer_auth("load")
        .json(&json!({"content": content, "session_id": format!("load-{s}")}))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status().as_u16(), 200, "{content}");
    response.json().await.expect("JSON reply")
}

fn main() {
    let messages: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let sessions: usize = std::env::args().nth(2).and_then(|a| a.parse().ok()).unwrap_or(100);
    let per_session = messages / sessions;
    let home = tempfile::tempdir().unwrap();
    let plugins = home.path().join("plugins");
    install_into(
        &plugins,
        "http-channel",
        &lib_release("http-channel"),
        // Every message is its own client connection, all open at once:
        // above the channel's default cap of 256 (which answers 503).
        json!({"bind": "127.0.0.1:0", "token": "load", "max_connections": messages + sessions}),
    );
    let trace = home.path().join("trace.log");
    install_into(
        &plugins,
        "turn-trace",
        &lib_release("tp-scripted"),
        json!({"trace": trace, "hooks": {
            "load_state": {"trace_arg": 0, "return": null},
            "save_state": {"trace_arg": 0, "return": null},
        }}),
    );
    let bin = std::env::var_os("BUB_LOAD_BIN").map_or_else(bub_bin_release, std::path::PathBuf::from);
    let mut gateway = GatewayProcess::start_bin(&bin, home.path(), &[], &[]);
    let base = gateway.address(home.path(), "http-channel");

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let prefill: usize = std::env::var("PREFILL_TURNS").ok().and_then(|n| n.parse().ok()).unwrap_or(0);
    rt.block_on(async {
        let client = reqwest::Client::builder().pool_max_idle_per_host(sessions * 2).build().unwrap();
        let tasks: Vec<_> = (0..sessions)
            .map(|s| {
                let (client, base) = (client.clone(), base.clone());
                tokio::spawn(async move {
                    for k in 0..prefill {
                        send(&client, &base, s, &format!("s{s}-earlier{k}")).await;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("a prefill task");
        }
    });
    // A `perf record` around the gateway (through `BUB_LOAD_BIN`) samples
    // the measured load only.
    bub_tests::perf_enable();
    // The gateway's CPU time (all its threads, user and system) spent on
    // the load alone: steadier than throughput, which the load's own
    // concurrency bounds as much as the gateway does.
    let cpu_before = gateway.pid().map(thread_cpu);
    let started = Instant::now();
    let latencies: Vec<(String, Duration)> = rt.block_on(async {
        let client = reqwest::Client::builder().pool_max_idle_per_host(sessions * 2).build().unwrap();
        let mut tasks = Vec::new();
        for s in 0..sessions {
            for k in 0..per_session {
                let (client, base) = (client.clone(), base.clone());
                tasks.push(tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(10 * k as u64)).await;
                    let content = format!("s{s}-m{k}");
                    let sent = Instant::now();
                    let body = send(&client, &base, s, &content).await;
                    let reply = body["reply"].as_str().unwrap_or_default();
                    assert!(reply.ends_with(&content), "{content} got someone else's reply: {body}");
                    (content, sent.elapsed())
                }));
            }
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.expect("a request task"));
        }
        out
    });
    let wall = started.elapsed();
    let cpu = gateway.pid().map(thread_cpu).zip(cpu_before).map(|(after, before)| cpu_between(&before, &after));
    // The gateway's peak memory (VmHWM), read before it stops.
    let peak_kb: u64 = gateway
        .pid()
        .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        .unwrap_or(0);
    gateway.signal("TERM");
    let status = gateway.wait(Duration::from_secs(60)).expect("the gateway stops");
    assert!(status.success(), "{}", gateway.log());

    // Exactly one reply per message.
    let mut seen: Vec<&String> = latencies.iter().map(|(c, _)| c).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), messages, "replies: {} distinct of {messages}", seen.len());

    // Per session: alternating start/end, in sending order.
    let text = std::fs::read_to_string(&trace).unwrap();
    let mut by_session: std::collections::HashMap<String, Vec<(String, String)>> = Default::default();
    for line in text.lines() {
        // turn-trace:<hook>:<json argument>
        let mut parts = line.splitn(3, ':');
        let (_, hook, arg) = (parts.next(), parts.next().unwrap_or_default(), parts.next().unwrap_or("null"));
        let arg: Value = serde_json::from_str(arg).unwrap_or_else(|e| panic!("{e}: {line}"));
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let (session, content) = match hook {
            "load_state" => (
                text(&arg["session_id"]),
                arg["context"]["_http_seq"].to_string() + " " + arg["content"].as_str().unwrap_or_default(),
            ),
            "save_state" => (text(&arg), String::new()),
            _ => continue,
        };
        let session = session.unwrap_or_else(|| panic!("no session in {line}"));
        by_session.entry(session).or_default().push((hook.to_owned(), content));
    }
    assert_eq!(by_session.len(), sessions);
    let mut overtaken = 0;
    for (session, calls) in &by_session {
        let hooks: Vec<&str> = calls.iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(hooks, ["load_state", "save_state"].repeat(per_session + prefill), "{session}: turns overlapped");
        // Turns in the order the messages reached the gateway.
        let turns: Vec<(u64, &str)> = calls
            .iter()
            .filter(|(h, _)| h == "load_state")
            .skip(prefill)
            .map(|(_, c)| {
                let (seq, content) = c.split_once(' ').unwrap();
                (seq.parse().unwrap_or_else(|_| panic!("no _http_seq in {c}")), content)
            })
            .collect();
        assert!(turns.windows(2).all(|w| w[0].0 < w[1].0), "{session}: turns out of arrival order: {turns:?}");
        // Sent 10 ms apart, they usually arrive in sending order too.
        let s = session.trim_start_matches("load-");
        let sent: Vec<String> = (0..per_session).map(|k| format!("s{s}-m{k}")).collect();
        if turns.iter().map(|t| t.1).ne(sent.iter().map(String::as_str)) {
            overtaken += 1;
        }
    }

    let mut times: Vec<Duration> = latencies.iter().map(|(_, d)| *d).collect();
    times.sort();
    let pct = |p: f64| times[((times.len() as f64 * p).ceil() as usize).saturating_sub(1)];
    println!(
        "gateway load: {messages} messages over {sessions} sessions (holding {prefill} turns each before) in {:.2} s = {:.0} messages/s; \
         latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; gateway CPU {} ms ({} µs a message), peak RSS {:.1} MB; every message one reply, \
         turns in arrival order, no overlapping turns ({overtaken} sessions had a request overtaken on the wire)",
        wall.as_secs_f64(),
        messages as f64 / wall.as_secs_f64(),
        pct(0.50).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        times.last().unwrap().as_secs_f64() * 1e3,
        cpu.map_or("?".into(), |ns| format!("{:.1}", ns as f64 / 1e6)),
        cpu.map_or("?".into(), |ns| (ns / 1000 / messages as u64).to_string()),
        peak_kb as f64 / 1024.0,
    );
}

/// Each thread of process `pid` with the CPU time it has run, in ns
/// (`/proc/<pid>/task/<tid>/schedstat`: exact, where `/proc/<pid>/stat`
/// counts 10 ms ticks).
fn thread_cpu(pid: u32) -> std::collections::HashMap<String, u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    tasks
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            Some((t.file_name().to_string_lossy().into_owned(), stat.split_whitespace().next()?.parse().ok()?))
        })
        .collect()
}

/// The CPU time the gateway's threads ran between two [`thread_cpu`]
/// readings: a thread started meanwhile counts whole; one that ended
/// meanwhile is not seen (tokio's blocking threads outlive the load).
fn cpu_between(before: &std::collections::HashMap<String, u64>, after: &std::collections::HashMap<String, u64>) -> u64 {
    after.iter().map(|(tid, ns)| ns - before.get(tid).copied().unwrap_or(0).min(*ns)).sum()
}
