//! Whose sessions a turn reaches (docs/gateway.md "Who can reach a
//! channel"; `bub_agent::sessions`): in a gateway shared by several
//! people, `tape.search(sessions=…)` and `subagent(session=…)` stay inside
//! the sessions of the person the turn is for, from the model and from
//! command mode alike, over Telegram and HTTP; the operator joins a
//! person's sessions (`people`) or opens search to a channel
//! (`search_open_channels`; the terminal by default).

use std::time::Duration;

use bub_tests::{
    gateway::GatewayProcess,
    lib,
    provider::{chat, Provider, Request},
    run_bub_env,
    telegram::{private_text, FakeBotApi, TOKEN as TELEGRAM_TOKEN},
    Home,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);
const HTTP_TOKEN: &str = "owners-test-token";
const SECRET: &str = "my bank PIN is hunter2";

/// The model: asked "anything about X?" it searches every session for X;
/// "read session S" runs a subagent on S; given a tool's result it answers
/// with it; anything else is "noted".
fn model() -> Provider {
    Provider::respond(|request: &Request| {
        let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
        let last = messages.last().cloned().unwrap_or_default();
        if last["role"] == "tool" {
            return chat::text(&format!("result: {}", last["content"].as_str().unwrap_or_default()));
        }
        let text = last["content"].as_str().map(str::to_owned).unwrap_or_else(|| last["content"].to_string());
        if let Some(rest) = text.split("anything about ").nth(1) {
            let query: String = rest.chars().take_while(|c| c.is_alphanumeric()).collect();
            let args = json!({"query": query, "sessions": "all"}).to_string();
            return chat::tool_calls("", &[("s1", "tape_search", &args)]);
        }
        if let Some(rest) = text.split("read session ").nth(1) {
            let session: String = rest.chars().take_while(|c| !c.is_whitespace() && *c != '"').collect();
            let args = json!({"prompt": "what was said?", "session": session}).to_string();
            return chat::tool_calls("", &[("a1", "subagent", &args)]);
        }
        chat::text("noted")
    })
}

fn post(base: &str, session: &str, content: &str) -> Value {
    let out = std::process::Command::new("curl")
        .args(["-s", "-m", "60", "-H", &format!("Authorization: Bearer {HTTP_TOKEN}"), "-d"])
        .arg(json!({"content": content, "session_id": session}).to_string())
        .arg(format!("{base}/v1/messages"))
        .output()
        .expect("curl");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stdout)))
}

struct Shared {
    home: Home,
    api: FakeBotApi,
    provider: Provider,
    gateway: GatewayProcess,
    base: String,
}

/// A gateway with Telegram and HTTP, command mode on for both, `people`
/// as given.
fn shared_gateway(people: Value) -> Shared {
    let home = Home::new();
    let api = FakeBotApi::start();
    home.install(
        "telegram-channel",
        &lib("telegram-channel"),
        json!({"token": TELEGRAM_TOKEN, "api_base": api.base, "poll_timeout": 1}),
    );
    home.install("http-channel", &lib("http-channel"), json!({"bind": "127.0.0.1:0", "token": HTTP_TOKEN}));
    let provider = model();
    let people = people.to_string();
    let env = [
        ("BUB_MODEL", "openai:m"),
        ("BUB_API_BASE", provider.base_url.as_str()),
        ("OPENAI_API_KEY", "none"),
        ("BUB_COMMAND_CHANNELS", "telegram,http"),
        ("BUB_PEOPLE", people.as_str()),
        ("BUB_DEBOUNCE_SECONDS", "0.1"),
    ];
    let mut gateway = GatewayProcess::start(home.path(), &[], &env);
    let base = gateway.address(home.path(), "http-channel");
    api.wait_for("the first getUpdates", WAIT, |calls| calls.iter().any(|c| c.method == "getUpdates"));
    Shared { home, api, provider, gateway, base }
}

fn telegram_says(shared: &Shared, user: u64, text: &str, replies: usize) -> String {
    shared.api.push_message(private_text(user, text));
    shared.api.wait_for(&format!("{replies} replies to chat {user}"), WAIT, |_| {
        shared.api.sent_to(user as i64).len() >= replies
    });
    shared.api.sent_to(user as i64)[replies - 1].clone()
}

