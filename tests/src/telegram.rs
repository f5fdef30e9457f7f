//! A fake Telegram Bot API server on loopback, for the telegram-channel
//! tests: `getMe`, `deleteWebhook`, `setWebhook`, long-polled `getUpdates` (updates the
//! test pushes, confirmed by `offset` as Telegram does), `sendMessage`,
//! `editMessageText`, `sendChatAction`, `getFile` and file downloads, with
//! scripted trouble: `429` answers with `retry_after`, and dropped
//! connections (closed without an answer, as a network drop looks).
//! Messages and updates follow the Bot API's JSON (core.telegram.org/bots/api).

use std::{
    collections::{HashMap, VecDeque},
    io::Write,
    net::TcpListener,
    sync::{Arc, Condvar, Mutex},
    time::{Duration, Instant},
};

use serde_json::{json, Value};

/// The bot's token the server accepts.
pub const TOKEN: &str = "123456:TEST-token";
/// The bot's user id and username.
pub const BOT_ID: u64 = 42;
/// The bot's username.
pub const BOT_USERNAME: &str = "bub_test_bot";

/// Scripted trouble for a method's next calls.
#[derive(Clone, Debug)]
pub enum Trouble {
    /// `429 Too Many Requests` with `retry_after` seconds.
    RateLimit(u16),
    /// Close the connection without an answer.
    Drop,
    /// `200` and a body that never ends (a broken proxy or a hostile
    /// self-hosted Bot API), until the client stops reading or 1 GiB.
    Endless,
}

pub use crate::fake::Call;

#[derive(Default)]
struct State {
    updates: Vec<Value>,
    next_update: i64,
    next_message: i64,
    calls: Vec<Call>,
    trouble: HashMap<String, VecDeque<Trouble>>,
    files: HashMap<String, Vec<u8>>,
}

/// The server.
pub struct FakeBotApi {
    /// `http://127.0.0.1:<port>`: the channel's `api_base`.
    pub base: String,
    state: Arc<(Mutex<State>, Condvar)>,
}

impl Default for FakeBotApi {
    fn default() -> Self {
        FakeBotApi::start()
    }
}

