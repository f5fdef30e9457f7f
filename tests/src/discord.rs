//! A fake Discord for the discord-channel tests: the Gateway (a WebSocket
//! server speaking API v10's JSON opcodes) and the REST routes the channel
//! calls, checking the bot token. Shapes from discord.com/developers/docs
//! (Gateway, Gateway Events, Message resource, Rate Limits); message and
//! user objects carry every field Discord's do, and discord.py, the most
//! used client, runs against it in the suite
//! (`the_fake_discord_is_what_discord_py_expects`), so the fake is held to
//! more than the channel's own reading of Discord.
//!
//! Discord's delivery rules, as documented, and kept here:
//! - An event is sent once, over the session's connection. Events of a
//!   session whose connection dropped are kept and replayed, after the
//!   client's sequence number, to a **Resume** (then `RESUMED`).
//! - A new session (**Identify**) gets no replay: what came before its
//!   `READY` is readable only over REST (`GET /channels/{id}/messages`).
//! - A client that closes with 1000 ends its session; one that closes
//!   with another code (or drops) may resume it.
//! - `GET …/messages?after=` gives the messages after an id, at most
//!   `limit`, newest first.
//! - A `429` carries `retry_after` (seconds) in its JSON and a
//!   `Retry-After` header; a response with `X-RateLimit-Remaining: 0`
//!   says its bucket is empty for `X-RateLimit-Reset-After` seconds.

use std::{
    collections::{HashMap, VecDeque},
    net::TcpListener,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};

use crate::fake::write_answer;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{
    protocol::{frame::coding::CloseCode, CloseFrame},
    Message,
};

pub use crate::fake::Call;

/// The bot token the fake accepts.
pub const TOKEN: &str = "discord-test-token";
/// The bot's user id.
pub const BOT_ID: &str = "900000000000000001";
/// The intents the channel must ask for (guild and direct messages, and
/// their content).
pub const INTENTS: u64 = (1 << 9) | (1 << 12) | (1 << 15);

enum Control {
    Send(Value),
    Drop,
    Close(u16),
}

struct Session {
    id: String,
    seq: u64,
    // Every dispatch of the session, for a Resume's replay.
    events: Vec<(u64, Value)>,
}

#[derive(Default)]
struct State {
    calls: Vec<Call>,
    history: HashMap<String, Vec<Value>>,
    last_id: u64,
    post_limits: VecDeque<f64>,
    empty_buckets: VecDeque<f64>,
    files: HashMap<String, Vec<u8>>,
    file_auth: Vec<Option<String>>,
    channels: HashMap<String, Value>,
    heartbeat_ms: u64,
    session: Option<Session>,
    sessions_made: usize,
    current: Option<mpsc::UnboundedSender<Control>>,
    identifies: Vec<Value>,
    resumes: Vec<Value>,
    heartbeats: Vec<Value>,
    opened: Vec<Instant>,
    deaf: bool,
    refuse_content_intent: bool,
    // CDN files that never finish answering.
    hung_files: std::collections::HashSet<String>,
    // The next `GET /channels/{id}` answer 429 with these `retry_after`s.
    lookup_limits: VecDeque<f64>,
    // The next connections' Hello frames, as raw text (a hostile Gateway).
    bad_hellos: VecDeque<String>,
    // Each person's direct-message channel (`POST /users/@me/channels`).
    dm_channels: HashMap<String, String>,
}

/// The fake.
pub struct FakeDiscord {
    /// `http://127.0.0.1:<port>/api/v10`: the channel's `api_base`.
    pub api_base: String,
    /// `ws://127.0.0.1:<port>`: the Gateway (what `/gateway/bot` names).
    pub gateway_url: String,
    cdn: String,
    state: Arc<Mutex<State>>,
}

impl Default for FakeDiscord {
    fn default() -> Self {
        FakeDiscord::start()
    }
}

const DISCORD_EPOCH_MS: u64 = 1_420_070_400_000;

