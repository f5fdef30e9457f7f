//! Anthropic Messages (`POST {base}/messages`), streaming: `system` apart,
//! tool calls as `tool_use` blocks, results as `tool_result` blocks in a
//! user message, `cache_control: {type: "ephemeral"}` on every call.

use futures_util::StreamExt;
use serde_json::{json, Map, Value};

use crate::message::Shared;

use super::{
    apply_extra_body, content_text, http, repair_tool_calls, Delta, ModelClient, ModelRequest, ModelResponse,
    ProviderError, ToolCallFragments, Usage,
};

fn block(p: &Value) -> Value {
    match p {
        Value::String(s) => json!({"type": "text", "text": s}),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("image") => {
            // Republic: a remote URL as a URL source; inline data (a data
            // URL decoded) as base64.
            match o.get("url").and_then(Value::as_str).filter(|u| !u.starts_with("data:")) {
                Some(url) => json!({"type": "image", "source": {"type": "url", "url": url}}),
                None => {
                    let (mime, data) = super::inline_media(o);
                    let mime = if mime.is_empty() { "image/png".to_owned() } else { mime };
                    json!({"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}})
                }
            }
        }
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("text") => {
            json!({"type": "text", "text": o.get("text").cloned().unwrap_or_default()})
        }
        other => json!({"type": "text", "text": content_text(other)}),
    }
}

/// [`messages`] for the wire-format tests of `provider`.
#[cfg(test)]
pub(super) fn tests_messages(neutral: &[Shared]) -> Vec<Value> {
    messages(neutral).1
}

/// `(system, messages)` of the neutral messages; consecutive tool results
/// share one user message.
fn messages(neutral: &[Shared]) -> (String, Vec<Value>) {
    let mut system = Vec::new();
    let mut out: Vec<Value> = Vec::new();
    for m in repair_tool_calls(neutral).iter() {
        let content = m.get("content").cloned().unwrap_or(Value::Null);
        match m.get("role").and_then(Value::as_str).unwrap_or("user") {
            "system" => system.push(content_text(&content)),
            "assistant" => {
                let text = content_text(&content);
                let calls = m.get("tool_calls").and_then(Value::as_array).cloned().unwrap_or_default();
                let data = m.get("provider_data").and_then(Value::as_array).cloned().unwrap_or_default();
                let blocks = assistant_blocks(&data, &text, &calls);
                // Anthropic refuses an empty assistant message.
                if !blocks.is_empty() {
                    out.push(json!({"role": "assistant", "content": blocks}));
                }
            }
            "tool" => {
                // Republic: text alone as text, media as blocks.
                let content = if super::has_media(&content) {
                    Value::Array(content.as_array().into_iter().flatten().map(block).collect())
                } else {
                    Value::String(content_text(&content))
                };
                let result = json!({"type": "tool_result", "tool_use_id": m.get("tool_call_id").cloned().unwrap_or_default(),
                    "content": content});
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
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": *t.parameters}))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("max_tokens".into(), json!(request.max_tokens.unwrap_or(16384)));
    for key in ["temperature", "top_p", "top_k", "stop_sequences", "metadata"] {
        if let Some(v) = request.options.get(key).filter(|v| !v.is_null()) {
            body.insert(key.into(), v.clone());
        }
    }
    // OpenAI-style options in Anthropic's words.
    let option = |k: &str| request.options.get(k).filter(|v| !v.is_null());
    if let Some(stop) = option("stop").filter(|_| !body.contains_key("stop_sequences")) {
        let list = match stop {
            Value::String(s) => vec![json!(s)],
            Value::Array(items) => items.clone(),
            other => vec![json!(content_text(other))],
        };
        body.insert("stop_sequences".into(), Value::Array(list));
    }
    // As Republic's `_tool_choice`: parallel_tool_calls → its negation,
    // on an `auto` choice when none was given; never on `none`.
    let mut choice = option("tool_choice").map(tool_choice);
    if let Some(parallel) = option("parallel_tool_calls").and_then(Value::as_bool) {
        let c = choice.get_or_insert_with(|| json!({"type": "auto"}));
        if let Value::Object(c) = c {
            if c.get("type").and_then(Value::as_str) != Some("none") {
                c.insert("disable_parallel_tool_use".into(), json!(!parallel));
            }
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
    let body = serde_json::to_vec(&body(client, request)).expect("a JSON value always serializes");
    let resp = http::post(&client.config, &url, &auth, body).await?;
    let mut events = http::events(&client.config, resp);
    let mut out = ModelResponse::default();
    let mut calls = ToolCallFragments::default();
    let mut usage = Usage::default();
    let mut blocks = Blocks::default();
    while let Some(event) = events.next().await {
        let event = event?;
        let Ok(data) = serde_json::from_str::<Value>(&event.data) else { continue };
        match data["type"].as_str().unwrap_or(event.event.as_str()) {
            "message_start" => {
                apply_usage(&mut usage, &data["message"]["usage"]);
                let named = |k: &str| data["message"].get(k).and_then(Value::as_str).map(str::to_owned);
                out.meta.id = named("id");
                out.meta.model = named("model");
            }
            "content_block_start" => {
                let b = &data["content_block"];
                let index = data["index"].as_u64().unwrap_or(0);
                match b["type"].as_str() {
                    Some("tool_use") => {
                        calls.add(&index.to_string(), b["id"].as_str(), b["name"].as_str(), None);
                        blocks.mark(json!({"type": "tool_use", "id": b["id"]}));
                    }
                    Some("text") => {
                        blocks.open(index, json!({"type": "text", "text": b["text"].as_str().unwrap_or("")}))
                    }
                    // thinking, redacted_thinking, …: kept whole for the replay.
                    _ => blocks.open(index, b.clone()),
                }
            }
            "content_block_stop" => blocks.close(data["index"].as_u64().unwrap_or(0)),
            "content_block_delta" => {
                let d = &data["delta"];
                match d["type"].as_str() {
                    Some("text_delta") => {
                        let t = d["text"].as_str().unwrap_or("").to_owned();
                        blocks.append(data["index"].as_u64().unwrap_or(0), "text", &t);
                        out.text.push_str(&t);
                        on_delta(Delta::Text(t));
                    }
                    Some("thinking_delta") => {
                        let t = d["thinking"].as_str().unwrap_or("").to_owned();
                        blocks.append(data["index"].as_u64().unwrap_or(0), "thinking", &t);
                        out.reasoning.push_str(&t);
                        on_delta(Delta::Reasoning(t));
                    }
                    Some("signature_delta") => {
                        let s = d["signature"].as_str().unwrap_or("");
                        blocks.append(data["index"].as_u64().unwrap_or(0), "signature", s);
                    }
                    Some("input_json_delta") => {
                        let key = data["index"].as_u64().unwrap_or(0).to_string();
                        calls.add(&key, None, None, d["partial_json"].as_str());
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                apply_usage(&mut usage, &data["usage"]);
                if let Some(reason) = data["delta"]["stop_reason"].as_str() {
                    // Republic's names for Anthropic's stop reasons.
                    const STOP_REASONS: &[(&str, &str)] = &[
                        ("end_turn", "stop"),
                        ("stop_sequence", "stop"),
                        ("max_tokens", "length"),
                        ("model_context_window_exceeded", "length"),
                        ("tool_use", "tool_calls"),
                        ("refusal", "refusal"),
                        ("pause_turn", "pause"),
                    ];
                    out.meta.finish_reason = Some(super::finish_reason_of(STOP_REASONS, Some(reason)));
                }
                // A refusal ends the message with its explanation (Republic).
                if data["delta"]["stop_reason"] == "refusal" {
                    if let Some(why) = data["delta"]["stop_details"]["explanation"].as_str() {
                        out.refusal.push_str(why);
                        on_delta(Delta::Text(why.to_owned()));
                    }
                }
            }
            "message_stop" => {
                usage.total_tokens = usage.input_tokens + usage.output_tokens;
                out.usage = Some(usage);
                out.tool_calls = calls.finish();
                out.provider_data = blocks.finish();
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

/// Anthropic reports cache reads and writes apart from the uncached input;
/// Bub's (Republic's) input counts them all. A later report (the
/// `message_delta` one) updates what it names.
fn apply_usage(usage: &mut Usage, u: &Value) {
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    if let Some(c) = n("cache_read_input_tokens") {
        usage.cached_tokens = c;
    }
    if let Some(c) = n("cache_creation_input_tokens") {
        usage.cache_write_tokens = c;
    }
    if let Some(i) = n("input_tokens") {
        usage.input_tokens =
            i + n("cache_read_input_tokens").unwrap_or(0) + n("cache_creation_input_tokens").unwrap_or(0);
    }
    if let Some(o) = n("output_tokens") {
        usage.output_tokens = o;
    }
}

/// The blocks of a streamed message that must go back verbatim (thinking,
/// redacted thinking, …), with markers for the text and tool uses before
/// them, as Republic's provider data: the server checks thinking against
/// the original order.
#[derive(Default)]
struct Blocks {
    // In stream order: markers and round-tripped blocks.
    order: Vec<Value>,
    // Open blocks (text markers and round-tripped blocks) by stream index,
    // with their place in `order`: deltas append to them.
    open: std::collections::HashMap<u64, usize>,
}

impl Blocks {
    fn mark(&mut self, marker: Value) {
        self.order.push(marker);
    }

    fn open(&mut self, index: u64, block: Value) {
        self.open.insert(index, self.order.len());
        self.order.push(block);
    }

    fn append(&mut self, index: u64, key: &str, text: &str) {
        if let Some(&at) = self.open.get(&index) {
            let old = self.order[at].get(key).and_then(Value::as_str).unwrap_or("").to_owned();
            self.order[at][key] = json!(old + text);
        }
    }

    fn close(&mut self, index: u64) {
        self.open.remove(&index);
    }

    /// Provider data parts (`{"api_format": "messages", "payload": …}`):
    /// everything up to the last round-tripped block (markers after it are
    /// not needed); none when there is nothing to round-trip.
    fn finish(self) -> Vec<Value> {
        let is_marker = |b: &Value| matches!(b["type"].as_str(), Some("text" | "tool_use"));
        let Some(last) = self.order.iter().rposition(|b| !is_marker(b)) else { return Vec::new() };
        self.order
            .into_iter()
            .take(last + 1)
            .filter(|b| !(b["type"] == "text" && b["text"] == ""))
            .map(|payload| json!({"api_format": "messages", "payload": payload}))
            .collect()
    }
}

/// An assistant message's blocks in their original order (Republic's
/// `_assistant_content`): round-tripped blocks verbatim, text and tool uses
/// where their markers stand, the rest after; a message changed since (its
/// text or calls no longer match the markers) gets its blocks first.
fn assistant_blocks(provider_data: &[Value], text: &str, calls: &[Value]) -> Vec<Value> {
    let mut payloads: Vec<&Value> =
        provider_data.iter().filter(|p| p["api_format"] == "messages").filter_map(|p| p.get("payload")).collect();
    let tool_use = |c: &Value| {
        let input: Value = c["arguments"]
            .as_str()
            .and_then(|a| serde_json::from_str(a).ok())
            .or_else(|| c["arguments"].as_object().map(|o| Value::Object(o.clone())))
            .unwrap_or(json!({}));
        json!({"type": "tool_use", "id": c["id"], "name": c["name"], "input": input})
    };
    let mut marked_text: String =
        payloads.iter().filter(|p| p["type"] == "text").filter_map(|p| p["text"].as_str()).collect();
    let ids: Vec<&Value> = calls.iter().map(|c| &c["id"]).collect();
    let mut marked_calls: Vec<&Value> = payloads.iter().filter(|p| p["type"] == "tool_use").map(|p| &p["id"]).collect();
    if !text.starts_with(&marked_text) || !marked_calls.iter().all(|id| ids.contains(id)) {
        payloads.retain(|p| !matches!(p["type"].as_str(), Some("text" | "tool_use")));
        marked_text.clear();
        marked_calls.clear();
    }
    let mut content = Vec::new();
    for p in &payloads {
        match p["type"].as_str() {
            Some("text") => content.push(json!({"type": "text", "text": p["text"]})),
            Some("tool_use") => {
                if let Some(c) = calls.iter().find(|c| c["id"] == p["id"]) {
                    content.push(tool_use(c));
                }
            }
            _ => content.push((*p).clone()),
        }
    }
    let rest = &text[marked_text.len()..];
    if !rest.is_empty() {
        content.push(json!({"type": "text", "text": rest}));
    }
    content.extend(calls.iter().filter(|c| !marked_calls.contains(&&c["id"])).map(tool_use));
    content
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use crate::provider::settings::ModelSettings;

    #[test]
    fn cache_control_and_max_tokens_behaviour_232() {
        let c = ModelSettings::from_sources(vec![], &Map::new()).unwrap().client("anthropic:claude").unwrap();
        let req = ModelRequest {
            messages: Message::all([json!({"role": "user", "content": "hi"})]),
            max_tokens: Some(42),
            ..Default::default()
        };
        let b = body(&c, &req);
        assert_eq!(b["cache_control"], json!({"type": "ephemeral"}));
        assert_eq!(b["max_tokens"], 42);
    }

    /// OpenAI-style options in Anthropic's words.
    #[test]
    fn tool_choice_parallel_calls_stop_and_reasoning_effort_are_mapped() {
        let c = ModelSettings::from_sources(vec![], &Map::new()).unwrap().client("anthropic:claude").unwrap();
        let with = |options: Value| {
            let req = ModelRequest {
                messages: Message::all([json!({"role": "user", "content": "hi"})]),
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