impl FakeBotApi {
    /// Starts serving.
    pub fn start() -> FakeBotApi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let state =
            Arc::new((Mutex::new(State { next_update: 1000, next_message: 1, ..State::default() }), Condvar::new()));
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let state = shared.clone();
                std::thread::spawn(move || serve(stream, &state));
            }
        });
        FakeBotApi { base, state }
    }

    /// Queues an update with this `message` (its `update_id` is assigned).
    pub fn push_message(&self, message: Value) {
        let (lock, wake) = &*self.state;
        let mut state = lock.lock().unwrap();
        let id = state.next_update;
        state.next_update += 1;
        state.updates.push(json!({"update_id": id, "message": message}));
        wake.notify_all();
    }

    /// Queues an update of `message` with `update_id` as given (a broken or
    /// hostile Bot API's), not the next one.
    pub fn push_message_with_id(&self, update_id: i64, message: Value) {
        let (lock, wake) = &*self.state;
        lock.lock().unwrap().updates.push(json!({"update_id": update_id, "message": message}));
        wake.notify_all();
    }

    /// Serves `bytes` for `getFile(file_id)`.
    pub fn add_file(&self, file_id: &str, bytes: &[u8]) {
        self.state.0.lock().unwrap().files.insert(file_id.to_owned(), bytes.to_vec());
    }

    /// Scripts `trouble` for the next calls of `method`.
    pub fn trouble(&self, method: &str, trouble: Vec<Trouble>) {
        self.state.0.lock().unwrap().trouble.entry(method.to_owned()).or_default().extend(trouble);
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.state.0.lock().unwrap().calls.clone()
    }

    /// The calls of `method` so far.
    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        self.calls().into_iter().filter(|c| c.method == method).collect()
    }

    /// Waits up to `limit` until `done` holds for the calls; panics with
    /// them (and `what`) when it does not.
    pub fn wait_for(&self, what: &str, limit: Duration, done: impl Fn(&[Call]) -> bool) -> Vec<Call> {
        let deadline = Instant::now() + limit;
        loop {
            let calls = self.calls();
            if done(&calls) {
                return calls;
            }
            if Instant::now() > deadline {
                let seen: Vec<String> = calls.iter().map(|c| format!("{} {}", c.method, c.params)).collect();
                panic!("the fake Bot API did not see {what} within {limit:?}; calls:\n{}", seen.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The texts sent to `chat` (`sendMessage`), in order.
    pub fn sent_to(&self, chat: i64) -> Vec<String> {
        self.calls_of("sendMessage")
            .iter()
            .filter(|c| c.params["chat_id"] == json!(chat))
            .filter_map(|c| c.params["text"].as_str().map(str::to_owned))
            .collect()
    }
}

/// A private-chat text message from user `user` (chat id = user id).
pub fn private_text(user: u64, text: &str) -> Value {
    json!({
        "message_id": 1, "date": 1_700_000_000,
        "chat": {"id": user, "type": "private", "first_name": "Ann"},
        "from": {"id": user, "is_bot": false, "first_name": "Ann", "username": format!("user{user}")},
        "text": text,
    })
}

/// A group text message from user `user` in group `chat`, with `entities`.
pub fn group_text(chat: i64, user: u64, text: &str, entities: Value) -> Value {
    json!({
        "message_id": 2, "date": 1_700_000_000,
        "chat": {"id": chat, "type": "supergroup", "title": "team"},
        "from": {"id": user, "is_bot": false, "first_name": "Bo", "username": format!("user{user}")},
        "text": text, "entities": entities,
    })
}

fn answer(out: &mut std::net::TcpStream, code: u16, body: &[u8], kind: &str) {
    let head = format!(
        "HTTP/1.1 {code} Fake\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = out.write_all(head.as_bytes()).and_then(|()| out.write_all(body)).and_then(|()| out.flush());
}

fn serve(stream: std::net::TcpStream, state: &(Mutex<State>, Condvar)) {
    let Some(request) = crate::provider::read_request(&stream) else { return };
    let mut out = stream;
    let path = request.line.split_whitespace().nth(1).unwrap_or("").to_owned();
    let (lock, wake) = state;
    if let Some(file) = path.strip_prefix(&format!("/file/bot{TOKEN}/")) {
        let bytes = lock.lock().unwrap().files.get(file.trim_start_matches("files/")).cloned();
        match bytes {
            Some(bytes) => answer(&mut out, 200, &bytes, "application/octet-stream"),
            None => answer(&mut out, 404, b"not found", "text/plain"),
        }
        return;
    }
    let Some(method) = path.strip_prefix(&format!("/bot{TOKEN}/")).map(str::to_owned) else {
        let body = json!({"ok": false, "error_code": 401, "description": "Unauthorized"}).to_string();
        answer(&mut out, 401, body.as_bytes(), "application/json");
        return;
    };
    let params = request.body;
    let trouble = {
        let mut s = lock.lock().unwrap();
        s.calls.push(Call { method: method.clone(), params: params.clone(), at: Instant::now() });
        s.trouble.get_mut(&method).and_then(VecDeque::pop_front)
    };
    match trouble {
        Some(Trouble::Drop) => return,
        Some(Trouble::Endless) => {
            crate::provider::write_endless_json(&mut out, r#"{"ok":true,"result":["#, b' ');
            return;
        }
        Some(Trouble::RateLimit(seconds)) => {
            let body = json!({"ok": false, "error_code": 429,
                "description": format!("Too Many Requests: retry after {seconds}"),
                "parameters": {"retry_after": seconds}});
            answer(&mut out, 429, body.to_string().as_bytes(), "application/json");
            return;
        }
        None => {}
    }
    let result = match method.as_str() {
        "getMe" => json!({"id": BOT_ID, "is_bot": true, "first_name": "Bub", "username": BOT_USERNAME}),
        "deleteWebhook" | "setWebhook" | "sendChatAction" => json!(true),
        "getUpdates" => {
            let offset = params["offset"].as_i64().unwrap_or(0);
            let timeout = Duration::from_secs(params["timeout"].as_u64().unwrap_or(0));
            let deadline = Instant::now() + timeout;
            let mut s = lock.lock().unwrap();
            // An offset confirms every update before it, as Telegram does.
            s.updates.retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
            while s.updates.is_empty() && Instant::now() < deadline {
                s = wake.wait_timeout(s, deadline - Instant::now()).unwrap().0;
            }
            let limit = params["limit"].as_u64().unwrap_or(100) as usize;
            json!(s.updates.iter().take(limit).cloned().collect::<Vec<_>>())
        }
        "sendMessage" | "editMessageText" => {
            let mut s = lock.lock().unwrap();
            let id = match params["message_id"].as_i64() {
                Some(id) => id,
                None => {
                    s.next_message += 1;
                    s.next_message
                }
            };
            json!({"message_id": id, "date": 1_700_000_001,
                   "chat": {"id": params["chat_id"], "type": "private"},
                   "from": {"id": BOT_ID, "is_bot": true, "first_name": "Bub"},
                   "text": params["text"]})
        }
        "getFile" => {
            let id = params["file_id"].as_str().unwrap_or("").to_owned();
            let size = lock.lock().unwrap().files.get(&id).map(Vec::len);
            match size {
                Some(size) => {
                    json!({"file_id": id, "file_unique_id": "u", "file_size": size, "file_path": format!("files/{id}")})
                }
                None => {
                    let body = json!({"ok": false, "error_code": 400, "description": "Bad Request: invalid file_id"});
                    answer(&mut out, 400, body.to_string().as_bytes(), "application/json");
                    return;
                }
            }
        }
        _ => {
            let body = json!({"ok": false, "error_code": 404, "description": "Not Found"});
            answer(&mut out, 404, body.to_string().as_bytes(), "application/json");
            return;
        }
    };
    answer(&mut out, 200, json!({"ok": true, "result": result}).to_string().as_bytes(), "application/json");
}
