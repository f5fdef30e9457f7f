//! Where bub-rs differed from Bub 0.6.0a3 on the first turns a
//! user runs (items named by number), through `bub run`.

use bub_tests::{run_bub, Home};
use serde_json::Value;

fn bub_in(home: &Home, ws: &std::path::Path, args: &[&str]) -> (String, String, bool) {
    let mut all = vec!["-w", ws.to_str().unwrap()];
    all.extend_from_slice(args);
    run_bub(home, &all)
}

/// Bub names the tool object it ran, so
/// a failed *command* is named by its registry name (`fs.read`), as Python
/// Bub 0.6.0a3 prints it; a model's call is named by its model-facing name
/// (`fs_read`; the differential scenario
/// `failed_tool_is_named_as_the_model_sees_it`).
#[test]
fn a_failed_command_is_named_by_its_registry_name() {
    let (home, ws) = (Home::new(), tempfile::tempdir().unwrap());
    let (_, err, ok) = bub_in(&home, ws.path(), &["run", ",fs.read missing.txt"]);
    assert!(!ok);
    assert!(err.contains("[tool] Tool 'fs.read' execution failed"), "{err}");
}

/// `fs.write` and `fs.edit` answer with the resolved absolute path.
#[test]
fn fs_write_and_edit_answer_with_the_resolved_path() {
    let (home, ws) = (Home::new(), tempfile::tempdir().unwrap());
    let real = ws.path().canonicalize().unwrap();
    let (out, err, ok) = bub_in(&home, ws.path(), &["run", ",fs.write sub/../notes.txt content=hello"]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("wrote: {}", real.join("notes.txt").display())), "{out}");
    let (out, err, ok) = bub_in(&home, ws.path(), &["run", ",fs.edit notes.txt old=hello new=bye"]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("edited: {}", real.join("notes.txt").display())), "{out}");
}

/// `tape.search` prints each match as Python's json.dumps does.
#[test]
fn tape_search_prints_matches_as_python_json() {
    let (home, ws) = (Home::new(), tempfile::tempdir().unwrap());
    assert!(bub_in(&home, ws.path(), &["run", "remember the walrus"]).2);
    let (out, err, ok) = bub_in(&home, ws.path(), &["run", ",tape.search query=walrus"]);
    assert!(ok, "{err}");
    let line = out.lines().find(|l| l.starts_with("{\"date\": ")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("\", \"content\": {"), "{line}");
}

/// A bare prefix fails before its command is recorded (the tape's
/// bootstrap anchor is there, as in Bub: checked side by side by the
/// differential harness).
#[test]
fn a_bare_prefix_fails_before_recording_a_command() {
    let (home, ws) = (Home::new(), tempfile::tempdir().unwrap());
    let (_, err, ok) = bub_in(&home, ws.path(), &["run", ","]);
    assert!(!ok);
    assert!(err.contains("empty command"), "{err}");
    let mut kinds = Vec::new();
    // The main tape (its record, a sidecar, is bub-rs's own).
    for tape in std::fs::read_dir(home.path().join("tapes")).unwrap().flatten() {
        if tape.file_name().to_string_lossy().contains("__sidecar__") {
            continue;
        }
        for line in std::fs::read_to_string(tape.path()).unwrap().lines() {
            let e: Value = serde_json::from_str(line).unwrap();
            kinds.push(format!("{}:{}", e["kind"].as_str().unwrap(), e["payload"]["name"].as_str().unwrap_or("")));
        }
    }
    assert_eq!(kinds, ["anchor:session/start", "event:handoff"], "a command was recorded for a bare prefix");
}

/// A blank session id falls back to
/// `<channel>:<chat_id>`; a command turn's outbound is `kind: command`.
#[test]
fn blank_session_ids_fall_back_and_command_outbounds_are_commands() {
    let (home, ws) = (Home::new(), tempfile::tempdir().unwrap());
    let (out, err, ok) = bub_in(&home, ws.path(), &["run", "--session-id", "   ", "--json", "hi"]);
    assert!(ok, "{err}");
    let result: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(result["session_id"], "cli:local", "{result}");
    let (out, err, ok) = bub_in(&home, ws.path(), &["run", "--session-id", "  keep-me  ", "--json", "hi"]);
    assert!(ok, "{err}");
    let result: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(result["session_id"], "  keep-me  ", "non-blank ids are kept verbatim");
    let (out, err, ok) = bub_in(&home, ws.path(), &["run", "--json", ",help"]);
    assert!(ok, "{err}");
    let result: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(result["outbounds"][0]["kind"], "command", "{result}");
}

