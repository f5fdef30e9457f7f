//! A fake Slack for the slack-channel tests: the Web API methods the
//! channel calls (`auth.test`, `apps.connections.open`, `chat.postMessage`,
//! `chat.update`, file downloads), checking the tokens, with scripted
//! `429 Retry-After` answers; and a Socket Mode WebSocket server that says
//! `hello`, sends the events the test pushes as `events_api` envelopes,
//! records the acknowledgements, and can ask for a reconnect
//! (`disconnect`) or drop the connection. Shapes from api.slack.com
//! (Socket Mode, Events API).
//!
//! Slack's delivery rule, as its Events API documents it: an event whose
//! envelope is not acknowledged is sent again, with `retry_attempt` one
//! higher and `retry_reason`, at most three times. Here the retries go out
//! when the next connection opens (a restarted app), so a test sees
//! exactly what an app that stopped without acknowledging gets back.

use std::{
    collections::{HashMap, VecDeque},
    net::TcpListener,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};

use crate::fake::write_answer;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

/// The bot token the fake accepts.
pub const BOT_TOKEN: &str = "xoxb-test-bot";
/// The app token the fake accepts.
pub const APP_TOKEN: &str = "xapp-test-app";
/// The bot's user id.
pub const BOT_USER: &str = "B0BOT";

enum Control {
    Send(Value),
    Drop,
}

/// A Web API call (the shape the fake Bot API records too).
pub use crate::fake::Call;

#[derive(Default)]
struct State {
    calls: Vec<Call>,
    acks: Vec<String>,
    connections: usize,
    current: Option<mpsc::UnboundedSender<Control>>,
    rate_limits: HashMap<String, VecDeque<u64>>,
    files: HashMap<String, Vec<u8>>,
    next_ts: u64,
    next_envelope: u64,
    // Every envelope sent, for Slack's retries of unacknowledged ones.
    sent: Vec<Value>,
    // The token of every file request.
    file_requests: Vec<String>,
    // When each Socket Mode connection opened.
    opened: Vec<Instant>,
    // Methods whose next call gets a 200 body that never ends.
    endless: Vec<String>,
}

/// How often Slack retries an unacknowledged event.
pub const RETRIES: u64 = 3;

/// The fake.
pub struct FakeSlack {
    /// `http://127.0.0.1:<port>/api`: the channel's `api_base`.
    pub api_base: String,
    state: Arc<Mutex<State>>,
}

impl Default for FakeSlack {
    fn default() -> Self {
        FakeSlack::start()
    }
}

