//! Reliability issue, item 10: a plugin that takes the process down is
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