/// A chat-completions stream with `n > 1` choices answers with
/// choice 0 only, and `n` is not forwarded.
#[test]
fn only_the_first_choice_of_a_stream_is_the_answer() {
    use bub_tests::provider::{Provider, Reply};
    use serde_json::json;
    let chunk = |i: u64, text: &str| json!({"choices": [{"index": i, "delta": {"content": text}}]}).to_string();
    let provider = Provider::start(vec![Reply::Sse(vec![
        chunk(0, "first "),
        chunk(1, "SECOND "),
        chunk(0, "answer"),
        chunk(1, "CHOICE"),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}, {"index": 1, "delta": {}, "finish_reason": "stop"}]}).to_string(),
        "[DONE]".into(),
    ])]);
    let home = Home::new();
    home.use_model("openai:m", &provider.base_url, json!({"completion_args": {"n": 2}}));
    let (out, err, ok) = run_bub(&home, &["run", "hi"]);
    assert!(ok, "{err}");
    assert!(out.contains("first answer") && !out.contains("SECOND") && !out.contains("CHOICE"), "{out}");
    assert!(provider.requests()[0].body.get("n").is_none(), "n was forwarded");
}

/// `allowed_tools` with an unknown name fails the subagent call
/// before any sub-run.
#[test]
fn a_subagent_with_unknown_allowed_tools_does_not_run() {
    use bub_tests::provider::{chat, Provider};
    use serde_json::json;
    let args = json!({"prompt": "go", "allowed_tools": [" bash ", "nope"]}).to_string();
    let provider = Provider::start(vec![chat::tool_calls("", &[("c1", "subagent", &args)]), chat::text("done")]);
    let home = Home::new();
    home.use_model("openai:m", &provider.base_url, json!({}));
    let (_, err, ok) = run_bub(&home, &["run", "delegate"]);
    assert!(ok, "{err}");
    let requests = provider.requests();
    assert_eq!(requests.len(), 2, "a sub-run called the model");
    let sent = requests[1].body.to_string();
    assert!(sent.contains("unknown tool name(s): 'nope'"), "{sent}");
}

/// The turn state holds the message's context
/// string as `context`.
#[test]
fn the_turn_state_holds_the_message_context() {
    let (home, ws) = (Home::new(), tempfile::tempdir().unwrap());
    let (out, err, ok) = bub_in(&home, ws.path(), &["run", "--json", "hi"]);
    assert!(ok, "{err}");
    let result: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(result["state"]["context"], "sender_id=human|channel=$cli|chat_id=local", "{result}");
}

/// The settings' max_tokens wins over `completion_args.max_tokens`,
/// as Bub's `chat_options` (the wire says `max_completion_tokens: 16384`).
#[test]
fn the_settings_max_tokens_wins_over_completion_args() {
    use bub_tests::provider::{chat, Provider};
    use serde_json::json;
    let provider = Provider::start(vec![chat::text("ok")]);
    let home = Home::new();
    home.use_model("openai:m", &provider.base_url, json!({"completion_args": {"max_tokens": 100, "temperature": 0.5}}));
    let (_, err, ok) = run_bub(&home, &["run", "hi"]);
    assert!(ok, "{err}");
    let body = &provider.requests()[0].body;
    assert_eq!(body["max_completion_tokens"], 16384, "{body}");
    assert!(body.get("max_tokens").is_none(), "{body}");
    assert_eq!(body["temperature"], 0.5);
}