impl FakeSlack {
    /// Starts both servers.
    pub fn start() -> FakeSlack {
        let state = Arc::new(Mutex::new(State { next_ts: 1000, ..State::default() }));
        let ws = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let ws_url = format!("ws://{}/link", ws.local_addr().unwrap());
        let ws_state = state.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                ws.set_nonblocking(true).unwrap();
                let listener = tokio::net::TcpListener::from_std(ws).unwrap();
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve_socket(stream, ws_state.clone()));
                }
            });
        });
        let http = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let api_base = format!("http://{}/api", http.local_addr().unwrap());
        let http_state = state.clone();
        let files_base = format!("http://{}/files", http.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in http.incoming() {
                let Ok(stream) = stream else { continue };
                let (state, ws_url) = (http_state.clone(), ws_url.clone());
                std::thread::spawn(move || serve_http(stream, &state, &ws_url));
            }
        });
        let fake = FakeSlack { api_base, state };
        fake.state.lock().unwrap().files.insert("base".into(), files_base.into_bytes());
        fake
    }

    /// `http://…/files/<name>`, serving `bytes` to the bot token.
    pub fn add_file(&self, name: &str, bytes: &[u8]) -> String {
        let mut state = self.state.lock().unwrap();
        state.files.insert(name.to_owned(), bytes.to_vec());
        format!("{}/{name}", String::from_utf8_lossy(&state.files["base"]))
    }

    /// The next `n` calls of `method` answer `429` with `Retry-After: seconds`.
    pub fn rate_limit(&self, method: &str, seconds: u64, n: usize) {
        let mut state = self.state.lock().unwrap();
        state.rate_limits.entry(method.to_owned()).or_default().extend(std::iter::repeat_n(seconds, n));
    }

    /// Sends `event` in an `events_api` envelope over the current
    /// connection (waiting up to 30 s for one); returns its envelope id.
    pub fn push_event(&self, event: Value) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            {
                let mut state = self.state.lock().unwrap();
                if let Some(current) = state.current.clone() {
                    state.next_envelope += 1;
                    let id = format!("env-{}", state.next_envelope);
                    let envelope = json!({"envelope_id": id, "type": "events_api", "accepts_response_payload": false,
                        "retry_attempt": 0, "payload": {"type": "event_callback", "team_id": "T1", "event": event}});
                    if current.send(Control::Send(envelope.clone())).is_ok() {
                        state.sent.push(envelope);
                        return id;
                    }
                    state.current = None;
                }
            }
            assert!(Instant::now() < deadline, "no Socket Mode connection to send an event over");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Asks the channel to reconnect, as Slack does before it rotates a connection.
    pub fn request_reconnect(&self) {
        if let Some(current) = self.state.lock().unwrap().current.take() {
            let _ = current.send(Control::Send(json!({"type": "disconnect", "reason": "refresh_requested"})));
        }
    }

    /// Drops the current connection without a close frame (a network drop).
    pub fn drop_connection(&self) {
        if let Some(current) = self.state.lock().unwrap().current.take() {
            let _ = current.send(Control::Drop);
        }
    }

    /// The next call of `method` gets `200` and a body that never ends (a
    /// broken proxy), until the client stops reading or 1 GiB.
    pub fn endless(&self, method: &str) {
        self.state.lock().unwrap().endless.push(method.to_owned());
    }

    /// When each Socket Mode connection opened.
    pub fn opened(&self) -> Vec<Instant> {
        self.state.lock().unwrap().opened.clone()
    }

    /// How many Socket Mode connections were made.
    pub fn connections(&self) -> usize {
        self.state.lock().unwrap().connections
    }

    /// The bearer tokens file downloads came with, in order.
    pub fn file_requests(&self) -> Vec<String> {
        self.state.lock().unwrap().file_requests.clone()
    }

    /// Every envelope sent (retries included), in order.
    pub fn sent(&self) -> Vec<Value> {
        self.state.lock().unwrap().sent.clone()
    }

    /// The acknowledged envelope ids.
    pub fn acks(&self) -> Vec<String> {
        self.state.lock().unwrap().acks.clone()
    }

    /// Web API calls of `method`.
    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        self.state.lock().unwrap().calls.iter().filter(|c| c.method == method).cloned().collect()
    }

    /// The texts posted to `channel`, with their `thread_ts`.
    pub fn posted(&self, channel: &str) -> Vec<(String, Option<String>)> {
        self.calls_of("chat.postMessage")
            .into_iter()
            .filter(|c| c.params["channel"] == channel)
            .map(|c| {
                (c.params["text"].as_str().unwrap_or("").to_owned(), c.params["thread_ts"].as_str().map(str::to_owned))
            })
            .collect()
    }

    /// Waits up to 60 s until `done()` holds; panics naming `what`.
    pub fn wait_for(&self, what: &str, done: impl Fn() -> bool) {
        crate::fake::wait_seeing("the fake Slack", what, done, || self.state.lock().unwrap().calls.clone());
    }
}

