//! Prompt formats (semantics §H4.3): user content (`to_content`), the legacy
//! form hooks receive (`to_legacy_prompt`), and Republic's part dicts the
//! tape records (`to_part_dicts`).

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

/// Republic's part dicts (`_part_to_dict`), as Bub records a list prompt in
/// `loop.start` / `loop.step.start`: text as `{type: text, text}`, media as
/// `{type, media_type, url | data}` with a data URL split into its media
/// type and base64 data. A string prompt stays a string.
pub fn to_part_dicts(prompt: &Value) -> Value {
    let Value::Array(items) = prompt else { return prompt.clone() };
    let part = |item: &Value| match item {
        Value::String(s) => json!({"type": "text", "text": s}),
        Value::Object(block)
            if matches!(block.get("type").and_then(Value::as_str), Some("image" | "audio" | "video")) =>
        {
            let text = |k: &str| block.get(k).and_then(Value::as_str);
            let declared = text("media_type").or_else(|| text("mime_type"));
            let mut b = Map::new();
            b.insert("type".into(), block["type"].clone());
            match text("url").and_then(|u| u.strip_prefix("data:")).and_then(|u| u.split_once(',')) {
                Some((header, data)) => {
                    b.insert("media_type".into(), json!(header.trim_end_matches(";base64")));
                    b.insert("data".into(), json!(data));
                }
                None => {
                    b.insert("media_type".into(), json!(declared.unwrap_or("application/octet-stream")));
                    match block.get("url") {
                        Some(url) => b.insert("url".into(), url.clone()),
                        None => b.insert("data".into(), block.get("data").cloned().unwrap_or_default()),
                    };
                }
            }
            Value::Object(b)
        }
        other => other.clone(),
    };
    Value::Array(items.iter().map(part).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_dicts_split_data_urls() {
        let prompt = json!(["look", {"type": "image", "mime_type": "image/png", "url": "data:image/png;base64,iVBO"},
                            {"type": "image", "url": "https://x/y.jpg", "media_type": "image/jpeg"}]);
        assert_eq!(
            to_part_dicts(&prompt),
            json!([{"type": "text", "text": "look"}, {"type": "image", "media_type": "image/png", "data": "iVBO"},
                   {"type": "image", "media_type": "image/jpeg", "url": "https://x/y.jpg"}])
        );
        assert_eq!(to_part_dicts(&json!("plain")), json!("plain"));
    }
}
