//! The host side of the `republic` module inside `run_code` (Bub's
//! `republic_bridge`): model-written code never holds a credential; its
//! `republic.get_model().chat(...)`, `.stream(...)`, embedding and decision
//! calls arrive here as tool calls named `republic.<operation>` and are made
//! with the host's model settings, the session's model by default.
//!
//! Republic values cross as JSON objects with a `"$republic"` key (media,
//! messages, questions), as Bub's runner sends them; media and messages are
//! turned into the agent's neutral message parts, so the same wire formats
//! carry them as a turn's own messages.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use bub_agent::{
    message::Message,
    provider::{decisions, embeddings, Delta, ModelClient, ModelRequest, ModelResponse, ProviderError, Usage},
    ModelSettings,
};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

/// The prefix of the code's `republic` calls.
pub const CALL_PREFIX: &str = "republic.";
/// The key that marks a Republic value.
const KEY: &str = "$republic";

/// One item of a stream, as the pump saw it.
enum Item {
    Event(Value),
    Failed(String),
    End,
}

/// A model stream read in the background, so each `stream_next` returns
/// every event that has arrived (Bub's `_StreamPump`).
struct Pump {
    rx: mpsc::UnboundedReceiver<Item>,
    /// A failure held back while events received before it are delivered.
    held: Vec<Item>,
    task: tokio::task::AbortHandle,
}

impl Drop for Pump {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One `run_code` call's Republic service; dropping it stops the streams
/// the code left open.
pub struct Republic {
    settings: Result<ModelSettings, String>,
    /// The session's model (`state["model"]`), else the configured one.
    session_model: Option<String>,
    streams: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Pump>>>>,
}

/// A failed operation, as Bub's `str(BubError)`: `[kind] message`.
fn failure(kind: &str, message: impl std::fmt::Display) -> String {
    format!("[{kind}] {message}")
}

/// Republic's exception class for a provider error (what Bub's text names).
fn error_class(e: &ProviderError) -> &'static str {
    match e {
        ProviderError::Status { .. } => "APIStatusError",
        ProviderError::Connection(_) => "APIConnectionError",
        ProviderError::Timeout | ProviderError::Deadline(_) => "APITimeoutError",
        ProviderError::Config(m) if m.contains(" supports no ") => "UnsupportedApiFormatError",
        ProviderError::Auth(_) => "AuthenticationError",
        _ => "APIResponseError",
    }
}

impl Republic {
    /// For a run whose state names `session_model` (or none).
    pub fn new(settings: Result<ModelSettings, String>, session_model: Option<String>) -> Republic {
        Republic { settings, session_model, streams: Mutex::new(HashMap::new()) }
    }

    /// Serves `name` (`republic.chat`, …) with the code's `arguments`; the
    /// result as the code decodes it, or the failure's text.
    pub async fn call(&self, name: &str, arguments: Map<String, Value>) -> Result<Value, String> {
        let operation = name.strip_prefix(CALL_PREFIX).unwrap_or(name);
        let args = Args { name, map: arguments };
        let outcome = match operation {
            "chat" => self.chat(&args).await,
            "stream_open" => self.stream_open(&args),
            "stream_next" => self.stream_next(&args).await,
            "stream_close" => args.text("stream").map(|id| {
                bub_abi::sync::lock(&self.streams).remove(&id);
                Value::Null
            }),
            "embed" => self.embed(&args).await,
            "decide" => self.decide(&args).await,
            _ => return Err(failure("invalid_input", format!("unknown republic operation: {name}"))),
        };
        outcome.map_err(|e| match e {
            Failure::Text(text) => text,
            Failure::Provider(e) => failure("tool", format!("{name} failed: {}: {e}", error_class(&e))),
        })
    }

    /// The client for the code's `spec` (`None`: the session's model).
    fn client(&self, spec: Option<&str>) -> Result<ModelClient, Failure> {
        let settings = self.settings.as_ref().map_err(|e| Failure::Text(failure("invalid_input", e)))?;
        let spec =
            spec.map(str::to_owned).or_else(|| self.session_model.clone()).unwrap_or_else(|| settings.default_model());
        settings.client(&spec).map_err(|e| Failure::Text(failure("invalid_input", e)))
    }

    fn request(&self, args: &Args) -> Result<ModelRequest, Failure> {
        let mut options = match args.map.get("options") {
            Some(Value::Object(o)) => o.clone(),
            _ => Map::new(),
        };
        if options.contains_key("tools") || options.contains_key("tool_choice") {
            return Err(Failure::Text(failure("invalid_input", "republic models in run_code do not support tools.")));
        }
        let messages = match args.map.get("messages") {
            Some(Value::Array(items)) => items.iter().map(message).collect::<Option<Vec<Value>>>(),
            _ => None,
        }
        .ok_or_else(|| Failure::Text(failure("invalid_input", "chat() takes text or republic messages.")))?;
        let max_tokens = options.remove("max_tokens").and_then(|v| v.as_u64());
        Ok(ModelRequest { messages: Message::all(messages), tools: Vec::new(), max_tokens, options })
    }