async fn serve_socket(stream: tokio::net::TcpStream, state: Arc<Mutex<State>>) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else { return };
    let (tx, mut rx) = mpsc::unbounded_channel();
    {
        let mut s = state.lock().unwrap();
        s.connections += 1;
        s.opened.push(Instant::now());
        s.current = Some(tx);
    }
    if ws.send(Message::text(json!({"type": "hello", "num_connections": 1}).to_string())).await.is_err() {
        return;
    }
    // Slack's retries: what was never acknowledged comes again.
    let retries: Vec<Value> = {
        let mut s = state.lock().unwrap();
        let mut retries = Vec::new();
        let acked = s.acks.clone();
        for envelope in &s.sent {
            let id = envelope["envelope_id"].as_str().unwrap_or("");
            let attempt = envelope["retry_attempt"].as_u64().unwrap_or(0);
            let retried = s.sent.iter().any(|e| {
                e["envelope_id"] == envelope["envelope_id"] && e["retry_attempt"].as_u64().unwrap_or(0) > attempt
            });
            if !acked.iter().any(|a| a == id) && !retried && attempt < RETRIES {
                let mut again = envelope.clone();
                again["retry_attempt"] = json!(attempt + 1);
                again["retry_reason"] = json!("timeout");
                retries.push(again);
            }
        }
        s.sent.extend(retries.iter().cloned());
        retries
    };
    for envelope in retries {
        if ws.send(Message::text(envelope.to_string())).await.is_err() {
            return;
        }
    }
    loop {
        tokio::select! {
            frame = ws.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    if let Ok(ack) = serde_json::from_str::<Value>(&text) {
                        if let Some(id) = ack["envelope_id"].as_str() {
                            state.lock().unwrap().acks.push(id.to_owned());
                        }
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            },
            control = rx.recv() => match control {
                Some(Control::Send(envelope)) => {
                    if ws.send(Message::text(envelope.to_string())).await.is_err() {
                        return;
                    }
                }
                // Dropped without a close frame: the TCP connection just ends.
                Some(Control::Drop) | None => return,
            },
        }
    }
}

fn serve_http(stream: std::net::TcpStream, state: &Mutex<State>, ws_url: &str) {
    let Some(request) = crate::provider::read_request(&stream) else { return };
    let mut out = stream;
    let path = request.line.split_whitespace().nth(1).unwrap_or("").to_owned();
    let token = request.header("authorization").and_then(|a| a.strip_prefix("Bearer ")).unwrap_or("").to_owned();
    if let Some(name) = path.strip_prefix("/files/") {
        let mut s = state.lock().unwrap();
        s.file_requests.push(token.clone());
        let bytes = s.files.get(name).cloned();
        drop(s);
        match bytes.filter(|_| token == BOT_TOKEN) {
            Some(bytes) => write_answer(&mut out, 200, "", &bytes),
            None => write_answer(&mut out, 404, "", b"{}"),
        }
        return;
    }
    let method = path.trim_start_matches("/api/").to_owned();
    let (rate_limited, endless) = {
        let mut s = state.lock().unwrap();
        s.calls.push(Call { method: method.clone(), params: request.body.clone(), at: Instant::now() });
        let endless = s.endless.iter().position(|m| *m == method).map(|i| s.endless.remove(i)).is_some();
        (s.rate_limits.get_mut(&method).and_then(VecDeque::pop_front), endless)
    };
    if endless {
        crate::provider::write_endless_json(&mut out, r#"{"ok":true,"x":""#, b'x');
        return;
    }
    if let Some(seconds) = rate_limited {
        write_answer(&mut out, 429, &format!("retry-after: {seconds}\r\n"), br#"{"ok":false,"error":"ratelimited"}"#);
        return;
    }
    let want = if method == "apps.connections.open" { APP_TOKEN } else { BOT_TOKEN };
    let body = if token != want {
        json!({"ok": false, "error": "invalid_auth"})
    } else {
        match method.as_str() {
            "auth.test" => json!({"ok": true, "user_id": BOT_USER, "team": "Test Team", "bot_id": "BX"}),
            "apps.connections.open" => json!({"ok": true, "url": ws_url}),
            "chat.postMessage" => {
                let mut s = state.lock().unwrap();
                s.next_ts += 1;
                json!({"ok": true, "channel": request.body["channel"], "ts": format!("{}.000100", s.next_ts)})
            }
            "chat.update" => json!({"ok": true, "channel": request.body["channel"], "ts": request.body["ts"]}),
            _ => json!({"ok": false, "error": "unknown_method"}),
        }
    };
    write_answer(&mut out, 200, "", body.to_string().as_bytes());
}