/// 17.13, behaviour 199: a media turn's user message is stored with its
/// text parts only, as text blocks.
#[test]
fn a_media_turn_stores_its_text_as_blocks_behaviour_199() {
    use serde_json::json;
    let (home, ws) = (Home::new(), tempfile::tempdir().unwrap());
    let image = json!({"type": "image", "media_type": "image/png", "url": "data:image/png;base64,iVBORw0KGgo="});
    home.scripted("media", "", json!({"build_prompt": {"return": ["look at this", image]}}));
    let (_, err, ok) = bub_in(&home, ws.path(), &["run", "ignored"]);
    assert!(ok, "{err}");
    let mut users = Vec::new();
    for tape in std::fs::read_dir(home.path().join("tapes")).unwrap().flatten() {
        for line in std::fs::read_to_string(tape.path()).unwrap().lines() {
            let entry: Value = serde_json::from_str(line).unwrap();
            if entry["kind"] == "message" && entry["payload"]["role"] == "user" {
                users.push(entry["payload"]["content"].clone());
            }
        }
    }
    assert_eq!(users, [json!([{"type": "text", "text": "look at this"}])]);
}

fn anthropic_events(events: Vec<serde_json::Value>) -> bub_tests::provider::Reply {
    bub_tests::provider::Reply::NamedSse(
        events.into_iter().map(|e| (e["type"].as_str().unwrap().to_owned(), e.to_string())).collect(),
    )
}

/// Anthropic thinking blocks (with their signature, and
/// redacted ones) are kept and sent back, in their order, before the
/// `tool_use` they precede; cache reads and writes count as input, and the
/// input re-reported in `message_delta` is taken.
#[test]
fn anthropic_thinking_is_replayed_and_cache_tokens_count_as_input() {
    use bub_tests::provider::{anthropic, Provider};
    use serde_json::json;
    let step = anthropic_events(vec![
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 10, "cache_read_input_tokens": 90, "cache_creation_input_tokens": 0}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "The user wants "}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "the file."}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIM"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "fs_read", "input": {}}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"a.txt\"}"}}),
        json!({"type": "content_block_stop", "index": 2}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"input_tokens": 12, "cache_read_input_tokens": 90, "output_tokens": 30}}),
        json!({"type": "message_stop"}),
    ]);
    let provider = Provider::start(vec![step, anthropic::text("read it")]);
    let (home, ws) = (Home::new(), tempfile::tempdir().unwrap());
    std::fs::write(ws.path().join("a.txt"), "contents").unwrap();
    home.use_model("anthropic:claude", &provider.base_url, json!({}));
    let (out, err, ok) = bub_in(&home, ws.path(), &["run", "--json", "read a.txt"]);
    assert!(ok, "{err}");
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let assistant =
        requests[1].body["messages"].as_array().unwrap().iter().find(|m| m["role"] == "assistant").cloned().unwrap();
    assert_eq!(
        assistant["content"],
        json!([
            {"type": "thinking", "thinking": "The user wants the file.", "signature": "EqQBCgIYAhIM"},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"},
            {"type": "tool_use", "id": "toolu_1", "name": "fs_read", "input": {"path": "a.txt"}},
        ]),
        "{assistant}"
    );
    let result: Value = serde_json::from_str(&out).unwrap();
    let usage =
        result["events"].as_array().unwrap().iter().find(|e| e["kind"] == "usage").unwrap()["data"]["usage"].clone();
    assert_eq!(usage["input_tokens"], 102, "{usage}");
    assert_eq!(usage["cached_tokens"], 90, "{usage}");
    assert_eq!(usage["output_tokens"], 30, "{usage}");
}

/// `stop_reason: "refusal"` answers with its explanation.
#[test]
fn an_anthropic_refusal_answers_with_its_explanation() {
    use bub_tests::provider::Provider;
    use serde_json::json;
    let refusal = anthropic_events(vec![
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 5}}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_details": {"explanation": "I can't help with that."}}, "usage": {"output_tokens": 1}}),
        json!({"type": "message_stop"}),
    ]);
    let provider = Provider::start(vec![refusal]);
    let home = Home::new();
    home.use_model("anthropic:claude", &provider.base_url, json!({}));
    let (out, err, ok) = run_bub(&home, &["run", "something bad"]);
    assert!(ok, "{err}");
    assert!(out.contains("I can't help with that."), "{out}");
}

