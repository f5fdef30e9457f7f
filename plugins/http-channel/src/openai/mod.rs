//! The OpenAI-compatible face of the channel, on the same listener and
//! behind the same token: `POST /v1/chat/completions` (`chat.rs`), `POST
//! /v1/responses` (`responses.rs`), each streamed and not, and `GET
//! /v1/models`.
//!
//! Any OpenAI client (the official `openai` package, `curl`, a chat UI,
//! an agent SDK on the Responses API) can then talk to the agent. One
//! request is one turn:
//!
//! - the session is the `X-Bub-Session` header, else the body's `user`
//!   (a blank one counts as none), else (Responses) the session of the
//!   `previous_response_id` it continues (the id carries it: `ids.rs`),
//!   else one of the request's own: a Responses request starts a new
//!   session (`<channel>:resp-<random>`) that its response's id continues;
//!   a chat request runs on a `temp/` session no one else reaches, told
//!   the conversation it sent (`with_transcript`). The channel's
//!   `sessions` rule applies to what a request names or continues;
//! - the inbound is the **last user message** (its text parts). Earlier
//!   messages are not replayed: the session's tape is its memory, and an
//!   OpenAI client sends the whole conversation with every request, so
//!   replaying it would write each message to the tape again and again. A
//!   `system` message (`instructions`) is ignored too: the agent has its
//!   own prompt;
//! - `model` may be anything: the agent is the one model (`GET /v1/models`
//!   names it, `model_name`, default `bub`), and the answer names it too;
//! - usage is zeros: the turn may have made several model calls, or none.
//!
//! Errors are OpenAI's shape (`{"error": {"message", "type", "code"}}`),
//! with the channel's statuses.

mod chat;
mod ids;
mod responses;

use std::sync::{atomic::Ordering, Arc};

