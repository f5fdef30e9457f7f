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
//! - usage is the turn's: the input and output tokens of every model call
//!   it made, summed (zeros for a command, which calls none). A streamed
//!   chat sends it in a last chunk when `stream_options.include_usage`
//!   asks, as OpenAI does.
//!
//! Errors are OpenAI's shape (`{"error": {"message", "type", "param",
//! "code"}}`) with the status, `type` and `code` OpenAI answers for the
//! same case (`Refusal`), so a client's own error classes and retries
//! work: 401 `invalid_api_key`, 404 `unknown_url`/`model_not_found`, 405
//! `method_not_allowed`, 408/413 for a slow or large body, 429
//! `rate_limit_exceeded` with `Retry-After` when the session's queue or
//! the backlog is full, 503 with `Retry-After` while the gateway stops.
//! The gateway takes or refuses a message before a streamed answer's 200,
//! so a refusal is a status, never a broken stream.

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
use bub_abi::resources::clients::MessageHandlerClient;
use futures_util::Stream;
use serde_json::{json, Value};
use std::future::Future as _;
use tokio::sync::{mpsc, oneshot};

use super::Shared;

pub(super) use chat::chat_completions;
pub(super) use ids::{key_file, ResponseIds};
pub(super) use responses::responses;

/// An error in OpenAI's shape (`{"error": {"message", "type", "param",
/// "code"}}`) with the status, `type` and `code` OpenAI answers with for
/// the same case, and `Retry-After` where a retry can succeed. Made a
/// response where it is answered (a `Response` is too large to pass
/// around in results).
struct Refusal {
    status: StatusCode,
    message: String,
    kind: &'static str,
    code: Option<&'static str>,
    param: Option<&'static str>,
    retry_after: Option<u64>,
}

impl Refusal {
    fn new(status: StatusCode, kind: &'static str, code: &'static str, message: impl Into<String>) -> Refusal {
        Refusal { status, message: message.into(), kind, code: Some(code), param: None, retry_after: None }
    }

    /// 400: a request that cannot be run as it is.
    fn bad_request(message: impl Into<String>) -> Refusal {
        let mut r = Refusal::new(StatusCode::BAD_REQUEST, "invalid_request_error", "invalid_request", message);
        r.code = None;
        r
    }

    /// 401: no key, or the wrong one (OpenAI's `invalid_api_key`).
    fn unauthorized(message: impl Into<String>) -> Refusal {
        Refusal::new(StatusCode::UNAUTHORIZED, "invalid_request_error", "invalid_api_key", message)
    }

    /// 404 with OpenAI's `code` (`unknown_url`, `model_not_found`, …).
    fn not_found(code: &'static str, message: impl Into<String>) -> Refusal {
        Refusal::new(StatusCode::NOT_FOUND, "invalid_request_error", code, message)
    }

    /// 429: the session's queue is full; try again shortly.
    fn busy(message: impl Into<String>) -> Refusal {
        let mut r = Refusal::new(StatusCode::TOO_MANY_REQUESTS, "requests", "rate_limit_exceeded", message);
        r.retry_after = Some(1);
        r
    }

    /// 503: the gateway is stopping; another gateway, or this one after
    /// its restart, takes it.
    fn unavailable(message: impl Into<String>) -> Refusal {
        let mut r = Refusal::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", "service_unavailable", message);
        r.retry_after = Some(5);
        r
    }

    /// A message the gateway did not take (`submit` failed): 429 when its
    /// session's queue or the backlog is full, else (stopping) 503.
    fn not_taken(error: &bub_abi::resources::MethodError) -> Refusal {
        let why = error.error.message.clone();
        if error.error.kind != bub_abi::ErrorKind::CLOSED && why.contains("BUB_MAX_") {
            Refusal::busy(why)
        } else {
            Refusal::unavailable(why)
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body =
            json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}});
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

fn openai_error(status: StatusCode, message: impl Into<String>, kind: &'static str) -> Response {
    let code = match status {
        StatusCode::INTERNAL_SERVER_ERROR => "server_error",
        _ => "invalid_request",
    };
    Refusal::new(status, kind, code, message).into_response()
}

