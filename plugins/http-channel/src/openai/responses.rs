//! `POST /v1/responses`, OpenAI's Responses API (what its agent SDKs and
//! newer clients speak): the inbound is `input` when it is a string, else
//! its last `user` message (text and `input_text` parts); `instructions`
//! is ignored, as a chat's system message is. The answer is a `response`
//! object whose one output item is the assistant's message
//! (`output_text`).
//!
//! Streamed, it is the API's event sequence, each event named and
//! numbered (`sequence_number`): `response.created`,
//! `response.in_progress`, `response.output_item.added`,
//! `response.content_part.added`, a `response.output_text.delta` per text
//! delta, `response.output_text.done`, `response.content_part.done`,
//! `response.output_item.done`, `response.completed` (or
//! `response.failed`, with the reason, when the turn fails).
//!
//! `previous_response_id` continues a conversation: a request naming no
//! session runs on the session of the response it continues, which the
//! response's id carries (`ids.rs`: unguessable, and the same after a
//! restart); a request naming none and continuing none starts a session
//! of its own. Responses are not stored (`store: false`): the session's
//! tape is the record.

use std::sync::Arc;

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
use futures_util::StreamExt;
use serde_json::{json, Value};

use super::{Shared, Step};

/// A `response` object (`previous`: the `previous_response_id` it continues).
#[allow(clippy::too_many_arguments)]
fn response_object(
    id: &str,
    created: u64,
    model: &str,
    status: &str,
    output: Value,
    error: Value,
    previous: &Value,
    usage: &super::Usage,
) -> Value {
    json!({
        "id": id, "object": "response", "created_at": created, "status": status, "error": error,
        "incomplete_details": null, "instructions": null, "max_output_tokens": null, "model": model,
        "output": output, "parallel_tool_calls": false, "previous_response_id": previous,
        "reasoning": {"effort": null, "summary": null}, "store": false, "temperature": null,
        "text": {"format": {"type": "text"}}, "tool_choice": "none", "tools": [], "top_p": null,
        "truncation": "disabled", "metadata": {},
        "usage": usage.responses(),
    })
}

/// The assistant's message item, `status` `in_progress` or `completed`.
fn message_item(id: &str, status: &str, text: Option<&str>) -> Value {
    let content: Vec<Value> =
        text.map(|t| json!({"type": "output_text", "text": t, "annotations": []})).into_iter().collect();
    json!({"id": id, "type": "message", "status": status, "role": "assistant", "content": content})
}

/// The inbound of a request's `input`.
fn input_text(request: &Value) -> Result<String, super::Refusal> {
    match request.get("input") {
        Some(Value::String(text)) if !text.trim().is_empty() => Ok(text.clone()),
        Some(Value::Array(items)) => super::last_user_text(items),
        _ => Err(super::Refusal::bad_request(
            "input must be a non-empty string or a list of messages with a user message",
        )),
    }
}

/// The session of a Responses request: the one it names (`X-Bub-Session`,
/// `user`), else the one its `previous_response_id` continues, else a new
/// one of its own (`<channel>:resp-<random>`), which the response's id
/// then continues. An id this channel did not make (unknown, altered, of
/// another key) is OpenAI's 400 `previous_response_not_found`, whatever
/// else the request names: it never runs on some other session.
fn session(
    shared: &Shared,
    headers: &HeaderMap,
    request: &Value,
    ids: &super::ResponseIds,
) -> Result<String, super::Refusal> {
    let continued = match request.get("previous_response_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => match ids.session(id) {
            Some(session) => Some(session),
            None => {
                let mut refusal = super::Refusal::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    "previous_response_not_found",
                    format!("Previous response with id '{id}' not found."),
                );
                refusal.param = Some("previous_response_id");
                return Err(refusal);
            }
        },
        Some(_) => return Err(super::Refusal::bad_request("previous_response_id must be a string")),
    };
    if let Some(named) = super::named_session(shared, headers, request)? {
        return Ok(named);
    }
    match continued {
        Some(session) => super::allowed(shared, session),
        None => super::fresh_session(&format!("{}:resp-", shared.config.name)),
    }
}