    async fn chat(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let client = self.client(args.optional_text("spec").as_deref())?;
        let request = self.request(args)?;
        let response = client.call_whole(&request).await.map_err(Failure::Provider)?;
        Ok(response_json(&response))
    }

    fn stream_open(&self, args: &Args) -> Result<Value, Failure> {
        let client = self.client(args.optional_text("spec").as_deref())?;
        let request = self.request(args)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut on_delta = |d: Delta| {
                let event = match d {
                    Delta::Text(chunk) => json!({"type": "text", "chunk": chunk}),
                    Delta::Reasoning(chunk) => json!({"type": "reasoning", "chunk": chunk}),
                };
                let _ = tx.send(Item::Event(event));
            };
            match client.call(&request, &mut on_delta).await {
                Ok(response) => {
                    if let Some(usage) = response.usage {
                        let _ = tx.send(Item::Event(json!({"type": "usage", "usage": usage_json(&usage)})));
                    }
                    let _ = tx.send(Item::Event(json!({"type": "completed", "response": response_json(&response)})));
                }
                Err(e) => {
                    let _ = tx.send(Item::Failed(failure(
                        "tool",
                        format!("republic.stream_next failed: {}: {e}", error_class(&e)),
                    )));
                }
            }
            let _ = tx.send(Item::End);
        });
        let id = format!("{:016x}{:016x}", bub_kit::random::u64(), bub_kit::random::u64());
        let pump = Pump { rx, held: Vec::new(), task: task.abort_handle() };
        bub_abi::sync::lock(&self.streams).insert(id.clone(), Arc::new(tokio::sync::Mutex::new(pump)));
        Ok(json!({"stream": id}))
    }

    async fn stream_next(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let id = args.text("stream")?;
        let pump = bub_abi::sync::lock(&self.streams).get(&id).cloned();
        let Some(pump) = pump else { return Err(Failure::Text(failure("invalid_input", "The stream is closed."))) };
        let mut pump = pump.lock().await;
        let mut items = std::mem::take(&mut pump.held);
        if items.is_empty() {
            items.push(pump.rx.recv().await.unwrap_or(Item::End));
        }
        while let Ok(item) = pump.rx.try_recv() {
            items.push(item);
        }
        let mut events = Vec::new();
        let mut done = false;
        let mut failed = None;
        for item in items {
            match item {
                Item::Event(e) => events.push(e),
                Item::Failed(text) => failed = Some(text),
                Item::End => done = true,
            }
        }
        if let Some(text) = failed {
            if events.is_empty() {
                drop(pump);
                bub_abi::sync::lock(&self.streams).remove(&id);
                return Err(Failure::Text(text));
            }
            // The events received before the failure go first.
            pump.held = vec![Item::Failed(text), Item::End];
            return Ok(json!({"events": events, "done": false}));
        }
        if done {
            drop(pump);
            bub_abi::sync::lock(&self.streams).remove(&id);
        }
        Ok(json!({"events": events, "done": done}))
    }

    async fn embed(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let client = self.client(args.optional_text("spec").as_deref())?;
        let texts: Vec<String> = match args.map.get("texts") {
            Some(Value::Array(items)) => items.iter().map(|t| t.as_str().map(str::to_owned)).collect::<Option<_>>(),
            _ => None,
        }
        .ok_or_else(|| {
            Failure::Text(failure("invalid_input", format!("{} failed: texts must be strings", args.name)))
        })?;
        let dimensions = args.map.get("dimensions").and_then(Value::as_u64);
        let answer = embeddings::embed(&client, &texts, dimensions).await.map_err(Failure::Provider)?;
        Ok(json!({"vectors": answer.vectors, "model": answer.model, "token_usage": usage_json(&answer.usage)}))
    }

    async fn decide(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let client = self.client(args.optional_text("spec").as_deref())?;
        let questions = args.map.get("questions").and_then(Value::as_object).cloned().unwrap_or_default();
        let valid = questions
            .values()
            .all(|q| q.get(KEY).and_then(Value::as_str).is_some_and(|k| matches!(k, "noul" | "choice" | "score")));
        if !valid {
            return Err(Failure::Text(failure("invalid_input", "decide() takes republic.decisions questions.")));
        }
        let questions: Map<String, Value> = questions
            .into_iter()
            .map(|(id, mut q)| {
                if let Some(o) = q.as_object_mut() {
                    let kind = o.remove(KEY).unwrap_or_default();
                    o.insert("type".into(), kind);
                }
                (id, q)
            })
            .collect();
        let state = args.map.get("state").cloned().unwrap_or_default();
        let answer = decisions::decide(&client, &state, &questions).await.map_err(Failure::Provider)?;
        Ok(json!({"answers": answer.answers, "model": answer.model, "token_usage": usage_json(&answer.usage)}))
    }
}

