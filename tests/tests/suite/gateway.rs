//! `bub gateway` with the `http-channel` example plugin, through the real
//! binary, loader and a real HTTP client (semantics §A5, §H6.5).

use std::time::Duration;

use bub_tests::{gateway::GatewayProcess, lib, run_bub, Home};
use serde_json::{json, Value};

/// The token the tests' channels are configured with (the generated
/// default is tested in `security.rs`).
const TOKEN: &str = "test-token";

fn http_channel(home: &Home, name: &str, config: Value) {
    let mut config = config;
    config["bind"] = json!("127.0.0.1:0");
    if config.get("token").is_none() {
        config["token"] = json!(TOKEN);
    }
    if name != "http-channel" {
        config["name"] = json!(name);
    }
    home.install(name, &lib("http-channel"), config);
}

/// `bub --home <home> <args>`, which must succeed: its output.
fn bub_ok(home: &Home, args: &[&str]) -> String {
    let (out, err, ok) = run_bub(home, args);
    assert!(ok, "bub {args:?}: {err}");
    out
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

async fn post(client: &reqwest::Client, base: &str, body: Value) -> (u16, Value) {
    let response =
        client.post(format!("{base}/v1/messages")).bearer_auth(TOKEN).json(&body).send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// §5: a message through the HTTP channel is a turn; the reply comes back in
/// the response, or as the turn's events then a `reply` event.
#[test]
fn http_channel_answers_with_the_turns_reply_as_json_and_as_events() {
    let home = Home::new();
    http_channel(&home, "http-channel", json!({}));
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    let base = gateway.address(home.path(), "http-channel");
    runtime().block_on(async {
        let client = reqwest::Client::new();
        let health = client.get(format!("{base}/v1/health")).send().await.unwrap().text().await.unwrap();
        assert_eq!(health, "ok");

        let (status, body) = post(&client, &base, json!({"content": "hello gateway", "session_id": "s1"})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "processed");
        assert_eq!(body["session_id"], "s1");
        assert!(body["reply"].as_str().unwrap().ends_with("hello gateway"), "{body}");
        assert_eq!(body["outbounds"][0]["channel"], "http");

        let text = client
            .post(format!("{base}/v1/messages"))
            .bearer_auth(TOKEN)
            .json(&json!({"content": "stream me", "session_id": "s1", "stream": true}))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let events: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
        assert_eq!(events.first(), Some(&"text"), "{text}");
        assert_eq!(events.last(), Some(&"reply"), "{text}");
        let reply = text.lines().rfind(|l| l.starts_with("data: ")).unwrap();
        let reply: Value = serde_json::from_str(reply.trim_start_matches("data: ")).unwrap();
        assert_eq!(reply["status"], "processed");
        assert!(reply["reply"].as_str().unwrap().ends_with("stream me"));

        let (status, body) = post(&client, &base, json!({"text": "no content field"})).await;
        assert_eq!(status, 400);
        assert!(body["error"].as_str().unwrap().contains("unknown field `text`"), "{body}");
    });
    // The memory of the session is on its tape, as for `bub run`.
    let tapes = std::fs::read_dir(home.path().join("tapes")).unwrap().count();
    assert!(tapes >= 1);
}

/// A configured token is required (`Authorization: Bearer`).
#[test]
fn http_channel_requires_its_token() {
    let home = Home::new();
    http_channel(&home, "http-channel", json!({"token": "s3cret"}));
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    let base = gateway.address(home.path(), "http-channel");
    runtime().block_on(async {
        let client = reqwest::Client::new();
        let url = format!("{base}/v1/messages");
        let body = json!({"content": "hi"});
        let none = client.post(&url).json(&body).send().await.unwrap();
        assert_eq!(none.status().as_u16(), 401);
        let wrong = client.post(&url).bearer_auth("s3cre").json(&body).send().await.unwrap();
        assert_eq!(wrong.status().as_u16(), 401);
        let right = client.post(&url).bearer_auth("s3cret").json(&body).send().await.unwrap();
        assert_eq!(right.status().as_u16(), 200);
    });
}

/// The channel is reachable by every local user, so what a
/// peer can hold is bounded: connections (`max_connections`: one over it
/// gets a JSON 503 and is closed), the time to send a head
/// (`header_timeout_seconds`, which also closes idle keep-alive
/// connections), the time and size of a body (`body_timeout_seconds` 408,
/// `max_body_bytes` 413, both JSON naming their setting; a body is read
/// only after the token is checked).
#[test]
fn http_channel_bounds_connections_heads_and_bodies() {
    use std::io::{Read, Write};
    let home = Home::new();
    http_channel(
        &home,
        "http-channel",
        json!({"max_connections": 4, "header_timeout_seconds": 1, "body_timeout_seconds": 1, "max_body_bytes": 2000}),
    );
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    let base = gateway.address(home.path(), "http-channel");
    let addr = base.trim_start_matches("http://").to_owned();
    let read_all = |s: &mut std::net::TcpStream| {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    };
    // Four silent connections take every place; the fifth is told why.
    let mut idle: Vec<_> = (0..4).map(|_| std::net::TcpStream::connect(&addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut fifth = std::net::TcpStream::connect(&addr).unwrap();
    let answer = read_all(&mut fifth);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("application/json") && answer.contains("max_connections"), "{answer}");
    // The head deadline closes the silent ones, and the channel serves again.
    let started = std::time::Instant::now();
    for s in &mut idle {
        read_all(s);
    }
    assert!(started.elapsed() < Duration::from_secs(5), "idle connections closed by header_timeout_seconds");
    runtime().block_on(async {
        let client = reqwest::Client::new();
        let url = format!("{base}/v1/messages");
        // A lower-case scheme is the same scheme (RFC 7235).
        let ok = client.post(&url).header("authorization", format!("bearer {TOKEN}")).json(&json!({"content": "hi"}));
        assert_eq!(ok.send().await.unwrap().status().as_u16(), 200);
        let big = json!({"content": "x".repeat(5000)}).to_string();
        let refused = client.post(&url).body(big.clone()).send().await.unwrap();
        assert_eq!(refused.status().as_u16(), 401, "no body is read before the token");
        let large = client.post(&url).bearer_auth(TOKEN).body(big).send().await.unwrap();
        assert_eq!(large.status().as_u16(), 413);
        let body: Value = large.json().await.unwrap();
        assert!(body["error"].as_str().unwrap().contains("max_body_bytes"), "{body}");
    });
    // A body that never finishes arriving.
    let mut slow = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        slow,
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\n\
         content-length: 100\r\n\r\n{{\"content\""
    )
    .unwrap();
    let answer = read_all(&mut slow);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout_seconds"), "{answer}");
}

/// An http channel refuses to listen beyond loopback without a token.
#[test]
fn http_channel_refuses_a_public_address_without_a_token() {
    let home = Home::new();
    home.install("http-channel", &lib("http-channel"), json!({"bind": "0.0.0.0:0"}));
    let (_, err, ok) = run_bub(&home, &["gateway"]);
    assert!(!ok);
    assert!(err.contains("refusing to listen on 0.0.0.0:0 without a token"), "{err}");
}

/// Behaviour 213: no enabled channel (cli is an interface) → exit 1.
#[test]
fn gateway_without_enabled_channels_exits_1() {
    let home = Home::new();
    let (_, err, ok) = run_bub(&home, &["gateway"]);
    assert!(!ok);
    assert!(err.contains("No channels are enabled. Configure at least one channel"), "{err}");
    assert!(err.contains("Channels available: cli"), "{err}");
    // Excluding the only plain channel leaves none either.
    http_channel(&home, "http-channel", json!({}));
    let (_, err, ok) = run_bub(&home, &["gateway", "--enable-channel", "all", "--enable-channel", "!http"]);
    assert!(!ok);
    assert!(err.contains("No channels are enabled"), "{err}");
}

/// A plugin that makes every turn slow (150 ms in `load_state`), so turns
/// overlap if they can, and traces `slow:load_state:"<session>"` when a
/// turn starts and `slow:save_state:"<session>"` when it saves.
fn slow_traced_turns(home: &Home) {
    home.scripted(
        "slow",
        "",
        json!({
            "load_state": {"async": true, "sleep_ms": 150, "trace_arg": 1, "return": null},
            "save_state": {"trace_arg": 0, "return": null},
        }),
    );
}

/// Each of the sessions a, b and c ran `rounds` turns, one after another
/// (its load and save alternate in the trace of [`slow_traced_turns`]).
fn each_session_ran_in_turn(trace: &[String], rounds: usize) {
    for session in ["a", "b", "c"] {
        let calls: Vec<&str> = trace
            .iter()
            .filter(|l| l.ends_with(&format!(":\"{session}\"")))
            .filter_map(|l| l.split(':').nth(1))
            .collect();
        assert_eq!(calls, ["load_state", "save_state"].repeat(rounds), "session {session} overlapped: {calls:?}");
    }
}

/// `rounds` messages to each of the sessions a, b and c, interleaved and
/// 5 ms apart (arrival order within a session is the sending order); each
/// must be answered 200 with its own content.
fn send_rounds(base: &str, rounds: usize) {
    runtime().block_on(async {
        let client = reqwest::Client::new();
        let mut requests = Vec::new();
        for i in 0..rounds {
            for session in ["a", "b", "c"] {
                let (client, base) = (client.clone(), base.to_owned());
                requests.push(tokio::spawn(async move {
                    let body = json!({"content": format!("{session}-{i}"), "session_id": session});
                    (format!("{session}-{i}"), post(&client, &base, body).await)
                }));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        for r in requests {
            let (content, (status, body)) = r.await.unwrap();
            assert_eq!(status, 200, "{body}");
            assert!(body["reply"].as_str().unwrap().ends_with(&content), "{content}: {body}");
        }
    });
}

/// §5 and the load test's invariant, small: messages of one session queue
/// behind its running turn (the channel's `follow_up` admission) and run in
/// arrival order; sessions run concurrently; every request gets its own reply.
#[test]
fn a_sessions_turns_run_one_at_a_time_in_order() {
    let home = Home::new();
    http_channel(&home, "http-channel", json!({}));
    slow_traced_turns(&home);
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    let base = gateway.address(home.path(), "http-channel");
    send_rounds(&base, 4);
    each_session_ran_in_turn(&home.trace(), 4);
    // The log shows the queueing.
    assert!(gateway.log().contains("admission follow_up session_id=a"), "{}", gateway.log());
}

/// Turns are capped across the gateway
/// (`BUB_MAX_CONCURRENT_TURNS`) and per session (`BUB_MAX_SESSION_TURNS`),
/// even when admission says `process` (Bub would start all nine at once);
/// what waits runs later, a session's messages in their order.
#[test]
fn turn_caps_bound_the_gateway_and_keep_sessions_in_order() {
    let home = Home::new();
    http_channel(&home, "http-channel", json!({"admission": "process"}));
    slow_traced_turns(&home);
    let env = [("BUB_MAX_CONCURRENT_TURNS", "2"), ("BUB_MAX_SESSION_TURNS", "1")];
    let mut gateway = GatewayProcess::start(home.path(), &[], &env);
    let base = gateway.address(home.path(), "http-channel");
    send_rounds(&base, 3);
    let trace = home.trace();
    let (mut now, mut peak) = (0i32, 0i32);
    // `slow:load_state:"a"` when a turn's load starts, `slow:save_state:"a"`
    // when it saves (the `:done` lines are the async hook finishing).
    for line in trace.iter().filter(|l| l.ends_with('"')) {
        match line.split(':').nth(1) {
            Some("load_state") => now += 1,
            Some("save_state") => now -= 1,
            _ => {}
        }
        peak = peak.max(now);
    }
    assert_eq!(peak, 2, "at most BUB_MAX_CONCURRENT_TURNS at once, and that many used: {trace:?}");
    each_session_ran_in_turn(&trace, 3);
}

/// Behaviour 91 and §6.5: `admit_message` → drop discards the message; a
/// failing `resolve_session` drops it after `on_error(stage="resolve_session")`.
#[test]
fn admission_can_drop_and_a_failing_resolver_drops() {
    let home = Home::new();
    http_channel(&home, "http-channel", json!({}));
    home.scripted(
        "gate",
        "",
        json!({
            "admit_message": {"return": {"action": "drop", "reason": "closed for the night"}},
            "on_error": {"trace_arg": 0, "return": null},
        }),
    );
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    let base = gateway.address(home.path(), "http-channel");
    runtime().block_on(async {
        let client = reqwest::Client::new();
        let (status, body) = post(&client, &base, json!({"content": "hi"})).await;
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["status"], "dropped");
        assert_eq!(body["error"], "closed for the night");
    });
    drop(gateway);

    let home = Home::new();
    http_channel(&home, "http-channel", json!({}));
    home.scripted(
        "resolver",
        "",
        json!({"resolve_session": {"error": "no such tenant"}, "on_error": {"trace_arg": 0, "return": null}}),
    );
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    let base = gateway.address(home.path(), "http-channel");
    runtime().block_on(async {
        let (status, body) = post(&reqwest::Client::new(), &base, json!({"content": "hi"})).await;
        assert_eq!(status, 409, "{body}");
        assert!(body["error"].as_str().unwrap().contains("no such tenant"), "{body}");
    });
    assert!(home.trace().contains(&r#"resolver:on_error:"resolve_session""#.to_owned()), "{:?}", home.trace());
}

/// Stopping: SIGTERM refuses new messages (503, retry later), lets the
/// running turn finish and answer, and exits 0.
#[test]
fn sigterm_lets_running_turns_finish_and_refuses_new_messages() {
    let home = Home::new();
    http_channel(&home, "http-channel", json!({}));
    home.scripted("slow", "", json!({"load_state": {"async": true, "sleep_ms": 1500, "return": null}}));
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    let base = gateway.address(home.path(), "http-channel");
    runtime().block_on(async {
        let client = reqwest::Client::new();
        let running = tokio::spawn(post_owned(client.clone(), base.clone(), json!({"content": "slow one"})));
        tokio::time::sleep(Duration::from_millis(400)).await;
        gateway.signal("TERM");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (status, body) = post(&client, &base, json!({"content": "too late"})).await;
        assert_eq!(status, 503, "{body}");
        assert!(body["error"].as_str().unwrap().contains("stopping"), "{body}");
        let (status, body) = running.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(body["reply"].as_str().unwrap().ends_with("slow one"));
    });
    let status = gateway.wait(Duration::from_secs(20)).expect("the gateway exits after its turns");
    assert!(status.success(), "{status}\n{}", gateway.log());
    assert!(!home.path().join("gateway/unprocessed.jsonl").exists());
}

async fn post_owned(client: reqwest::Client, base: String, body: Value) -> (u16, Value) {
    post(&client, &base, body).await
}

/// Stopping, grace over: the hanging turn is cancelled (its client told
/// 503 `cancelled`), and the message is kept in `gateway/unprocessed.jsonl`.
#[test]
fn turns_still_running_after_the_grace_period_are_cancelled_and_kept() {
    let home = Home::new();
    http_channel(&home, "http-channel", json!({}));
    home.scripted("hang", "", json!({"load_state": {"async": true, "sleep_ms": 60000, "return": null}}));
    let mut gateway = GatewayProcess::start(home.path(), &[], &[("BUB_SHUTDOWN_GRACE_SECONDS", "0.5")]);
    let base = gateway.address(home.path(), "http-channel");
    runtime().block_on(async {
        let client = reqwest::Client::new();
        let running = tokio::spawn(post_owned(
            client.clone(),
            base.clone(),
            json!({"content": "never answered", "session_id": "h"}),
        ));
        tokio::time::sleep(Duration::from_millis(400)).await;
        gateway.signal("TERM");
        let (status, body) = running.await.unwrap();
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["status"], "cancelled");
    });
    let status = gateway.wait(Duration::from_secs(20)).expect("the gateway exits after the grace period");
    assert!(status.success(), "{status}\n{}", gateway.log());
    let saved = std::fs::read_to_string(home.path().join("gateway/unprocessed.jsonl")).unwrap();
    let saved: Value = serde_json::from_str(saved.lines().next().unwrap()).unwrap();
    assert_eq!(saved["content"], "never answered");
    assert_eq!(saved["session_id"], "h");
}

/// A channel that fails to start is reported; the others run.
#[test]
fn a_channel_that_fails_to_start_does_not_stop_the_others() {
    let home = Home::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    home.install("http-busy", &lib("http-channel"), json!({"name": "busy", "bind": format!("127.0.0.1:{port}")}));
    http_channel(&home, "http-ok", json!({}));
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    let base = gateway.address(home.path(), "http-ok");
    let log = gateway.log();
    assert!(log.contains("channel 'busy' failed to start") && log.contains("cannot listen on 127.0.0.1"), "{log}");
    runtime().block_on(async {
        let (status, body) = post(&reqwest::Client::new(), &base, json!({"content": "still here"})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["outbounds"][0]["channel"], "http-ok");
    });
}

/// Debounce (§5): a debounced channel's quick messages of one session
/// become one turn whose prompt joins them; each sender gets its reply.
#[test]
fn debounced_channels_batch_a_sessions_quick_messages() {
    let home = Home::new();
    http_channel(&home, "http-channel", json!({"debounce": true}));
    home.scripted("trace", "", json!({"save_state": {"trace_arg": 0, "return": null}}));
    let mut gateway = GatewayProcess::start(home.path(), &[], &[("BUB_DEBOUNCE_SECONDS", "0.3")]);
    let base = gateway.address(home.path(), "http-channel");
    runtime().block_on(async {
        let client = reqwest::Client::new();
        let mut requests = Vec::new();
        for word in ["one", "two", "three"] {
            let body = json!({"content": word, "session_id": "d"});
            requests.push(tokio::spawn(post_owned(client.clone(), base.clone(), body)));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for r in requests {
            let (status, body) = r.await.unwrap();
            assert_eq!(status, 200, "{body}");
            assert!(body["reply"].as_str().unwrap().ends_with("one\ntwo\nthree"), "{body}");
        }
    });
    let turns = home.trace().iter().filter(|l| l.as_str() == r#"trace:save_state:"d""#).count();
    assert_eq!(turns, 1, "{:?}", home.trace());
}

/// The `schedule` plugin: jobs added with its tools
/// in a session's turn persist under `$BUB_HOME`; the gateway fires a due
/// job back as a message on that session (its turn lands on the session's
/// tape); repeating jobs stay with their next run; bad input is explained.
#[test]
fn scheduled_jobs_fire_back_into_their_session_through_the_gateway() {
    let home = Home::new();
    http_channel(&home, "http-channel", json!({}));
    home.install("schedule", &lib("schedule"), json!({"tick_ms": 100}));
    let bub = |args: &[&str]| bub_ok(&home, args);
    bub(&["run", "--session-id", "s1", ",schedule.add message=ping-reminder after=1s"]);
    bub(&["run", "--session-id", "s1", ",schedule.add message=hourly every=1h"]);
    let cron = bub(&["run", "--session-id", "s2", ",schedule.add message=standup cron=\"30 9 * * 1-5\""]);
    assert!(cron.contains("T09:30:00Z"), "{cron}");
    // A failing command fails the turn, with the tool's reason.
    let (_, err, ok) = run_bub(&home, &["run", "--session-id", "s1", ",schedule.add message=x cron=\"every day\""]);
    assert!(!ok && err.contains("execution failed: cron \"every day\" needs 5 fields"), "{err}");
    let mine = bub(&["run", "--session-id", "s1", ",schedule.list"]);
    assert!(mine.contains("ping-reminder") && mine.contains("hourly") && !mine.contains("standup"), "{mine}");
    let jobs: Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join("data/schedule/jobs.json")).unwrap()).unwrap();
    let standup =
        jobs.as_array().unwrap().iter().find(|j| j["message"] == "standup").unwrap()["id"].as_str().unwrap().to_owned();
    let removed = bub(&["run", "--session-id", "s2", &format!(",schedule.remove id={standup}")]);
    assert!(removed.contains("removed"), "{removed}");

    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    gateway.address(home.path(), "http-channel");
    gateway.wait_for_log("reply on session", Duration::from_secs(20), "the job did not fire");
    gateway.signal("TERM");
    assert!(gateway.wait(Duration::from_secs(20)).is_some_and(|s| s.success()));
    let found = bub(&["run", "--session-id", "s1", ",tape.search query=ping-reminder"]);
    assert!(found.contains("2 matches"), "{found}");
    let left = bub(&["run", "--session-id", "s1", ",schedule.list all=true"]);
    assert!(!left.contains("ping-reminder") && left.contains("hourly"), "{left}");
}

/// Schedules in the user's time zone, and a heartbeat: a cron job with
/// `tz` shows its next run on that zone's clock; a heartbeat fires every
/// second with its prompt and a note naming `<no_reply/>`; an answer that
/// is exactly the marker is recorded on the tape and sent nowhere, any
/// other answer is delivered (here to the schedule channel, which logs it).
#[test]
fn a_heartbeat_answer_of_no_reply_is_kept_on_the_tape_and_sent_nowhere() {
    use bub_tests::provider::{chat, Provider};
    let turns = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let t = turns.clone();
    let provider = Provider::respond(move |request| {
        let last = request.body["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or_default();
        let text = last["content"].to_string();
        if !text.contains("heartbeat") {
            return chat::text("not a heartbeat");
        }
        // The first two check-ins have nothing to say; the third does.
        match t.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 | 1 => chat::text("<no_reply/>"),
            _ => chat::text("Time to stretch!"),
        }
    });
    let home = Home::new();
    http_channel(&home, "http-channel", json!({}));
    home.install("schedule", &lib("schedule"), json!({"tick_ms": 100, "timezone": "Europe/Berlin"}));
    let env = [
        ("BUB_MODEL", "openai:m".to_owned()),
        ("BUB_API_BASE", provider.base_url.clone()),
        ("OPENAI_API_KEY", "none".to_owned()),
    ];
    // Commands run no model: only the gateway needs the model's environment.
    let bub = |args: &[&str]| bub_ok(&home, args);
    // Cron in a zone: 09:30 on Tokyo's clock (+09:00); the plugin's default zone for the other.
    let tokyo = bub(&["run", "--session-id", "tz", r#",schedule.add message=standup cron="30 9 * * *" tz=Asia/Tokyo"#]);
    assert!(tokyo.contains("T09:30:00+09:00") && tokyo.contains("T00:30:00Z"), "{tokyo}");
    let berlin = bub(&["run", "--session-id", "tz", r#",schedule.add message=lunch cron="0 12 * * *""#]);
    assert!(berlin.contains("T12:00:00+01:00"), "the plugin's timezone setting: {berlin}");
    let refused =
        run_bub(&home, &["run", "--session-id", "tz", r#",schedule.add message=x cron="0 9 * * *" tz=Mars/Base"#]);
    assert!(!refused.2 && refused.1.contains("is not known"), "{}", refused.1);
    bub(&["run", "--session-id", "hb", ",schedule.add message=anything-to-say heartbeat=true every=1s"]);

    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut gateway = GatewayProcess::start(home.path(), &[], &env);
    gateway.address(home.path(), "http-channel");
    gateway.wait_for_log("Time to stretch!", Duration::from_secs(30), "no heartbeat answer was delivered");
    gateway.signal("TERM");
    assert!(gateway.wait(Duration::from_secs(20)).is_some_and(|s| s.success()));
    let log = gateway.log();
    let delivered: Vec<&str> = log.lines().filter(|l| l.contains("schedule: reply on session")).collect();
    assert!(delivered.iter().all(|l| !l.contains("no_reply")), "a silent answer was delivered: {delivered:?}");
    assert!(delivered.iter().any(|l| l.contains("Time to stretch!")), "{delivered:?}");
    // The silent answers are on the session's tape, and the prompt named the marker.
    let mut tapes = String::new();
    for f in std::fs::read_dir(home.path().join("tapes")).unwrap().flatten() {
        tapes.push_str(&std::fs::read_to_string(f.path()).unwrap_or_default());
    }
    let silent = tapes.matches(r#"{"role":"assistant","content":"<no_reply/>"}"#).count();
    assert!(silent >= 2, "{silent} silent answers on the tape");
    assert!(tapes.contains("answer exactly <no_reply/>"), "the heartbeat's prompt names the marker");
}

/// §2.10: `,quit` clears the session's queue (`ChannelManager.quit`): a
/// message queued behind the quitting turn is dropped, and says why.
#[test]
fn quit_clears_the_sessions_queue() {
    let home = Home::new();
    http_channel(&home, "http-channel", json!({}));
    home.scripted("slow", "", json!({"load_state": {"async": true, "sleep_ms": 600, "return": null}}));
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    let base = gateway.address(home.path(), "http-channel");
    runtime().block_on(async {
        let client = reqwest::Client::new();
        let mut sent = Vec::new();
        for content in ["first", ",quit", "after quit"] {
            let body = json!({"content": content, "session_id": "q"});
            sent.push(tokio::spawn(post_owned(client.clone(), base.clone(), body)));
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        let mut results = Vec::new();
        for r in sent {
            results.push(r.await.unwrap());
        }
        assert_eq!(results[0].0, 200, "{:?}", results[0]);
        assert_eq!(results[1].0, 200, "{:?}", results[1]);
        assert_eq!(results[2].0, 409, "{:?}", results[2]);
        assert_eq!(results[2].1["error"], "the session quit");
    });
    assert!(gateway.log().contains("channel.manager quit session_id=q"), "{}", gateway.log());
}

/// §6.5 steer: a message that arrives while its session's turn runs goes
/// into the steering inbox (its client told 202 `steered`), and the running
/// turn takes it up: it lands on the session's tape.
#[test]
fn a_steered_message_joins_the_running_turn() {
    let home = Home::new();
    http_channel(&home, "http-channel", json!({"admission": "steer"}));
    home.scripted("slow", "", json!({"load_state": {"async": true, "sleep_ms": 800, "return": null}}));
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    let base = gateway.address(home.path(), "http-channel");
    runtime().block_on(async {
        let client = reqwest::Client::new();
        let first =
            tokio::spawn(post_owned(client.clone(), base.clone(), json!({"content": "first", "session_id": "st"})));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (status, body) = post(&client, &base, json!({"content": "steered-in", "session_id": "st"})).await;
        assert_eq!(status, 202, "{body}");
        assert_eq!(body["status"], "steered");
        let (status, body) = first.await.unwrap();
        assert_eq!(status, 200, "{body}");
    });
    gateway.signal("TERM");
    assert!(gateway.wait(Duration::from_secs(20)).is_some_and(|s| s.success()));
    let (out, err, ok) = run_bub(&home, &["run", "--session-id", "st", ",tape.search query=steered-in"]);
    assert!(ok, "{err}");
    assert!(!out.contains("0 matches"), "the steered message never reached the session: {out}");
}

/// With debounce on, a command (`,help`) passes at once
/// (the channel marks it `kind: command`, as Bub's channels do).
#[test]
fn a_debounced_channel_passes_commands_at_once() {
    let home = Home::new();
    http_channel(&home, "http-channel", json!({"debounce": true}));
    let mut gateway = GatewayProcess::start(home.path(), &[], &[("BUB_DEBOUNCE_SECONDS", "5")]);
    let base = gateway.address(home.path(), "http-channel");
    runtime().block_on(async {
        let client = reqwest::Client::new();
        let started = std::time::Instant::now();
        let (status, body) = post(&client, &base, json!({"content": ",help", "session_id": "cmd"})).await;
        assert_eq!(status, 200, "{body}");
        assert!(started.elapsed() < Duration::from_secs(4), "the command waited for the debounce window");
        assert_eq!(body["outbounds"][0]["kind"], "command", "{body}");
    });
}

fn process_running(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
        std::fs::read(p.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(marker))
            && std::fs::read_to_string(p.path().join("stat")).is_ok_and(|s| !s.contains(") Z "))
    })
}

/// `,quit` answers "Session tasks stopped." and stops the
/// session's background shells; another session's keep running.
#[test]
fn quit_stops_the_sessions_shells_only() {
    let home = Home::new();
    http_channel(&home, "http-channel", json!({}));
    let env = [("BUB_COMMAND_CHANNELS", "http")];
    let mut gateway = GatewayProcess::start(home.path(), &[], &env);
    let base = gateway.address(home.path(), "http-channel");
    let pid = std::process::id();
    let (mine, theirs) = (format!("sleep 43.{pid}1"), format!("sleep 44.{pid}2"));
    runtime().block_on(async {
        let client = reqwest::Client::new();
        for (session, marker) in [("q1", &mine), ("q2", &theirs)] {
            let line = format!(",bash command=\"{marker}\" background=true");
            let (status, body) = post(&client, &base, json!({"content": line, "session_id": session})).await;
            assert_eq!(status, 200, "{body}");
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !(process_running(&mine) && process_running(&theirs)) {
            assert!(std::time::Instant::now() < deadline, "the shells did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (status, body) = post(&client, &base, json!({"content": ",quit", "session_id": "q1"})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["reply"], "Session tasks stopped.", "{body}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while process_running(&mine) {
            assert!(std::time::Instant::now() < deadline, "the quitting session's shell still runs");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(process_running(&theirs), "another session's shell was stopped");
    });
}

/// `bub gateway --install / --status / --uninstall`: a systemd
/// user unit under `$XDG_CONFIG_HOME` restarting on failure, in the
/// workspace, with the channels; the secrets in an owner-only environment
/// file, not the unit; `systemctl --user` driven when there is one.
#[test]
fn gateway_installs_as_a_systemd_user_service() {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::new();
    let xdg = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let log = bin.path().join("systemctl.log");
    let fake = bin.path().join("systemctl");
    std::fs::write(&fake, format!("#!/bin/sh\necho \"$@\" >> {}\n", log.display())).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    // logind's `enable-linger` (it records lingering as a file we cannot
    // write here, so it is asked for and reported as not on).
    let linger_log = bin.path().join("loginctl.log");
    let loginctl = bin.path().join("loginctl");
    std::fs::write(&loginctl, format!("#!/bin/sh\necho \"$@\" >> {}\n", linger_log.display())).unwrap();
    std::fs::set_permissions(&loginctl, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bub = |args: &[&str], path: &std::path::Path| {
        let out = std::process::Command::new(bub_tests::bub_bin())
            .arg("--home")
            .arg(home.path())
            .arg("--workspace")
            .arg(workspace.path())
            .args(args)
            .env("XDG_CONFIG_HOME", xdg.path())
            .env("PATH", path)
            .env("BUB_TELEGRAM_TOKEN", "123:secret")
            .env_remove("BUB_PLUGIN_PATH")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let out = bub(&["gateway", "--install", "--enable-channel", "telegram"], bin.path());
    let unit_path = xdg.path().join("systemd/user/bub-gateway.service");
    let unit = std::fs::read_to_string(&unit_path).unwrap_or_else(|e| panic!("{e}: {out}"));
    let ws = std::fs::canonicalize(workspace.path()).unwrap();
    assert!(unit.contains(&format!("WorkingDirectory={}\n", ws.display())), "{unit}");
    assert!(unit.contains("\"gateway\" \"--enable-channel\" \"telegram\""), "{unit}");
    assert!(unit.contains("Restart=on-failure"), "{unit}");
    assert!(!unit.contains("secret"), "no secret in the unit file: {unit}");
    let env_file = home.path().join("gateway.env");
    let env = std::fs::read_to_string(&env_file).unwrap();
    assert!(env.contains("BUB_TELEGRAM_TOKEN=\"123:secret\""), "{env}");
    assert_eq!(std::fs::metadata(&env_file).unwrap().permissions().mode() & 0o077, 0, "owner-only");
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(calls, "--user daemon-reload\n--user enable bub-gateway.service\n--user restart bub-gateway.service\n");
    let linger = std::fs::read_to_string(&linger_log).unwrap_or_default();
    assert!(linger.starts_with("enable-linger "), "lingering was asked for: {linger:?}\n{out}");
    assert!(out.contains("lingering:") && out.contains("loginctl enable-linger"), "{out}");

    let status = bub(&["gateway", "--status"], bin.path());
    assert!(status.contains("installed") && status.contains("none running"), "{status}");
    assert!(status.contains("lingering: off"), "--status says whether lingering is on: {status}");

    // No systemctl: the unit is written all the same, the steps printed.
    let nowhere = bin.path().join("empty");
    std::fs::create_dir(&nowhere).unwrap();
    let out = bub(&["gateway", "--install"], &nowhere);
    assert!(
        out.contains("systemctl not found") && out.contains("systemctl --user enable --now bub-gateway.service"),
        "{out}"
    );

    let out = bub(&["gateway", "--uninstall"], bin.path());
    assert!(out.contains("removed"), "{out}");
    assert!(!unit_path.exists() && !env_file.exists());
    assert!(std::fs::read_to_string(&log).unwrap().contains("--user disable --now bub-gateway.service"));
}

/// `--status` names the gateways of the home that run (their journal lock).
#[test]
fn gateway_status_names_running_gateways() {
    let home = Home::new();
    http_channel(&home, "http-channel", json!({}));
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    gateway.address(home.path(), "http-channel");
    let (out, err, ok) = run_bub(&home, &["gateway", "--status"]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("running, pid {}", gateway.pid().unwrap())), "{out}");
}

/// The unit `--install` writes is one real systemd accepts:
/// `systemd-analyze verify` (systemd 252 refused the quoted
/// `WorkingDirectory=` it used to get) passes for a binary, home and
/// workspace whose paths have spaces, `%`, `$`, quotes and non-ASCII, and
/// `EnvironmentFile=` names the environment file itself (systemd reads a
/// quoted path as part of the name, and the `-` made it skip the file
/// silently, so tokens never reached the service).
#[test]
fn the_installed_unit_passes_systemd_analyze_verify_with_awkward_paths() {
    let Ok(analyze) = which("systemd-analyze") else {
        eprintln!("SKIPPED: systemd-analyze is not installed (Debian's `systemd` package; .ci/run installs it)");
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let odd = "a b 100% $x \"dq\" 'sq' ü";
    let bin = root.path().join(format!("bin {odd}").replace(['"', '\''], ""));
    let home = root.path().join(format!("home {odd}"));
    let workspace = root.path().join(format!("ws {odd}"));
    let xdg = root.path().join("xdg");
    for dir in [&bin, &workspace, &xdg] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let bub = bin.join("bub");
    if std::fs::hard_link(bub_tests::bub_bin(), &bub).is_err() {
        std::fs::copy(bub_tests::bub_bin(), &bub).unwrap();
    }
    let out = std::process::Command::new(&bub)
        .arg("--home")
        .arg(&home)
        .arg("--workspace")
        .arg(&workspace)
        .args(["gateway", "--install", "--enable-channel", "telegram"])
        .env("XDG_CONFIG_HOME", &xdg)
        .env("PATH", root.path())
        .env("BUB_TELEGRAM_TOKEN", "123:se$cret\"`x")
        .env_remove("BUB_PLUGIN_PATH")
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{printed}");
    let unit_path = xdg.join("systemd/user/bub-gateway.service");
    let unit = std::fs::read_to_string(&unit_path).unwrap_or_else(|e| panic!("{e}: {printed}"));
    let verify = std::process::Command::new(analyze).arg("verify").arg(&unit_path).output().unwrap();
    let said = String::from_utf8_lossy(&verify.stderr).into_owned() + &String::from_utf8_lossy(&verify.stdout);
    assert!(verify.status.success() && !said.contains("bub-gateway"), "systemd-analyze verify: {said}\n{unit}");
    // What systemd reads for the two path settings: the rest of the line,
    // with `%%` as `%`.
    let setting = |name: &str| {
        let line = unit.lines().find_map(|l| l.strip_prefix(&format!("{name}="))).unwrap_or_else(|| panic!("{unit}"));
        line.replace("%%", "%")
    };
    let ws = std::fs::canonicalize(&workspace).unwrap();
    assert_eq!(setting("WorkingDirectory"), ws.to_str().unwrap());
    let env_file = format!("-{}", home.join("gateway.env").display());
    assert_eq!(setting("EnvironmentFile"), env_file, "{unit}");
    assert!(std::path::Path::new(&env_file[1..]).is_file());
    // systemd.exec's environment file rules: in double quotes a backslash
    // escapes `"`, `\\`, `` ` `` and `$`.
    let env = std::fs::read_to_string(&env_file[1..]).unwrap();
    assert!(env.contains(r#"BUB_TELEGRAM_TOKEN="123:se\$cret\"\`x""#), "{env}");

    // A binary whose path has a quote cannot be a systemd executable: refused
    // with the reason, nothing written.
    let quoted = root.path().join("it's");
    std::fs::create_dir_all(&quoted).unwrap();
    std::fs::remove_file(&unit_path).unwrap();
    if std::fs::hard_link(bub_tests::bub_bin(), quoted.join("bub")).is_err() {
        std::fs::copy(bub_tests::bub_bin(), quoted.join("bub")).unwrap();
    }
    let out = std::process::Command::new(quoted.join("bub"))
        .arg("--home")
        .arg(&home)
        .arg("--workspace")
        .arg(&workspace)
        .args(["gateway", "--install"])
        .env("XDG_CONFIG_HOME", &xdg)
        .env("PATH", root.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("install bub elsewhere"), "{err}");
    assert!(!unit_path.exists(), "nothing written");
}

fn which(tool: &str) -> Result<std::path::PathBuf, ()> {
    let path = std::env::var_os("PATH").ok_or(())?;
    std::env::split_paths(&path).map(|dir| dir.join(tool)).find(|p| p.is_file()).ok_or(())
}
