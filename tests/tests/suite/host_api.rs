//! Host APIs that real plugins need: calling the
//! rest of a hook's chain from inside a hook (`bub_abi::host::call_rest`),
//! through the real binary and loader.

use bub_tests::{lib, run_bub, Home};
use serde_json::json;

/// A store wrapper decorates the store the rest of the chain provides (the
/// builtin's JSONL files here); a sync broadcast reports the rest's answers;
/// an async first-result hook rewrites what the rest would answer; a hook
/// with an object argument is refused with an error, not a crash.
#[test]
fn a_plugin_calls_the_rest_of_a_hooks_chain() {
    let home = Home::new();
    let log = home.path().join("wrapper.log");
    home.install("wrapper", &lib("tp-store-wrapper"), json!({"log": log}));
    let (out, err, ok) = run_bub(&home, &["run", "hello rest"]);
    assert!(ok, "{err}");
    // build_prompt: the builtin's prompt, marked by the wrapper.
    assert!(out.contains("[wrapped] ") && out.contains("hello rest"), "{out}");
    // provide_tape_store: the builtin still stores, the wrapper saw each append.
    let tapes: Vec<_> = std::fs::read_dir(home.path().join("tapes")).unwrap().flatten().collect();
    assert!(!tapes.is_empty(), "the wrapped builtin store wrote no tape");
    let appends = std::fs::read_to_string(&log).unwrap();
    assert!(appends.lines().count() >= 3 && appends.lines().all(|l| l.starts_with("append ")), "{appends}");
    // system_prompt: the builtin's block is the rest of the chain.
    let text: String = tapes.iter().map(|t| std::fs::read_to_string(t.path()).unwrap()).collect();
    assert!(text.contains("[wrapper saw 1 other system prompt block(s); provide_channels refused: true]"), "{text}");
}