/// Why an operation failed: its text already, or the provider's error.
enum Failure {
    Text(String),
    Provider(ProviderError),
}

/// The code's arguments to one operation.
struct Args<'a> {
    name: &'a str,
    map: Map<String, Value>,
}

impl Args<'_> {
    fn optional_text(&self, key: &str) -> Option<String> {
        self.map.get(key).and_then(Value::as_str).map(str::to_owned)
    }

    fn text(&self, key: &str) -> Result<String, Failure> {
        self.optional_text(key).ok_or_else(|| {
            Failure::Text(failure("invalid_input", format!("{} failed: missing argument {key:?}", self.name)))
        })
    }
}

/// Republic's `TokenUsage` as `dataclasses.asdict` writes it.
fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "reasoning_tokens": u.reasoning_tokens,
        "cached_tokens": u.cached_tokens,
        "cache_write_tokens": u.cache_write_tokens,
    })
}

/// Bub's `_encode_response`.
fn response_json(r: &ModelResponse) -> Value {
    let content: Vec<Value> = if r.text.is_empty() { Vec::new() } else { vec![json!(r.text)] };
    json!({
        "text": r.text,
        "reasoning": r.reasoning,
        "refusal": (!r.refusal.is_empty()).then_some(&r.refusal),
        "finish_reason": r.meta.finish_reason,
        "model": r.meta.model,
        "token_usage": usage_json(&r.usage.unwrap_or_default()),
        "message": {KEY: "message", "role": "assistant", "content": content},
    })
}

/// A Republic media value as the agent's message part (`{"type": "image",
/// "media_type", "data" | "url"}`, as `attach_image` tapes it).
pub fn media_part(value: &Value) -> Option<Value> {
    let kind = value.get(KEY)?.as_str().filter(|k| matches!(*k, "image" | "audio" | "video"))?;
    let mut part = json!({"type": kind, "media_type": value.get("media_type")?.as_str()?});
    for key in ["data", "url"] {
        if let Some(v) = value.get(key).filter(|v| v.is_string()) {
            part[key] = v.clone();
        }
    }
    (part.get("data").is_some() || part.get("url").is_some()).then_some(part)
}

/// A `{"$republic": "message"}` value as a neutral message: its text and
/// media in order.
fn message(value: &Value) -> Option<Value> {
    if value.get(KEY)?.as_str()? != "message" {
        return None;
    }
    let role = value.get("role")?.as_str()?;
    let items = value.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
    let parts: Vec<Value> = items
        .iter()
        .map(|item| match item {
            Value::String(text) => Some(json!({"type": "text", "text": text})),
            other => media_part(other),
        })
        .collect::<Option<_>>()?;
    // Text alone is sent as a string, as Republic writes it.
    let content = if parts.iter().all(|p| p["type"] == "text") {
        json!(parts.iter().filter_map(|p| p["text"].as_str()).collect::<String>())
    } else {
        Value::Array(parts)
    };
    Some(json!({"role": role, "content": content}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_from_code_become_neutral_messages_with_media_parts() {
        let image = json!({KEY: "image", "media_type": "image/png", "data": "AAAA", "url": null});
        let user = json!({KEY: "message", "role": "user", "content": ["Describe ", "this.", image]});
        assert_eq!(
            message(&user).unwrap(),
            json!({"role": "user", "content": [
                {"type": "text", "text": "Describe "}, {"type": "text", "text": "this."},
                {"type": "image", "media_type": "image/png", "data": "AAAA"},
            ]})
        );
        let text = json!({KEY: "message", "role": "system", "content": ["Be ", "brief."]});
        assert_eq!(message(&text).unwrap(), json!({"role": "system", "content": "Be brief."}));
        // Not a message, or media without data or a URL: refused.
        assert!(message(&json!("hi")).is_none());
        assert!(media_part(&json!({KEY: "image", "media_type": "image/png"})).is_none());
    }

    #[tokio::test]
    async fn unknown_operations_and_tool_options_are_refused_in_bubs_words() {
        let republic = Republic::new(Err("no settings".into()), None);
        let err = republic.call("republic.paint", Map::new()).await.unwrap_err();
        assert_eq!(err, "[invalid_input] unknown republic operation: republic.paint");
        let err = republic.call("republic.stream_next", json!({"stream": "x"}).as_object().cloned().unwrap()).await;
        assert_eq!(err.unwrap_err(), "[invalid_input] The stream is closed.");
    }
}
