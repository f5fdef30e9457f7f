//! What the fake platform servers (Telegram, Slack, Discord) share: the
//! record of a call they got, their JSON answer, and the wait for what a
//! test expects them to see, which names the calls when it never comes.

use std::{
    io::Write,
    time::{Duration, Instant},
};

use serde_json::Value;

/// A call a fake server answered (or refused).
#[derive(Clone, Debug)]
pub struct Call {
    /// The API method.
    pub method: String,
    /// Its JSON parameters.
    pub params: Value,
    /// When it came.
    pub at: Instant,
}

/// Waits up to 60 s until `done()` holds; else panics saying that
/// `server` (`the fake Slack`) did not see `what`, with the `calls` it got.
pub(crate) fn wait_seeing(server: &str, what: &str, done: impl Fn() -> bool, calls: impl Fn() -> Vec<Call>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        if Instant::now() > deadline {
            let calls: Vec<String> = calls().iter().map(|c| format!("{} {}", c.method, c.params)).collect();
            panic!("{server} did not see {what} within 60 s; calls:\n{}", calls.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A fake server's JSON answer: `code`, extra `headers` (each line ending
/// in `\r\n`), then `body`, and the connection closed.
pub(crate) fn write_answer(out: &mut std::net::TcpStream, code: u16, headers: &str, body: &[u8]) {
    // An empty answer (Discord's `204 No Content`) names no content type:
    // a client that parses JSON by the header (discord.py) would choke.
    let kind = if body.is_empty() { "" } else { "content-type: application/json\r\n" };
    let head =
        format!("HTTP/1.1 {code} Fake\r\n{kind}content-length: {}\r\nconnection: close\r\n{headers}\r\n", body.len());
    let _ = out.write_all(head.as_bytes()).and_then(|()| out.write_all(body)).and_then(|()| out.flush());
}