/// Any other path or method, as OpenAI answers it: 404 `unknown_url`, 405
/// `method_not_allowed` (never an empty body, which OpenAI clients cannot
/// read).
pub(super) async fn unknown(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    Refusal::not_found("unknown_url", format!("Invalid URL ({method} {})", uri.path())).into_response()
}

/// A known path asked with a method it does not serve.
pub(super) async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let message = format!("{method} is not allowed on {} (see the API's reference)", uri.path());
    Refusal::new(StatusCode::METHOD_NOT_ALLOWED, "invalid_request_error", "method_not_allowed", message).into_response()
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn model_object(shared: &Shared) -> Value {
    json!({"id": shared.config.model_name, "object": "model", "created": 0, "owned_by": "bub"})
}

/// `GET /v1/models`: the agent, as the one model.
pub(super) async fn models(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Err(why) = super::check_token(&shared, &headers) {
        return Refusal::unauthorized(why).into_response();
    }
    Json(json!({"object": "list", "data": [model_object(&shared)]})).into_response()
}

/// `GET /v1/models/{id}` (`models.retrieve`): the agent's model, by its name.
pub(super) async fn model(
    State(shared): State<Arc<Shared>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(why) = super::check_token(&shared, &headers) {
        return Refusal::unauthorized(why).into_response();
    }
    if id != shared.config.model_name {
        let why = format!("The model '{id}' does not exist (this endpoint serves '{}')", shared.config.model_name);
        return Refusal::not_found("model_not_found", why).into_response();
    }
    Json(model_object(&shared)).into_response()
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
        return Err(Refusal::unauthorized(why).into_response());
    }
    use bub_kit::server::BodyError;
    let body = bub_kit::server::read_body(&shared.config.limits, body).await.map_err(|e| {
        match e {
            BodyError::TimedOut(after) => Refusal::new(
                StatusCode::REQUEST_TIMEOUT,
                "invalid_request_error",
                "request_timeout",
                format!("the body did not arrive within {after:?} (the channel's body_timeout_seconds setting)"),
            ),
            BodyError::TooLarge(max) => Refusal::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                "request_too_large",
                format!("the body is larger than {max} bytes (the channel's max_body_bytes setting)"),
            ),
            BodyError::Failed(why) => Refusal::bad_request(why),
        }
        .into_response()
    })?;
    match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => Ok(v),
        _ => Err(Refusal::bad_request(format!("the body must be a JSON object like {example}")).into_response()),
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
        return Err(Refusal::new(StatusCode::FORBIDDEN, "permission_error", "session_not_allowed", why));
    }
    Ok(session)
}