impl FakeDiscord {
    /// Starts both servers; heartbeats are asked every 45 s, as Discord's
    /// usual 41.25 s.
    pub fn start() -> FakeDiscord {
        FakeDiscord::with_heartbeat(Duration::from_millis(45_000))
    }

    /// Starts both servers, asking for a heartbeat every `interval`.
    pub fn with_heartbeat(interval: Duration) -> FakeDiscord {
        let state = Arc::new(Mutex::new(State { heartbeat_ms: interval.as_millis() as u64, ..State::default() }));
        let ws = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let ws_url = format!("ws://{}", ws.local_addr().unwrap());
        let ws_state = state.clone();
        let resume_url = ws_url.clone();
        let gateway_url = ws_url.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                ws.set_nonblocking(true).unwrap();
                let listener = tokio::net::TcpListener::from_std(ws).unwrap();
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve_gateway(stream, ws_state.clone(), resume_url.clone()));
                }
            });
        });
        let http = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let origin = format!("http://{}", http.local_addr().unwrap());
        let http_state = state.clone();
        std::thread::spawn(move || {
            for stream in http.incoming() {
                let Ok(stream) = stream else { continue };
                let (state, ws_url) = (http_state.clone(), ws_url.clone());
                std::thread::spawn(move || serve_http(stream, &state, &ws_url));
            }
        });
        FakeDiscord { api_base: format!("{origin}/api/v10"), gateway_url, cdn: format!("{origin}/cdn"), state }
    }

    /// A message of a person: in `guild` (none: a DM) channel `channel`.
    pub fn user_message(channel: &str, guild: Option<&str>, author: &str, text: &str) -> Value {
        json!({"type": 0, "channel_id": channel, "guild_id": guild, "content": text, "mentions": [], "attachments": [],
            "author": {"id": author, "username": format!("user{author}"), "discriminator": "0", "avatar": null,
                "global_name": null}})
    }

    fn new_id(state: &mut State) -> String {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        let id = ((now - DISCORD_EPOCH_MS) << 22).max(state.last_id + 1);
        state.last_id = id;
        id.to_string()
    }

    /// Posts `message` (from [`FakeDiscord::user_message`]) to its channel:
    /// kept for REST, and dispatched as `MESSAGE_CREATE` to the current
    /// session (over its connection, or kept for its Resume); with no
    /// session, only REST can read it. Returns its id.
    pub fn push_message(&self, mut message: Value) -> String {
        let mut state = self.state.lock().unwrap();
        let id = Self::new_id(&mut state);
        message["id"] = json!(id);
        if message["guild_id"].is_null() {
            message.as_object_mut().unwrap().remove("guild_id");
        }
        complete(&mut message);
        let channel = message["channel_id"].as_str().unwrap().to_owned();
        if message.get("guild_id").is_none() {
            // Discord knows a direct message's channel as one: `GET
            // /channels/{id}` answers it as a DM (type 1) with its person.
            let dm =
                json!({"id": channel, "type": 1, "recipients": [message["author"].clone()], "last_message_id": null});
            state.channels.entry(channel.clone()).or_insert(dm);
        }
        state.history.entry(channel).or_default().push(message.clone());
        dispatch(&mut state, "MESSAGE_CREATE", message);
        id
    }

    /// An image (or any file) on the fake CDN; its URL.
    pub fn add_file(&self, name: &str, bytes: &[u8]) -> String {
        self.state.lock().unwrap().files.insert(name.to_owned(), bytes.to_vec());
        format!("{}/{name}", self.cdn)
    }

    /// A file on the fake CDN whose download never finishes (the headers
    /// come, the body does not); its URL.
    pub fn add_hung_file(&self, name: &str) -> String {
        self.state.lock().unwrap().hung_files.insert(name.to_owned());
        format!("{}/{name}", self.cdn)
    }

    /// The next `n` channel lookups (`GET /channels/{id}`) answer `429`
    /// with `retry_after` seconds.
    pub fn rate_limit_lookups(&self, seconds: f64, n: usize) {
        self.state.lock().unwrap().lookup_limits.extend(std::iter::repeat_n(seconds, n));
    }

    /// The next connections begin with these Hello frames (raw text) instead
    /// of Discord's.
    pub fn bad_hellos(&self, hellos: &[&str]) {
        self.state.lock().unwrap().bad_hellos.extend(hellos.iter().map(|h| (*h).to_owned()));
    }

    /// Person `user`'s direct-message channel with the bot is `channel`.
    pub fn dm_channel(&self, user: &str, channel: &str) {
        self.state.lock().unwrap().dm_channels.insert(user.to_owned(), channel.to_owned());
    }

    /// What `GET /channels/{id}` answers for `id` (a thread: type 11).
    pub fn add_channel(&self, id: &str, kind: u64, name: &str) {
        self.state.lock().unwrap().channels.insert(id.to_owned(), json!({"id": id, "type": kind, "name": name}));
    }

    /// The next `n` message posts answer `429` with `retry_after` seconds.
    pub fn rate_limit_posts(&self, seconds: f64, n: usize) {
        self.state.lock().unwrap().post_limits.extend(std::iter::repeat_n(seconds, n));
    }

    /// The next message post answers with its bucket empty for `seconds`.
    pub fn empty_post_bucket(&self, seconds: f64) {
        self.state.lock().unwrap().empty_buckets.push_back(seconds);
    }

    /// Drops the connection without a close frame (a network drop); the
    /// session stays resumable.
    pub fn drop_connection(&self) {
        if let Some(current) = self.state.lock().unwrap().current.take() {
            let _ = current.send(Control::Drop);
        }
    }

    /// Sends Reconnect (op 7).
    pub fn request_reconnect(&self) {
        if let Some(current) = self.state.lock().unwrap().current.clone() {
            let _ = current.send(Control::Send(json!({"op": 7, "d": null})));
        }
    }

    /// Ends the session: Invalid Session (op 9, not resumable).
    pub fn invalidate_session(&self) {
        let mut state = self.state.lock().unwrap();
        state.session = None;
        if let Some(current) = state.current.clone() {
            let _ = current.send(Control::Send(json!({"op": 9, "d": false})));
        }
    }

    /// Closes the connection with `code`.
    pub fn close(&self, code: u16) {
        if let Some(current) = self.state.lock().unwrap().current.take() {
            let _ = current.send(Control::Close(code));
        }
    }

    /// Stops acknowledging heartbeats (a zombie connection) until the next connection.
    pub fn stop_acknowledging(&self) {
        self.state.lock().unwrap().deaf = true;
    }

    /// Closes every identify with 4014, as Discord does when the bot's
    /// Message Content intent is not enabled in the Developer Portal.
    pub fn refuse_content_intent(&self) {
        self.state.lock().unwrap().refuse_content_intent = true;
    }

    /// The identify payloads (op 2 `d`), in order.
    pub fn identifies(&self) -> Vec<Value> {
        self.state.lock().unwrap().identifies.clone()
    }

    /// The resume payloads (op 6 `d`), in order.
    pub fn resumes(&self) -> Vec<Value> {
        self.state.lock().unwrap().resumes.clone()
    }

    /// The heartbeats' `d` (the client's last sequence number), in order.
    pub fn heartbeats(&self) -> Vec<Value> {
        self.state.lock().unwrap().heartbeats.clone()
    }

    /// When each Gateway connection opened.
    pub fn opened(&self) -> Vec<Instant> {
        self.state.lock().unwrap().opened.clone()
    }

    /// Whether a Gateway connection is open and its session ready.
    pub fn connected(&self) -> bool {
        let state = self.state.lock().unwrap();
        state.current.is_some() && state.session.is_some()
    }

    /// The `Authorization` header of each CDN request (none: `None`).
    pub fn file_requests(&self) -> Vec<Option<String>> {
        self.state.lock().unwrap().file_auth.clone()
    }

    /// REST calls whose `METHOD /path` starts with `prefix`.
    pub fn calls(&self, prefix: &str) -> Vec<Call> {
        self.state.lock().unwrap().calls.iter().filter(|c| c.method.starts_with(prefix)).cloned().collect()
    }

    /// The bot's messages in `channel` as they read now (edits applied),
    /// with the message each replies to.
    pub fn posted(&self, channel: &str) -> Vec<(String, Option<String>)> {
        let state = self.state.lock().unwrap();
        state
            .history
            .get(channel)
            .into_iter()
            .flatten()
            .filter(|m| m["author"]["id"] == BOT_ID)
            .map(|m| {
                (
                    m["content"].as_str().unwrap_or("").to_owned(),
                    // Discord takes a snowflake as a string or a number.
                    match &m["message_reference"]["message_id"] {
                        Value::String(id) => Some(id.clone()),
                        Value::Number(id) => Some(id.to_string()),
                        _ => None,
                    },
                )
            })
            .collect()
    }

    /// Waits up to 60 s until `done()` holds; panics naming `what`.
    pub fn wait_for(&self, what: &str, done: impl Fn() -> bool) {
        crate::fake::wait_seeing("the fake Discord", what, done, || self.state.lock().unwrap().calls.clone());
    }
}

