//! Bub plugins published on PyPI, installed as a Bub user installs them
//! (`tests/python/published-requirements.txt`, pinned), run by bub-rs's
//! python bridge and by Python Bub 0.6.0a3 side by side: the same venv, the
//! same scripted provider, the same input; what reaches the provider and
//! what comes back must agree. Their network peers are loopback fakes.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use bub_tests::{
    gateway::GatewayProcess,
    lib,
    provider::{chat, Provider, Request},
    python, run_bub_env, Home,
};
use serde_json::{json, Value};

/// What both hosts are given: the scripted provider, by environment (Bub's
/// `BUB_*` settings, read by both).
fn model_env(provider: &Provider) -> Vec<(String, String)> {
    vec![
        ("BUB_MODEL".into(), "openai:gpt-test".into()),
        ("BUB_API_KEY".into(), "k".into()),
        ("BUB_API_BASE".into(), provider.base_url.clone()),
        ("BUB_CLIENT_ARGS".into(), json!({"api_format": "chat", "retry_delay": 0.01}).to_string()),
        ("NO_COLOR".into(), "1".into()),
    ]
}

/// A bub-rs home whose python bridge runs `venv`.
fn rust_home(venv: &Path) -> Home {
    let home = Home::new();
    home.install("python-bridge", &lib("python-bridge"), json!({"venv": venv}));
    home
}

/// A home and workspace for Python Bub (a folder of their own).
fn python_home(name: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join(format!("{name}-home"));
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    (dir, home, ws)
}

/// `bub run <message>` of Python Bub from `venv`: (stdout, stderr, ok).
fn python_run(venv: &Path, home: &Path, ws: &Path, message: &str, env: &[(String, String)]) -> (String, String, bool) {
    let mut cmd = Command::new(venv.join("bin/bub"));
    cmd.arg("run").arg(message).current_dir(ws).env("BUB_HOME", home).env("HOME", home);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run Python Bub");
    (String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into(), out.status.success())
}

