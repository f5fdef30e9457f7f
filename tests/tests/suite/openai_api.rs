//! The http channel's OpenAI-compatible API (chat completions and the
//! Responses API), tested with the official `openai` Python client from
//! PyPI (pinned in `tests/python/openai-client-requirements.txt`) and
//! with `curl`: a real gateway, a model on loopback, turns on the session
//! the `user` field, the `X-Bub-Session` header or the continued
//! response names.

use bub_tests::{
    gateway::GatewayProcess,
    lib,
    provider::{chat, Provider},
    python::openai_client_venv_or_skip,
    Home,
};
use serde_json::{json, Value};
use std::time::Duration;

const TOKEN: &str = "openai-test-token";

/// A gateway with the http channel, whose model answers "echo: <the
/// prompt's last line>" in two streamed chunks.
fn gateway(home: &Home) -> (GatewayProcess, String, Provider) {
    let provider = Provider::respond(|request| {
        let last = request.body["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or_default();
        let text = last["content"].as_str().unwrap_or_default().lines().last().unwrap_or_default().to_owned();
        chat::text(&format!("echo: {text}"))
    });
    home.install(
        "http-channel",
        &lib("http-channel"),
        json!({"bind": "127.0.0.1:0", "token": TOKEN, "model_name": "bub-agent"}),
    );
    let (gateway, base) = start(home, &provider);
    (gateway, base, provider)
}

/// Starts the gateway of `home` with `provider` as its model.
fn start(home: &Home, provider: &Provider) -> (GatewayProcess, String) {
    let env = [("BUB_MODEL", "openai:m"), ("BUB_API_BASE", provider.base_url.as_str()), ("OPENAI_API_KEY", "none")];
    let mut gateway = GatewayProcess::start(home.path(), &[], &env);
    let base = gateway.address(home.path(), "http-channel");
    (gateway, base)
}

/// Runs `script` with the official client (`client`, on `base` with the
/// token, ready to use), `json`, `sys` and `openai` imported; the JSON it
/// prints last.
fn run_client(venv: &std::path::Path, script: &str, base: &str, gw: &GatewayProcess) -> Value {
    let script = format!(
        "import json, sys, openai\nbase, token = sys.argv[1], sys.argv[2]\n\
        client = openai.OpenAI(base_url=base + \"/v1\", api_key=token)\n{script}"
    );
    let output = std::process::Command::new(venv.join("bin/python"))
        .args(["-c", &script, base, TOKEN])
        .output()
        .expect("run the openai client");
    assert!(output.status.success(), "{}\n{}", String::from_utf8_lossy(&output.stderr), gw.log());
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Stops the gateway as systemd would, and checks it ended well.
fn stop(mut gw: GatewayProcess) {
    gw.signal("TERM");
    assert!(gw.wait(std::time::Duration::from_secs(20)).is_some_and(|s| s.success()));
}

/// The official client lists the agent as a model, gets an answer streamed
/// and not, on the session its `user` names (the second turn remembers
/// the first: it is on that session's tape), and a wrong key is its
/// `AuthenticationError`.
#[test]
fn the_official_openai_client_talks_to_the_agent() {
    let Some(venv) = openai_client_venv_or_skip("the_official_openai_client_talks_to_the_agent") else { return };
    let home = Home::new();
    let (gw, base, provider) = gateway(&home);
    let script = r#"
out = {"models": [m.id for m in client.models.list()]}
r = client.chat.completions.create(model="bub-agent", user="oa-1",
    messages=[{"role": "system", "content": "ignored"}, {"role": "user", "content": "hello there"}])
out["plain"] = {"content": r.choices[0].message.content, "finish": r.choices[0].finish_reason, "model": r.model, "object": r.object}
chunks = list(client.chat.completions.create(model="bub-agent", user="oa-1", stream=True,
    messages=[{"role": "user", "content": "hello there"}, {"role": "assistant", "content": "echo: hello there"},
              {"role": "user", "content": [{"type": "text", "text": "and again"}]}]))
out["streamed"] = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
out["chunks"] = len(chunks)
out["last_finish"] = chunks[-1].choices[0].finish_reason
try:
    openai.OpenAI(base_url=base + "/v1", api_key="wrong").models.list()
    out["wrong_key"] = "accepted"
except openai.AuthenticationError as e:
    out["wrong_key"] = e.status_code
print(json.dumps(out))
"#;
    let out = run_client(venv, script, &base, &gw);
    assert_eq!(out["models"], json!(["bub-agent"]));
    assert_eq!(
        out["plain"],
        json!({"content": "echo: hello there", "finish": "stop", "model": "bub-agent", "object": "chat.completion"})
    );
    assert_eq!(out["streamed"], "echo: and again");
    assert!(out["chunks"].as_u64().unwrap() >= 3, "an opening chunk, deltas, a closing one: {out}");
    assert_eq!(out["last_finish"], "stop");
    assert_eq!(out["wrong_key"], 401);
    // One turn per request on session oa-1; the earlier messages the client
    // resent were not replayed: the second request's model call has the
    // first turn from the tape, once.
    let requests = provider.requests();
    assert_eq!(requests.len(), 2, "one model call per turn");
    let second = requests[1].body["messages"].to_string();
    assert_eq!(second.matches("hello there").count(), 2, "the first turn, once, from the tape: {second}");
    assert!(!second.contains("ignored"), "a client's system message is not the agent's: {second}");
    stop(gw);
}

/// `curl`, as the API's own documentation shows it: plain and streamed
/// (`data:` chunks, then `data: [DONE]`), the session from `X-Bub-Session`,
/// errors in OpenAI's shape.
#[test]
fn curl_gets_chat_completions_plain_and_streamed() {
    if std::process::Command::new("curl").arg("--version").output().is_err() {
        return eprintln!("SKIPPED curl_gets_chat_completions_plain_and_streamed: curl is not installed");
    }
    let home = Home::new();
    let (gw, base, _provider) = gateway(&home);
    let curl = |extra: &[&str], body: &str| {
        let out = std::process::Command::new("curl")
            .args(["-sS", "-N", &format!("{base}/v1/chat/completions"), "-H", "Content-Type: application/json"])
            .args(extra)
            .args(["-d", body])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let auth = format!("Authorization: Bearer {TOKEN}");
    let plain = curl(
        &["-H", &auth, "-H", "X-Bub-Session: curl-1"],
        r#"{"model": "bub", "messages": [{"role": "user", "content": "hi curl"}]}"#,
    );
    let plain: Value = serde_json::from_str(&plain).unwrap_or_else(|e| panic!("{e}: {plain}"));
    assert_eq!(plain["choices"][0]["message"]["content"], "echo: hi curl");
    let streamed = curl(
        &["-H", &auth, "-H", "X-Bub-Session: curl-1"],
        r#"{"model": "bub", "stream": true, "messages": [{"role": "user", "content": "stream me"}]}"#,
    );
    let frames: Vec<&str> = streamed.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(frames.last(), Some(&"[DONE]"), "{streamed}");
    let text: String = frames[..frames.len() - 1]
        .iter()
        .map(|f| serde_json::from_str::<Value>(f).unwrap())
        .map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(text, "echo: stream me");
    let unauthorized = curl(&[], r#"{"model": "bub", "messages": [{"role": "user", "content": "x"}]}"#);
    assert!(unauthorized.contains(r#""error""#) && unauthorized.contains("bearer token"), "{unauthorized}");
    let no_user = curl(&["-H", &auth], r#"{"model": "bub", "messages": [{"role": "system", "content": "x"}]}"#);
    assert!(no_user.contains("no user message") && no_user.contains("invalid_request_error"), "{no_user}");
    // Both turns landed on session curl-1's tape.
    let (found, err, ok) = bub_tests::run_bub(&home, &["run", "--session-id", "curl-1", ",tape.search query=stream"]);
    assert!(ok && found.contains("stream me"), "{err}{found}");
    stop(gw);
}

/// The official client's Responses API: a plain answer (`output_text`),
/// a raw event stream (the documented event sequence, numbered in order),
/// and the client's own stream helper, which rebuilds the response from
/// the events and fails on any out of place. A request naming no session
/// but continuing a response (`previous_response_id`) runs on that
/// response's session.
#[test]
fn the_official_openai_client_speaks_the_responses_api() {
    let Some(venv) = openai_client_venv_or_skip("the_official_openai_client_speaks_the_responses_api") else { return };
    let home = Home::new();
    let (gw, base, provider) = gateway(&home);
    let script = r#"
out = {}
r = client.responses.create(model="bub-agent", input="first words", instructions="ignored",
    extra_headers={"X-Bub-Session": "rs-1"})
out["plain"] = {"text": r.output_text, "status": r.status, "object": r.object, "model": r.model}
events = list(client.responses.create(model="bub-agent", stream=True, previous_response_id=r.id,
    input=[{"role": "user", "content": [{"type": "input_text", "text": "second words"}]}]))
out["types"] = [e.type for e in events]
out["sequence"] = [e.sequence_number for e in events]
out["deltas"] = "".join(e.delta for e in events if e.type == "response.output_text.delta")
out["completed"] = events[-1].response.output_text
with client.responses.stream(model="bub-agent", input="third words", previous_response_id=events[-1].response.id) as s:
    for _ in s:
        pass
    out["helper"] = s.get_final_response().output_text
print(json.dumps(out))
"#;
    let out = run_client(venv, script, &base, &gw);
    assert_eq!(
        out["plain"],
        json!({"text": "echo: first words", "status": "completed", "object": "response", "model": "bub-agent"})
    );
    let types: Vec<&str> = out["types"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let deltas = types.iter().filter(|t| **t == "response.output_text.delta").count();
    let mut expected =
        vec!["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"];
    expected.extend(std::iter::repeat_n("response.output_text.delta", deltas));
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert!(deltas >= 2, "the model's two chunks: {types:?}");
    assert_eq!(types, expected);
    let sequence: Vec<u64> = out["sequence"].as_array().unwrap().iter().filter_map(Value::as_u64).collect();
    assert_eq!(sequence, (0..types.len() as u64).collect::<Vec<_>>());
    assert_eq!(out["deltas"], "echo: second words");
    assert_eq!(out["completed"], "echo: second words");
    assert_eq!(out["helper"], "echo: third words");
    // All three turns on session rs-1: the third model call has the first
    // two from the tape, and `instructions` is not the agent's prompt.
    let third = provider.requests()[2].body["messages"].to_string();
    assert!(third.contains("first words") && third.contains("second words"), "{third}");
    assert!(!third.contains("ignored"), "{third}");
    let (found, err, ok) = bub_tests::run_bub(&home, &["run", "--session-id", "rs-1", ",tape.search query=third"]);
    assert!(ok && found.contains("third words"), "{err}{found}");
    stop(gw);
}

/// Sessions are the clients' own. A `previous_response_id` the gateway
/// did not make (the old guessable `resp-<pid>-<n>` shape, a forged
/// `resp_…`) is OpenAI's 400 `previous_response_not_found` and runs
/// nothing; a real one still continues its conversation after a restart;
/// two clients that name no session never share one, on either API.
#[test]
fn openai_sessions_are_the_clients_own() {
    let Some(venv) = openai_client_venv_or_skip("openai_sessions_are_the_clients_own") else { return };
    let home = Home::new();
    let (gw, base, provider) = gateway(&home);
    let script = r#"
out = {"unknown": []}
for bad in ["resp-4242-1", "resp_" + "A" * 60, "resp_c2Vzc2lvbg"]:
    try:
        client.responses.create(model="bub-agent", input="take over", previous_response_id=bad)
        out["unknown"].append("accepted")
    except openai.BadRequestError as e:
        out["unknown"].append([e.status_code, e.code, e.body.get("param"), e.body.get("type")])
first = client.responses.create(model="bub-agent", input="my PIN is hunter2")
other = client.responses.create(model="bub-agent", input="what is my PIN?")
a = client.chat.completions.create(model="bub-agent", messages=[{"role": "user", "content": "my code word is kumquat"}])
b = client.chat.completions.create(model="bub-agent", messages=[
    {"role": "user", "content": "hello"}, {"role": "assistant", "content": "echo: hello"},
    {"role": "user", "content": "what is my code word?"}])
out["first"] = first.id
out["b"] = b.choices[0].message.content
print(json.dumps(out))
"#;
    let out = run_client(venv, script, &base, &gw);
    let refused = json!([400, "previous_response_not_found", "previous_response_id", "invalid_request_error"]);
    assert_eq!(out["unknown"], json!([refused, refused, refused]), "{out}");
    let first = out["first"].as_str().unwrap().to_owned();
    assert!(first.starts_with("resp_") && first.len() >= 5 + 22, "at least 128 random bits: {first}");
    let bodies: Vec<String> = provider.requests().iter().map(|r| r.body["messages"].to_string()).collect();
    assert!(!bodies.iter().any(|b| b.contains("take over")), "a refused continuation ran no turn");
    assert_eq!(bodies.len(), 4, "{bodies:#?}");
    assert!(!bodies[1].contains("hunter2"), "another Responses client saw the first one's turn: {}", bodies[1]);
    assert!(!bodies[3].contains("kumquat"), "another chat client saw the first one's turn: {}", bodies[3]);
    assert!(bodies[3].contains("echo: hello"), "a chat naming no session is told its own conversation: {}", bodies[3]);

    // A restart keeps the id's meaning: the conversation goes on.
    stop(gw);
    provider.clear();
    let (gw, base) = start(&home, &provider);
    let script = format!(
        "r = client.responses.create(model='bub-agent', input='and my PIN was?', previous_response_id='{first}')\n\
         print(json.dumps({{'text': r.output_text, 'previous': r.previous_response_id}}))"
    );
    let out = run_client(venv, &script, &base, &gw);
    assert_eq!(out["previous"], json!(first));
    let after = provider.requests()[0].body["messages"].to_string();
    assert!(after.contains("hunter2"), "the continued session's tape: {after}");
    stop(gw);
}

/// Status, body and headers of `curl -i` with `args` against `url`.
fn curl_raw(url: &str, args: &[&str]) -> (u16, String, String) {
    let out =
        std::process::Command::new("curl").args(["-sS", "-i", "-m", "60"]).args(args).arg(url).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
    let (head, body) = text.split_once("\n\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_lowercase(), body.to_owned())
}

/// Sends headers promising a 100-byte body, then 10 bytes, then waits:
/// the status and body the channel answers.
fn slow_body(base: &str, auth: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let address = base.trim_start_matches("http://");
    let mut socket = std::net::TcpStream::connect(address).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {address}\r\n{auth}\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\nConnection: close\r\n\r\n{{\"model\":"
    );
    socket.write_all(head.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = socket.read_to_string(&mut answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, body.to_owned())
}

/// Errors as OpenAI answers them, on every status: `type` and `code` in
/// OpenAI's shape for 401 (`invalid_api_key`), 404 (an unknown path:
/// `unknown_url`; an unknown model: `model_not_found`), 403 (a session
/// the rule refuses), 405, 408 and 413;
/// a session whose queue is full is 429 with `Retry-After`; a gateway that
/// stops answers 503 with `Retry-After`, a streamed request included, and
/// before any 200; `models.retrieve` answers the model.
#[test]
fn the_openai_api_answers_errors_and_refusals_as_openai_does() {
    if std::process::Command::new("curl").arg("--version").output().is_err() {
        return eprintln!("SKIPPED the_openai_api_answers_errors_and_refusals_as_openai_does: curl is not installed");
    }
    let home = Home::new();
    let provider = Provider::respond(|_| chat::text("slow answer"));
    home.install(
        "http-channel",
        &lib("http-channel"),
        json!({"bind": "127.0.0.1:0", "token": TOKEN, "model_name": "bub-agent", "body_timeout_seconds": 1,
            "max_body_bytes": 2000, "sessions": ["q", "mine"]}),
    );
    home.scripted("slow", "", json!({"load_state": {"async": true, "sleep_ms": 2500, "return": null}}));
    let env = [
        ("BUB_MODEL", "openai:m"),
        ("BUB_API_BASE", provider.base_url.as_str()),
        ("OPENAI_API_KEY", "none"),
        ("BUB_MAX_SESSION_QUEUE", "1"),
        ("BUB_SHUTDOWN_GRACE_SECONDS", "20"),
    ];
    let mut gw = GatewayProcess::start(home.path(), &[], &env);
    let base = gw.address(home.path(), "http-channel");
    let auth = format!("Authorization: Bearer {TOKEN}");
    let error = |body: &str| -> Value {
        serde_json::from_str::<Value>(body).unwrap_or_else(|e| panic!("{e}: {body}"))["error"].clone()
    };

    let (status, _, body) = curl_raw(&format!("{base}/v1/models"), &["-H", "Authorization: Bearer wrong"]);
    assert_eq!((status, error(&body)["code"].clone()), (401, json!("invalid_api_key")), "{body}");
    let (status, _, body) = curl_raw(&format!("{base}/v1/nothing"), &["-H", &auth]);
    assert_eq!(status, 404);
    assert_eq!(error(&body)["code"], "unknown_url");
    assert_eq!(error(&body)["type"], "invalid_request_error");
    let (status, _, body) = curl_raw(&format!("{base}/v1/chat/completions"), &["-H", &auth]);
    assert_eq!((status, error(&body)["code"].clone()), (405, json!("method_not_allowed")), "{body}");
    let (status, _, body) = curl_raw(&format!("{base}/v1/models/bub-agent"), &["-H", &auth]);
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["id"], "bub-agent");
    let (status, _, body) = curl_raw(&format!("{base}/v1/models/gpt-9"), &["-H", &auth]);
    assert_eq!((status, error(&body)["code"].clone()), (404, json!("model_not_found")), "{body}");
    let big = json!({"model": "x", "messages": [{"role": "user", "content": "y".repeat(5000)}]}).to_string();
    let (status, _, body) = curl_raw(&format!("{base}/v1/chat/completions"), &["-H", &auth, "-d", &big]);
    assert_eq!((status, error(&body)["code"].clone()), (413, json!("request_too_large")), "{body}");
    let theirs = json!({"model": "x", "user": "theirs", "messages": [{"role": "user", "content": "y"}]}).to_string();
    let (status, _, body) = curl_raw(&format!("{base}/v1/chat/completions"), &["-H", &auth, "-d", &theirs]);
    assert_eq!((status, error(&body)["code"].clone()), (403, json!("session_not_allowed")), "{body}");
    // A body that stops arriving: 408 once body_timeout_seconds passes.
    let (status, body) = slow_body(&base, &auth);
    assert_eq!((status, error(&body)["code"].clone()), (408, json!("request_timeout")), "{body}");

    // A session whose queue is full (BUB_MAX_SESSION_QUEUE=1, 2.5 s turns).
    let ask = |stream: bool| {
        let body =
            json!({"model": "x", "user": "q", "stream": stream, "messages": [{"role": "user", "content": "hi"}]});
        let (base, auth) = (base.clone(), auth.clone());
        std::thread::spawn(move || {
            curl_raw(&format!("{base}/v1/chat/completions"), &["-H", &auth, "-d", &body.to_string()])
        })
    };
    let running = ask(false);
    std::thread::sleep(Duration::from_millis(500));
    let queued = ask(false);
    std::thread::sleep(Duration::from_millis(500));
    let (status, head, body) = ask(false).join().unwrap();
    assert_eq!(status, 429, "{body}");
    assert!(head.contains("retry-after: 1"), "{head}");
    assert_eq!(error(&body)["code"], "rate_limit_exceeded");
    assert_eq!(running.join().unwrap().0, 200);
    assert_eq!(queued.join().unwrap().0, 200);

    // A stop: a running turn finishes; a new request, streamed too, is 503
    // with Retry-After before any event.
    let running = ask(false);
    std::thread::sleep(Duration::from_millis(500));
    gw.signal("TERM");
    gw.wait_for_log("stopping: no new messages", Duration::from_secs(30), "the gateway stopping");
    for stream in [false, true] {
        let (status, head, body) = ask(stream).join().unwrap();
        assert_eq!(status, 503, "stream={stream}: {head}{body}");
        assert!(head.contains("retry-after: 5") && head.contains("application/json"), "{head}");
        assert_eq!(error(&body)["code"], "service_unavailable");
    }
    assert_eq!(running.join().unwrap().0, 200, "the running turn finished");
    assert!(gw.wait(Duration::from_secs(30)).is_some_and(|s| s.success()));
}

/// The official Node client (`openai` from npm, pinned; installed once
/// under the target folder): a chat completion, a stream with
/// `include_usage` (the usage chunk before the end, with the counts the
/// model reported), the Responses API with `previous_response_id`,
/// `models.retrieve`, and its typed errors (`AuthenticationError`,
/// `NotFoundError`, `BadRequestError` with OpenAI's codes).
#[test]
fn the_official_node_client_talks_to_the_agent() {
    let Some(module) = node_openai() else {
        return eprintln!("SKIPPED the_official_node_client_talks_to_the_agent: npm is not installed");
    };
    let home = Home::new();
    let (gw, base, provider) = gateway(&home);
    let script = r#"
const OpenAI = require(process.argv[1]);
const client = new OpenAI({ baseURL: process.argv[2] + "/v1", apiKey: process.argv[3] });
(async () => {
  const out = {};
  const r = await client.chat.completions.create({ model: "bub-agent", user: "node-1",
    messages: [{ role: "user", content: "hello node" }] });
  out.plain = r.choices[0].message.content;
  out.usage = r.usage;
  const stream = await client.chat.completions.create({ model: "bub-agent", user: "node-1", stream: true,
    stream_options: { include_usage: true }, messages: [{ role: "user", content: "stream node" }] });
  let text = "", usage = null, after_usage = 0;
  for await (const chunk of stream) {
    if (usage) after_usage += 1;
    if (chunk.choices.length) text += chunk.choices[0].delta?.content || "";
    if (chunk.usage) usage = chunk.usage;
  }
  out.streamed = text; out.stream_usage = usage; out.after_usage = after_usage;
  const first = await client.responses.create({ model: "bub-agent", input: "first node words" });
  const second = await client.responses.create({ model: "bub-agent", input: "second node words",
    previous_response_id: first.id });
  out.responses = [first.output_text, second.output_text];
  out.model = (await client.models.retrieve("bub-agent")).id;
  const failures = {};
  for (const [name, call] of Object.entries({
    key: () => new OpenAI({ baseURL: process.argv[2] + "/v1", apiKey: "wrong" }).models.list(),
    model: () => client.models.retrieve("gpt-9"),
    previous: () => client.responses.create({ model: "x", input: "take over", previous_response_id: "resp_forged" }),
  })) {
    try { await call(); failures[name] = "accepted"; }
    catch (e) { failures[name] = [e.constructor.name, e.status, e.code]; }
  }
  out.failures = failures;
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
"#;
    let output = std::process::Command::new("node")
        .args(["-e", script, module.to_str().unwrap(), &base, TOKEN])
        .output()
        .expect("run node");
    assert!(output.status.success(), "{}\n{}", String::from_utf8_lossy(&output.stderr), gw.log());
    let out: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(out["plain"], "echo: hello node");
    assert_eq!(out["usage"], json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}));
    assert_eq!(out["streamed"], "echo: stream node");
    assert_eq!(out["stream_usage"], json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}));
    assert_eq!(out["after_usage"], 0, "the usage chunk is the last one");
    assert_eq!(out["responses"], json!(["echo: first node words", "echo: second node words"]));
    assert_eq!(out["model"], "bub-agent");
    assert_eq!(
        out["failures"],
        json!({"key": ["AuthenticationError", 401, "invalid_api_key"], "model": ["NotFoundError", 404, "model_not_found"],
            "previous": ["BadRequestError", 400, "previous_response_not_found"]})
    );
    let continued = provider.requests().last().unwrap().body["messages"].to_string();
    assert!(continued.contains("first node words"), "the continued session's tape: {continued}");
    stop(gw);
}

/// The official `openai` package for Node from npm (pinned), installed
/// once per target folder; None when npm is missing.
fn node_openai() -> Option<std::path::PathBuf> {
    const PACKAGE: &str = "openai@6.49.0";
    static INSTALLED: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            bub_tests::npm::install("npm-openai", PACKAGE, "node_modules/openai/package.json")
                .map(|marker| marker.parent().expect("the package folder").to_owned())
        })
        .clone()
}