/// The bot's user object.
fn bot_user() -> Value {
    json!({"id": BOT_ID, "username": "bub_test", "discriminator": "0", "avatar": null, "global_name": null, "bot": true})
}

/// Fills the fields every message object of Discord's carries (its
/// timestamp from its id, no embeds, not pinned, …) where a test left
/// them out: clients such as discord.py read them unconditionally.
fn complete(message: &mut Value) {
    let id: u64 = message["id"].as_str().and_then(|i| i.parse().ok()).unwrap_or(0);
    let ms = (id >> 22) + DISCORD_EPOCH_MS;
    let stamp = jiff::Timestamp::from_millisecond(ms as i64).map(|t| t.to_string()).unwrap_or_default();
    let defaults = json!({"timestamp": stamp, "edited_timestamp": null, "tts": false, "mention_everyone": false,
        "mention_roles": [], "embeds": [], "pinned": false, "flags": 0, "components": [], "mentions": [],
        "attachments": []});
    for (key, value) in defaults.as_object().unwrap() {
        if message.get(key).is_none() {
            message[key] = value.clone();
        }
    }
}

/// A dispatch to the session: numbered, kept for a Resume, and sent over
/// the connection when there is one.
fn dispatch(state: &mut State, name: &str, data: Value) {
    let Some(session) = state.session.as_mut() else { return };
    session.seq += 1;
    let event = json!({"op": 0, "t": name, "s": session.seq, "d": data});
    session.events.push((session.seq, event.clone()));
    if let Some(current) = &state.current {
        if current.send(Control::Send(event)).is_err() {
            state.current = None;
        }
    }
}