/// One turn on the named (or continued) session.
pub(crate) async fn responses(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    let example = r#"{"model": "bub", "input": "hi"}"#;
    let request = match super::read_request(&shared, &headers, body, example).await {
        Ok(request) => request,
        Err(response) => return response,
    };
    let Some(ids) = shared.response_ids.get() else {
        return super::Refusal::unavailable("the channel is starting").into_response();
    };
    let (session, content) =
        match input_text(&request).and_then(|content| Ok((session(&shared, &headers, &request, ids)?, content))) {
            Ok(prepared) => prepared,
            Err(refusal) => return refusal.into_response(),
        };
    let message = super::envelope(&shared, &session, &content, "openai-responses");
    let id = match ids.issue(&session) {
        Ok(id) => id,
        Err(e) => {
            let why = format!("cannot make a response id: {e}");
            return super::openai_error(StatusCode::INTERNAL_SERVER_ERROR, why, "server_error");
        }
    };
    let item = super::new_id(&shared, "msg");
    let model = shared.config.model_name.clone();
    let created = super::unix_now();
    let previous = request.get("previous_response_id").cloned().unwrap_or(Value::Null);
    if !request.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        return match super::run(&shared, message, &id).await {
            Ok(ended) => {
                let output = json!([message_item(&item, "completed", Some(&ended.reply))]);
                let object =
                    response_object(&id, created, &model, "completed", output, Value::Null, &previous, &ended.usage);
                Json(object).into_response()
            }
            Err(response) => response,
        };
    }
    let steps = match super::run_turn(&shared, message, &id).await {
        Ok(steps) => steps,
        Err(refusal) => return refusal.into_response(),
    };
    let response = move |status: &str, output: Value, error: Value, usage: &super::Usage| {
        response_object(&id, created, &model, status, output, error, &previous, usage)
    };
    let none = super::Usage::default();
    let where_ = json!({"item_id": item, "output_index": 0, "content_index": 0});
    let with = |mut event: Value, extra: &Value| {
        for (k, v) in extra.as_object().into_iter().flatten() {
            event[k] = v.clone();
        }
        event
    };
    let opening = vec![
        json!({"type": "response.created", "response": response("in_progress", json!([]), Value::Null, &none)}),
        json!({"type": "response.in_progress", "response": response("in_progress", json!([]), Value::Null, &none)}),
        json!({"type": "response.output_item.added", "output_index": 0,
            "item": message_item(&item, "in_progress", None)}),
        with(
            json!({"type": "response.content_part.added",
                "part": {"type": "output_text", "text": "", "annotations": []}}),
            &where_,
        ),
    ];
    let mut text = String::new();
    let events = steps.flat_map(move |step| {
        let events = match step {
            Step::Delta(delta) => {
                text.push_str(&delta);
                vec![with(json!({"type": "response.output_text.delta", "delta": delta, "logprobs": []}), &where_)]
            }
            Step::End(Ok(ended)) => {
                if !ended.streamed {
                    text = ended.reply;
                }
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                let done = message_item(&item, "completed", Some(&text));
                vec![
                    with(json!({"type": "response.output_text.done", "text": text, "logprobs": []}), &where_),
                    with(json!({"type": "response.content_part.done", "part": part}), &where_),
                    json!({"type": "response.output_item.done", "output_index": 0, "item": done}),
                    json!({"type": "response.completed",
                        "response": response("completed", json!([done]), Value::Null, &ended.usage)}),
                ]
            }
            Step::End(Err(failed)) => {
                let refusal = failed.refusal();
                let error = json!({"code": refusal.code, "message": refusal.message});
                vec![json!({"type": "response.failed", "response": response("failed", json!([]), error, &none)})]
            }
        };
        futures_util::stream::iter(events)
    });
    let mut sequence = 0u64;
    let frames = futures_util::stream::iter(opening).chain(events).map(move |mut event| {
        event["sequence_number"] = json!(sequence);
        sequence += 1;
        let name = event["type"].as_str().unwrap_or("message").to_owned();
        Ok::<_, std::convert::Infallible>(Event::default().event(name).data(event.to_string()))
    });
    Sse::new(frames).into_response()
}
