//! The OpenAI Responses API (`POST {base}/responses`), streaming (semantics §A6.6);
//! chosen with `client_args.api_format = "responses"`.

use futures_util::StreamExt;
use serde_json::{json, Map, Value};

use super::{
    apply_extra_body, content_text, encode, http, repair_tool_calls, splice_tools, Delta, ModelClient, ModelRequest,
    ModelResponse, ProviderError, Spliced, ToolCallFragments, Usage, SPLICED,
};
use crate::message::{json_text, JsonArray, Shared, WireForm};

fn input_part(p: &Value, role: &str) -> Value {
    let text_type = if role == "assistant" { "output_text" } else { "input_text" };
    match p {
        Value::String(s) => json!({"type": text_type, "text": s}),
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("text") => json!({"type": text_type, "text": o.get("text").cloned().unwrap_or_default()}),
            Some("image") => json!({"type": "input_image", "image_url": super::media_url(o)}),
            _ => Value::Object(o.clone()),
        },
        other => json!({"type": text_type, "text": other.to_string()}),
    }
}

/// [`items`] for the wire-format tests of `provider`.
#[cfg(test)]
pub(super) fn tests_items(m: &Shared) -> Vec<Value> {
    items(m.json())
}

/// The `input` items of one neutral message (zero or more).
fn items(m: &Value) -> Vec<Value> {
    let mut items = Vec::new();
    let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
    let content = m.get("content").cloned().unwrap_or(Value::Null);
    match role {
        // Republic: text alone as text, media as input parts.
        "tool" => items.push(json!({
            "type": "function_call_output",
            "call_id": m.get("tool_call_id").cloned().unwrap_or_default(),
            "output": if super::has_media(&content) {
                Value::Array(content.as_array().into_iter().flatten().map(|p| input_part(p, "user")).collect())
            } else {
                Value::String(content_text(&content))
            },
        })),
        "assistant" => {
            // Reasoning (and server tool) items first, verbatim, as
            // Republic: a reasoning model gets its chain back, and
            // `store: false` use needs the encrypted content (17.6).
            for p in m.get("provider_data").and_then(Value::as_array).into_iter().flatten() {
                if p["api_format"] == "responses" {
                    if let Some(item) = p.get("payload") {
                        items.push(item.clone());
                    }
                }
            }
            let text = content_text(&content);
            if !text.is_empty() {
                items.push(json!({"role": "assistant", "content": [{"type": "output_text", "text": text}]}));
            }
            for c in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                items.push(json!({"type": "function_call", "call_id": c["id"], "name": c["name"],
                    "arguments": c.get("arguments").cloned().unwrap_or(json!("{}"))}));
            }
        }
        _ => {
            let parts: Vec<Value> = match &content {
                Value::Array(ps) => ps.iter().map(|p| input_part(p, role)).collect(),
                other => vec![input_part(&Value::String(content_text(other)), role)],
            };
            items.push(json!({"role": role, "content": parts}));
        }
    }
    items
}

/// The `input` list of the neutral messages, from each message's kept wire
/// form (its items, comma-separated).
fn input(repaired: &[Shared]) -> JsonArray<'_> {
    let items_text = |m: &Value| match items(m).as_slice() {
        // One item (a user message): its text is the part, not copied again.
        [one] => json_text(one),
        several => several.iter().map(json_text).collect::<Vec<_>>().join(","),
    };
    JsonArray::new(repaired.iter().map(|m| m.wire(WireForm::Responses, items_text)))
}

/// The request body.
pub fn body(client: &ModelClient, request: &ModelRequest) -> Result<Value, ProviderError> {
    Ok(serde_json::from_slice(&encoded(client, request)?).expect("the body is JSON"))
}

/// The request body as sent (the messages from their kept wire forms).
fn encoded(client: &ModelClient, request: &ModelRequest) -> Result<Vec<u8>, ProviderError> {
    for rejected in ["stop", "seed", "top_k", "presence_penalty", "frequency_penalty"] {
        if request.options.get(rejected).is_some_and(|v| !v.is_null()) {
            return Err(ProviderError::Config(format!(
                "the Responses API does not take `{rejected}`: remove it from BUB_COMPLETION_ARGS or use api_format \"chat\""
            )));
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(client.model));
    body.insert("input".into(), json!(SPLICED));
    let repaired = repair_tool_calls(&request.messages);
    let input = input(&repaired);
    #[derive(serde::Serialize)]
    struct Tool<'a> {
        r#type: &'static str,
        name: &'a str,
        description: &'a str,
        parameters: &'a Value,
        strict: bool,
    }
    let tools = splice_tools(&mut body, "responses", &request.tools, |t| Tool {
        r#type: "function",
        name: &t.name,
        description: &t.description,
        parameters: &t.parameters,
        strict: false,
    });
    // Bub sends Codex no output limit (its endpoint refuses one).
    if let Some(max) = request.max_tokens.filter(|_| client.config.kind != "codex") {
        body.insert("max_output_tokens".into(), json!(max));
    }
    for key in ["tool_choice", "temperature", "top_p", "parallel_tool_calls", "user"] {
        if let Some(v) = request.options.get(key).filter(|v| !v.is_null()) {
            body.insert(key.into(), v.clone());
        }
    }
    if let Some(effort) = request.options.get("reasoning_effort").filter(|v| !v.is_null()) {
        body.insert("reasoning".into(), json!({"effort": effort}));
    }
    body.insert("stream".into(), json!(true));
    apply_extra_body(client, request, &mut body);
    if client.config.kind == "codex" {
        super::codex::adjust_body(&mut body)?;
    }
    Ok(encode(&body, &[("input", Spliced::Array(&input)), ("tools", Spliced::Text(&tools))]))
}

