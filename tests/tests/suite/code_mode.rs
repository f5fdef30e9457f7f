//! Code mode (Bub's `bub.builtin.codemode`): `,code_mode` as a
//! session setting on the tape, the tools the model is offered then, the
//! `<code_mode>` prompt and its stub file, `run_code` in a real `python3`
//! whose `tools.<name>` calls go through the tool hooks (a policy plugin
//! denies one, the audit log records them), media attached from code,
//! failures and timeouts, the `republic` module's models served by the
//! host — through `bub run` against a scripted provider.

use bub_tests::{
    lib,
    provider::{chat, Provider},
    run_bub, Home,
};
use serde_json::{json, Value};

fn setup(provider: &Provider) -> (Home, tempfile::TempDir) {
    let home = Home::new();
    let config = json!({"model": "openai:m", "api_key": "sk-test", "api_base": provider.base_url,
        "client_args": {"retry_delay": 0.01, "max_retry_delay": 0.05}});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let ws = tempfile::tempdir().unwrap();
    // A 1×1 PNG.
    std::fs::write(
        ws.path().join("dot.png"),
        [
            0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, 0x49, 0x48, 0x44, 0x52, 0, 0, 0, 1, 0, 0, 0,
            1, 8, 6, 0, 0, 0, 0x1f, 0x15, 0xc4, 0x89,
        ],
    )
    .unwrap();
    (home, ws)
}

fn bub(home: &Home, ws: &tempfile::TempDir, args: &[&str]) -> (String, String, bool) {
    let mut all = vec!["-w", ws.path().to_str().unwrap()];
    all.extend_from_slice(args);
    run_bub(home, &all)
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"].as_array().into_iter().flatten().map(|t| t["function"]["name"].as_str().unwrap().to_owned()).collect()
}

fn tool_messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").map(|m| m["content"].clone()).collect()
}

fn python3() -> bool {
    let ok = std::process::Command::new("python3").arg("-c").arg("pass").status().is_ok_and(|s| s.success());
    if !ok {
        eprintln!("SKIPPED: code mode runs python3, which is not on PATH");
    }
    ok
}