use axum::{
    body::Body,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use bub_abi::{resources::clients::MessageHandlerClient, types::Delivery};
use futures_util::Stream;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::Shared;

pub(super) use chat::chat_completions;
pub(super) use ids::{key_file, ResponseIds};
pub(super) use responses::responses;

fn openai_error(status: StatusCode, message: impl Into<String>, kind: &str) -> Response {
    let body = json!({"error": {"message": message.into(), "type": kind, "param": null, "code": null}});
    (status, Json(body)).into_response()
}

/// An OpenAI-shaped error of a request's reading, made a response where
/// it is answered (a `Response` is too large to pass around in results).
struct Refusal {
    status: StatusCode,
    message: String,
    // OpenAI's `code` and `param`, where its API names them.
    code: Option<&'static str>,
    param: Option<&'static str>,
}

impl Refusal {
    fn bad_request(message: impl Into<String>) -> Refusal {
        Refusal { status: StatusCode::BAD_REQUEST, message: message.into(), code: None, param: None }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let kind = if self.status == StatusCode::FORBIDDEN { "permission_error" } else { "invalid_request_error" };
        let body = json!({"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}});
        (self.status, Json(body)).into_response()
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// `GET /v1/models`: the agent, as the one model.
pub(super) async fn models(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Err(why) = super::check_token(&shared, &headers) {
        return openai_error(StatusCode::UNAUTHORIZED, why, "invalid_request_error");
    }
    let model = json!({"id": shared.config.model_name, "object": "model", "created": 0, "owned_by": "bub"});
    Json(json!({"object": "list", "data": [model]})).into_response()
}

/// The text of a message's content: a string, or its text parts
/// (`text`, or the Responses API's `input_text`) joined.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| matches!(p.get("type").and_then(Value::as_str), Some("text" | "input_text")))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The request's JSON object, once its token is checked; `example` shows
/// a good body in the error for a bad one.
async fn read_request(shared: &Shared, headers: &HeaderMap, body: Body, example: &str) -> Result<Value, Response> {
    if let Err(why) = super::check_token(shared, headers) {
        return Err(openai_error(StatusCode::UNAUTHORIZED, why, "invalid_request_error"));
    }
    let body = super::read_body(&shared.config.limits, body).await?;
    match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => Ok(v),
        _ => Err(openai_error(
            StatusCode::BAD_REQUEST,
            format!("the body must be a JSON object like {example}"),
            "invalid_request_error",
        )),
    }
}

/// The last user message's text among `messages`, or the error to answer.
fn last_user_text(messages: &[Value]) -> Result<String, Refusal> {
    let Some(last) = messages.iter().rev().find(|m| m.get("role").and_then(Value::as_str) == Some("user")) else {
        return Err(Refusal::bad_request("there is no user message"));
    };
    let content = text_of(last.get("content").unwrap_or(&Value::Null));
    if content.trim().is_empty() {
        return Err(Refusal::bad_request("the last user message has no text"));
    }
    Ok(content)
}

/// The inbound of a chat request that names no session. It runs on a
/// `temp/` session of its own, which no one else reaches and nothing
/// keeps, so the conversation the client sent is all its memory: the
/// earlier user and assistant messages (their text) come first as a
/// transcript, then `last`, the last user message.
fn with_transcript(messages: &[Value], last: String) -> String {
    let Some(at) = messages.iter().rposition(|m| m.get("role").and_then(Value::as_str) == Some("user")) else {
        return last;
    };
    let earlier: Vec<String> = messages[..at]
        .iter()
        .filter_map(|m| {
            let role = m.get("role").and_then(Value::as_str).filter(|r| matches!(*r, "user" | "assistant"))?;
            let text = text_of(m.get("content").unwrap_or(&Value::Null));
            (!text.trim().is_empty()).then(|| format!("{role}: {text}"))
        })
        .collect();
    if earlier.is_empty() {
        return last;
    }
    format!("Earlier in this conversation:\n{}\n\nNow:\n{last}", earlier.join("\n"))
}

/// The session a request names: the `X-Bub-Session` header, else the
/// body's `user` (each counted only when not blank), checked against the
/// channel's `sessions` rule; None when it names none.
fn named_session(shared: &Shared, headers: &HeaderMap, request: &Value) -> Result<Option<String>, Refusal> {
    let header = headers.get("x-bub-session").and_then(|v| v.to_str().ok()).map(str::trim);
    let user = request.get("user").and_then(Value::as_str).map(str::trim);
    let Some(session) = header.filter(|s| !s.is_empty()).or(user.filter(|s| !s.is_empty())) else { return Ok(None) };
    allowed(shared, session.to_owned()).map(Some)
}

/// `session` if the channel's `sessions` rule allows a request to run
/// on it (named, or continued by a response id).
fn allowed(shared: &Shared, session: String) -> Result<String, Refusal> {
    if !super::session_allowed(&shared.config.sessions, &session) {
        let why = format!("session {session:?} is not one this channel may name (its `sessions` setting)");
        return Err(Refusal { status: StatusCode::FORBIDDEN, message: why, code: None, param: None });
    }
    Ok(session)
}

/// A session no one else has: `<prefix><32 hex digits>` from the kernel's
/// CSPRNG.
fn fresh_session(prefix: &str) -> Result<String, Refusal> {
    let bytes = bub_kit::random::secret::<16>().map_err(|e| Refusal {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: format!("cannot read /dev/urandom for a new session: {e}"),
        code: None,
        param: None,
    })?;
    Ok(format!("{prefix}{}", bub_kit::random::hex(&bytes)))
}

/// The gateway message of one request's turn.
fn envelope(shared: &Shared, session: &str, content: &str, api: &str) -> Value {
    let command = content.trim_start().starts_with(shared.config.command_prefix.as_str());
    json!({
        "channel": shared.config.name,
        "chat_id": session,
        "session_id": session,
        "content": content,
        "is_active": true,
        "kind": if command { "command" } else { "normal" },
        "context": {"_http_seq": shared.next_id.fetch_add(1, Ordering::Relaxed), "api": api},
    })
}

/// A fresh id with OpenAI's `prefix` (`chatcmpl`, `msg`): unique in the
/// process, and naming nothing (a response's id is `ids.rs`').
fn new_id(shared: &Shared, prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), shared.next_id.fetch_add(1, Ordering::Relaxed))
}

/// Runs `message`'s turn: the reply text, or the error to answer.
async fn run(shared: &Shared, message: &Value) -> Result<String, Response> {
    match MessageHandlerClient(&shared.handler).submit(message).await {
        Ok(d) if d.status == "processed" => Ok(super::reply_text(&shared.config.name, &d).unwrap_or_default()),
        Ok(d) => Err(not_processed(&d)),
        Err(e) => Err(openai_error(StatusCode::SERVICE_UNAVAILABLE, e.to_string(), "server_error")),
    }
}

/// What a streamed turn gives, in order: text deltas, then its end.
enum Step {
    /// Text the model wrote.
    Delta(String),
    /// The turn is over: the whole reply when no delta carried it (a
    /// command, a plugin's own model), or why it failed.
    End(Result<Option<String>, String>),
}

/// Runs `message`'s turn streamed (request id `id`): its steps.
fn run_streamed(shared: &Arc<Shared>, mut message: Value, id: &str) -> impl Stream<Item = Step> + Send + 'static {
    message["context"]["_http_request"] = json!(id);
    message["stream_output"] = json!(true);
    let (events, receiver) = mpsc::channel(super::STREAM_QUEUE);
    shared.streams().insert(id.to_owned(), events);
    let (done_tx, done_rx) = oneshot::channel();
    let submitter = shared.clone();
    let key = id.to_owned();
    tokio::spawn(async move {
        let outcome = MessageHandlerClient(&submitter.handler).submit(&message).await;
        submitter.streams().remove(&key);
        let _ = done_tx.send(outcome.map_err(|e| e.to_string()));
    });
    let channel = shared.config.name.clone();
    let state = (receiver, Some(done_rx), false);
    futures_util::stream::unfold(state, move |(mut events, mut done, mut streamed)| {
        let channel = channel.clone();
        async move {
            while let Some(event) = events.recv().await {
                let delta = bub_kit::envelope::text_delta(&event).unwrap_or("");
                if !delta.is_empty() {
                    streamed = true;
                    return Some((Step::Delta(delta.to_owned()), (events, done, streamed)));
                }
            }
            let end = match done.take()?.await {
                Ok(Ok(d)) if d.status == "processed" => {
                    Ok((!streamed).then(|| super::reply_text(&channel, &d).unwrap_or_default()))
                }
                Ok(Ok(d)) => Err(d.error.clone().unwrap_or_else(|| format!("the turn was {}", d.status))),
                Ok(Err(e)) => Err(e),
                Err(_) => Err("the turn was cancelled".to_owned()),
            };
            Some((Step::End(end), (events, None, streamed)))
        }
    })
}

/// A turn that was not processed, as OpenAI's error.
fn not_processed(d: &Delivery) -> Response {
    let status = match d.status.as_str() {
        "dropped" => StatusCode::CONFLICT,
        "ignored" => StatusCode::UNPROCESSABLE_ENTITY,
        "cancelled" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let why = d.error.clone().unwrap_or_else(|| format!("the turn was {}", d.status));
    openai_error(status, why, "server_error")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_naming_no_session_is_told_its_own_conversation() {
        let messages = vec![
            json!({"role": "system", "content": "be brief"}),
            json!({"role": "user", "content": "hello"}),
            json!({"role": "assistant", "content": [{"type": "text", "text": "hi!"}]}),
            json!({"role": "tool", "content": "ignored"}),
            json!({"role": "user", "content": "and now?"}),
        ];
        let text = with_transcript(&messages, "and now?".into());
        assert_eq!(text, "Earlier in this conversation:\nuser: hello\nassistant: hi!\n\nNow:\nand now?");
        assert_eq!(with_transcript(&messages[4..], "and now?".into()), "and now?", "nothing earlier");
    }
}