fn usage(u: &Value) -> Usage {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let (input, output) = (n(&u["input_tokens"]), n(&u["output_tokens"]));
    Usage {
        input_tokens: input,
        output_tokens: output,
        reasoning_tokens: n(&u["output_tokens_details"]["reasoning_tokens"]),
        cached_tokens: n(&u["input_tokens_details"]["cached_tokens"]),
        cache_write_tokens: 0,
        total_tokens: input + output,
    }
}

/// Runs a call.
pub async fn call(
    client: &ModelClient,
    request: &ModelRequest,
    on_delta: &mut (dyn FnMut(Delta) + Send),
) -> Result<ModelResponse, ProviderError> {
    let url = format!("{}/responses", client.config.base_url);
    let mut auth = http::bearer(&client.config);
    if let Some(codex) = &client.config.codex {
        // A ChatGPT login, read (and refreshed) for every call.
        let login = codex.credentials().await?;
        auth =
            vec![("authorization", format!("Bearer {}", login.access_token)), ("ChatGPT-Account-Id", login.account_id)];
        // Republic's defaults: a header the user set wins.
        let unset = |k: &str| !client.config.headers.keys().any(|h| h.eq_ignore_ascii_case(k));
        auth.extend(super::codex::HEADERS.iter().filter(|(k, _)| unset(k)).map(|(k, v)| (*k, (*v).to_owned())));
    }
    let resp = http::post(&client.config, &url, &auth, encoded(client, request)?).await?;
    let mut events = http::events(&client.config, resp);
    let mut out = ModelResponse::default();
    let mut calls = ToolCallFragments::default();
    while let Some(event) = events.next().await {
        let event = event?;
        let Ok(data) = serde_json::from_str::<Value>(&event.data) else { continue };
        let kind = data.get("type").and_then(Value::as_str).unwrap_or(event.event.as_str()).to_owned();
        let text = |k: &str| data.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        match kind.as_str() {
            "response.output_text.delta" => {
                let d = text("delta");
                out.text.push_str(&d);
                on_delta(Delta::Text(d));
            }
            "response.refusal.delta" => {
                let d = text("delta");
                out.refusal.push_str(&d);
                on_delta(Delta::Text(d));
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let d = text("delta");
                out.reasoning.push_str(&d);
                on_delta(Delta::Reasoning(d));
            }
            "response.output_item.added" | "response.output_item.done" => {
                let item = &data["item"];
                let item_type = item["type"].as_str().unwrap_or("");
                let round_trip =
                    item_type == "reasoning" || (item_type.ends_with("_call") && item_type != "function_call");
                if kind.ends_with("done") && round_trip {
                    out.provider_data.push(json!({"api_format": "responses", "payload": item}));
                }
                if item["type"] == "function_call" {
                    let key = item["id"].as_str().or(item["call_id"].as_str()).unwrap_or("0");
                    let arguments = (kind.ends_with("done") && calls_is_empty(&calls, key))
                        .then(|| item["arguments"].as_str())
                        .flatten();
                    calls.add(key, item["call_id"].as_str(), item["name"].as_str(), arguments);
                }
            }
            "response.function_call_arguments.delta" => {
                let key = data["item_id"].as_str().unwrap_or("0");
                calls.add(key, None, None, data["delta"].as_str());
            }
            "response.completed" | "response.incomplete" => {
                let named = |k: &str| data["response"].get(k).and_then(Value::as_str).map(str::to_owned);
                out.meta.id = named("id");
                out.meta.model = named("model");
                // Republic's reading of the response's status.
                out.meta.finish_reason = match named("status").as_deref() {
                    Some("completed") => Some("stop".into()),
                    Some("incomplete") => {
                        let reason = data["response"]["incomplete_details"]["reason"].as_str();
                        Some(super::finish_reason_of(
                            &[("max_output_tokens", "length"), ("content_filter", "content_filter")],
                            reason,
                        ))
                    }
                    _ => None,
                };
                if let Some(u) = data["response"].get("usage").filter(|u| u.is_object()) {
                    out.usage = Some(usage(u));
                }
                out.tool_calls = calls.finish();
                return Ok(out);
            }
            "response.failed" | "error" => {
                let e = data["response"].get("error").or_else(|| data.get("error")).unwrap_or(&data);
                let message =
                    e.get("message").and_then(Value::as_str).map(str::to_owned).unwrap_or_else(|| e.to_string());
                return Err(ProviderError::Response(message));
            }
            _ => {}
        }
    }
    Err(ProviderError::Incomplete)
}

/// Whether no argument fragment arrived for `key` yet (a `done` item then
/// carries the whole arguments).
fn calls_is_empty(calls: &ToolCallFragments, key: &str) -> bool {
    calls.arguments_of(key).is_none_or(str::is_empty)
}
