//! The agent through `bub run`, against a scripted provider on loopback in
//! each wire format (behaviours 95–236 of `docs/semantics.md`).

use bub_tests::{
    lib,
    provider::{anthropic, chat, responses, Provider, Reply},
    run_bub, Home,
};
use serde_json::{json, Value};

/// Points the home's config at `provider` with `model`, plus `extra` keys.
fn configure(home: &Home, provider: &Provider, model: &str, extra: Value) {
    let mut config = json!({
        "model": model,
        "api_key": "sk-test",
        "api_base": provider.base_url,
        "client_args": {"retry_delay": 0.01, "max_retry_delay": 0.05},
    });
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
}

/// A workspace folder with `a.txt`.
fn workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "hello file\n").unwrap();
    ws
}

fn bub(home: &Home, ws: &tempfile::TempDir, args: &[&str]) -> (String, String, bool) {
    let mut all = vec!["-w", ws.path().to_str().unwrap()];
    all.extend_from_slice(args);
    run_bub(home, &all)
}

/// Every entry of every session tape (sidecars excluded), in file order.
fn tape(home: &Home) -> Vec<Value> {
    let mut out = Vec::new();
    let dir = home.path().join("tapes");
    let mut files: Vec<_> =
        std::fs::read_dir(&dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    files.sort();
    for f in files
        .into_iter()
        .filter(|f| !f.to_string_lossy().contains("__sidecar__") && f.extension().is_some_and(|e| e == "jsonl"))
    {
        for line in std::fs::read_to_string(f).unwrap().lines() {
            out.push(serde_json::from_str(line).unwrap());
        }
    }
    out
}

/// `kind` or `event:<name>` per entry.
fn kinds(entries: &[Value]) -> Vec<String> {
    entries
        .iter()
        .map(|e| match e["kind"].as_str().unwrap() {
            "event" => format!("event:{}", e["payload"]["name"].as_str().unwrap()),
            k => k.to_owned(),
        })
        .collect()
}

fn messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_text_answer_is_streamed_recorded_and_printed_behaviour_97_106_190_217_231() {
    let provider = Provider::start(vec![chat::text("Hello there")]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:test-model", json!({}));
    let (out, err, ok) = bub(&home, &ws, &["run", "hi"]);
    assert!(ok, "{err}");
    assert!(out.contains("Hello there"), "{out}");
    let requests = provider.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(r.line, "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
    assert!(r.header("user-agent").unwrap().starts_with("bub/"));
    assert_eq!(r.body["model"], "test-model");
    assert_eq!(r.body["max_completion_tokens"], 16384);
    assert_eq!(r.body["stream"], true);
    assert_eq!(r.body["stream_options"], json!({"include_usage": true}));
    let tools: Vec<&str> =
        r.body["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    for name in
        ["bash", "bash_output", "bash_kill", "fs_read", "fs_write", "fs_edit", "web_fetch", "tape_info", "tape_handoff"]
    {
        assert!(tools.contains(&name), "{name} missing from {tools:?}");
    }
    assert!(!tools.contains(&"help"), "command tools are never offered (behaviour 177)");
    let msgs = messages(&r.body);
    assert_eq!(msgs[0]["role"], "system");
    assert!(msgs.last().unwrap()["content"].as_str().unwrap().ends_with("hi"));
    assert_eq!(
        kinds(&tape(&home)),
        [
            "anchor",
            "event:handoff",
            "event:loop.start",
            "event:loop.step.start",
            "system",
            "message",
            "message",
            "event:run",
            "event:loop.step",
            "event:loop.finish"
        ]
    );
    let entries = tape(&home);
    assert_eq!(entries[0]["payload"], json!({"name": "session/start", "state": {"owner": "human"}}));
    assert_eq!(entries[6]["payload"]["content"], "Hello there");
    assert_eq!(entries[7]["payload"]["data"]["usage"]["total_tokens"], 5);
}

#[test]
fn a_tool_step_then_a_text_step_behaviour_135_190_211_220() {
    let provider = Provider::start(vec![
        chat::tool_calls("Let me look", &[("call_1", "fs_read", r#"{"path": "a.txt"}"#)]),
        chat::text("It says hello file."),
    ]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:m", json!({}));
    let (out, err, ok) = bub(&home, &ws, &["run", "read a.txt"]);
    assert!(ok, "{err}");
    assert!(out.contains("Let me lookIt says hello file."), "{out}");
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let second = messages(&requests[1].body);
    let n = second.len();
    assert_eq!(second[n - 2]["role"], "assistant");
    assert_eq!(second[n - 2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(second[n - 2]["tool_calls"][0]["function"]["arguments"], r#"{"path": "a.txt"}"#);
    assert_eq!(second[n - 1], json!({"role": "tool", "tool_call_id": "call_1", "content": "hello file"}));
    let entries = tape(&home);
    assert_eq!(
        kinds(&entries)[4..],
        [
            "system",
            "message",
            "tool_call",
            "tool_result",
            "event:run",
            "event:loop.step",
            "event:loop.step.start",
            "system",
            "message",
            "event:run",
            "event:loop.step",
            "event:loop.finish"
        ]
    );
    assert_eq!(entries[6]["payload"]["content"], "Let me look");
    assert_eq!(entries[7]["payload"]["results"], json!(["hello file"]));
    assert_eq!(entries[9]["payload"]["data"]["status"], "continue");
}

#[test]
fn the_conversation_is_remembered_across_turns_and_processes() {
    let provider = Provider::start(vec![chat::text("First answer"), chat::text("Second answer")]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:m", json!({}));
    assert!(bub(&home, &ws, &["run", "one"]).2);
    let (out, err, ok) = bub(&home, &ws, &["run", "two"]);
    assert!(ok, "{err}");
    assert!(out.contains("Second answer"));
    let second = messages(&provider.requests()[1].body);
    let roles: Vec<&str> = second.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(second[2]["content"], "First answer");
}

#[test]
fn unknown_tools_get_the_closest_names_and_the_run_goes_on_behaviour_140() {
    let provider =
        Provider::start(vec![chat::tool_calls("", &[("c1", "fs_reed", "{}"), ("c2", "zzz", "{}")]), chat::text("ok")]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:m", json!({}));
    let (_, err, ok) = bub(&home, &ws, &["run", "x"]);
    assert!(ok, "{err}");
    let second = messages(&provider.requests()[1].body);
    let n = second.len();
    assert_eq!(
        second[n - 2]["content"],
        "Tool `fs_reed` does not exist. Did you mean one of the following?\n- fs_read\n- fs_edit\n- fs_write"
    );
    // Nothing close, and `skill` is offered: Bub points at it.
    assert_eq!(
        second[n - 1]["content"],
        "Tool `zzz` does not exist. Invoke the `skill` tool to list available skills."
    );
}

#[test]
fn malformed_tool_arguments_fail_the_step_before_any_tool_runs_behaviour_138() {
    let provider = Provider::start(vec![chat::tool_calls("", &[("c1", "fs_write", "not json")])]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:m", json!({}));
    let (_, err, ok) = bub(&home, &ws, &["run", "x"]);
    assert!(!ok);
    assert!(err.contains("Expected a function tool call with JSON object arguments."), "{err}");
    let entries = tape(&home);
    assert!(!kinds(&entries).contains(&"tool_result".to_owned()));
    let finish = entries.last().unwrap();
    assert_eq!(finish["payload"]["name"], "loop.finish");
    assert_eq!(finish["payload"]["data"]["status"], "error");
}

#[test]
fn a_denied_tool_reaches_the_model_as_an_error_and_is_audited() {
    let provider =
        Provider::start(vec![chat::tool_calls("", &[("c1", "fs_read", r#"{"path":"a.txt"}"#)]), chat::text("ok")]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:m", json!({}));
    home.install("tool-policy", &lib("tool_policy"), json!({"rules": [{"tool": "fs_read", "deny": "no reading"}]}));
    home.install("audit-log", &lib("audit_log"), json!({}));
    let (_, err, ok) = bub(&home, &ws, &["run", "x"]);
    assert!(ok, "{err}");
    let second = messages(&provider.requests()[1].body);
    let tool: Value = serde_json::from_str(second.last().unwrap()["content"].as_str().unwrap()).unwrap();
    assert_eq!(tool, json!({"kind": "tool", "message": "blocked by policy: no reading"}));
    let audit = std::fs::read_to_string(home.path().join("audit.jsonl")).unwrap();
    let lines: Vec<Value> = audit.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let events: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["llm_call", "tool_call", "llm_call"]);
    assert_eq!(lines[1]["tool"], "fs_read");
    assert_eq!(lines[1]["ok"], false);
}

#[test]
fn http_errors_are_retried_then_reported_behaviour_223_225_226() {
    let provider = Provider::start(vec![Reply::Status(503, "busy".into(), vec![]), chat::text("fine")]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:m", json!({}));
    let (out, err, ok) = bub(&home, &ws, &["run", "x"]);
    assert!(ok, "{err}");
    assert!(out.contains("fine"));
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body, requests[1].body);

    let provider = Provider::start(vec![Reply::Status(401, r#"{"error":"bad key"}"#.into(), vec![])]);
    let home = Home::new();
    configure(&home, &provider, "openai:m", json!({}));
    let (_, err, ok) = bub(&home, &ws, &["run", "x"]);
    assert!(!ok);
    assert!(err.contains(r#"Provider returned HTTP 401: {"error":"bad key"}"#), "{err}");
    assert_eq!(provider.requests().len(), 1, "4xx is not retried");

    let provider = Provider::start(vec![Reply::Status(500, "a".into(), vec![]); 3]);
    let home = Home::new();
    configure(&home, &provider, "openai:m", json!({}));
    let (_, err, ok) = bub(&home, &ws, &["run", "x"]);
    assert!(!ok);
    assert!(err.contains("Provider returned HTTP 500: a"), "{err}");
    assert_eq!(provider.requests().len(), 3, "max_retries 2: three attempts");
}

#[test]
fn a_stream_without_its_completion_signal_fails_behaviour_161() {
    let provider = Provider::start(vec![Reply::Sse(vec![
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "bash", "arguments": "{\"command\":\"touch x\"}"}}]}}]}).to_string(),
    ])]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:m", json!({}));
    let (_, err, ok) = bub(&home, &ws, &["run", "x"]);
    assert!(!ok);
    assert!(err.contains("Stream ended without a completion signal"), "{err}");
    assert!(!ws.path().join("x").exists(), "the tool never ran");
}

#[test]
fn a_finish_decision_skips_the_provider_behaviour_127() {
    let provider = Provider::start(vec![]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:m", json!({}));
    home.scripted(
        "budget",
        "",
        json!({"before_llm_call": {"return": {"decision": {"action": "finish", "text": "budget exhausted"}}}}),
    );
    let (out, err, ok) = bub(&home, &ws, &["run", "x"]);
    assert!(ok, "{err}");
    assert!(out.contains("budget exhausted"), "{out}");
    assert!(provider.requests().is_empty());
}

#[test]
fn the_responses_api_and_anthropic_messages_behaviour_216_232() {
    let provider =
        Provider::start(vec![responses::tool_call("c1", "fs_read", r#"{"path":"a.txt"}"#), responses::text("done")]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:m", json!({"client_args": {"api_format": "responses"}}));
    let (out, err, ok) = bub(&home, &ws, &["run", "x"]);
    assert!(ok, "{err}");
    assert!(out.contains("done"));
    let requests = provider.requests();
    assert_eq!(requests[0].line, "POST /v1/responses HTTP/1.1");
    let input = requests[1].body["input"].as_array().unwrap();
    assert_eq!(
        input.last().unwrap(),
        &json!({"type": "function_call_output", "call_id": "c1", "output": "hello file"})
    );

    let provider =
        Provider::start(vec![anthropic::tool_call("t1", "fs_read", r#"{"path":"a.txt"}"#), anthropic::text("seen")]);
    let home = Home::new();
    configure(&home, &provider, "anthropic:claude", json!({}));
    let (out, err, ok) = bub(&home, &ws, &["run", "x"]);
    assert!(ok, "{err}");
    assert!(out.contains("seen"));
    let requests = provider.requests();
    assert_eq!(requests[0].line, "POST /v1/messages HTTP/1.1");
    assert_eq!(requests[0].header("x-api-key"), Some("sk-test"));
    assert_eq!(requests[0].body["cache_control"], json!({"type": "ephemeral"}));
    let last = requests[1].body["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["content"][0], json!({"type": "tool_result", "tool_use_id": "t1", "content": "hello file"}));
}

#[test]
fn command_mode_runs_offline_through_the_tool_hooks_behaviour_164_168_171() {
    let home = Home::new();
    let ws = workspace();
    let (out, err, ok) = bub(&home, &ws, &["run", ",echo hi"]);
    assert!(ok, "{err}");
    assert!(out.contains("hi"));
    let (out, err, ok) = bub(&home, &ws, &["run", ",fs.read a.txt"]);
    assert!(ok, "{err}");
    assert!(out.contains("hello file"));
    let entries = tape(&home);
    assert!(!kinds(&entries).contains(&"event:loop.start".to_owned()), "commands emit no RunStarted");
    let command = entries.iter().rev().find(|e| e["payload"]["name"] == "command").unwrap();
    assert_eq!(command["payload"]["data"]["name"], "fs.read");
    assert_eq!(command["payload"]["data"]["status"], "ok");

    home.install("tool-policy", &lib("tool_policy"), json!({"rules": [{"tool": "bash", "deny": "no shells"}]}));
    home.install("audit-log", &lib("audit_log"), json!({}));
    let (_, err, ok) = bub(&home, &ws, &["run", ",bash echo hi"]);
    assert!(!ok);
    assert!(err.contains("blocked by policy: no shells"), "{err}");
    let audit = std::fs::read_to_string(home.path().join("audit.jsonl")).unwrap();
    assert!(audit.contains(r#""tool":"bash""#) && audit.contains(r#""ok":false"#), "{audit}");
}

/// The builtin tools keep at most `BUB_TOOL_MAX_BYTES`: a
/// shell's output is cut with a note (the command runs on), a file read
/// past the limit is refused naming the setting; a FIFO is refused at once
/// and `bub run` exits (it used to wait for a writer forever).
#[test]
fn builtin_tools_keep_at_most_tool_max_bytes_and_refuse_fifos() {
    let home = Home::new();
    let ws = workspace();
    let env = [("BUB_TOOL_MAX_BYTES", "1048576"), ("BUB_SPILL_THRESHOLD", "0")];
    let run = |line: &str| {
        let mut all = vec!["-w", ws.path().to_str().unwrap(), "run", line];
        all.shrink_to_fit();
        bub_tests::run_bub_env(&home, &all, &env)
    };
    let (out, err, ok) = run(",head -c 3000000 /dev/zero | tr '\\0' x");
    assert!(ok, "{err}");
    assert!(
        out.contains("[output cut at 1048576 bytes (BUB_TOOL_MAX_BYTES); the command runs on]"),
        "{}",
        &out[out.len().saturating_sub(300)..]
    );
    assert!(out.len() < 1_100_000, "{}", out.len());
    std::fs::write(ws.path().join("big.txt"), "y\n".repeat(1_000_000)).unwrap();
    let (_, err, ok) = run(",fs.read big.txt");
    assert!(!ok);
    assert!(err.contains("larger than 1048576 bytes") && err.contains("BUB_TOOL_MAX_BYTES"), "{err}");
    assert!(std::process::Command::new("mkfifo").arg(ws.path().join("pipe")).status().unwrap().success());
    let started = std::time::Instant::now();
    let (_, err, ok) = run(",fs.read pipe");
    assert!(!ok);
    assert!(err.contains("it is a FIFO (named pipe), not a regular file"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

#[test]
fn the_model_command_switches_the_sessions_model_behaviour_175() {
    let provider = Provider::start(vec![chat::text("from the other model")]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:default-model", json!({}));
    let (out, err, ok) = bub(&home, &ws, &["run", ",model openai:gpt-4o"]);
    assert!(ok, "{err}");
    assert!(out.contains("Session model set to openai:gpt-4o (applies from the next turn)."), "{out}");
    assert!(provider.requests().is_empty());
    let switch = tape(&home).into_iter().find(|e| e["payload"]["name"] == "model_switch").unwrap();
    assert_eq!(switch["payload"]["data"], json!({"model": "openai:gpt-4o"}));
    let (_, err, ok) = bub(&home, &ws, &["run", "hi"]);
    assert!(ok, "{err}");
    assert_eq!(provider.requests()[0].body["model"], "gpt-4o");
    // Another session keeps the configured model.
    let provider2 = Provider::start(vec![chat::text("x")]);
    configure(&home, &provider2, "openai:default-model", json!({}));
    assert!(bub(&home, &ws, &["run", "--session-id", "other", "hi"]).2);
    assert_eq!(provider2.requests()[0].body["model"], "default-model");
    // `,model ''` clears the session's model: back to the default.
    let (out, err, ok) = bub(&home, &ws, &["run", ",model ''"]);
    assert!(ok && out.contains("Session model set to  (applies from the next turn)."), "{out}\n{err}");
    let provider3 = Provider::start(vec![chat::text("y")]);
    configure(&home, &provider3, "openai:default-model", json!({}));
    let (_, err, ok) = bub(&home, &ws, &["run", "hi"]);
    assert!(ok, "{err}");
    assert_eq!(provider3.requests()[0].body["model"], "default-model", "the cleared session uses the default");
}

#[test]
fn run_json_shows_the_whole_stream() {
    let provider =
        Provider::start(vec![chat::tool_calls("", &[("c1", "fs_read", r#"{"path":"a.txt"}"#)]), chat::text("ok")]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:m", json!({}));
    let (out, err, ok) = bub(&home, &ws, &["run", "--json", "x"]);
    assert!(ok, "{err}");
    let result: Value = serde_json::from_str(&out).unwrap();
    let kinds: Vec<&str> = result["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["usage", "tool_call", "tool_result", "final", "text", "text", "usage", "final"]);
    assert_eq!(result["events"][2]["data"], json!({"tool_results": ["hello file"]}));
    assert_eq!(result["model_output"], "ok");
}

#[test]
fn subagent_runs_a_nested_unmerged_session_behaviour_189() {
    let provider = Provider::start(vec![
        chat::tool_calls("", &[("c1", "subagent", r#"{"prompt": "sub task"}"#)]),
        chat::text("sub answer"),
        chat::text("done"),
    ]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:m", json!({}));
    let (out, err, ok) = bub(&home, &ws, &["run", "delegate"]);
    assert!(ok, "{err}");
    assert!(out.contains("done"));
    let requests = provider.requests();
    assert_eq!(requests.len(), 3);
    let sub_tools: Vec<&str> =
        requests[1].body["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert!(!sub_tools.contains(&"subagent") && sub_tools.contains(&"fs_read"), "{sub_tools:?}");
    assert_eq!(messages(&requests[1].body).last().unwrap()["content"], "sub task");
    assert_eq!(messages(&requests[2].body).last().unwrap()["content"], "sub answer");
    // The session's tape (and its record, a sidecar): none of the temp/ session.
    let tapes: Vec<_> = std::fs::read_dir(home.path().join("tapes"))
        .unwrap()
        .flatten()
        .filter(|f| !f.file_name().to_string_lossy().contains("__sidecar__"))
        .collect();
    assert_eq!(tapes.len(), 1, "the temp/ session is not merged back");
}

#[test]
fn a_hanging_provider_times_out_and_a_broken_stream_fails_clearly() {
    let provider = Provider::start(vec![Reply::Hang(std::time::Duration::from_secs(10))]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:m", json!({"model_timeout_seconds": 1}));
    bub_tests::bub_bin(); // built before the clock starts
    let started = std::time::Instant::now();
    let (_, err, ok) = bub(&home, &ws, &["run", "x"]);
    assert!(!ok);
    assert!(err.contains("Provider call did not finish within 1s"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(8));

    let provider = Provider::start(vec![Reply::Sse(vec!["{not json".into()])]);
    let home = Home::new();
    configure(&home, &provider, "openai:m", json!({}));
    let (_, err, ok) = bub(&home, &ws, &["run", "x"]);
    assert!(!ok);
    assert!(err.contains("malformed stream chunk"), "{err}");
    // The tape stays readable and records the failed run.
    let entries = tape(&home);
    assert_eq!(entries.last().unwrap()["payload"]["data"]["status"], "error");
}

/// A provider is a peer. An endless answer stops at
/// `model_max_output_bytes`, one endless event at `model_max_event_bytes`
/// (parsed in one pass: the old parser was quadratic in a line's length),
/// a stream that trickles a byte at a time at the call deadline; each error
/// names its setting, the process stays small and the tape readable.
#[test]
fn endless_huge_and_trickling_streams_are_bounded_and_named() {
    let ws = workspace();
    bub_tests::bub_bin();
    let delta = json!({"choices": [{"index": 0, "delta": {"content": "x".repeat(1000)}}]});
    let cases = [
        (
            Reply::Endless(format!("data: {delta}\n\n")),
            json!({"model_max_output_bytes": 2_000_000}),
            "went past 2000000 bytes",
            "BUB_MODEL_MAX_OUTPUT_BYTES",
        ),
        (
            Reply::Endless("data: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx".repeat(100)),
            json!({"model_max_event_bytes": 100_000}),
            "went past 100000 bytes",
            "BUB_MODEL_MAX_EVENT_BYTES",
        ),
        (
            Reply::Trickle(std::time::Duration::from_millis(50)),
            json!({"model_timeout_seconds": 1}),
            "did not finish within 1s",
            "BUB_MODEL_TIMEOUT_SECONDS",
        ),
    ];
    for (reply, settings, what, setting) in cases {
        let provider = Provider::start(vec![reply]);
        let home = Home::new();
        configure(&home, &provider, "openai:m", settings);
        let started = std::time::Instant::now();
        let (_, err, ok) = bub(&home, &ws, &["run", "x"]);
        assert!(!ok, "{setting}: {err}");
        assert!(err.contains(what) && err.contains(setting), "{setting}: {err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "{setting}");
        let entries = tape(&home);
        assert_eq!(entries.last().unwrap()["payload"]["data"]["status"], "error", "{setting}");
    }
}

#[test]
fn tape_reset_with_archive_behaviour_201() {
    let provider = Provider::start(vec![chat::text("remember me")]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:m", json!({}));
    assert!(bub(&home, &ws, &["run", "hello"]).2);
    let (out, err, ok) = bub(&home, &ws, &["run", ",tape.reset archive=true"]);
    assert!(ok, "{err}");
    let archived = out.lines().find_map(|l| l.strip_prefix("Archived: ")).expect(&out).to_owned();
    let baks: Vec<String> = std::fs::read_dir(home.path().join("tapes"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".bak"))
        .collect();
    assert_eq!(baks.len(), 2, "{baks:?}");
    let stamp = |n: &str| n.rsplit(".jsonl.").next().unwrap().to_owned();
    assert_eq!(stamp(&baks[0]), stamp(&baks[1]), "one stamp");
    assert!(std::fs::read_to_string(&archived).unwrap().contains("remember me"));
    let entries = tape(&home);
    assert_eq!(entries[0]["payload"]["state"], json!({"owner": "human", "archived": archived}));
    let names: Vec<&str> = entries.iter().filter_map(|e| e["payload"]["name"].as_str()).collect();
    assert_eq!(names[1..4], ["handoff", "sidecar.reset", "sidecar.archive"]);
    assert!(!entries.iter().any(|e| e.to_string().contains("remember me")), "the old entries are gone");
}

#[test]
fn a_failing_configured_model_falls_back_behaviour_227() {
    let relay = Provider::start(vec![Reply::Status(503, "down".into(), vec![]); 3]);
    let openai = Provider::start(vec![chat::text("from the fallback")]);
    let home = Home::new();
    let ws = workspace();
    let config = json!({
        "model": "relay:big",
        "fallback_models": ["openai:gpt-5"],
        "providers": {"relay": {"type": "openai", "api_base": relay.base_url, "api_key": "relay-key"}},
        "api_base": {"openai": openai.base_url},
        "api_key": {"openai": "openai-key"},
        "client_args": {"retry_delay": 0.01, "max_retry_delay": 0.02},
    });
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let (out, err, ok) = bub(&home, &ws, &["run", "x"]);
    assert!(ok, "{err}");
    assert!(out.contains("from the fallback"), "{out}");
    assert_eq!(relay.requests().len(), 3);
    assert_eq!(relay.requests()[0].header("authorization"), Some("Bearer relay-key"));
    let second = &openai.requests()[0];
    assert_eq!(second.header("authorization"), Some("Bearer openai-key"));
    assert_eq!(second.body["model"], "gpt-5");
}

#[test]
fn the_sessions_reasoning_effort_wins_behaviour_218() {
    let provider = Provider::start(vec![chat::text("ok")]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:m", json!({"completion_args": {"reasoning_effort": "low", "tools": [1]}}));
    home.scripted("effort", "", json!({"load_state": {"return": {"reasoning_effort": "high"}}}));
    let (_, err, ok) = bub(&home, &ws, &["run", "x"]);
    assert!(ok, "{err}");
    let body = &provider.requests()[0].body;
    assert_eq!(body["reasoning_effort"], "high");
    assert!(
        body["tools"].as_array().unwrap().iter().all(|t| t["type"] == "function"),
        "tools in completion args are ignored"
    );
}

#[test]
fn session_settings_live_on_the_tape_as_switch_events_behaviour_175_218() {
    let provider = Provider::start(vec![chat::text("one"), chat::text("two")]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:configured", json!({}));
    let (out, err, ok) = bub(&home, &ws, &["run", ",reasoning_effort high"]);
    assert!(ok, "{err}");
    assert!(out.contains("Session reasoning effort set to high (applies from the next turn)."), "{out}");
    let (_, err, ok) = bub(&home, &ws, &["run", ",reasoning_effort ' '"]);
    assert!(!ok && err.contains("reasoning_effort must not be empty"), "{err}");
    // Lines as Python Bub writes them on the same session tape: a model
    // switch, then one that clears the effort, then one that sets it again.
    let file = std::fs::read_dir(home.path().join("tapes"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| !p.to_string_lossy().contains("__sidecar__") && p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    let next = std::fs::read_to_string(&file).unwrap().lines().count() + 1;
    let python = |id: usize, name: &str, data: Value| {
        format!(
            "{{\"id\": {id}, \"kind\": \"event\", \"payload\": {{\"name\": \"{name}\", \"data\": {data}}}, \"meta\": {{}}, \"date\": \"2026-11-30T10:00:00.000001+00:00\"}}\n"
        )
    };
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str(&python(next, "model_switch", json!({"model": "openai:from-python"})));
    text.push_str(&python(next + 1, "reasoning_effort_switch", json!({"reasoning_effort": ""})));
    std::fs::write(&file, &text).unwrap();
    let (_, err, ok) = bub(&home, &ws, &["run", "hi"]);
    assert!(ok, "{err}");
    let body = &provider.requests()[0].body;
    assert_eq!(body["model"], "from-python");
    assert!(body.get("reasoning_effort").is_none(), "an empty switch clears the setting: {body}");
    text = std::fs::read_to_string(&file).unwrap();
    let next = text.lines().count() + 1;
    text.push_str(&python(next, "reasoning_effort_switch", json!({"reasoning_effort": "low"})));
    std::fs::write(&file, &text).unwrap();
    assert!(bub(&home, &ws, &["run", "again"]).2);
    assert_eq!(provider.requests()[1].body["reasoning_effort"], "low");
    // No sessions.json: the tape is the only record.
    assert!(!home.path().join("sessions.json").exists());
}

/// A plugin tool's context carries the live
/// tape and the live state (Bub's `context.tape` / `context.state`): the
/// tool (tp-sdk's `tape_note`, a cdylib) records an event on the run's tape
/// and sets a state key through them, and reads both back.
#[test]
fn a_context_tool_gets_the_live_tape_and_state() {
    let provider = Provider::start(vec![
        chat::tool_calls("", &[("c1", "tape_note", r#"{"text": "remember this"}"#)]),
        chat::text("noted"),
    ]);
    let home = Home::new();
    let ws = workspace();
    configure(&home, &provider, "openai:m", json!({}));
    home.install("sdk", &lib("tp-sdk"), json!({}));
    // "[agent]": tp-sdk's own model hook steps aside for Bub's agent.
    let (out, err, ok) = bub(&home, &ws, &["run", "note it [agent]"]);
    assert!(ok, "{err}");
    assert!(out.contains("noted"), "{out}");
    let result = messages(&provider.requests()[1].body).into_iter().find(|m| m["role"] == "tool").unwrap();
    let result: Value = serde_json::from_str(result["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["noted"], "remember this", "the live state: {result}");
    assert_eq!(result["anchors"], json!(["session/start"]), "the live tape: {result}");
    let note = tape(&home).into_iter().find(|e| e["payload"]["name"] == "sdk.note").expect("the event is on the tape");
    assert_eq!(note["payload"]["data"], json!({"text": "remember this"}));
}

/// A subagent's `allowed_tools` takes registry names and model-facing
/// aliases alike, case-insensitively (Bub's `resolve_tool_names`): the
/// sub-run is offered exactly those tools, and its `loop.start` records
/// the tools it may call and the skills as they were asked.
#[test]
fn a_subagent_accepts_model_facing_tool_names_and_records_what_was_asked() {
    // A named session: its tape is kept (a temp one is not).
    let args = json!({"prompt": "go", "session": "helper", "allowed_tools": ["tape_info", " FS_READ "], "allowed_skills": ["Notes"]});
    let provider = Provider::start(vec![
        chat::tool_calls("", &[("c1", "subagent", &args.to_string())]),
        chat::text("sub done"),
        chat::text("done"),
    ]);
    let home = Home::new();
    configure(&home, &provider, "openai:m", json!({}));
    let ws = workspace();
    let (out, err, ok) = bub(&home, &ws, &["run", "delegate"]);
    assert!(ok && out.contains("done"), "{out}\n{err}");
    let requests = provider.requests();
    assert_eq!(requests.len(), 3, "the sub-run called the model: {:?}", requests[1].body);
    let mut offered: Vec<&str> = requests[1].body["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["function"]["name"].as_str()).collect())
        .unwrap_or_default();
    offered.sort();
    assert_eq!(offered, ["fs_read", "tape_info"]);
    let entries = tape(&home);
    let starts: Vec<&Value> = entries
        .iter()
        .filter(|e| e["kind"] == "event" && e["payload"]["name"] == "loop.start")
        .map(|e| &e["payload"]["data"])
        .collect();
    assert!(
        starts
            .iter()
            .any(|d| d["allowed_tools"] == json!(["fs.read", "tape.info"]) && d["allowed_skills"] == json!(["Notes"])),
        "{starts:#?}"
    );
}