#[test]
fn code_mode_offers_direct_tools_and_runs_code_through_the_tool_hooks() {
    if !python3() {
        return;
    }
    let code = "info = await tools.tape_info()\nprint('tape', info['entries'] > 0, info['last_anchor'])\n\
                try:\n    await tools.tape_anchors()\nexcept Exception as e:\n    print('denied:', e)\n\
                print(await tools.attach_image(image='dot.png'))\n\
                found = await tools.tape_search(query='hi', sessions='all')\n\
                print('found', [m.get('tape') is not None or m.get('session') is not None for m in found['matches']][:1])";
    let provider = Provider::start(vec![
        chat::text("not in code mode yet"),
        chat::tool_calls("", &[("c1", "run_code", &json!({"code": code}).to_string())]),
        chat::text("done"),
    ]);
    let (home, ws) = setup(&provider);
    home.install(
        "tool-policy",
        &lib("tool_policy"),
        json!({"rules": [{"tool": "tape_anchors", "deny": "no anchors"}]}),
    );
    home.install("audit-log", &lib("audit_log"), json!({}));

    // Off: no run_code and no code-only tools; the stub is not written.
    assert!(bub(&home, &ws, &["run", "hi"]).2);
    let first = &provider.requests()[0].body;
    let names = tool_names(first);
    assert!(!names.iter().any(|n| n == "run_code" || n.starts_with("attach_")), "{names:?}");
    assert!(names.iter().any(|n| n == "tape_search") && names.iter().any(|n| n == "web_fetch"), "{names:?}");

    let (out, err, ok) = bub(&home, &ws, &["run", ",code_mode enable=true"]);
    assert!(ok, "{err}");
    assert!(out.contains("Session code mode enabled (applies from the next turn)."), "{out}");

    let (out, err, ok) = bub(&home, &ws, &["run", "use code"]);
    assert!(ok, "{err}");
    assert!(out.contains("done"), "{out}");
    let second = &provider.requests()[1].body;
    let names = tool_names(second);
    // Bub's split: the model keeps the direct tools, the rest only from code.
    for direct in ["run_code", "bash", "fs_read", "spill_read"] {
        assert!(names.iter().any(|n| n == direct), "{direct} missing: {names:?}");
    }
    for code_only in ["tape_search", "tape_info", "web_fetch", "subagent", "attach_image"] {
        assert!(!names.iter().any(|n| n == code_only), "{code_only} offered: {names:?}");
    }
    let system = second["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("<code_mode>"), "{system}");
    let stub_path = system.split("stub file: ").nth(1).unwrap().lines().next().unwrap();
    let stub = std::fs::read_to_string(stub_path).unwrap();
    assert!(stub.contains("async def tape_search(*, query: str, limit: int = 20"), "{stub}");
    assert!(stub.contains("sessions: str | list[str] = ..."), "searching other sessions from code: {stub}");
    assert!(stub.contains("async def attach_image(*, image: republic.Image | str) -> str:"), "{stub}");
    assert!(!stub.contains("def bash("), "direct tools are not in the stub: {stub}");

    // What the code printed, with the denial, and the attached image.
    let result = &tool_messages(&provider.requests()[2].body)[0];
    let text = serde_json::to_string(result).unwrap();
    // Structured values in code (Bub's TapeInfo as a dict), not the text.
    assert!(text.contains("tape True session/start"), "{text}");
    // Bub's BubError reads `[kind] message` in code.
    assert!(text.contains("denied: [tool] blocked by policy: no anchors"), "{text}");
    assert!(text.contains("The image is attached to the run_code result."), "{text}");
    assert!(text.contains("image/png") || text.contains("data:image/png;base64,"), "{text}");
    // A search across sessions from code: what the first turn said, naming where.
    assert!(text.contains("found [True]"), "{text}");
    // The hooks saw the code's calls by their model-facing names, as Bub's.
    let audit = std::fs::read_to_string(home.path().join("audit.jsonl")).unwrap();
    assert!(audit.contains(r#""tool":"tape_info""#) && audit.contains(r#""tool":"run_code""#), "{audit}");
}

#[test]
fn failing_and_hanging_code_fail_the_call_with_the_output_so_far() {
    if !python3() {
        return;
    }
    let provider = Provider::start(vec![
        chat::tool_calls(
            "",
            &[
                ("c1", "run_code", &json!({"code": "print('before')\n1/0"}).to_string()),
                (
                    "c2",
                    "run_code",
                    // Three seconds: a loaded machine still starts the runner and
                    // sends what it printed well within them.
                    &json!({"code": "print('waiting')\nimport time\ntime.sleep(30)", "timeout_seconds": 3}).to_string(),
                ),
                ("c3", "run_code", &json!({"code": "await tools.bash(command='ls')"}).to_string()),
            ],
        ),
        chat::text("ok"),
    ]);
    let (home, ws) = setup(&provider);
    assert!(bub(&home, &ws, &["run", ",code_mode enable=true"]).2);
    let started = std::time::Instant::now();
    let (_, err, ok) = bub(&home, &ws, &["run", "go"]);
    assert!(ok, "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "the timeout stopped the sleeping code");
    let results: Vec<String> =
        tool_messages(&provider.requests()[1].body).iter().map(|r| serde_json::to_string(r).unwrap()).collect();
    assert!(
        results[0].contains("Code raised ZeroDivisionError: division by zero") && results[0].contains("before"),
        "{}",
        results[0]
    );
    assert!(results[0].contains("traceback"), "{}", results[0]);
    assert!(results[1].contains("Code timed out after 3 seconds") && results[1].contains("waiting"), "{}", results[1]);
    // bash is direct: code cannot call it.
    assert!(results[2].contains("AttributeError") && results[2].contains("bash"), "{}", results[2]);
}

#[test]
fn the_code_mode_setting_is_a_switch_event_and_off_drops_run_code() {
    let provider = Provider::start(vec![chat::text("a")]);
    let (home, ws) = setup(&provider);
    assert!(bub(&home, &ws, &["run", ",code_mode enable=true"]).2);
    let (out, _, ok) = bub(&home, &ws, &["run", ",code_mode enable=false"]);
    assert!(ok && out.contains("Session code mode disabled"), "{out}");
    assert!(bub(&home, &ws, &["run", "x"]).2);
    let names = tool_names(&provider.requests()[0].body);
    assert!(!names.iter().any(|n| n == "run_code"), "{names:?}");
    let tapes = home.path().join("tapes");
    let text: String = std::fs::read_dir(tapes)
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert!(text.contains(r#""name":"code_mode_switch","data":{"code_mode":true}"#), "{text}");
    assert!(text.contains(r#""name":"code_mode_switch","data":{"code_mode":false}"#), "{text}");
}

/// An image attached in `run_code` reaches the model in each wire format,
/// as Republic sends a tool result with media: chat completions as
/// `image_url` parts of the tool message, Responses as `input_image` parts
/// of the `function_call_output`, Anthropic as an `image` block of the
/// `tool_result` (the printed text beside it in each).
#[test]
fn an_attached_image_reaches_the_model_in_every_wire_format() {
    use bub_tests::provider::{anthropic, responses};
    if !python3() {
        return;
    }
    let code = json!({"code": "print('see the dot')\nawait tools.attach_image(image='dot.png')"}).to_string();
    let formats: [(&str, Value, Vec<bub_tests::provider::Reply>); 3] = [
        ("openai:m", json!({}), vec![chat::tool_calls("", &[("c1", "run_code", &code)]), chat::text("a dot")]),
        (
            "openai:m",
            json!({"api_format": "responses"}),
            vec![responses::tool_call("c1", "run_code", &code), responses::text("a dot")],
        ),
        ("anthropic:m", json!({}), vec![anthropic::tool_call("c1", "run_code", &code), anthropic::text("a dot")]),
    ];
    for (model, client_args, replies) in formats {
        let provider = Provider::start(replies);
        let (home, ws) = setup(&provider);
        let mut args = json!({"retry_delay": 0.01, "max_retry_delay": 0.05});
        for (k, v) in client_args.as_object().unwrap() {
            args[k] = v.clone();
        }
        let config = json!({"model": model, "api_key": "sk-test", "api_base": provider.base_url, "client_args": args});
        std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
        assert!(bub(&home, &ws, &["run", ",code_mode enable=true"]).2);
        let (out, err, ok) = bub(&home, &ws, &["run", "look"]);
        assert!(ok && out.contains("a dot"), "{model} {client_args}: {out}\n{err}");
        let body = &provider.requests()[1].body;
        let sent = match client_args.get("api_format").and_then(Value::as_str) {
            Some("responses") => body["input"]
                .as_array()
                .unwrap()
                .iter()
                .find(|i| i["type"] == "function_call_output")
                .map(|i| i["output"].clone()),
            _ if model.starts_with("anthropic") => body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
                .find(|b| b["type"] == "tool_result")
                .map(|b| b["content"].clone()),
            _ => tool_messages(body).into_iter().next(),
        }
        .unwrap_or_else(|| panic!("{model} {client_args}: no tool result in {body}"));
        let parts = sent.as_array().unwrap_or_else(|| panic!("{model} {client_args}: {sent}"));
        let text = serde_json::to_string(parts).unwrap();
        assert!(text.contains("see the dot"), "{model} {client_args}: {text}");
        let image = match client_args.get("api_format").and_then(Value::as_str) {
            Some("responses") => parts.iter().find(|p| p["type"] == "input_image").map(|p| p["image_url"].clone()),
            _ if model.starts_with("anthropic") => parts.iter().find(|p| p["type"] == "image").map(|p| {
                json!(format!(
                    "data:{};base64,{}",
                    p["source"]["media_type"].as_str().unwrap_or(""),
                    p["source"]["data"].as_str().unwrap_or("")
                ))
            }),
            _ => parts.iter().find(|p| p["type"] == "image_url").map(|p| p["image_url"]["url"].clone()),
        };
        let image = image.unwrap_or_else(|| panic!("{model} {client_args}: no image in {text}"));
        assert!(image.as_str().unwrap().starts_with("data:image/png;base64,iVBORw0KGgo"), "{model}: {image}");
    }
}

/// The code's `republic` module, as Bub's runner gives it: a chat
/// (unstreamed, as Republic's `chat()` sends it) with a system message and
/// an image, a stream, embeddings and a System One decision, each made by
/// the host with its own credentials against the provider's documented
/// endpoint; a provider without decisions refused in Bub's words; a
/// `republic.Image` attached as it is.
#[test]
fn republic_models_in_code_are_called_by_the_host() {
    if !python3() {
        return;
    }
    let code = r#"
from republic.decisions import Noul, Choice
model = republic.get_model()
chart = republic.Image("image/png", data=b"\x89PNG")
reply = await model.chat([republic.system("Be brief."), republic.user("Describe", chart)], temperature=0.2, max_tokens=50)
print("chat:", reply.text, reply.finish_reason, reply.token_usage.input_tokens, reply.message.role, reply.refusal)
async with model.stream("Write a haiku.") as stream:
    kinds = [type(event).__name__ async for event in stream]
print("stream:", stream.text, sorted(set(kinds)), kinds[-1])
emb = await republic.get_embedding_model("openai:text-embedding-3-small").embed_many(["a", "b"], dimensions=2)
print("vectors:", emb.vectors, emb.vector, emb.token_usage.input_tokens)
d = await republic.get_decision_model("openrouter:typesafe/jev").decide(
    {"x": 1}, questions={"ok": Noul("Is it ok?"), "pick": Choice("Which?", ["a", "b"])})
print("decide:", d.ok.noul, d.pick.choice, d.answers["pick"].confidence)
try:
    await republic.get_decision_model("openai:m").decide("s", questions={"q": Noul("?")})
except Exception as e:
    print("refused:", type(e).__name__, e)
print(await tools.attach_image(image=republic.Image("image/png", url="https://example.com/a.png")))
"#;
    let json_reply = |body: Value| bub_tests::provider::Reply::Status(200, body.to_string(), vec![]);
    let provider = Provider::start(vec![
        chat::tool_calls("", &[("c1", "run_code", &json!({"code": code}).to_string())]),
        json_reply(json!({"id": "c-1", "model": "m-2024", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": "A chart."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3}})),
        chat::text("an old pond"),
        json_reply(json!({"model": "text-embedding-3-small", "usage": {"prompt_tokens": 2},
            "data": [{"index": 1, "embedding": [0.3, 0.4]}, {"index": 0, "embedding": [0.1, 0.2]}]})),
        json_reply(json!({"model": "typesafe/jev", "usage": {"input_tokens": 9, "output_tokens": 0}, "answers": {
            "ok": {"type": "noul", "noul": 0.8},
            "pick": {"type": "choice", "choice": "b", "probabilities": {"a": 0.1, "b": 0.9}, "confidence": 0.9}}})),
        chat::text("done"),
    ]);
    let (home, ws) = setup(&provider);
    assert!(bub(&home, &ws, &["run", ",code_mode enable=true"]).2);
    let (out, err, ok) = bub(&home, &ws, &["run", "use republic"]);
    assert!(ok && out.contains("done"), "{out}\n{err}");
    let requests = provider.requests();
    let result = serde_json::to_string(&tool_messages(&requests.last().unwrap().body)).unwrap();
    let result: String = serde_json::from_str::<Value>(&result).unwrap().to_string();
    assert!(result.contains("chat: A chart. stop 7 assistant None"), "{result}");
    assert!(result.contains("stream: an old pond ['Completed', 'TextDelta', 'UsageDelta'] Completed"), "{result}");
    assert!(result.contains("vectors: [[0.1, 0.2], [0.3, 0.4]] [0.1, 0.2] 2"), "{result}");
    assert!(result.contains("decide: 0.8 b 0.9"), "{result}");
    assert!(
        result.contains(
            "refused: BubError [tool] republic.decide failed: UnsupportedApiFormatError: Provider 'openai' supports \
             no decision API format"
        ),
        "{result}"
    );
    assert!(result.contains("The image is attached to the run_code result."), "{result}");
    assert!(result.contains("https://example.com/a.png"), "the republic.Image is attached: {result}");

    // What the host sent for the code: the session's model and key.
    let [_, chat_call, stream_call, embed_call, decide_call, _] = &requests[..] else {
        panic!("{} requests: {:?}", requests.len(), requests.iter().map(|r| &r.line).collect::<Vec<_>>())
    };
    assert!(chat_call.line.contains("/v1/chat/completions"), "{}", chat_call.line);
    assert_eq!(chat_call.header("authorization"), Some("Bearer sk-test"));
    assert!(chat_call.body.get("stream").is_none(), "chat() is unstreamed: {}", chat_call.body);
    assert_eq!(chat_call.body["temperature"], 0.2);
    assert_eq!(chat_call.body["max_completion_tokens"], 50);
    assert_eq!(
        chat_call.body["messages"],
        json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": [
            {"type": "text", "text": "Describe"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}}]}])
    );
    assert!(chat_call.body.get("tools").is_none());
    assert_eq!(stream_call.body["stream"], true);
    assert_eq!(stream_call.body["messages"], json!([{"role": "user", "content": "Write a haiku."}]));
    assert!(embed_call.line.contains("/v1/embeddings"), "{}", embed_call.line);
    assert_eq!(
        embed_call.body,
        json!({"model": "text-embedding-3-small", "input": ["a", "b"], "encoding_format": "float", "dimensions": 2})
    );
    assert!(decide_call.line.contains("/v1/systemone"), "{}", decide_call.line);
    assert_eq!(
        decide_call.body,
        json!({"model": "typesafe/jev", "state": {"x": 1}, "questions": {
            "ok": {"type": "noul", "instructions": "Is it ok?"},
            "pick": {"type": "choice", "instructions": "Which?", "criteria": {"a": null, "b": null}}}})
    );
}
