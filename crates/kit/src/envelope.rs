//! Reading message envelopes the way Bub does (`field_of`, `content_of`,
//! the default session id, `unpack_batch`): pure functions over the loose
//! JSON a channel sends, shared by the host and plugins (a session router
//! or a model plugin reads a message exactly as the framework does).

use bub_abi::types::{Envelope, StreamEvent};
use serde_json::{Map, Value};

/// `field_of(msg, key)`: a map's value, `None` when absent or null.
pub fn field_of<'a>(message: &'a Envelope, key: &str) -> Option<&'a Value> {
    message.get(key).filter(|v| !v.is_null())
}

/// Python's `str(value)` for JSON values (strings unquoted).
pub fn py_str(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        other => other.to_string(),
    }
}

/// The channel a message goes out on: its `output_channel`, else its
/// `channel` (the channel router's rule).
pub fn target_channel(message: &Envelope) -> Option<&str> {
    ["output_channel", "channel"].iter().find_map(|k| message.get(*k).and_then(Value::as_str).filter(|s| !s.is_empty()))
}

/// `content_of(msg)`: `str(field_of(msg, "content", ""))`.
pub fn content_of(message: &Envelope) -> String {
    field_of(message, "content").map(py_str).unwrap_or_default()
}

/// The framework's default session id: the envelope's `session_id` if
/// present (as is, even empty), else `"{channel}:{chat_id}"`, each
/// defaulting to `default`.
pub fn default_session_id(message: &Envelope) -> String {
    if let Some(id) = field_of(message, "session_id") {
        return py_str(id);
    }
    // Written into one string: no copy of each part first (every turn
    // without a resolver makes this id).
    let part = |id: &mut String, key| match field_of(message, key) {
        Some(Value::String(s)) => id.push_str(s),
        Some(other) => id.push_str(&py_str(other)),
        None => id.push_str("default"),
    };
    let mut id = String::new();
    part(&mut id, "channel");
    id.push(':');
    part(&mut id, "chat_id");
    id
}

/// `unpack_batch`: None → `[]`, a list → its items, anything else → `[v]`.
pub fn unpack_batch(value: Value) -> Vec<Value> {
    match value {
        Value::Null => Vec::new(),
        Value::Array(items) => items,
        other => vec![other],
    }
}

/// Python truthiness of a JSON value.
pub fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Completes an envelope the way Bub's `ChannelMessage` does when a channel
/// builds one: `chat_id` defaults to `default`, `kind` to `normal`,
/// `output_channel` to the channel, and the context gets
/// `channel = "$<channel>"` and `chat_id`, so the model learns where a
/// message came from (semantics §H4.1).
pub fn complete_channel_message(message: &mut Map<String, Value>) {
    let channel = message.get("channel").map(py_str).unwrap_or_default();
    let chat_id = message.entry("chat_id").or_insert_with(|| Value::String("default".into())).clone();
    message.entry("kind").or_insert_with(|| Value::String("normal".into()));
    if message.get("output_channel").is_none_or(|v| !truthy(v)) {
        message.insert("output_channel".into(), Value::String(channel.clone()));
    }
    let context = message.entry("context").or_insert_with(|| Value::Object(Map::new()));
    if !context.is_object() {
        *context = Value::Object(Map::new());
    }
    if let Value::Object(context) = context {
        context.insert("channel".into(), Value::String(format!("${channel}")));
        context.insert("chat_id".into(), chat_id);
    }
}

/// `ChannelMessage.context_str`: the context's `key=value` pairs joined by
/// `|`, internal keys (starting with `_`) left out.
pub fn context_str(message: &Envelope) -> String {
    if let Some(Value::String(s)) = field_of(message, "context_str") {
        return s.clone();
    }
    match field_of(message, "context") {
        Some(Value::Object(m)) => m
            .iter()
            .filter(|(k, _)| !k.starts_with('_'))
            .map(|(k, v)| format!("{k}={}", py_str(v)))
            .collect::<Vec<_>>()
            .join("|"),
        _ => String::new(),
    }
}

/// The `kind` of an outbound that the turn keeps (its result, the tape)
/// but no channel is sent: the builtin's `render_outbound` gives it to an
/// answer that is exactly the inbound's `context.silent_marker` (a
/// scheduled heartbeat with nothing to say).
pub const SILENT_KIND: &str = "silent";

/// Whether an outbound is silent ([`SILENT_KIND`]): every router skips it.
pub fn is_silent(message: &Envelope) -> bool {
    field_of(message, "kind").and_then(Value::as_str) == Some(SILENT_KIND)
}

/// The text a streamed turn's event adds: the `delta` of a `text` event
/// (the others carry reasoning, tool calls, usage…).
pub fn text_delta(event: &StreamEvent) -> Option<&str> {
    event.data.get("delta").and_then(Value::as_str).filter(|_| event.kind == "text")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_text_events_add_text() {
        let event = |kind: &str, data| StreamEvent { kind: kind.into(), data };
        assert_eq!(text_delta(&event("text", json!({"delta": "hi"}))), Some("hi"));
        assert_eq!(text_delta(&event("reasoning", json!({"delta": "hmm"}))), None);
        assert_eq!(text_delta(&event("text", json!({}))), None);
    }

    /// The default session id is Bub's `f"{channel}:{chat_id}"` over
    /// `str()` of each part, `default` for a missing or null one; a
    /// `session_id` present wins as is.
    #[test]
    fn default_session_id_is_channel_colon_chat_id() {
        assert_eq!(default_session_id(&json!({"channel": "tg", "chat_id": "42"})), "tg:42");
        assert_eq!(default_session_id(&json!({"channel": "tg", "chat_id": 42})), "tg:42");
        assert_eq!(default_session_id(&json!({"chat_id": true, "channel": null})), "default:True");
        assert_eq!(default_session_id(&json!({})), "default:default");
        assert_eq!(default_session_id(&json!({"session_id": "", "channel": "tg"})), "");
    }

    /// Behaviour of §4.1: a channel message's context names its channel and chat.
    #[test]
    fn channel_message_context_names_channel_and_chat() {
        let mut m = json!({"channel": "tg", "chat_id": "42", "content": "hi", "context": {"sender_id": "ann"}});
        complete_channel_message(m.as_object_mut().unwrap());
        assert_eq!(m["context"], json!({"sender_id": "ann", "channel": "$tg", "chat_id": "42"}));
        assert_eq!(m["output_channel"], "tg");
        assert_eq!(m["kind"], "normal");
        assert_eq!(context_str(&m), "sender_id=ann|channel=$tg|chat_id=42");
    }

    #[test]
    fn context_str_leaves_out_internal_keys() {
        let m = json!({"context": {"a": 1, "_secret": "x", "b": true}});
        assert_eq!(context_str(&m), "a=1|b=True");
        let mut d = json!({"channel": "cli"});
        complete_channel_message(d.as_object_mut().unwrap());
        assert_eq!(d["chat_id"], "default");
        assert_eq!(d["context"]["chat_id"], "default");
    }
}
