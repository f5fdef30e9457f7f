//! What a stranger or a fault cannot take from a gateway left running for
//! months: the webhook's listener (a body read only after its secret, a
//! connection cap, head and body deadlines), a client that stops reading
//! (cut off, the turn kept), the process's descriptors (the soft limit
//! raised), and a tape store that fails after the answer went out (the
//! run's entries retried, else rescued and stored at the next run:
//! nothing answered is missing from the tape). docs/gateway.md "Who can
//! reach a channel" and RELIABILITY.md "Bounds" cite these.

use std::{
    io::{Read, Write},
    net::TcpStream,
    time::{Duration, Instant},
};

use bub_tests::{
    gateway::GatewayProcess,
    lib,
    provider::{Provider, Reply},
    run_bub, run_bub_env,
    telegram::{private_text, FakeBotApi, TOKEN as TELEGRAM_TOKEN},
    Home,
};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

/// Everything the peer sends until it closes (or `limit` passes).
fn read_all(s: &mut TcpStream, limit: Duration) -> String {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The webhook's address, once it listens.
fn webhook_address(home: &Home) -> String {
    let file = home.path().join("data/telegram-channel/webhook-address");
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(text) = std::fs::read_to_string(&file) {
            if !text.trim().is_empty() {
                return text.trim().to_owned();
            }
        }
        assert!(Instant::now() < deadline, "no webhook address in {}", file.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Telegram's webhook URL is public, so anyone can post to it. A request
/// without the secret is refused on its headers (its announced 100 MB body
/// is never read); a body that does not arrive is 408 and one over 1 MiB
/// 413; idle connections are closed by the head deadline; past
/// `webhook_open_connections` a connection gets a JSON 503 naming it; the
/// channel then still takes Telegram's delivery.
#[test]
fn the_telegram_webhook_reads_no_strangers_body_and_holds_no_strangers_connection() {
    let home = Home::new();
    let api = FakeBotApi::start();
    let secret = "s3cret_token-1";
    home.install(
        "telegram-channel",
        &lib("telegram-channel"),
        json!({"token": TELEGRAM_TOKEN, "api_base": api.base, "webhook_url": "https://bub.example/telegram",
            "webhook_listen": "127.0.0.1:0", "webhook_secret": secret, "webhook_open_connections": 4,
            "webhook_header_timeout_seconds": 1, "webhook_body_timeout_seconds": 1}),
    );
    let gateway = GatewayProcess::start(home.path(), &["--enable-channel", "telegram"], &[]);
    let addr = webhook_address(&home);
    let head = |secret: Option<&str>, length: usize| {
        let mut s = TcpStream::connect(&addr).unwrap();
        let header = secret.map(|s| format!("x-telegram-bot-api-secret-token: {s}\r\n")).unwrap_or_default();
        write!(s, "POST /telegram HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{header}content-length: {length}\r\n\r\n")
            .unwrap();
        s
    };

    // No secret: answered on the headers, though the body never comes.
    let started = Instant::now();
    let answer = read_all(&mut head(None, 100 << 20), Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "answered before any body deadline: {:?}",
        started.elapsed()
    );
    // The secret, and a body that never finishes: the body deadline.
    let answer = read_all(&mut head(Some(secret), 100), Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    // The secret, and a body over 1 MiB.
    let mut big = head(Some(secret), 2 << 20);
    let _ = big.write_all(&vec![b' '; 2 << 20]);
    let answer = read_all(&mut big, Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");

    // Four silent connections take every place; the fifth is told why.
    let mut idle: Vec<_> = (0..4).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let answer = read_all(&mut TcpStream::connect(&addr).unwrap(), Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 503") && answer.contains("webhook_open_connections"), "{answer}");
    let started = Instant::now();
    for s in &mut idle {
        read_all(s, Duration::from_secs(10));
    }
    assert!(started.elapsed() < Duration::from_secs(5), "idle connections closed by the head deadline");

    // Telegram's own delivery still runs its turn.
    let update = json!({"update_id": 1, "message": private_text(7, "still here")}).to_string();
    let mut s = head(Some(secret), update.len());
    s.write_all(update.as_bytes()).unwrap();
    let answer = read_all(&mut s, Duration::from_secs(30));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    api.wait_for("the reply", WAIT, |_| !api.sent_to(7).is_empty());
    assert!(gateway.log().contains("webhook request(s) without the secret token refused"), "{}", gateway.log());
    drop(gateway);
}

/// A client that asks for a streamed answer of 20 MB in 20,000 events and
/// stops reading: the channel's queue fills, the client is cut off after
/// `write_timeout_seconds`, the turn runs to its end and its answer is on
/// the tape; the gateway's memory does not hold the answer for the
/// client. A plain (not streamed) answer to a client that never reads is
/// cut off the same way.
#[test]
fn a_client_that_stops_reading_is_cut_off_and_the_turn_is_kept() {
    let home = Home::new();
    let events: Vec<String> = (0..20_000)
        .map(|i| {
            let text = format!("{i:05} {}", "x".repeat(1000));
            json!({"choices": [{"index": 0, "delta": {"content": text}}]}).to_string()
        })
        .chain(["[DONE]".to_owned()])
        .collect();
    let provider = Provider::start(vec![Reply::Sse(events.clone()), Reply::Sse(events)]);
    home.install(
        "http-channel",
        &lib("http-channel"),
        json!({"bind": "127.0.0.1:0", "token": "t", "write_timeout_seconds": 2}),
    );
    let env = [("BUB_MODEL", "openai:m"), ("BUB_API_BASE", provider.base_url.as_str()), ("OPENAI_API_KEY", "none")];
    let mut gateway = GatewayProcess::start(home.path(), &[], &env);
    let addr = gateway.address(home.path(), "http-channel").trim_start_matches("http://").to_owned();
    let ask = |session: &str, stream: bool| {
        let body = json!({"content": "talk a lot", "session_id": session, "stream": stream}).to_string();
        let mut s = TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "POST /v1/messages HTTP/1.1\r\nhost: x\r\nauthorization: Bearer t\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        s
    };
    let mut streamed = ask("stalled", true);
    std::thread::sleep(Duration::from_secs(12));
    let rss_mb = gateway.rss_kb() / 1024;
    let got = read_all(&mut streamed, Duration::from_secs(20));
    assert!(got.starts_with("HTTP/1.1 200"), "{}", &got[..got.len().min(300)]);
    assert!(got.len() < 20_000_000, "cut off before the whole answer: {} bytes", got.len());
    assert!(!got.contains("event: reply"), "the stream did not reach its end");
    gateway.wait_for_log("stopped reading its event stream", WAIT, "the cut-off is logged");
    println!("BOUND a stalled reader of a 20 MB stream: cut off; gateway RSS while stalled {rss_mb} MB");
    assert!(rss_mb < 400, "the gateway held the answer for a client that does not read: {rss_mb} MB");

    // Plain: the whole JSON is the answer; a client that never reads it is cut off.
    let mut plain = ask("plain", false);
    std::thread::sleep(Duration::from_secs(8));
    let got = read_all(&mut plain, Duration::from_secs(20));
    assert!(got.len() < 20_000_000, "cut off: {} bytes", got.len());

    // Both turns ran to their end: their answers are on their tapes.
    for session in ["stalled", "plain"] {
        let (found, err, ok) = run_bub(&home, &["run", "--session-id", session, ",tape.search query=00000 limit=1"]);
        assert!(ok && found.contains("1 matches"), "the {session} turn's answer on its tape: {err}{found}");
    }
    // Whole: a search reads an entry's first 64 KiB, so its end is checked on the tapes.
    let whole = std::fs::read_dir(home.path().join("tapes"))
        .unwrap()
        .flatten()
        .filter(|f| std::fs::read_to_string(f.path()).is_ok_and(|t| t.contains("19999 xxx")))
        .count();
    assert_eq!(whole, 2, "both answers whole on their tapes");
    drop(gateway);
}

/// The soft limit of open files is raised to the hard one at start, so a
/// gateway started with `ulimit -Sn 256` does not run out at 256.
#[test]
fn the_gateway_raises_its_open_file_limit() {
    let home = Home::new();
    home.install("http-channel", &lib("http-channel"), json!({"bind": "127.0.0.1:0", "token": "t"}));
    let script = home.path().join("low-limit.sh");
    std::fs::write(&script, format!("#!/bin/sh\nulimit -Sn 256\nexec {} \"$@\"\n", bub_tests::bub_bin().display()))
        .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let mut gateway = GatewayProcess::start_bin(&script, home.path(), &[], &[]);
    gateway.address(home.path(), "http-channel");
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", gateway.pid().unwrap())).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap().to_owned();
    let numbers: Vec<&str> = line.split_whitespace().filter(|w| w.chars().all(|c| c.is_ascii_digit())).collect();
    assert_eq!(numbers.len(), 2, "{line}");
    assert_eq!(numbers[0], numbers[1], "the soft limit is the hard one: {line}");
    assert_ne!(numbers[0], "256", "{line}");
    drop(gateway);
}

/// A tape store that fails once the answer has gone out (here: every
/// append refused while a flag file exists, as a store out of
/// descriptors) loses nothing: the run's entries are tried again, then
/// kept in `$BUB_HOME/rescued/`, and the session's next run stores them
/// first, so the conversation is whole and in order.
#[test]
fn a_turn_the_store_refuses_is_rescued_and_stored_at_the_next_run() {
    let home = Home::new();
    let flag = home.path().join("store-down");
    let log = home.path().join("wrapper.log");
    home.install("wrapper", &lib("tp-store-wrapper"), json!({"log": log, "fail_while": flag, "mark_prompts": false}));
    std::fs::write(&flag, "").unwrap();
    let started = Instant::now();
    let (out, err, ok) = run_bub_env(&home, &["run", "--session-id", "s", "remember the kumquat"], &[]);
    assert!(ok, "the turn answered: {err}");
    assert!(out.contains("remember the kumquat"), "{out}");
    assert!(started.elapsed() >= Duration::from_secs(10), "tried again for a while first: {:?}", started.elapsed());
    assert!(err.contains("go to the store at the session's next run"), "{err}");
    let rescued: Vec<_> = std::fs::read_dir(home.path().join("rescued")).unwrap().flatten().collect();
    assert_eq!(rescued.len(), 1, "one file of the run's entries");
    let refused = std::fs::read_to_string(&log).unwrap();
    assert!(refused.lines().filter(|l| l.starts_with("refused")).count() >= 5, "first try and four more: {refused}");

    // The store is back: the next run stores the rescued entries first.
    std::fs::remove_file(&flag).unwrap();
    let (out, err, ok) = run_bub(&home, &["run", "--session-id", "s", ",tape.search query=kumquat"]);
    assert!(ok, "{err}");
    assert!(out.contains("remember the kumquat"), "the rescued turn is on the tape: {out}");
    assert_eq!(std::fs::read_dir(home.path().join("rescued")).unwrap().count(), 0, "stored once, then removed");
    assert!(out.contains("2 matches"), "the prompt and its echo, once each: {out}");
}

/// A store that comes back within the retries loses nothing and rescues
/// nothing: the run's entries go to the store on a later try.
#[test]
fn a_store_back_within_the_retries_takes_the_run() {
    let home = Home::new();
    let flag = home.path().join("store-down");
    let log = home.path().join("wrapper.log");
    home.install("wrapper", &lib("tp-store-wrapper"), json!({"log": log, "fail_while": flag, "mark_prompts": false}));
    std::fs::write(&flag, "").unwrap();
    let remover = {
        let flag = flag.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            std::fs::remove_file(flag).unwrap();
        })
    };
    let (_, err, ok) = run_bub(&home, &["run", "--session-id", "s", "remember the quince"]);
    remover.join().unwrap();
    assert!(ok, "{err}");
    assert!(err.contains("failed to append") && !err.contains("rescued"), "{err}");
    assert!(!home.path().join("rescued").exists(), "nothing rescued");
    let (out, _, _) = run_bub(&home, &["run", "--session-id", "s", ",tape.search query=quince"]);
    assert!(out.contains("2 matches"), "{out}");
}
