//! The OpenAI-compatible face of the channel, on the same listener and
//! behind the same token: `POST /v1/chat/completions` (`chat.rs`), `POST
//! /v1/responses` (`responses.rs`), each streamed and not, and `GET
//! /v1/models`.
//!
//! Any OpenAI client (the official `openai` package, `curl`, a chat UI,
//! an agent SDK on the Responses API) can then talk to the agent. One
//! request is one turn:
//!
//! - the session is the `X-Bub-Session` header, else the body's `user`,
//!   else (Responses) the session of the `previous_response_id` it
//!   continues, else `<channel>:default`; the channel's `sessions` rule
//!   applies;
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
}

impl Refusal {
    fn bad_request(message: impl Into<String>) -> Refusal {
        Refusal { status: StatusCode::BAD_REQUEST, message: message.into() }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let kind = if self.status == StatusCode::FORBIDDEN { "permission_error" } else { "invalid_request_error" };
        openai_error(self.status, self.message, kind)
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

/// The session a request names (see the module docs): `continued` is
/// the session of the response it continues, if any.
fn session_of(
    shared: &Shared,
    headers: &HeaderMap,
    request: &Value,
    continued: Option<String>,
) -> Result<String, Refusal> {
    let header = headers.get("x-bub-session").and_then(|v| v.to_str().ok()).map(str::trim);
    let user = request.get("user").and_then(Value::as_str).map(str::trim);
    let named = header.or(user).filter(|s| !s.is_empty()).map(str::to_owned).or(continued);
    let session = named.unwrap_or_else(|| format!("{}:default", shared.config.name));
    if !super::session_allowed(&shared.config.sessions, &session) {
        let why = format!("session {session:?} is not one this channel may name (its `sessions` setting)");
        return Err(Refusal { status: StatusCode::FORBIDDEN, message: why });
    }
    Ok(session)
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

/// A fresh id with OpenAI's `prefix` (`chatcmpl`, `resp`, `msg`).
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
    let (events, receiver) = mpsc::unbounded_channel();
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
