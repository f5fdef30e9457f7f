//! Contract misses found by a black-box run of the hook contract,
//! through `bub plugins install`, `bub run` and a scripted provider.

use std::process::Command;

use bub_tests::{
    bub_bin, lib,
    provider::{chat, Provider, Reply},
    run_bub, Home,
};
use serde_json::{json, Value};

/// A plugin installed under `umask 002` (user private groups)
/// loads; the installer leaves no group or other write bit.
#[test]
fn a_plugin_installed_under_umask_002_loads() {
    let home = tempfile::tempdir().unwrap();
    let bub = |line: String| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("umask 002; exec \"$0\" --home \"$1\" {line}"))
            .arg(bub_bin())
            .arg(home.path())
            .env_remove("BUB_PLUGIN_PATH")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    bub(format!("plugins install {}", lib("echo-model").display()));
    let listed = bub("plugins list".into());
    assert!(listed.lines().any(|l| l.starts_with("echo-model") && l.contains(" loaded ")), "{listed}");
    assert!(!listed.contains("group-writable"), "{listed}");
    for path in ["plugins", "plugins/echo-model", "plugins/echo-model/plugin.json", "plugins/echo-model/plugin.so"] {
        let mode = std::os::unix::fs::MetadataExt::mode(&std::fs::metadata(home.path().join(path)).unwrap());
        assert_eq!(mode & 0o022, 0, "{path}: {mode:o}");
    }
}

/// A tool step that reports 10 + 5 tokens.
fn tool_step_with_usage() -> Reply {
    let Reply::Sse(mut events) = chat::tool_calls("", &[("call_1", "fs_read", r#"{"path": "a.txt"}"#)]) else {
        unreachable!()
    };
    let done = events.pop().unwrap();
    events.push(
        json!({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).to_string(),
    );
    events.push(done);
    Reply::Sse(events)
}

/// `system_prompt`
/// receives the prompt in Bub's legacy form, a string without media.
/// `continue_prompt` on
/// StepFinished(continue) gets the finished step's prompt in that form and a
/// StreamState with the step's usage.
#[test]
fn prompt_hooks_get_the_legacy_prompt_and_continue_prompt_the_steps_usage() {
    let provider = Provider::start(vec![tool_step_with_usage(), chat::text("done")]);
    let home = Home::new();
    home.use_model("openai:m", &provider.base_url, json!({}));
    home.scripted(
        "prompts",
        "",
        json!({
            "system_prompt": {"trace_arg": 0, "return": null},
            "continue_prompt": {"trace_arg": 0, "return": null},
        }),
    );
    home.scripted("states", "", json!({"continue_prompt": {"trace_arg": 2, "return": null}}));
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "file text").unwrap();
    let (out, err, ok) = run_bub(&home, &["-w", ws.path().to_str().unwrap(), "run", "read a.txt"]);
    assert!(ok, "{err}");
    assert!(out.contains("done"), "{out}");
    // Trace lines are `<plugin>:<hook>:<argument>`.
    let trace: Vec<String> =
        home.trace().iter().filter_map(|l| l.split_once(':').map(|(_, rest)| rest.to_owned())).collect();
    let system: Vec<&String> = trace.iter().filter(|l| l.starts_with("system_prompt:")).collect();
    assert!(!system.is_empty(), "{trace:?}");
    let first: Value = serde_json::from_str(system[0].trim_start_matches("system_prompt:")).unwrap();
    let text = first.as_str().unwrap_or_else(|| panic!("system_prompt got {first}, not a string"));
    assert!(text.ends_with("read a.txt"), "{text}");
    let prompts: Vec<Value> = trace
        .iter()
        .filter_map(|l| l.strip_prefix("continue_prompt:"))
        .map(|a| serde_json::from_str(a).unwrap())
        .collect();
    assert_eq!(prompts.len(), 2, "{trace:?}");
    let prompt = prompts.iter().find(|p| p.is_string()).unwrap_or_else(|| panic!("no prompt given: {prompts:?}"));
    assert!(prompt.as_str().unwrap().ends_with("read a.txt"), "{prompt}");
    let state = prompts.iter().find(|p| p.is_object()).unwrap_or_else(|| panic!("no state given: {prompts:?}"));
    assert_eq!(state["usage"]["total_tokens"], 15, "{state}");
}
