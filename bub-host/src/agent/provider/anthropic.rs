//! Anthropic Messages (`POST {base}/messages`), streaming: `system` apart,
//! tool calls as `tool_use` blocks, results as `tool_result` blocks in a
//! user message, `cache_control: {type: "ephemeral"}` on every call.

use futures_util::StreamExt;
use serde_json::{json, Map, Value};

use super::{
    apply_extra_body, content_text, http, repair_tool_calls, Delta, ModelClient, ModelRequest, ModelResponse,
    ProviderError, ToolCallFragments, Usage,
};

fn block(p: &Value) -> Value {
    match p {
        Value::String(s) => json!({"type": "text", "text": s}),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("image") => {
            match (o.get("data"), o.get("url")) {
                (Some(data), _) => json!({"type": "image", "source": {"type": "base64",
                    "media_type": o.get("media_type").cloned().unwrap_or(json!("image/png")), "data": data}}),
                (None, Some(url)) => json!({"type": "image", "source": {"type": "url", "url": url}}),
                _ => json!({"type": "text", "text": ""}),
            }
        }
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("text") => {
            json!({"type": "text", "text": o.get("text").cloned().unwrap_or_default()})
        }
        other => json!({"type": "text", "text": content_text(other)}),
    }
}

/// `(system, messages)` of the neutral messages; consecutive tool results
/// share one user message.
fn messages(neutral: &[Value]) -> (String, Vec<Value>) {
    let mut system = Vec::new();
    let mut out: Vec<Value> = Vec::new();
    for m in repair_tool_calls(neutral) {
        let content = m.get("content").cloned().unwrap_or(Value::Null);
        match m.get("role").and_then(Value::as_str).unwrap_or("user") {
            "system" => system.push(content_text(&content)),
            "assistant" => {
                let mut blocks = Vec::new();
                let text = content_text(&content);
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for c in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                    let input: Value =
                        c["arguments"].as_str().and_then(|a| serde_json::from_str(a).ok()).unwrap_or(json!({}));
                    blocks.push(json!({"type": "tool_use", "id": c["id"], "name": c["name"], "input": input}));
                }
                out.push(json!({"role": "assistant", "content": blocks}));
            }
            "tool" => {
                let result = json!({"type": "tool_result", "tool_use_id": m.get("tool_call_id").cloned().unwrap_or_default(),
                    "content": content_text(&content)});
                match out.last_mut() {
                    Some(last) if last["role"] == "user" && last["content"][0]["type"] == "tool_result" => {
                        last["content"].as_array_mut().expect("blocks").push(result)
                    }
                    _ => out.push(json!({"role": "user", "content": [result]})),
                }
            }
            _ => {
                let blocks: Vec<Value> = match &content {
                    Value::Array(ps) => ps.iter().map(block).collect(),
                    other => vec![block(&Value::String(content_text(other)))],
                };
                out.push(json!({"role": "user", "content": blocks}));
            }
        }
    }
    (system.join("\n\n"), out)
}

/// The request body.
pub fn body(client: &ModelClient, request: &ModelRequest) -> Value {
    let (system, msgs) = messages(&request.messages);
    let mut body = Map::new();
    body.insert("model".into(), json!(client.model));
    if !system.is_empty() {
        body.insert("system".into(), json!(system));
    }
    body.insert("messages".into(), Value::Array(msgs));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("max_tokens".into(), json!(request.max_tokens.unwrap_or(16384)));
    for key in ["temperature", "top_p", "top_k", "stop_sequences", "metadata"] {
        if let Some(v) = request.options.get(key).filter(|v| !v.is_null()) {
            body.insert(key.into(), v.clone());
        }
    }
    // OpenAI-style options in Anthropic's words (issue 17.3).
    let option = |k: &str| request.options.get(k).filter(|v| !v.is_null());
    if let Some(stop) = option("stop").filter(|_| !body.contains_key("stop_sequences")) {
        let list = match stop {
            Value::String(s) => vec![json!(s)],
            Value::Array(items) => items.clone(),
            other => vec![json!(content_text(other))],
        };
        body.insert("stop_sequences".into(), Value::Array(list));
    }
    let mut choice = option("tool_choice").map(tool_choice);
    if option("parallel_tool_calls") == Some(&Value::Bool(false)) {
        let c = choice.get_or_insert_with(|| json!({"type": "auto"}));
        if let Value::Object(c) = c {
            c.insert("disable_parallel_tool_use".into(), json!(true));
        }
    }
    if let Some(choice) = choice {
        body.insert("tool_choice".into(), choice);
    }
    // Bub's reasoning effort: adaptive thinking at that effort (17.2).
    if let Some(effort) = option("reasoning_effort").and_then(Value::as_str).filter(|e| !e.is_empty()) {
        body.insert("thinking".into(), json!({"type": "adaptive"}));
        body.insert("output_config".into(), json!({"effort": effort}));
    }
    body.insert("stream".into(), json!(true));
    body.insert("cache_control".into(), json!({"type": "ephemeral"}));
    apply_extra_body(client, request, &mut body);
    Value::Object(body)
}

/// An OpenAI-style `tool_choice` as Anthropic's object: `"auto"` →
/// `{"type": "auto"}`, `"required"` → `{"type": "any"}`, `"none"`, a
/// function choice → `{"type": "tool", "name": …}`; Anthropic's own objects
/// pass as they are.
fn tool_choice(choice: &Value) -> Value {
    match choice {
        Value::String(s) => match s.as_str() {
            "required" | "any" => json!({"type": "any"}),
            "none" => json!({"type": "none"}),
            "auto" => json!({"type": "auto"}),
            name => json!({"type": "tool", "name": name}),
        },
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = o.get("function").and_then(|f| f.get("name")).or_else(|| o.get("name"));
            json!({"type": "tool", "name": name.cloned().unwrap_or_default()})
        }
        other => other.clone(),
    }
}