/// `bub run <message>` of bub-rs in `home`: (stdout, stderr, ok).
fn rust_run(home: &Home, message: &str, env: &[(String, String)]) -> (String, String, bool) {
    let mut all: Vec<(&str, &str)> = vec![("VIRTUAL_ENV", "")];
    all.extend(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    run_bub_env(home, &["run", message], &all)
}

fn system_text(request: &Request) -> String {
    let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
    messages.iter().filter(|m| m["role"] == "system").filter_map(|m| m["content"].as_str()).collect()
}

/// The last user message's text, its `---Date: …---` line (the clock of
/// the turn) blanked.
fn last_user(request: &Request) -> String {
    let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
    let content = messages.iter().rev().find(|m| m["role"] == "user").map(|m| m["content"].clone());
    let text = match content {
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
        None => String::new(),
    };
    match (text.find("---Date: "), text.find("---\n")) {
        (Some(start), _) => {
            let end = text[start + 9..].find("---").map(|e| start + 9 + e + 3).unwrap_or(text.len());
            format!("{}---Date: …---{}", &text[..start], &text[end..])
        }
        _ => text,
    }
}

/// The names in a system prompt's `<available_skills>` list.
fn listed_skills(system: &str) -> Vec<String> {
    let Some(start) = system.find("<available_skills>") else { return Vec::new() };
    let end = system[start..].find("</available_skills>").map(|e| start + e).unwrap_or(system.len());
    system[start..end]
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .filter_map(|l| l.split(':').next())
        .map(str::to_owned)
        .collect()
}

/// nowledge-mem-bub 0.7.5 decorates the builtin's prompt through Bub's
/// call-parent idiom (`state["_runtime_agent"].framework._plugin_manager
/// .subset_hook_caller("build_prompt", [self])`) and adds its guidance to
/// the system prompt: under both hosts the turn runs, the guidance and the
/// skills the venv ships reach the model, and the user's message is the
/// builtin's.
#[test]
fn published_plugins_shape_the_prompt_as_under_bub() {
    let Some(venv) = python::published_venv_or_skip("published_plugins_shape_the_prompt_as_under_bub") else {
        return;
    };
    let provider = Provider::start(vec![chat::text("noted"), chat::text("noted")]);
    let env = model_env(&provider);

    let (_dir, py_home, py_ws) = python_home("python");
    let (out, err, ok) = python_run(venv, &py_home, &py_ws, "remember the milk", &env);
    assert!(ok && out.contains("noted"), "Python Bub: {out}\n{err}");
    let home = rust_home(venv);
    let (out, err, ok) = rust_run(&home, "remember the milk", &env);
    assert!(ok && out.contains("noted"), "bub-rs: {out}\n{err}");

    let requests = provider.requests();
    assert_eq!(requests.len(), 2, "one model call each");
    let (py, rs) = (&requests[0], &requests[1]);
    let guidance = "You have access to the user's personal knowledge graph (Nowledge Mem).";
    assert!(system_text(py).contains(guidance), "Python Bub's system prompt: {}", system_text(py));
    assert!(system_text(rs).contains(guidance), "bub-rs's system prompt: {}", system_text(rs));
    assert_eq!(last_user(py), last_user(rs), "the user's message");
    assert!(last_user(rs).ends_with("remember the milk"), "{}", last_user(rs));
    // The skills of the venv's `skills` namespace package: the plugins'
    // (discord, feishu, nowledge-mem) and Bub's own.
    let (py_skills, rs_skills) = (listed_skills(&system_text(py)), listed_skills(&system_text(rs)));
    for skill in ["discord", "feishu", "nowledge-mem", "gh", "skill-creator", "telegram"] {
        assert!(py_skills.iter().any(|s| s == skill), "Python Bub lists {skill}: {py_skills:?}");
    }
    assert_eq!(rs_skills, py_skills, "the same skills, in the same order");
}

/// A free loopback port (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Calls bub-mcp-server's `run_model` MCP tool over SSE with the venv's
/// own fastmcp client, waiting up to a minute for the server: its text.
fn call_run_model(venv: &Path, port: u16) -> Result<String, String> {
    let script = r#"
import asyncio, sys
from fastmcp import Client

async def main():
    async with Client(f"http://127.0.0.1:{sys.argv[1]}/sse") as client:
        result = await client.call_tool("run_model", {"prompt": "what is two and two?", "session_id": "mcp:t"})
        print("ANSWER:" + "".join(getattr(c, "text", "") for c in result.content))

asyncio.run(main())
"#;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = Command::new(venv.join("bin/python"))
            .args(["-c", script, &port.to_string()])
            .output()
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if let Some(answer) = text.lines().find_map(|l| l.strip_prefix("ANSWER:")) {
            return Ok(answer.to_owned());
        }
        if Instant::now() > deadline {
            return Err(format!("{text}\n{}", String::from_utf8_lossy(&out.stderr)));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// bub-mcp-server 0.0.2's MCP tool `run_model` awaits
/// `framework.process_inbound` and answers the `TurnResult`'s
/// `model_output`: under both hosts' gateways an MCP client gets the
/// model's answer.
#[test]
fn bub_mcp_server_answers_the_turns_model_output_as_under_bub() {
    let Some(venv) = python::published_venv_or_skip("bub_mcp_server_answers_the_turns_model_output_as_under_bub")
    else {
        return;
    };
    let provider = Provider::start(vec![chat::text("four"), chat::text("four")]);
    let mut env = model_env(&provider);

    // Python Bub's gateway.
    let port = free_port();
    env.push(("BUB_MCP_SERVER_PORT".into(), port.to_string()));
    let (_dir, py_home, py_ws) = python_home("python");
    let log = std::fs::File::create(py_home.join("gateway.log")).unwrap();
    let mut cmd = Command::new(venv.join("bin/bub"));
    cmd.args(["gateway", "--enable-channel", "mcp-server"]).current_dir(&py_ws).env("BUB_HOME", &py_home);
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let mut child = cmd.stdout(log.try_clone().unwrap()).stderr(log).spawn().expect("Python Bub's gateway");
    let answer = call_run_model(venv, port);
    let _ = child.kill();
    let _ = child.wait();
    let python_log = std::fs::read_to_string(py_home.join("gateway.log")).unwrap_or_default();
    assert_eq!(answer.as_deref(), Ok("four"), "Python Bub:\n{python_log}");

    // bub-rs's gateway.
    let port = free_port();
    env.pop();
    env.push(("BUB_MCP_SERVER_PORT".into(), port.to_string()));
    let home = rust_home(venv);
    let mut all: Vec<(&str, &str)> = vec![("VIRTUAL_ENV", "")];
    all.extend(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let mut gateway = GatewayProcess::start(home.path(), &["--enable-channel", "mcp-server"], &all);
    let answer = call_run_model(venv, port);
    gateway.signal("TERM");
    let _ = gateway.wait(Duration::from_secs(30));
    assert_eq!(answer.as_deref(), Ok("four"), "bub-rs:\n{}", gateway.log());
    let requests = provider.requests();
    assert_eq!(requests.len(), 2, "one model call each");
    assert_eq!(last_user(&requests[0]), last_user(&requests[1]), "the same prompt reached the model");
}

/// Points discord.py at the fake Discord (`DISCORD_FAKE_API`,
/// `DISCORD_FAKE_GATEWAY`) in whichever host imports it: discord.py names
/// Discord's addresses as class attributes, with no setting.
const DISCORD_SITECUSTOMIZE: &str = r#"
import os
if os.environ.get("DISCORD_FAKE_API"):
    import discord, yarl
    discord.http.Route.BASE = os.environ["DISCORD_FAKE_API"]
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(os.environ["DISCORD_FAKE_GATEWAY"])
"#;

/// A Python Bub gateway, killed when dropped (a failing test leaves no
/// process behind holding its ports).
struct PythonGateway(std::process::Child);

impl Drop for PythonGateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts Python Bub's `bub gateway --enable-channel <channel>` from `venv`,
/// logging to `<home>/gateway.log`. bub-mcp-server, installed beside, serves
/// on a free port.
fn python_gateway(venv: &Path, home: &Path, ws: &Path, channel: &str, env: &[(String, String)]) -> PythonGateway {
    let log = std::fs::File::create(home.join("gateway.log")).unwrap();
    let mut cmd = Command::new(venv.join("bin/bub"));
    cmd.args(["gateway", "--enable-channel", channel]).current_dir(ws).env("BUB_HOME", home);
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd.env("BUB_MCP_SERVER_PORT", free_port().to_string());
    PythonGateway(cmd.stdout(log.try_clone().unwrap()).stderr(log).spawn().expect("Python Bub's gateway"))
}

/// One host's gateway running a published channel plugin from `venv`:
/// Python Bub's own, or bub-rs's with the python bridge; stopped when
/// dropped. Its environment adds a `sitecustomize` (`sitecustomize`, put
/// on `PYTHONPATH`) that points the plugin's SDK at a fake.
enum HostGateway {
    // Each holds what it must keep until dropped (the process, its folders).
    Python { _gateway: PythonGateway, dir: tempfile::TempDir },
    Rust { gateway: GatewayProcess, _home: Home, _dir: tempfile::TempDir },
}

impl HostGateway {
    fn start(venv: &Path, python: bool, channel: &str, sitecustomize: &str, env: &[(String, String)]) -> HostGateway {
        let (dir, home, ws) = python_home(if python { "python" } else { "rust" });
        let site = dir.path().join("site");
        std::fs::create_dir_all(&site).unwrap();
        std::fs::write(site.join("sitecustomize.py"), sitecustomize).unwrap();
        let mut env = env.to_vec();
        env.push(("PYTHONPATH".into(), site.display().to_string()));
        if python {
            return HostGateway::Python { _gateway: python_gateway(venv, &home, &ws, channel, &env), dir };
        }
        let home = rust_home(venv);
        let port = free_port().to_string();
        let mut all: Vec<(&str, &str)> = vec![("VIRTUAL_ENV", ""), ("BUB_MCP_SERVER_PORT", &port)];
        all.extend(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let gateway = GatewayProcess::start(home.path(), &["--enable-channel", channel], &all);
        HostGateway::Rust { gateway, _home: home, _dir: dir }
    }

    fn log(&self) -> String {
        match self {
            HostGateway::Python { dir, .. } => {
                std::fs::read_to_string(dir.path().join("python-home/gateway.log")).unwrap_or_default()
            }
            HostGateway::Rust { gateway, .. } => gateway.log(),
        }
    }

    /// Waits up to 90 s for `done`, failing with the gateway's log and `seen`.
    fn wait(&self, what: &str, done: &dyn Fn() -> bool, seen: &dyn Fn() -> String) {
        let deadline = Instant::now() + Duration::from_secs(90);
        while !done() {
            let host = if matches!(self, HostGateway::Python { .. }) { "Python Bub" } else { "bub-rs" };
            assert!(Instant::now() < deadline, "no {what} under {host}:\n{}\n{}", self.log(), seen());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn stop(self) {
        if let HostGateway::Rust { mut gateway, .. } = self {
            gateway.signal("TERM");
            let _ = gateway.wait(Duration::from_secs(30));
        }
    }
}

/// The JSON a channel plugin made of a message, from the prompt that
/// reached the model, without `volatile` keys (ids and dates of the fake's).
fn message_json(request: &Request, volatile: &[&str]) -> Value {
    let prompt = last_user(request);
    let json_start = prompt.find('{').unwrap_or_else(|| panic!("no message JSON in {prompt:?}"));
    let mut message: Value = serde_json::from_str(&prompt[json_start..]).unwrap();
    for key in volatile {
        message.as_object_mut().unwrap().remove(*key);
    }
    message
}

/// What one host did with one direct message to bub-discord: the replies
/// the fake holds (text, the message each answers), how often it showed
/// "typing…", and the prompt that reached the model.
fn bub_discord_turn(venv: &Path, python: bool) -> (Vec<(String, bool)>, usize, Value) {
    use bub_tests::discord::{FakeDiscord, TOKEN};
    // Snowflakes: discord.py reads ids as numbers.
    const DM: &str = "1100000000000000001";
    const PERSON: &str = "1100000000000000002";
    let fake = FakeDiscord::start();
    let provider = Provider::start(vec![chat::text("hello from the model")]);
    let mut env = model_env(&provider);
    env.extend([
        ("BUB_DISCORD_TOKEN".into(), TOKEN.into()),
        ("DISCORD_FAKE_API".into(), fake.api_base.clone()),
        ("DISCORD_FAKE_GATEWAY".into(), fake.gateway_url.clone()),
    ]);
    let host = HostGateway::start(venv, python, "discord", DISCORD_SITECUSTOMIZE, &env);
    let seen = || format!("{:?}", fake.calls(""));
    host.wait("connection", &|| fake.connected(), &seen);
    let asked = fake.push_message(FakeDiscord::user_message(DM, None, PERSON, "hello bub"));
    host.wait("reply", &|| !fake.posted(DM).is_empty(), &seen);
    let replies: Vec<(String, bool)> =
        fake.posted(DM).into_iter().map(|(text, to)| (text, to.as_deref() == Some(asked.as_str()))).collect();
    let typing = fake.calls(&format!("POST /channels/{DM}/typing")).len();
    host.stop();
    let requests = provider.requests();
    assert_eq!(requests.len(), 1, "one model call (python: {python})");
    (replies, typing, message_json(&requests[0], &["message_id", "date"]))
}

/// bub-discord 0.0.2, with its own discord.py, against the project's fake
/// Discord (held to discord.py's expectations in the discord suite) in
/// both hosts: a direct message reaches the model as the same JSON, is
/// answered once in its channel as a reply to it, with "typing…" shown
/// while the turn runs.
#[test]
fn bub_discord_answers_a_direct_message_as_under_bub() {
    let Some(venv) = python::published_venv_or_skip("bub_discord_answers_a_direct_message_as_under_bub") else {
        return;
    };
    let (py_replies, py_typing, py_prompt) = bub_discord_turn(venv, true);
    let (rs_replies, rs_typing, rs_prompt) = bub_discord_turn(venv, false);
    assert_eq!(py_replies, vec![("hello from the model".to_owned(), true)], "Python Bub");
    assert_eq!(rs_replies, py_replies, "bub-rs (right) and Python Bub (left)");
    assert_eq!(rs_prompt, py_prompt, "the message as the model reads it");
    assert_eq!(py_prompt["message"], "hello bub");
    assert!(py_typing >= 1 && rs_typing >= 1, "typing: Python Bub {py_typing}, bub-rs {rs_typing}");
}

/// Points lark-oapi (bub-feishu's Feishu SDK) at the fake Feishu
/// (`FEISHU_FAKE_ORIGIN`): its clients take the open platform's address as
/// an argument bub-feishu leaves at Feishu's.
const FEISHU_SITECUSTOMIZE: &str = r#"
import os
if os.environ.get("FEISHU_FAKE_ORIGIN"):
    origin = os.environ["FEISHU_FAKE_ORIGIN"]
    import lark_oapi.client
    import lark_oapi.ws.client
    _ws_init = lark_oapi.ws.client.Client.__init__
    def _ws_at_the_fake(self, *args, **kwargs):
        kwargs["domain"] = origin
        _ws_init(self, *args, **kwargs)
    lark_oapi.ws.client.Client.__init__ = _ws_at_the_fake
    _build = lark_oapi.client.ClientBuilder.build
    def _build_at_the_fake(self):
        self.domain(origin)
        return _build(self)
    lark_oapi.client.ClientBuilder.build = _build_at_the_fake
"#;

/// The fake Feishu (`tests/python/fake_feishu.py`), run by `venv`'s
/// Python (it speaks Feishu's frames with lark-oapi's own protobuf module).
struct FakeFeishu {
    child: std::process::Child,
    origin: String,
    state: PathBuf,
}

impl FakeFeishu {
    fn start(venv: &Path, dir: &Path) -> FakeFeishu {
        let state = dir.join("feishu-calls.jsonl");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/fake_feishu.py");
        let mut child = Command::new(venv.join("bin/python"))
            .arg(&script)
            .arg(&state)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the fake Feishu");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        assert!(line.starts_with("http://"), "the fake Feishu did not start: {line:?}");
        FakeFeishu { child, origin: line.trim().to_owned(), state }
    }

    fn seen(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.state).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    fn calls(&self, prefix: &str) -> Vec<Value> {
        self.seen().into_iter().filter(|c| c["call"].as_str().is_some_and(|c| c.starts_with(prefix))).collect()
    }

    /// Sends `event` over the client's connection (one must be open).
    fn push(&self, event: &Value) {
        use std::io::{Read as _, Write as _};
        let body = event.to_string();
        let mut stream = std::net::TcpStream::connect(self.origin.trim_start_matches("http://")).unwrap();
        let head = format!(
            "POST /fake/push HTTP/1.1\r\nhost: fake\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(format!("{head}{body}").as_bytes()).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let sent: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap_or("")).unwrap();
        assert_eq!(sent["sent"], 1, "one client connected");
    }
}

impl Drop for FakeFeishu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An `im.message.receive_v1` event as Feishu sends one (schema 2.0) for a
/// person's text in a one-to-one chat.
fn feishu_text_event(message_id: &str, text: &str) -> Value {
    json!({"schema": "2.0", "header": {"event_id": format!("ev-{message_id}"), "token": "", "create_time": "1764979200000",
        "event_type": "im.message.receive_v1", "tenant_key": "tenant-1", "app_id": "cli_fake_app"},
        "event": {"sender": {"sender_id": {"union_id": "on_1", "user_id": "u_1", "open_id": "ou_1"},
            "sender_type": "user", "tenant_key": "tenant-1"},
            "message": {"message_id": message_id, "create_time": "1764979200000", "chat_id": "oc_1", "chat_type": "p2p",
                "message_type": "text", "content": json!({"text": text}).to_string()}}})
}

/// What one host did with bub-feishu: the prompt of a person's message, the
/// reply to a command, and the events it acknowledged.
fn bub_feishu_turns(venv: &Path, python: bool) -> (Value, Vec<Value>, usize) {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeFeishu::start(venv, dir.path());
    let provider = Provider::start(vec![chat::text("noted")]);
    let mut env = model_env(&provider);
    env.extend([
        ("BUB_FEISHU_APP_ID".into(), "cli_fake_app".into()),
        ("BUB_FEISHU_APP_SECRET".into(), "fake-secret".into()),
        ("FEISHU_FAKE_ORIGIN".into(), fake.origin.clone()),
    ]);
    let host = HostGateway::start(venv, python, "feishu", FEISHU_SITECUSTOMIZE, &env);
    let seen = || format!("{:#?}", fake.seen());
    host.wait("connection", &|| fake.seen().iter().any(|c| c.get("connected").is_some()), &seen);
    fake.push(&feishu_text_event("om_1", "hello bub"));
    host.wait("model call", &|| !provider.requests().is_empty(), &seen);
    fake.push(&feishu_text_event("om_2", ",help"));
    host.wait("command reply", &|| !fake.calls("POST /open-apis/im/v1/messages").is_empty(), &seen);
    let acks = fake.seen().iter().filter(|c| c.get("ack").is_some_and(|a| a["code"] == 200)).count();
    host.stop();
    let requests = provider.requests();
    assert_eq!(requests.len(), 1, "one model call (python: {python})");
    (message_json(&requests[0], &[]), fake.calls("POST /open-apis/im/v1/messages"), acks)
}

/// bub-feishu 0.0.2, with its own lark-oapi SDK, against a fake of
/// Feishu's documented long-connection events and message API in both
/// hosts: a person's message reaches the model as the same JSON (with the
/// sender's name the contact API answered) and, as bub-feishu sends it to
/// no channel, is not answered in Feishu; a command is answered as a reply
/// to it; each event is acknowledged.
#[test]
fn bub_feishu_carries_messages_and_commands_as_under_bub() {
    let Some(venv) = python::published_venv_or_skip("bub_feishu_carries_messages_and_commands_as_under_bub") else {
        return;
    };
    let (py_prompt, py_sent, py_acks) = bub_feishu_turns(venv, true);
    let (rs_prompt, rs_sent, rs_acks) = bub_feishu_turns(venv, false);
    assert_eq!(py_prompt["message"], "hello bub");
    assert_eq!(py_prompt["sender_name"], "Ann Example");
    assert_eq!(rs_prompt, py_prompt, "the message as the model reads it: bub-rs (right), Python Bub (left)");
    let shape = |sent: &[Value]| -> Vec<(String, Value)> {
        sent.iter().map(|c| (c["call"].as_str().unwrap().to_owned(), c["body"]["msg_type"].clone())).collect()
    };
    assert_eq!(shape(&py_sent), vec![("POST /open-apis/im/v1/messages/om_2/reply".to_owned(), json!("text"))]);
    assert_eq!(shape(&rs_sent), shape(&py_sent), "bub-rs (right) and Python Bub (left) answered the command alike");
    assert!(py_acks >= 2 && rs_acks >= 2, "acknowledged: Python Bub {py_acks}, bub-rs {rs_acks}");
}