/// Responses reasoning items (id, encrypted content, summary) are
/// kept and sent back before the function call they led to.
#[test]
fn responses_reasoning_items_are_sent_back_with_the_call() {
    use bub_tests::provider::{responses, Provider, Reply};
    use serde_json::json;
    let reasoning = json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAAB…",
                           "summary": [{"type": "summary_text", "text": "Read the file first."}]});
    let call = json!({"type": "function_call", "id": "fc1", "call_id": "call_1", "name": "fs_read", "arguments": "{\"path\": \"a.txt\"}"});
    let step = Reply::Sse(vec![
        json!({"type": "response.output_item.added", "item": {"type": "reasoning", "id": "rs_1", "summary": []}}).to_string(),
        json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "delta": "Read the file first."}).to_string(),
        json!({"type": "response.output_item.done", "item": reasoning}).to_string(),
        json!({"type": "response.output_item.added", "item": {"type": "function_call", "id": "fc1", "call_id": "call_1", "name": "fs_read"}}).to_string(),
        json!({"type": "response.output_item.done", "item": call}).to_string(),
        json!({"type": "response.completed", "response": {"usage": {"input_tokens": 3, "output_tokens": 2}}}).to_string(),
    ]);
    let provider = Provider::start(vec![step, responses::text("done")]);
    let (home, ws) = (Home::new(), tempfile::tempdir().unwrap());
    std::fs::write(ws.path().join("a.txt"), "contents").unwrap();
    home.use_model("openai:o4", &provider.base_url, json!({"client_args": {"api_format": "responses"}}));
    let (_, err, ok) = bub_in(&home, ws.path(), &["run", "read a.txt"]);
    assert!(ok, "{err}");
    let input = provider.requests()[1].body["input"].as_array().unwrap().clone();
    let at = input.iter().position(|i| i["type"] == "reasoning").unwrap_or_else(|| panic!("{input:?}"));
    assert_eq!(input[at], reasoning);
    assert_eq!(input[at + 1]["type"], "function_call", "{input:?}");
    assert_eq!(input[at + 2]["type"], "function_call_output", "{input:?}");
}

/// An empty assistant answer stays in the conversation, so the next
/// request does not carry two user turns in a row.
#[test]
fn an_empty_answer_is_replayed() {
    use bub_tests::provider::{chat, Provider, Reply};
    use serde_json::json;
    let empty = Reply::Sse(vec![
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": "stop"}]})
            .to_string(),
        "[DONE]".into(),
    ]);
    let provider = Provider::start(vec![empty, chat::text("second")]);
    let home = Home::new();
    home.use_model("openai:m", &provider.base_url, json!({}));
    assert!(run_bub(&home, &["run", "first"]).2);
    assert!(run_bub(&home, &["run", "again"]).2);
    let roles: Vec<String> = provider.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_owned())
        .filter(|r| r != "system")
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"], "{:?}", provider.requests()[1].body["messages"]);
}

/// `,help` is Bub's help: Bub 0.6.0a3 prints a fixed list with an
/// example per command (`bub/builtin/tools.py`), here each line whose tool
/// this agent has (the differential harness compares it side by side).
#[test]
fn help_is_bubs_command_list() {
    let (home, ws) = (Home::new(), tempfile::tempdir().unwrap());
    let (out, err, ok) = bub_in(&home, ws.path(), &["run", ",help"]);
    assert!(ok, "{err}");
    assert!(out.contains("Commands use ',' at line start.\nKnown internal commands:\n  ,help\n"), "{out}");
    for line in [
        "  ,tape.search query=error\n",
        "  ,fs.edit path=tmp.txt old=hello new=world\n",
        "  ,bash.kill shell_id=bsh-12345678\n",
        "  ,quit\n",
    ] {
        assert!(out.contains(line), "{line} missing: {out}");
    }
    assert!(out.contains("  ,skill name=foo\n"), "skills are ported: {out}");
    assert!(out.contains("  ,code_mode enable=true\n"), "code mode is ported: {out}");
    assert!(out.trim_end().ends_with("Any unknown command after ',' is executed as shell via bash."), "{out}");
}
