//! The openai-chat example plugin against a local server speaking the
//! chat-completions protocol: SSE chunks, an HTTP error, a server that hangs.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpListener,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use bub_abi::TurnState;
use bub_host::CallArgs;
use bub_tests::{block_on, lib, Home};
use serde_json::{json, Value};

/// Serves one request; returns the request's head and body.
fn serve(reply: &'static str) -> (String, JoinHandle<(String, Value)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut head = String::new();
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let mut out = stream;
        match reply {
            "sse" => {
                out.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
                    .unwrap();
                for chunk in [
                    r#"data: {"choices":[{"delta":{"role":"assistant"}}]}"#,
                    r#"data: {"choices":[{"delta":{"content":"Hel"}}]}"#,
                    r#"data: {"choices":[{"delta":{"content":"lo!"}}]}"#,
                    r#"data: {"choices":[],"usage":{"total_tokens":5}}"#,
                    "data: [DONE]",
                ] {
                    out.write_all(format!("{chunk}\n\n").as_bytes()).unwrap();
                    out.flush().unwrap();
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            "401" => {
                let body = r#"{"error":{"message":"invalid api key"}}"#;
                let msg = format!("HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                out.write_all(msg.as_bytes()).unwrap();
            }
            _ => std::thread::sleep(Duration::from_secs(3)), // hang
        }
        (head, serde_json::from_slice(&body).unwrap())
    });
    (addr, handle)
}

fn events(home: &Home, addr: &str) -> Vec<(String, Value)> {
    let (events, error) = events_or_error(home, addr);
    assert_eq!(error, None);
    events
}

/// The events, and the error that ended the stream, if any.
fn events_or_error(home: &Home, _addr: &str) -> (Vec<(String, Value)>, Option<String>) {
    let rt = home.host().runtime();
    let args = CallArgs::run_model_stream(&json!("Say hello"), &"s".to_owned(), &TurnState::new()).unwrap();
    block_on(async {
        let mut stream = rt.run_model_stream(&args).await.unwrap().expect("a stream");
        let mut out = Vec::new();
        loop {
            match stream.next().await {
                Ok(Some(e)) => out.push((e.kind, e.data)),
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e.to_string())),
            }
        }
    })
}

fn install(home: &Home, addr: &str, timeout_ms: u64) {
    home.install(
        "openai",
        &lib("openai-chat"),
        json!({"base_url": format!("http://{addr}/v1"), "api_key": "test-key", "model": "test-model", "timeout_ms": timeout_ms, "system": "be brief"}),
    );
}

/// Streaming chat completions: text deltas, usage, final; the request is the
/// protocol's (path, bearer key, model, messages, stream: true).
#[test]
fn streams_chat_completions() {
    let (addr, server) = serve("sse");
    let home = Home::new();
    install(&home, &addr, 5000);
    let got = events(&home, &addr);
    let (head, body) = server.join().unwrap();
    assert!(head.starts_with("POST /v1/chat/completions HTTP/1.1"), "{head}");
    assert!(head.to_ascii_lowercase().contains("authorization: bearer test-key"), "{head}");
    assert_eq!(
        body,
        json!({"model": "test-model", "stream": true, "messages": [
            {"role": "system", "content": "be brief"}, {"role": "user", "content": "Say hello"}]})
    );
    assert_eq!(
        got,
        [
            ("text".to_owned(), json!({"delta": "Hel"})),
            ("text".to_owned(), json!({"delta": "lo!"})),
            ("usage".to_owned(), json!({"usage": {"total_tokens": 5}})),
            ("final".to_owned(), json!({"ok": true, "text": "Hello!"})),
        ]
    );
}

/// The same plugin isolated. Its stream is an object of
/// its process; each `next` is a request to it, and the events, the
/// request and an HTTP error's reason are the same as in process.
#[test]
fn an_isolated_model_plugin_streams_the_same() {
    let (addr, server) = serve("sse");
    let home = Home::new();
    install(&home, &addr, 5000);
    home.isolate("openai", json!({"enabled": true}));
    let got = events(&home, &addr);
    let (head, _) = server.join().unwrap();
    assert!(head.starts_with("POST /v1/chat/completions HTTP/1.1"), "{head}");
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(got[3], ("final".to_owned(), json!({"ok": true, "text": "Hello!"})));

    let (addr, server) = serve("401");
    let home = Home::new();
    install(&home, &addr, 5000);
    home.isolate("openai", json!({"enabled": true}));
    let (got, error) = events_or_error(&home, &addr);
    server.join().unwrap();
    assert!(got.is_empty(), "{got:?}");
    let msg = error.expect("the stream fails");
    assert!(msg.contains("provider: HTTP 401") && msg.contains("invalid api key"), "{msg}");
}

/// An HTTP error ends the stream with the reason, so the turn fails (not
/// an empty answer and exit 0).
#[test]
fn http_errors_fail_the_stream() {
    let (addr, server) = serve("401");
    let home = Home::new();
    install(&home, &addr, 5000);
    let (got, error) = events_or_error(&home, &addr);
    server.join().unwrap();
    assert!(got.is_empty(), "{got:?}");
    let msg = error.expect("the stream fails");
    assert!(msg.contains("provider: HTTP 401") && msg.contains("invalid api key"), "{msg}");
}

/// A server that never answers: the stream fails with `timeout` after
/// `timeout_ms`, and the turn is not held up longer than that.
#[test]
fn a_hanging_server_times_out() {
    let (addr, _server) = serve("hang");
    let home = Home::new();
    install(&home, &addr, 300);
    let start = Instant::now();
    let (_, error) = events_or_error(&home, &addr);
    assert!(start.elapsed() < Duration::from_secs(2), "took {:?}", start.elapsed());
    assert!(error.expect("the stream fails").contains("timeout: no answer"));
}

/// Behaviour 5: a plugin with only `run_model_stream`, through the text
/// path of a turn: the deltas joined. (And the same through the stream's
/// own `collect_text`.)
#[test]
fn b05_stream_only_model_through_the_text_path() {
    let (addr, server) = serve("sse");
    let home = Home::new();
    install(&home, &addr, 5000);
    let rt = home.host().runtime();
    let args = CallArgs::run_model_stream(&json!("hi"), &"s".to_owned(), &TurnState::new()).unwrap();
    let (text, errors) =
        block_on(async { rt.run_model_stream(&args).await.unwrap().unwrap().collect_text().await.unwrap() });
    server.join().unwrap();
    assert_eq!((text.as_str(), errors.len()), ("Hello!", 0));

    let (addr, server) = serve("sse");
    let home = Home::new();
    install(&home, &addr, 5000);
    let framework = bub_host::framework::Framework::new(&home.host(), "/ws");
    let mut inbound = json!({"content": "hi"});
    let result = block_on(framework.process_inbound(&mut inbound, false)).unwrap();
    server.join().unwrap();
    assert_eq!(result.model_output, "Hello!");
}