/// What every tool result the model was given says.
fn tool_results(provider: &Provider) -> String {
    let mut out = String::new();
    for r in provider.requests() {
        for m in r.body["messages"].as_array().into_iter().flatten().filter(|m| m["role"] == "tool") {
            out.push_str(&m["content"].to_string());
            out.push('\n');
        }
    }
    out
}

/// Two Telegram users and two HTTP callers share a gateway on default
/// settings: none finds another's message through the model's search or
/// through command mode, and naming another's session is refused, for
/// search and for a subagent alike; each still finds its own.
#[test]
fn no_one_reads_another_persons_sessions() {
    let shared = shared_gateway(json!({}));
    assert!(telegram_says(&shared, 5, SECRET, 1).contains("noted"));
    assert_eq!(post(&shared.base, "alice", "alice's PIN is hunter2")["reply"], "noted");

    // B on Telegram asks the model, which searches every session.
    let answer = telegram_says(&shared, 6, "anything about hunter2?", 1);
    assert!(answer.contains("0 matches") && !answer.contains("PIN"), "{answer}");
    // The other HTTP caller, by the model and by command mode.
    let bob = post(&shared.base, "bob", "anything about hunter2?");
    assert!(bob["reply"].as_str().unwrap().contains("0 matches"), "{bob}");
    let command = post(&shared.base, "bob", ",tape.search query=hunter2 sessions=all");
    assert!(!command.to_string().contains("PIN"), "{command}");
    // Named sessions are refused, saying how the operator opens them.
    let named = post(&shared.base, "bob", ",tape.search query=hunter2 sessions=alice,telegram:5");
    let text = named.to_string();
    assert!(text.contains("belong to someone else") && text.contains("people") && !text.contains("PIN"), "{text}");
    let sub = telegram_says(&shared, 6, "read session alice please", 2);
    assert!(sub.contains("belong to someone else") && !sub.contains("PIN"), "{sub}");
    assert!(!tool_results(&shared.provider).contains("PIN"), "no tool result carried the secret");

    // Each finds its own.
    let own = telegram_says(&shared, 5, "anything about hunter2?", 2);
    assert!(own.contains("1 matches") && own.contains(SECRET) && own.contains("\"session\": \"telegram:5\""), "{own}");
    let own = post(&shared.base, "alice", ",tape.search query=hunter2 sessions=all");
    assert!(own.to_string().contains("PIN"), "{own}");

    // The terminal is the operator's: it searches every session, each
    // match named by its session.
    let (out, err, ok) =
        run_bub_env(&shared.home, &["run", "--session-id", "cli:me", ",tape.search query=hunter2 sessions=all"], &[]);
    assert!(ok, "{err}");
    assert!(out.contains("\"session\": \"telegram:5\"") && out.contains("\"session\": \"alice\""), "{out}");
    drop(shared.gateway);
}

/// The operator's `people` joins sessions across channels into one
/// person: Ada on HTTP finds what Ada said on Telegram; Bo does not.
#[test]
fn a_declared_person_searches_all_of_their_sessions() {
    let shared = shared_gateway(json!({"ada": ["telegram:5", "http:ada*"]}));
    assert!(telegram_says(&shared, 5, SECRET, 1).contains("noted"));
    let ada = post(&shared.base, "http:ada-laptop", "anything about hunter2?");
    let reply = ada["reply"].as_str().unwrap();
    assert!(reply.contains(SECRET) && reply.contains("\"session\": \"telegram:5\""), "{ada}");
    let bo = post(&shared.base, "http:bo", "anything about hunter2?");
    assert!(!bo.to_string().contains("PIN"), "{bo}");
    // A person of "*" would be everyone: refused, naming the right setting.
    let (_, err, ok) = run_bub_env(&shared.home, &["run", "hi"], &[("BUB_PEOPLE", r#"{"all": ["*"]}"#)]);
    assert!(!ok && err.contains("search_open_channels"), "{err}");
    drop(shared.gateway);
}
