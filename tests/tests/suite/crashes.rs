//! A plugin that takes the process down is
//! named afterwards, and the commands that manage plugins still work.

use bub_tests::{run_bub, Home};
use serde_json::json;

/// Whatever way a plugin kills a run (abort, segfault, `exit`, stack
/// overflow), the next `bub` says which plugin and hook, once, and how to
/// disable it.
#[test]
fn the_next_run_names_the_plugin_that_killed_the_last_one() {
    for how in ["abort", "segfault", "exit", "stack_overflow"] {
        let home = Home::new();
        home.scripted("crasher", "", json!({"load_state": {"crash": how, "return": null}}));
        let (_, _, ok) = run_bub(&home, &["run", "hi"]);
        assert!(!ok, "{how}: the run should have died");
        let (_, err, ok) = run_bub(&home, &["plugins", "disable", "crasher"]);
        assert!(ok, "{how}: {err}");
        assert!(
            err.contains("in plugin 'crasher' (in hook 'load_state'); if it happens again, disable it with `bub plugins disable crasher`"),
            "{how}: {err}"
        );
        // Said once; the run works without the plugin.
        let (_, err, ok) = run_bub(&home, &["run", "hi"]);
        assert!(ok && !err.contains("the last bub run"), "{how}: {err}");
    }
}

/// A plugin that aborts while loading does not take `plugins list`,
/// `plugins info` or `--help` with it: they list it as crashed.
#[test]
fn management_commands_survive_a_plugin_that_crashes_while_loading() {
    let home = Home::new();
    let dir = home.scripted("crasher", "", json!({}));
    let manifest = dir.join("plugin.json");
    let mut m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    m["config"]["init"] = json!("abort");
    std::fs::write(&manifest, m.to_string()).unwrap();

    let (out, err, ok) = run_bub(&home, &["plugins", "list"]);
    assert!(ok, "{err}");
    assert!(out.contains("crasher") && out.contains("aborted bub while loading (not loaded here)"), "{out}");
    assert!(err.contains("the last bub run aborted in plugin 'crasher' (while loading)"), "{err}");
    let (out, err, ok) = run_bub(&home, &["plugins", "info", "crasher"]);
    assert!(ok && out.contains("status:       failed"), "{out}{err}");
    let (out, err, ok) = run_bub(&home, &["--help"]);
    assert!(ok && out.contains("Usage: bub"), "{out}{err}");
    let (_, err, ok) = run_bub(&home, &["plugins", "disable", "crasher"]);
    assert!(ok, "{err}");
    let (_, err, ok) = run_bub(&home, &["run", "hi"]);
    assert!(ok, "{err}");
}

/// Item 7: plugins whose tokio runtime cannot start (no file descriptors
/// left, 40 async plugins under small `ulimit -n`) fail as that plugin's
/// error; the host never dies with "FFI future panicked".
#[test]
fn a_plugin_runtime_that_cannot_start_is_that_plugins_error() {
    let home = Home::new();
    for i in 0..40 {
        home.scripted(&format!("p{i:02}"), "", json!({"load_state": {"async": true, "sleep_ms": 1, "return": null}}));
    }
    let bub = bub_tests::bub_bin();
    let mut failures = 0;
    for limit in (60..=150).step_by(10) {
        let script = format!("ulimit -n {limit} && exec \"$0\" --home \"$1\" run hi");
        let out = std::process::Command::new("sh")
            .args(["-c", &script, bub.to_str().unwrap(), home.path().to_str().unwrap()])
            .env_remove("BUB_PLUGIN_PATH")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.code().is_some_and(|c| c == 0 || c == 1), "ulimit {limit}: {:?}\n{err}", out.status);
        assert!(!err.contains("FFI future panicked"), "ulimit {limit}: {err}");
        if !out.status.success() {
            failures += 1;
            assert!(
                err.contains("the plugin's tokio runtime could not start") || err.contains("Too many open files"),
                "ulimit {limit}: {err}"
            );
        }
    }
    assert!(failures > 0, "no limit was low enough to exercise the failure");
}
