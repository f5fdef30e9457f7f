//! No plugin code blocks `bub` silently.

use bub_tests::{bub_bin, Home};
use serde_json::json;

fn bub_with(home: &Home, env: &[(&str, &str)], args: &[&str]) -> (String, String, bool, std::time::Duration) {
    let started = std::time::Instant::now();
    let mut cmd = std::process::Command::new(bub_bin());
    cmd.arg("--home").arg(home.path()).args(args).env_remove("BUB_PLUGIN_PATH").env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (text(out.stdout), text(out.stderr), out.status.success(), started.elapsed())
}

/// An async hook that hangs is cancelled at its deadline and fails the
/// turn as that plugin's error, naming the hook.
#[test]
fn a_hanging_async_hook_is_cancelled_and_named() {
    let home = Home::new();
    home.scripted("hangs", "", json!({"load_state": {"async": true, "sleep_ms": 60000, "return": null}}));
    let (_, err, ok, took) = bub_with(&home, &[("BUB_HOOK_TIMEOUT_SECONDS", "0.5")], &["run", "hi"]);
    assert!(!ok);
    assert!(
        err.contains("plugin 'hangs' failed in hook 'load_state': did not finish within 0.5s and was cancelled (BUB_HOOK_TIMEOUT_SECONDS)"),
        "{err}"
    );
    assert!(took < std::time::Duration::from_secs(20), "{took:?}");
}

/// The model stage has no hook deadline (an agent run is
/// long), but a plugin's `run_model` that does not answer is named every
/// `BUB_HOOK_TIMEOUT_SECONDS` instead of hanging silently; it is not
/// cancelled, and its answer still counts.
#[test]
fn a_slow_model_hook_is_named_while_it_runs_and_not_cancelled() {
    let home = Home::new();
    home.scripted("slowmodel", "", json!({"run_model": {"async": true, "sleep_ms": 2500, "return": "late answer"}}));
    let (out, err, ok, _) = bub_with(&home, &[("BUB_HOOK_TIMEOUT_SECONDS", "1")], &["run", "hi"]);
    assert!(ok, "{err}");
    assert!(out.contains("late answer"), "{out}");
    assert!(err.contains("plugin 'slowmodel' has been running hook 'run_model' for 1s"), "{err}");
    assert!(err.contains("plugin 'slowmodel' has been running hook 'run_model' for 2s"), "{err}");
}

/// A sync hook cannot be cancelled; the watchdog names it while it blocks,
/// and the turn goes on when it returns.
#[test]
fn a_blocking_sync_hook_is_reported_while_it_blocks() {
    let home = Home::new();
    home.scripted("blocks", "", json!({"resolve_session": {"block_ms": 1500, "return": null}}));
    let (_, err, ok, _) = bub_with(&home, &[("BUB_HOOK_WARN_SECONDS", "0.3")], &["run", "hi"]);
    assert!(ok, "{err}");
    assert!(err.contains("plugin 'blocks' has been running hook 'resolve_session' for"), "{err}");
    assert!(err.contains("bub plugins disable blocks"), "{err}");
}

/// Item 10: a hook's result over `BUB_MAX_RESULT_BYTES` fails as that
/// plugin's error, with the limit named, instead of flowing into the turn.
#[test]
fn an_oversized_result_is_that_plugins_error() {
    let home = Home::new();
    home.scripted("big", "", json!({"build_prompt": {"return": "x".repeat(5000)}}));
    let (_, err, ok, _) = bub_with(&home, &[("BUB_MAX_RESULT_BYTES", "1000")], &["run", "hi"]);
    assert!(!ok);
    assert!(
        err.contains("plugin 'big' failed in hook 'build_prompt': returned a result of more than 1000 bytes (BUB_MAX_RESULT_BYTES)"),
        "{err}"
    );
    let (_, err, ok, _) = bub_with(&home, &[], &["run", "hi"]);
    assert!(ok, "the default limit is far above 5 KB: {err}");
}
