//! The agent benchmark, Rust side (`scripts/agent-bench.sh` runs both sides
//! back to back): the builtin agent with 10 installed no-op plugins (the
//! four interception hooks) runs 5-step runs (one `fs_read` call per step,
//! then a text step) against `scripts/scripted_provider.py` in another
//! process; reports this process's CPU time per step, i.e. everything
//! except waiting for the provider. Also: the resident memory of a
//! 1,000-entry tape read back as the model's context.
//!
//! With `TAPE_ENTRIES=N`, every run's session tape already holds N entries
//! (an anchor then user/assistant messages, the file `bub_tests::prefill_line` writes,
//! the same bytes as `agent_bench.py` writes) before the run starts: the
//! cost of a step as the context grows.
//!
//! `BASE=http://127.0.0.1:PORT/v1 [TAPE_ENTRIES=N] [MEMORY=0] cargo run --release -p bub-tests --example agent_bench [RUNS]`
//!
//! A profile of the measured steps only (not the set-up or the prefill):
//! `mkfifo ctl; MEMORY=0 PERF_CTL=ctl perf record -D -1 --control fifo:ctl -g target/release/examples/agent_bench 100`.
//! Instructions: `VALGRIND=1 MEMORY=0 valgrind --tool=callgrind …` (no CPU
//! time then), two run counts, and their difference.

use bub_host::WithBuiltin as _;
use bub_host::{builtin::agent as bub, discovery::SearchPath, framework::Framework, HostBuilder};
use bub_tests::{install_into, lib_release};
use serde_json::json;

// As the `bub` binary: the same allocator, so the same costs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const STEPS: usize = 5;

