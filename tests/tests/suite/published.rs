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
