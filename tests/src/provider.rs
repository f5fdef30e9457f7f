//! A scripted LLM provider on loopback: serves one scripted reply per
//! request, in order, and records every request (head and JSON body). It
//! speaks HTTP/1.1 with `connection: close`, enough for reqwest.
//!
//! Builders for the three wire formats' event streams live in [`chat`],
//! [`responses`] and [`anthropic`].

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpListener,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::{json, Value};

/// One scripted reply.
#[derive(Debug, Clone)]
pub enum Reply {
    /// `200 text/event-stream` with these `data:` payloads (each its own event).
    Sse(Vec<String>),
    /// Named events (`event: <name>` + `data: <json>`), for Anthropic.
    NamedSse(Vec<(String, String)>),
    /// A status with a body and extra headers.
    Status(u16, String, Vec<(String, String)>),
    /// Accept and say nothing for this long.
    Hang(Duration),
    /// `200 text/event-stream`, then this chunk over and over until the
    /// client hangs up (a hostile provider).
    Endless(String),
    /// `200 text/event-stream`, then one byte of a never-ending comment
    /// every interval: no read timeout ever trips.
    Trickle(Duration),
    /// A recorded response replayed byte for byte: status and body, with
    /// the content type its first bytes show (an event stream or JSON).
    Recorded(u16, Vec<u8>),
}

/// A request the server saw.
#[derive(Debug, Clone)]
pub struct Request {
    /// `POST /v1/chat/completions`.
    pub line: String,
    /// Lower-cased header lines.
    pub headers: Vec<(String, String)>,
    /// The JSON body.
    pub body: Value,
    /// The body as text (a form, or anything not JSON).
    pub text: String,
}

impl Request {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// The server.
pub struct Provider {
    /// `http://127.0.0.1:<port>/v1`.
    pub base_url: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Provider {
    /// Starts serving `script`; requests beyond it get HTTP 500.
    pub fn start(script: Vec<Reply>) -> Provider {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let base_url = format!("http://{}/v1", listener.local_addr().expect("addr"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            let mut script = script.into_iter();
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let Some(request) = read_request(&stream) else { continue };
                seen.lock().unwrap().push(request);
                let reply = script.next().unwrap_or(Reply::Status(500, "script exhausted".into(), vec![]));
                let mut out = stream;
                let _ = write_reply(&mut out, reply);
            }
        });
        Provider { base_url, requests }
    }

    /// Starts answering each request with what `answer` makes of it (a
    /// provider with rules rather than a script: one that refuses a
    /// request above a size, say).
    pub fn respond(answer: impl Fn(&Request) -> Reply + Send + 'static) -> Provider {
        Provider::serve(answer, true)
    }

    /// As [`respond`](Self::respond), keeping no request (a benchmark's
    /// thousands of big requests).
    pub fn respond_forgetting(answer: impl Fn(&Request) -> Reply + Send + 'static) -> Provider {
        Provider::serve(answer, false)
    }

    fn serve(answer: impl Fn(&Request) -> Reply + Send + 'static, keep: bool) -> Provider {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let base_url = format!("http://{}/v1", listener.local_addr().expect("addr"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let Some(request) = read_request(&stream) else { continue };
                let reply = answer(&request);
                if keep {
                    seen.lock().unwrap().push(request);
                }
                let mut out = stream;
                let _ = write_reply(&mut out, reply);
            }
        });
        Provider { base_url, requests }
    }

    /// Forgets the requests seen so far (a long test keeps only the last).
    pub fn clear(&self) {
        self.requests.lock().unwrap().clear();
    }

    /// The requests so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

/// Answers `200` with a JSON body that starts with `json_start` and then
/// never ends (a broken proxy, a hostile server): `fill` bytes until the
/// client stops reading, or 1 GiB.
pub(crate) fn write_endless_json(out: &mut impl std::io::Write, json_start: &str, fill: u8) {
    let head = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{json_start}");
    if out.write_all(head.as_bytes()).is_err() {
        return;
    }
    let chunk = vec![fill; 64 * 1024];
    for _ in 0..(1 << 14) {
        if out.write_all(&chunk).is_err() {
            return;
        }
    }
}