/// A session no one else has: `<prefix><32 hex digits>` from the kernel's
/// CSPRNG.
fn fresh_session(prefix: &str) -> Result<String, Refusal> {
    let bytes = bub_kit::random::secret::<16>().map_err(|e| {
        let why = format!("cannot read /dev/urandom for a new session: {e}");
        Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "server_error", why)
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

/// What a turn's model calls reported, summed (a turn may make several
/// calls, or none: a command).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Usage {
    input: u64,
    output: u64,
    total: u64,
}

impl Usage {
    /// Adds one call's usage event (`{"usage": {input_tokens, …}}`).
    fn add(&mut self, event: &Value) {
        let usage = &event["usage"];
        let n = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
        self.input += n("input_tokens");
        self.output += n("output_tokens");
        self.total += n("total_tokens").max(n("input_tokens") + n("output_tokens"));
    }

    /// Chat completions' usage object.
    fn chat(&self) -> Value {
        json!({"prompt_tokens": self.input, "completion_tokens": self.output, "total_tokens": self.total})
    }

    /// The Responses API's usage object.
    fn responses(&self) -> Value {
        json!({"input_tokens": self.input, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": self.output, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.total})
    }
}

/// How a turn ended.
struct Ended {
    /// The reply: the outbound for this channel, else the model output.
    reply: String,
    /// Whether text deltas carried the reply as it came.
    streamed: bool,
    usage: Usage,
}

/// Why a turn gave no reply: what became of its message
/// (`dropped`, `ignored`, `cancelled`, `failed`), and why.
struct Failed {
    status: String,
    why: String,
}

impl Failed {
    /// As OpenAI's error: 409 dropped by admission, 422 ignored, 503
    /// cancelled by a stop (`Retry-After`), 500 failed.
    fn refusal(&self) -> Refusal {
        let why = self.why.clone();
        match self.status.as_str() {
            "dropped" => Refusal::new(StatusCode::CONFLICT, "invalid_request_error", "conflict", why),
            "ignored" => Refusal::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request_error", "unprocessable", why),
            "cancelled" => Refusal::unavailable(why),
            _ => Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "server_error", why),
        }
    }
}

/// What a streamed turn gives, in order: text deltas, then its end.
enum Step {
    /// Text the model wrote.
    Delta(String),
    /// The turn is over, or why it gave no reply.
    End(Result<Ended, Failed>),
}

/// Runs `message`'s turn with its events (request id `id`): its steps.
/// The gateway takes or refuses the message before this answers (a
/// streamed answer is refused before its 200, so a load balancer can send
/// it elsewhere).
async fn run_turn(
    shared: &Arc<Shared>,
    mut message: Value,
    id: &str,
) -> Result<impl Stream<Item = Step> + Send + 'static, Refusal> {
    message["context"]["_http_request"] = json!(id);
    message["stream_output"] = json!(true);
    let (events, receiver) = mpsc::channel(super::STREAM_QUEUE);
    shared.streams().insert(id.to_owned(), events);
    let handler = shared.handler.clone();
    let mut submitted = Box::pin(async move { MessageHandlerClient(&handler).submit(&message).await });
    // Polled once here: the gateway takes or refuses the message now.
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(submitted.as_mut().poll(cx))).await;
    let (done_tx, done_rx) = oneshot::channel();
    match first {
        std::task::Poll::Ready(Err(e)) => {
            shared.streams().remove(id);
            return Err(Refusal::not_taken(&e));
        }
        std::task::Poll::Ready(Ok(delivery)) => {
            shared.streams().remove(id);
            let _ = done_tx.send(Ok(delivery));
        }
        std::task::Poll::Pending => {
            let submitter = shared.clone();
            let key = id.to_owned();
            tokio::spawn(async move {
                let outcome = submitted.await;
                submitter.streams().remove(&key);
                let _ = done_tx.send(outcome.map_err(|e| e.to_string()));
            });
        }
    }
    let channel = shared.config.name.clone();
    let state = (receiver, Some(done_rx), false, Usage::default());
    Ok(futures_util::stream::unfold(state, move |(mut events, mut done, mut streamed, mut usage)| {
        let channel = channel.clone();
        async move {
            while let Some(event) = events.recv().await {
                if event.kind == "usage" {
                    usage.add(&event.data);
                    continue;
                }
                let delta = bub_kit::envelope::text_delta(&event).unwrap_or("");
                if !delta.is_empty() {
                    streamed = true;
                    return Some((Step::Delta(delta.to_owned()), (events, done, streamed, usage)));
                }
            }
            let end = match done.take()?.await {
                Ok(Ok(d)) if d.status == "processed" => {
                    Ok(Ended { reply: super::reply_text(&channel, &d).unwrap_or_default(), streamed, usage })
                }
                Ok(Ok(d)) => Err(Failed {
                    why: d.error.clone().unwrap_or_else(|| format!("the turn was {}", d.status)),
                    status: d.status,
                }),
                Ok(Err(why)) => Err(Failed { status: "failed".into(), why }),
                Err(_) => Err(Failed { status: "cancelled".into(), why: "the turn was cancelled".into() }),
            };
            Some((Step::End(end), (events, None, streamed, usage)))
        }
    }))
}

/// Runs `message`'s turn to its end (a request that is not streamed): the
/// reply and the usage, or the error to answer.
async fn run(shared: &Arc<Shared>, message: Value, id: &str) -> Result<Ended, Response> {
    use futures_util::StreamExt as _;
    let steps = run_turn(shared, message, id).await.map_err(IntoResponse::into_response)?;
    futures_util::pin_mut!(steps);
    while let Some(step) = steps.next().await {
        if let Step::End(end) = step {
            return end.map_err(|failed| failed.refusal().into_response());
        }
    }
    Err(openai_error(StatusCode::INTERNAL_SERVER_ERROR, "the turn ended without an answer", "server_error"))
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
