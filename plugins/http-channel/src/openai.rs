//! The OpenAI-compatible face of the channel: `POST /v1/chat/completions`
//! (streamed as `chat.completion.chunk` events and not) and `GET
//! /v1/models`, on the same listener, behind the same token.
//!
//! Any OpenAI client (the official `openai` package, `curl`, a chat UI)
//! can then talk to the agent. One request is one turn:
//!
//! - the session is the `X-Bub-Session` header, else the body's `user`,
//!   else `<channel>:default`; the channel's `sessions` rule applies;
//! - the inbound is the **last user message** (its text parts). Earlier
//!   messages are not replayed: the session's tape is its memory, and an
//!   OpenAI client sends the whole conversation with every request, so
//!   replaying it would write each message to the tape again and again. A
//!   `system` message is ignored too: the agent has its own prompt;
//! - `model` may be anything: the agent is the one model (`GET /v1/models`
//!   names it, `model_name`, default `bub`), and the answer names it too;
//! - `usage` is zeros: the turn may have made several model calls, or none.
//!
//! Errors are OpenAI's shape (`{"error": {"message", "type", "code"}}`),
//! with the channel's statuses.

use std::sync::{atomic::Ordering, Arc};

use axum::{
    body::Body,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{
        sse::{Event, Sse},
        IntoResponse, Response,
    },
    Json,
};
use bub_abi::{resources::clients::MessageHandlerClient, types::Delivery};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::Shared;

fn openai_error(status: StatusCode, message: impl Into<String>, kind: &str) -> Response {
    let body = json!({"error": {"message": message.into(), "type": kind, "param": null, "code": null}});
    (status, Json(body)).into_response()
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

/// The text of a message's content: a string, or its text parts joined.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// `POST /v1/chat/completions`: one turn on the named session.
pub(super) async fn chat_completions(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    if let Err(why) = super::check_token(&shared, &headers) {
        return openai_error(StatusCode::UNAUTHORIZED, why, "invalid_request_error");
    }
    let body = match super::read_body(&shared.config.limits, body).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return openai_error(
                StatusCode::BAD_REQUEST,
                "the body must be a JSON object like {\"model\": \"bub\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}",
                "invalid_request_error",
            )
        }
    };
    let messages = request.get("messages").and_then(Value::as_array).cloned().unwrap_or_default();
    let Some(last) = messages.iter().rev().find(|m| m.get("role").and_then(Value::as_str) == Some("user")) else {
        return openai_error(StatusCode::BAD_REQUEST, "messages has no user message", "invalid_request_error");
    };
    let content = text_of(last.get("content").unwrap_or(&Value::Null));
    if content.trim().is_empty() {
        return openai_error(StatusCode::BAD_REQUEST, "the last user message has no text", "invalid_request_error");
    }
    let header_session = headers.get("x-bub-session").and_then(|v| v.to_str().ok()).map(str::trim);
    let user = request.get("user").and_then(Value::as_str).map(str::trim);
    let session = header_session.or(user).filter(|s| !s.is_empty()).map(str::to_owned);
    let session = session.unwrap_or_else(|| format!("{}:default", shared.config.name));
    if !super::session_allowed(&shared.config.sessions, &session) {
        let why = format!("session {session:?} is not one this channel may name (its `sessions` setting)");
        return openai_error(StatusCode::FORBIDDEN, why, "permission_error");
    }
    let stream = request.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let command = content.trim_start().starts_with(shared.config.command_prefix.as_str());
    let mut message = json!({
        "channel": shared.config.name,
        "chat_id": session,
        "session_id": session,
        "content": content,
        "is_active": true,
        "kind": if command { "command" } else { "normal" },
        "context": {"_http_seq": shared.next_id.fetch_add(1, Ordering::Relaxed), "api": "openai"},
    });
    let id = format!("chatcmpl-{}-{}", std::process::id(), shared.next_id.fetch_add(1, Ordering::Relaxed));
    let model = shared.config.model_name.clone();
    if !stream {
        let delivery = MessageHandlerClient(&shared.handler).submit(&message).await;
        return match delivery {
            Ok(d) if d.status == "processed" => {
                let reply = super::reply_text(&shared.config.name, &d).unwrap_or_default();
                Json(json!({
                    "id": id, "object": "chat.completion", "created": unix_now(), "model": model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                        "finish_reason": "stop", "logprobs": null}],
                    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                }))
                .into_response()
            }
            Ok(d) => not_processed(&d),
            Err(e) => openai_error(StatusCode::SERVICE_UNAVAILABLE, e.to_string(), "server_error"),
        };
    }
    // Streamed: the turn's `text` events become chunks; the delivery ends it.
    message["context"]["_http_request"] = json!(id);
    message["stream_output"] = json!(true);
    let (events, receiver) = mpsc::unbounded_channel();
    shared.streams().insert(id.clone(), events);
    let (done_tx, done_rx) = oneshot::channel();
    let submitter = shared.clone();
    let key = id.clone();
    tokio::spawn(async move {
        let outcome = MessageHandlerClient(&submitter.handler).submit(&message).await;
        submitter.streams().remove(&key);
        let _ = done_tx.send(outcome.map_err(|e| e.to_string()));
    });
    let created = unix_now();
    let chunk = move |delta: Value, finish: Option<&str>| {
        json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}]})
        .to_string()
    };
    // Frames waiting to go out (the opening chunk first), the turn's
    // events, the delivery that ends them, whether any text was streamed.
    let pending = std::collections::VecDeque::from([chunk(json!({"role": "assistant", "content": ""}), None)]);
    let state = (pending, receiver, Some(done_rx), false);
    let channel = shared.config.name.clone();
    let stream = futures_util::stream::unfold(state, move |(mut pending, mut events, mut done, mut streamed)| {
        let (chunk, channel) = (chunk.clone(), channel.clone());
        async move {
            loop {
                if let Some(frame) = pending.pop_front() {
                    let event = Ok::<_, std::convert::Infallible>(Event::default().data(frame));
                    return Some((event, (pending, events, done, streamed)));
                }
                if let Some(event) = events.recv().await {
                    let delta = event.data.get("delta").and_then(Value::as_str).unwrap_or("");
                    if event.kind == "text" && !delta.is_empty() {
                        streamed = true;
                        pending.push_back(chunk(json!({"content": delta}), None));
                    }
                    continue;
                }
                // The turn is over: its end, then `[DONE]`.
                match done.take()?.await {
                    // A reply that came without deltas (a command, a
                    // plugin's own model) goes out as one chunk.
                    Ok(Ok(d)) if d.status == "processed" => {
                        if !streamed {
                            let reply = super::reply_text(&channel, &d).unwrap_or_default();
                            pending.push_back(chunk(json!({"content": reply}), None));
                        }
                        pending.push_back(chunk(json!({}), Some("stop")));
                    }
                    Ok(Ok(d)) => {
                        let why = d.error.clone().unwrap_or_else(|| format!("the turn was {}", d.status));
                        pending.push_back(json!({"error": {"message": why, "type": "server_error"}}).to_string());
                    }
                    Ok(Err(e)) => {
                        pending.push_back(json!({"error": {"message": e, "type": "server_error"}}).to_string())
                    }
                    Err(_) => pending.push_back(
                        json!({"error": {"message": "the turn was cancelled", "type": "server_error"}}).to_string(),
                    ),
                }
                pending.push_back("[DONE]".to_owned());
            }
        }
    });
    Sse::new(stream).into_response()
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