async fn serve_gateway(stream: tokio::net::TcpStream, state: Arc<Mutex<State>>, resume_url: String) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else { return };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (interval, bad_hello) = {
        let mut s = state.lock().unwrap();
        s.opened.push(Instant::now());
        s.deaf = false;
        (s.heartbeat_ms, s.bad_hellos.pop_front())
    };
    let hello = bad_hello.unwrap_or_else(|| json!({"op": 10, "d": {"heartbeat_interval": interval}}).to_string());
    if ws.send(Message::text(hello)).await.is_err() {
        return;
    }
    let close =
        |code: u16| Message::Close(Some(CloseFrame { code: CloseCode::from(code), reason: "fake discord".into() }));
    loop {
        tokio::select! {
            frame = ws.next() => {
                let text = match frame {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Close(frame))) => {
                        // 1000 and 1001 end the session; other codes keep it resumable.
                        let code: u16 = frame.map_or(1005, |f| f.code.into());
                        let mut s = state.lock().unwrap();
                        if code == 1000 || code == 1001 {
                            s.session = None;
                        }
                        s.current = None;
                        return;
                    }
                    Some(Ok(_)) => continue,
                    None | Some(Err(_)) => {
                        state.lock().unwrap().current = None;
                        return;
                    }
                };
                let Ok(payload) = serde_json::from_str::<Value>(&text) else { continue };
                let mut out = Vec::new();
                let mut refuse = None;
                {
                    let mut s = state.lock().unwrap();
                    match payload["op"].as_u64() {
                        Some(1) => {
                            s.heartbeats.push(payload["d"].clone());
                            if !s.deaf {
                                out.push(json!({"op": 11}));
                            }
                        }
                        Some(2) => {
                            let d = payload["d"].clone();
                            s.identifies.push(d.clone());
                            if d["token"] != TOKEN {
                                refuse = Some(4004);
                            } else if s.refuse_content_intent && d["intents"].as_u64().unwrap_or(0) & (1 << 15) != 0 {
                                refuse = Some(4014);
                            } else {
                            s.sessions_made += 1;
                            let id = format!("session-{}", s.sessions_made);
                            s.session = Some(Session { id: id.clone(), seq: 0, events: Vec::new() });
                            s.current = Some(tx.clone());
                            let ready = json!({"v": 10, "user": bot_user(),
                                "guilds": [], "session_id": id, "resume_gateway_url": resume_url});
                            dispatch(&mut s, "READY", ready);
                            }
                        }
                        Some(6) => {
                            let d = payload["d"].clone();
                            s.resumes.push(d.clone());
                            let valid = d["token"] == TOKEN
                                && s.session.as_ref().is_some_and(|session| session.id == d["session_id"]);
                            if !valid {
                                out.push(json!({"op": 9, "d": false}));
                            } else {
                                let after = d["seq"].as_u64().unwrap_or(0);
                                let replay: Vec<Value> = s.session.as_ref().unwrap().events.iter()
                                    .filter(|(seq, _)| *seq > after).map(|(_, e)| e.clone()).collect();
                                out.extend(replay);
                                s.current = Some(tx.clone());
                                dispatch(&mut s, "RESUMED", json!({}));
                            }
                        }
                        _ => {}
                    }
                }
                if let Some(code) = refuse {
                    let _ = ws.send(close(code)).await;
                    return;
                }
                for payload in out {
                    if ws.send(Message::text(payload.to_string())).await.is_err() {
                        return;
                    }
                }
            }
            control = rx.recv() => match control {
                Some(Control::Send(payload)) => {
                    if ws.send(Message::text(payload.to_string())).await.is_err() {
                        return;
                    }
                }
                Some(Control::Close(code)) => {
                    let _ = ws.send(close(code)).await;
                    return;
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
    let mut words = request.line.split_whitespace();
    let (method, target) = (words.next().unwrap_or("").to_owned(), words.next().unwrap_or("").to_owned());
    let auth = request.header("authorization").map(str::to_owned);
    if let Some(name) = target.strip_prefix("/cdn/") {
        let mut s = state.lock().unwrap();
        s.file_auth.push(auth);
        if s.hung_files.contains(name) {
            drop(s);
            let _ = std::io::Write::write_all(
                &mut out,
                b"HTTP/1.1 200 OK\r\ncontent-type: image/png\r\ncontent-length: 1000\r\n\r\n\x89PNG",
            );
            std::thread::sleep(Duration::from_secs(600));
            return;
        }
        match s.files.get(name).cloned() {
            Some(bytes) => write_answer(&mut out, 200, "", &bytes),
            None => write_answer(&mut out, 404, "", b"{}"),
        }
        return;
    }
    let path = target.strip_prefix("/api/v10").unwrap_or(&target).to_owned();
    let (path, query) =
        path.split_once('?').map_or((path.clone(), String::new()), |(p, q)| (p.to_owned(), q.to_owned()));
    let mut s = state.lock().unwrap();
    s.calls.push(Call { method: format!("{method} {path}"), params: request.body.clone(), at: Instant::now() });
    if auth.as_deref() != Some(&format!("Bot {TOKEN}")) {
        drop(s);
        write_answer(&mut out, 401, "", br#"{"message": "401: Unauthorized", "code": 0}"#);
        return;
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let mut headers = String::new();
    let (code, body) = match (method.as_str(), segments.as_slice()) {
        ("GET", ["users", "@me"]) => (200, bot_user()),
        ("GET", ["oauth2", "applications", "@me"]) => (
            200,
            json!({"id": BOT_ID, "name": "bub_test", "description": "", "icon": null, "bot_public": false,
                "bot_require_code_grant": false, "verify_key": "00", "flags": 0, "team": null,
                "owner": {"id": "1", "username": "owner", "discriminator": "0", "avatar": null, "global_name": null}}),
        ),
        ("GET", ["gateway", "bot"]) => (
            200,
            json!({"url": ws_url, "shards": 1,
                "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}}),
        ),
        ("POST", ["channels", channel, "messages"]) => {
            if let Some(seconds) = s.post_limits.pop_front() {
                headers = format!("retry-after: {}\r\n", seconds.ceil() as u64);
                (429, json!({"message": "You are being rate limited.", "retry_after": seconds, "global": false}))
            } else {
                if let Some(seconds) = s.empty_buckets.pop_front() {
                    headers = format!("x-ratelimit-remaining: 0\r\nx-ratelimit-reset-after: {seconds}\r\n");
                }
                let id = FakeDiscord::new_id(&mut s);
                let mut message = json!({"id": id, "type": 0, "channel_id": channel, "content": request.body["content"],
                    "author": bot_user()});
                if let Some(reference) = request.body.get("message_reference") {
                    message["type"] = json!(19);
                    message["message_reference"] = reference.clone();
                }
                complete(&mut message);
                s.history.entry(channel.to_string()).or_default().push(message.clone());
                dispatch(&mut s, "MESSAGE_CREATE", message.clone());
                (200, message)
            }
        }
        ("PATCH", ["channels", channel, "messages", id]) => {
            let found = s.history.get_mut(*channel).and_then(|h| h.iter_mut().find(|m| m["id"] == *id));
            match found {
                Some(message) => {
                    message["content"] = request.body["content"].clone();
                    (200, message.clone())
                }
                None => (404, json!({"message": "Unknown Message", "code": 10008})),
            }
        }
        ("POST", ["channels", _, "typing"]) => (204, Value::Null),
        ("GET", ["channels", channel, "messages"]) => {
            let param = |name: &str| {
                query.split('&').find_map(|kv| kv.strip_prefix(&format!("{name}="))).and_then(|v| v.parse::<u64>().ok())
            };
            let (after, limit) = (param("after").unwrap_or(0), param("limit").unwrap_or(50) as usize);
            let mut found: Vec<Value> = s
                .history
                .get(*channel)
                .into_iter()
                .flatten()
                .filter(|m| m["id"].as_str().and_then(|i| i.parse::<u64>().ok()).unwrap_or(0) > after)
                .take(limit)
                .cloned()
                .collect();
            found.reverse();
            (200, Value::Array(found))
        }
        ("GET", ["channels", channel]) => {
            if let Some(seconds) = s.lookup_limits.pop_front() {
                headers = format!("retry-after: {}\r\n", seconds.ceil() as u64);
                (429, json!({"message": "You are being rate limited.", "retry_after": seconds, "global": false}))
            } else {
                let known = s.channels.get(*channel).cloned();
                (200, known.unwrap_or_else(|| json!({"id": channel, "type": 0, "name": "general"})))
            }
        }
        ("POST", ["users", "@me", "channels"]) => {
            let user = request.body["recipient_id"].as_str().unwrap_or_default().to_owned();
            match s.dm_channels.get(&user).cloned() {
                Some(id) => (200, json!({"id": id, "type": 1, "recipients": [{"id": user}]})),
                None => (400, json!({"message": "Invalid Recipient(s)", "code": 50033})),
            }
        }
        _ => (404, json!({"message": "404: Not Found", "code": 0})),
    };
    drop(s);
    let body = if body.is_null() { Vec::new() } else { body.to_string().into_bytes() };
    write_answer(&mut out, code, &headers, &body);
}
