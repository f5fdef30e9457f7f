//! Prompt formats (spec §4.3): user content (`to_content`) and the legacy
//! form hooks receive (`to_legacy_prompt`).

use serde_json::{json, Map, Value};

/// `to_content`: a string → `[s]`; a list keeps strings and media blocks and
/// turns `{type: text}` blocks into strings. Anything else is invalid input.
pub fn to_content(prompt: &Value) -> Result<Vec<Value>, String> {
    match prompt {
        Value::String(s) => Ok(vec![Value::String(s.clone())]),
        Value::Array(items) => items.iter().map(content_item).collect(),
        other => Err(format!("invalid prompt: expected a string or a list, got {other}")),
    }
}

fn content_item(item: &Value) -> Result<Value, String> {
    match item {
        Value::String(_) => Ok(item.clone()),
        Value::Object(block) => match block.get("type").and_then(Value::as_str) {
            Some("text") => match block.get("text") {
                Some(Value::String(t)) => Ok(Value::String(t.clone())),
                _ => Err("invalid prompt: a text block needs a string `text`".into()),
            },
            Some(kind @ ("image" | "audio" | "video")) => {
                if block.get("url").is_none() && block.get("data").is_none() {
                    return Err(format!("invalid prompt: a {kind} block needs `url` or `data`"));
                }
                Ok(item.clone())
            }
            other => Err(format!("invalid prompt: unsupported content block type {other:?}")),
        },
        other => Err(format!("invalid prompt item: {other}")),
    }
}

/// `to_legacy_prompt`: all strings → joined by newlines; otherwise content
/// blocks (`{type: text, text}` / media blocks with a URL).
pub fn to_legacy_prompt(content: &[Value]) -> Value {
    if content.iter().all(Value::is_string) {
        let parts: Vec<&str> = content.iter().filter_map(Value::as_str).collect();
        return Value::String(parts.join("\n"));
    }
    Value::Array(
        content
            .iter()
            .map(|item| match item {
                Value::String(s) => json!({"type": "text", "text": s}),
                Value::Object(block) => {
                    let mut b = Map::new();
                    b.insert("type".into(), block.get("type").cloned().unwrap_or_default());
                    if let Some(m) = block.get("media_type") {
                        b.insert("media_type".into(), m.clone());
                    }
                    let url = block.get("url").cloned().unwrap_or_else(|| {
                        let mt = block.get("media_type").and_then(Value::as_str).unwrap_or("application/octet-stream");
                        let data = block.get("data").and_then(Value::as_str).unwrap_or_default();
                        Value::String(format!("data:{mt};base64,{data}"))
                    });
                    b.insert("url".into(), url);
                    Value::Object(b)
                }
                other => other.clone(),
            })
            .collect(),
    )
}
