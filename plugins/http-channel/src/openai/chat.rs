//! `POST /v1/chat/completions`: the inbound is the last `user` message of
//! `messages` on the session the request names; a request that names
//! none runs on a `temp/` session of its own with the conversation it
//! sent as a transcript (see `with_transcript`), so two clients that name
//! no session never share one; streamed as `chat.completion.chunk` events (an opening
//! chunk with the role, one per text delta, a closing one with
//! `finish_reason: stop`) and `data: [DONE]`.

use std::sync::Arc;

use axum::{
    body::Body,
    extract::State,
    http::HeaderMap,
    response::{
        sse::{Event, Sse},
        IntoResponse, Response,
    },
    Json,
};
use futures_util::StreamExt;
use serde_json::{json, Value};

use super::{Shared, Step};

/// One turn on the named session.
pub(crate) async fn chat_completions(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    let example = r#"{"model": "bub", "messages": [{"role": "user", "content": "hi"}]}"#;
    let request = match super::read_request(&shared, &headers, body, example).await {
        Ok(request) => request,
        Err(response) => return response,
    };
    let messages = request.get("messages").and_then(Value::as_array).cloned().unwrap_or_default();
    let prepared = super::last_user_text(&messages).and_then(|content| {
        Ok(match super::named_session(&shared, &headers, &request)? {
            Some(session) => (session, content),
            None => (super::fresh_session("temp/openai-")?, super::with_transcript(&messages, content)),
        })
    });
    let (session, content) = match prepared {
        Ok(prepared) => prepared,
        Err(refusal) => return refusal.into_response(),
    };
    let message = super::envelope(&shared, &session, &content, "openai");
    let id = super::new_id(&shared, "chatcmpl");
    let model = shared.config.model_name.clone();
    if !request.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        return match super::run(&shared, message, &id).await {
            Ok(ended) => Json(json!({
                "id": id, "object": "chat.completion", "created": super::unix_now(), "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": ended.reply},
                    "finish_reason": "stop", "logprobs": null}],
                "usage": ended.usage.chat(),
            }))
            .into_response(),
            Err(response) => response,
        };
    }
    // `stream_options.include_usage`: a last chunk before `[DONE]` with
    // no choices and the turn's usage; every other chunk says `usage: null`.
    let include_usage = request.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false);
    let created = super::unix_now();
    let steps = match super::run_turn(&shared, message, &id).await {
        Ok(steps) => steps,
        Err(refusal) => return refusal.into_response(),
    };
    let chunk = move |delta: Value, finish: Option<&str>| {
        let mut chunk = json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}]});
        if include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    };
    let opening = chunk(json!({"role": "assistant", "content": ""}), None).to_string();
    let frames = steps.flat_map(move |step| {
        let frames = match step {
            Step::Delta(text) => vec![chunk(json!({"content": text}), None).to_string()],
            Step::End(Ok(ended)) => {
                let mut frames = Vec::new();
                if !ended.streamed {
                    frames.push(chunk(json!({"content": ended.reply}), None).to_string());
                }
                frames.push(chunk(json!({}), Some("stop")).to_string());
                if include_usage {
                    let mut last = chunk(json!({}), None);
                    last["choices"] = json!([]);
                    last["usage"] = ended.usage.chat();
                    frames.push(last.to_string());
                }
                frames.push("[DONE]".to_owned());
                frames
            }
            Step::End(Err(failed)) => {
                let refusal = failed.refusal();
                let error = json!({"error": {"message": refusal.message, "type": refusal.kind, "param": null,
                    "code": refusal.code}});
                vec![error.to_string(), "[DONE]".to_owned()]
            }
        };
        futures_util::stream::iter(frames)
    });
    let events = futures_util::stream::once(async move { opening })
        .chain(frames)
        .map(|frame| Ok::<_, std::convert::Infallible>(Event::default().data(frame)));
    Sse::new(events).into_response()
}