/// This process's CPU time; 0 with `VALGRIND=1` (rustix reads the clock
/// through the vDSO, which valgrind does not map: the read crashes there).
fn cpu_seconds() -> f64 {
    if std::env::var_os("VALGRIND").is_some_and(|v| v == "1") {
        return 0.0;
    }
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

/// A `/proc/self/status` figure in KiB (`VmRSS:`, `VmHWM:` for the peak).
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

async fn one_run(fw: &Framework, session: &str, context_at_least: usize) {
    let (state, _) = fw.build_state(&json!({"session_id": session}), session).await.expect("state");
    let stream = bub::run_stream(fw, session, vec![json!("read a.txt")], state).await.expect("a run");
    let (events, error) = stream.collect().await;
    assert!(error.is_none(), "{error:?}");
    let results = events.iter().filter(|e| e.kind == "tool_result").count();
    assert_eq!(results, STEPS - 1, "{events:?}");
    // The provider names its first call after the number of messages it got.
    let first = events.iter().find(|e| e.kind == "tool_call").expect("a tool call");
    let id = first.data["tool_calls"][0]["id"].as_str().unwrap_or_default();
    let n: usize = id.trim_start_matches("call_").parse().expect("call_<messages>");
    assert!(n >= context_at_least, "the first request carried {n} messages, fewer than the tape's {context_at_least}");
}

/// Writes the tapes of sessions `bench/0..runs` with `entries` entries each.
fn prefill(home: &std::path::Path, ws: &std::path::Path, runs: usize, entries: usize) {
    if entries == 0 {
        return;
    }
    let body: String = (1..=entries).map(bub_tests::prefill_line).collect();
    let dir = home.join("tapes");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..runs {
        let tape = bub_host::agent::tape::session_tape_name(ws, &format!("bench/{i}"));
        let path = dir.join(format!("{tape}.jsonl"));
        std::fs::write(&path, &body).unwrap();
        // On disk before the clock starts: the first append's sync would
        // otherwise write the whole file out inside the measurement.
        std::fs::File::open(&path).unwrap().sync_all().unwrap();
    }
}

fn main() {
    let base = std::env::var("BASE").expect("BASE=http://127.0.0.1:PORT/v1 (scripts/scripted_provider.py)");
    let runs: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200);
    let tape_entries: usize = std::env::var("TAPE_ENTRIES").ok().and_then(|n| n.parse().ok()).unwrap_or(0);
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "hello file\n").unwrap();
    let config = json!({"model": "openai:bench", "api_key": "k", "api_base": base});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let noop = lib_release("tp-agent-noop");
    for i in 0..10 {
        install_into(&home.path().join("plugins"), &format!("p{i}"), &noop, json!({}));
    }
    let search = SearchPath::new(home.path(), None);
    // The OpenTelemetry variables only (scripts/otel-bench.sh turns traces
    // on and off with them); nothing else of the shell's reaches the host.
    let otel = std::env::vars_os().filter(|(k, _)| k.to_string_lossy().starts_with("OTEL_"));
    let host = HostBuilder::new()
        .settings(bub_host::settings::RuntimeSettings::from_vars(otel))
        .home(home.path())
        .workspace(&ws)
        .builtin()
        .discovered(&search)
        .build();
    assert_eq!(host.registry().plugins().iter().filter(|p| p.status.as_str() == "loaded").count(), 11);
    let fw = Framework::new(&host, &ws);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        // Running: the builtin file tape store, as `bub run` has it.
        let scope = fw.running().await.unwrap();
        for i in 0..3 {
            one_run(&fw, &format!("warm/{i}"), 0).await;
        }
        prefill(home.path(), &ws, runs, tape_entries);
        // Sampled from here: not the set-up, the warm-up runs, the prefill.
        bub_tests::perf_enable();
        let (cpu0, wall0) = (cpu_seconds(), std::time::Instant::now());
        for i in 0..runs {
            one_run(&fw, &format!("bench/{i}"), tape_entries.saturating_sub(1)).await;
        }
        let (cpu, wall) = (cpu_seconds() - cpu0, wall0.elapsed().as_secs_f64());
        let steps = (runs * STEPS) as f64;
        println!(
            "{}",
            json!({"impl": "rust", "tape_entries": tape_entries, "runs": runs, "steps": runs * STEPS,
                   "cpu_us_per_step": (cpu / steps * 1e7).round() / 10.0, "wall_us_per_step": (wall / steps * 1e7).round() / 10.0,
                   "rss_kib": rss_kib(), "peak_rss_kib": status_kib("VmHWM:")})
        );
        scope.exit(None).await.unwrap();
    });

    // Memory: a 1,000-entry tape (500 user/assistant exchanges) read back as
    // context. `MEMORY=0` skips it (profiles of the steps alone).
    if std::env::var("MEMORY").is_ok_and(|m| m == "0") {
        return;
    }
    rt.block_on(async {
        let scope = fw.running().await.unwrap();
        let store = fw.get_tape_store().unwrap();
        let tape = bub_host::agent::tape::session_tape_name(&ws, "memory");
        for i in 0..500 {
            for (role, text) in [("user", format!("question {i}: {}", "lorem ipsum ".repeat(8))), ("assistant", format!("answer {i}: {}", "dolor sit amet ".repeat(12)))] {
                let entry = bub_host::agent::tape::entry("message", json!({"role": role, "content": text}), Default::default());
                store.append(&tape, &entry).await.unwrap();
            }
        }
        let before = rss_kib();
        let run = bub_host::agent::RunTape::fork(bub_host::agent::Store::Host(store), &tape, &[], false);
        let spec = bub_abi::types::TapeContextSpec { anchor: None };
        let messages = bub_host::agent::context::messages(&run, &spec).await.unwrap();
        let after = rss_kib();
        let bytes = std::fs::metadata(home.path().join("tapes").join(format!("{tape}.jsonl"))).unwrap().len();
        println!(
            "{}",
            json!({"impl": "rust", "tape_entries": 1000, "context_messages": messages.len(), "tape_file_kib": bytes / 1024,
                   "rss_kib": after, "rss_growth_kib": after.saturating_sub(before)})
        );
        scope.exit(None).await.unwrap();
    });
}