pub(crate) fn read_request(stream: &std::net::TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut headers = Vec::new();
    let mut length = 0;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        if h == "\r\n" || h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_owned());
        if k == "content-length" {
            length = v.parse().ok()?;
        }
        headers.push((k, v));
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        line: line.trim().to_owned(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        text: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn write_reply(out: &mut std::net::TcpStream, reply: Reply) -> std::io::Result<()> {
    match reply {
        Reply::Sse(events) => {
            out.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")?;
            for data in events {
                out.write_all(format!("data: {data}\n\n").as_bytes())?;
                out.flush()?;
            }
        }
        Reply::NamedSse(events) => {
            out.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")?;
            for (name, data) in events {
                out.write_all(format!("event: {name}\ndata: {data}\n\n").as_bytes())?;
                out.flush()?;
            }
        }
        Reply::Status(code, body, headers) => {
            let mut head = format!("HTTP/1.1 {code} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n", body.len());
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            out.write_all(format!("{head}\r\n{body}").as_bytes())?;
        }
        Reply::Hang(d) => std::thread::sleep(d),
        Reply::Endless(chunk) => {
            out.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")?;
            loop {
                out.write_all(chunk.as_bytes())?; // ends when the client hangs up
            }
        }
        Reply::Trickle(every) => {
            out.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n:")?;
            loop {
                std::thread::sleep(every);
                out.write_all(b"x")?;
                out.flush()?;
            }
        }
        Reply::Recorded(code, body) => {
            let stream = body.starts_with(b"event:") || body.starts_with(b"data:");
            let kind = if stream { "text/event-stream" } else { "application/json" };
            let head = format!(
                "HTTP/1.1 {code} Recorded\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            out.write_all(head.as_bytes())?;
            out.write_all(&body)?;
        }
    }
    out.flush()
}

/// Chat-completions streams.
pub mod chat {
    use super::*;

    /// A text answer in two chunks, usage 3/2, `[DONE]`.
    pub fn text(text: &str) -> Reply {
        let (a, b) = text.split_at(text.len() / 2);
        Reply::Sse(vec![
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": a}}]}).to_string(),
            json!({"choices": [{"index": 0, "delta": {"content": b}}]}).to_string(),
            json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
                .to_string(),
            "[DONE]".into(),
        ])
    }

    /// A text answer with the usage a provider reports: `prompt_tokens`
    /// counted its way.
    pub fn text_counted(text: &str, prompt_tokens: u64) -> Reply {
        Reply::Sse(vec![
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]}).to_string(),
            json!({"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 2,
                "total_tokens": prompt_tokens + 2}})
            .to_string(),
            "[DONE]".into(),
        ])
    }

    /// One tool call with the usage a provider reports.
    pub fn tool_call_counted(id: &str, name: &str, args: &str, prompt_tokens: u64) -> Reply {
        Reply::Sse(vec![
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": args}}]}}]})
            .to_string(),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}).to_string(),
            json!({"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 2,
                "total_tokens": prompt_tokens + 2}})
            .to_string(),
            "[DONE]".into(),
        ])
    }

    /// OpenAI's refusal of a request past the model's window (HTTP 400,
    /// `context_length_exceeded`, its documented shape and wording).
    pub fn context_length_exceeded(limit: u64, asked: u64) -> Reply {
        let message = format!(
            "This model's maximum context length is {limit} tokens. However, your messages resulted in {asked} tokens. Please reduce the length of the messages."
        );
        let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": "messages",
            "code": "context_length_exceeded"}});
        Reply::Status(400, body.to_string(), vec![])
    }

    /// Optional text, then tool calls `(id, name, arguments)` with the
    /// arguments split in two fragments.
    pub fn tool_calls(text: &str, calls: &[(&str, &str, &str)]) -> Reply {
        let mut events = Vec::new();
        if !text.is_empty() {
            events.push(json!({"choices": [{"index": 0, "delta": {"content": text}}]}).to_string());
        }
        for (i, (id, name, args)) in calls.iter().enumerate() {
            let (a, b) = args.split_at(args.len() / 2);
            events.push(
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": a}}]}}]})
                .to_string(),
            );
            events.push(
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": i, "function": {"arguments": b}}]}}]})
                .to_string(),
            );
        }
        events.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}).to_string());
        events.push("[DONE]".into());
        Reply::Sse(events)
    }
}

/// Responses API streams.
pub mod responses {
    use super::*;

    /// A text answer.
    pub fn text(text: &str) -> Reply {
        Reply::Sse(vec![
            json!({"type": "response.output_text.delta", "delta": text}).to_string(),
            json!({"type": "response.completed", "response": {"usage": {"input_tokens": 3, "output_tokens": 2}}})
                .to_string(),
        ])
    }

    /// One function call.
    pub fn tool_call(id: &str, name: &str, args: &str) -> Reply {
        Reply::Sse(vec![
            json!({"type": "response.output_item.added", "item": {"type": "function_call", "id": "fc1", "call_id": id, "name": name}}).to_string(),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc1", "delta": args}).to_string(),
            json!({"type": "response.output_item.done", "item": {"type": "function_call", "id": "fc1", "call_id": id, "name": name, "arguments": args}}).to_string(),
            json!({"type": "response.completed", "response": {"usage": {"input_tokens": 3, "output_tokens": 2}}}).to_string(),
        ])
    }
}

/// Anthropic Messages streams.
pub mod anthropic {
    use super::*;

    fn ev(name: &str, data: Value) -> (String, String) {
        (name.to_owned(), data.to_string())
    }

    /// A text answer.
    pub fn text(text: &str) -> Reply {
        Reply::NamedSse(vec![
            ev("message_start", json!({"type": "message_start", "message": {"usage": {"input_tokens": 3}}})),
            ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
            ),
            ev("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
            ev("message_delta", json!({"type": "message_delta", "usage": {"output_tokens": 2}})),
            ev("message_stop", json!({"type": "message_stop"})),
        ])
    }

    /// One tool use.
    pub fn tool_call(id: &str, name: &str, args: &str) -> Reply {
        Reply::NamedSse(vec![
            ev("message_start", json!({"type": "message_start", "message": {"usage": {"input_tokens": 3}}})),
            ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
            ),
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": args}}),
            ),
            ev("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
            ev("message_delta", json!({"type": "message_delta", "usage": {"output_tokens": 2}})),
            ev("message_stop", json!({"type": "message_stop"})),
        ])
    }
}