/// Runs a call.
pub async fn call(
    client: &ModelClient,
    request: &ModelRequest,
    on_delta: &mut (dyn FnMut(Delta) + Send),
) -> Result<ModelResponse, ProviderError> {
    let url = format!("{}/messages", client.config.base_url);
    let mut auth = vec![("anthropic-version", "2023-06-01".to_owned())];
    if let Some(k) = &client.config.api_key {
        auth.push(("x-api-key", k.clone()));
    }
    let resp = http::post(&client.config, &url, &auth, &body(client, request)).await?;
    let mut events = http::events(resp);
    let mut out = ModelResponse::default();
    let mut calls = ToolCallFragments::default();
    let mut usage = Usage::default();
    while let Some(event) = events.next().await {
        let event = event?;
        let Ok(data) = serde_json::from_str::<Value>(&event.data) else { continue };
        let n = |v: &Value| v.as_u64();
        match data["type"].as_str().unwrap_or(event.event.as_str()) {
            "message_start" => {
                let u = &data["message"]["usage"];
                usage.input_tokens = n(&u["input_tokens"]).unwrap_or(0);
                usage.cached_tokens = n(&u["cache_read_input_tokens"]).unwrap_or(0);
                usage.cache_write_tokens = n(&u["cache_creation_input_tokens"]).unwrap_or(0);
            }
            "content_block_start" => {
                let b = &data["content_block"];
                if b["type"] == "tool_use" {
                    let key = data["index"].as_u64().unwrap_or(0).to_string();
                    calls.add(&key, b["id"].as_str(), b["name"].as_str(), None);
                }
            }
            "content_block_delta" => {
                let d = &data["delta"];
                match d["type"].as_str() {
                    Some("text_delta") => {
                        let t = d["text"].as_str().unwrap_or("").to_owned();
                        out.text.push_str(&t);
                        on_delta(Delta::Text(t));
                    }
                    Some("thinking_delta") => {
                        let t = d["thinking"].as_str().unwrap_or("").to_owned();
                        out.reasoning.push_str(&t);
                        on_delta(Delta::Reasoning(t));
                    }
                    Some("input_json_delta") => {
                        let key = data["index"].as_u64().unwrap_or(0).to_string();
                        calls.add(&key, None, None, d["partial_json"].as_str());
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(o) = n(&data["usage"]["output_tokens"]) {
                    usage.output_tokens = o;
                }
            }
            "message_stop" => {
                usage.total_tokens = usage.input_tokens + usage.output_tokens;
                out.usage = Some(usage);
                out.tool_calls = calls.finish();
                return Ok(out);
            }
            "error" => {
                let e = &data["error"];
                return Err(ProviderError::Response(
                    e["message"].as_str().map(str::to_owned).unwrap_or_else(|| e.to_string()),
                ));
            }
            _ => {}
        }
    }
    Err(ProviderError::Incomplete)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::provider::settings::ModelSettings;

    #[test]
    fn cache_control_and_max_tokens_behaviour_232() {
        let c = ModelSettings::from_sources(vec![], &Map::new()).unwrap().client("anthropic:claude").unwrap();
        let req = ModelRequest {
            messages: vec![json!({"role": "user", "content": "hi"})],
            max_tokens: Some(42),
            ..Default::default()
        };
        let b = body(&c, &req);
        assert_eq!(b["cache_control"], json!({"type": "ephemeral"}));
        assert_eq!(b["max_tokens"], 42);
    }

    /// Issue 17.2 and 17.3: OpenAI-style options in Anthropic's words.
    #[test]
    fn tool_choice_parallel_calls_stop_and_reasoning_effort_are_mapped() {
        let c = ModelSettings::from_sources(vec![], &Map::new()).unwrap().client("anthropic:claude").unwrap();
        let with = |options: Value| {
            let req = ModelRequest {
                messages: vec![json!({"role": "user", "content": "hi"})],
                options: options.as_object().cloned().unwrap(),
                ..Default::default()
            };
            body(&c, &req)
        };
        assert_eq!(with(json!({"tool_choice": "auto"}))["tool_choice"], json!({"type": "auto"}));
        assert_eq!(with(json!({"tool_choice": "required"}))["tool_choice"], json!({"type": "any"}));
        let f = json!({"tool_choice": {"type": "function", "function": {"name": "fs_read"}}});
        assert_eq!(with(f)["tool_choice"], json!({"type": "tool", "name": "fs_read"}));
        let b = with(json!({"tool_choice": "auto", "parallel_tool_calls": false}));
        assert_eq!(b["tool_choice"], json!({"type": "auto", "disable_parallel_tool_use": true}));
        assert_eq!(with(json!({"stop": "END"}))["stop_sequences"], json!(["END"]));
        assert_eq!(with(json!({"stop": ["a", "b"]}))["stop_sequences"], json!(["a", "b"]));
        let b = with(json!({"reasoning_effort": "high"}));
        assert_eq!(b["thinking"], json!({"type": "adaptive"}));
        assert_eq!(b["output_config"], json!({"effort": "high"}));
        assert!(
            b.get("stop").is_none() && b.get("reasoning_effort").is_none() && b.get("parallel_tool_calls").is_none()
        );
    }
}
