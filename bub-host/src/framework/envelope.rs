//! Reading message envelopes the way Bub does (`field_of`, `content_of`,
//! the default session id, `unpack_batch`).

use bub_abi::types::Envelope;
use serde_json::Value;

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
    let part = |k| field_of(message, k).map(py_str).unwrap_or_else(|| "default".into());
    format!("{}:{}", part("channel"), part("chat_id"))
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
