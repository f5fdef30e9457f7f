//! OpenAI chat completions (`POST {base}/chat/completions`), streaming
//! (semantics §A6.4, §A6.5): the format every OpenAI-compatible server speaks
//! (vLLM, Ollama, llama.cpp, DeepSeek, OpenRouter, …).

use std::borrow::Cow;

use futures_util::StreamExt;
use serde_json::{json, Map, Value};

use super::{
    apply_extra_body, content_text, encode, http, repair_tool_calls, splice_tools, Delta, ModelClient, ModelRequest,
    ModelResponse, ProviderError, ResponseMeta, Spliced, ToolCallFragments, Usage, SPLICED,
};
use crate::message::{JsonArray, Message, Part, WireForm};

/// Providers whose servers take `max_tokens`, not `max_completion_tokens`.
const MAX_TOKENS_PROVIDERS: &[&str] = &["ollama", "together", "deepseek", "mistral"];
/// Providers that want reasoning replayed as `reasoning_content`.
const REASONING_CONTENT_PROVIDERS: &[&str] = &["deepseek", "moonshot", "zai", "minimax"];
/// Republic's names for chat completions' finish reasons (another is
/// `other`).
const FINISH_REASONS: &[(&str, &str)] = &[
    ("stop", "stop"),
    ("length", "length"),
    ("tool_calls", "tool_calls"),
    ("function_call", "tool_calls"),
    ("content_filter", "content_filter"),
];
/// Options passed through as body keys.
const PASSED: &[&str] = &[
    "tool_choice",
    "temperature",
    "top_p",
    "top_k",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "parallel_tool_calls",
    "stop",
    "response_format",
    "logit_bias",
    "user",
];

/// [`part`] for the wire-format tests of `provider`.
#[cfg(test)]
pub(super) fn tests_part(p: &Value) -> Value {
    part(p)
}

fn part(p: &Value) -> Value {
    match p {
        Value::String(s) => json!({"type": "text", "text": s}),
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("text") => json!({"type": "text", "text": o.get("text").cloned().unwrap_or_default()}),
            Some("image" | "image_url") => {
                let url = o
                    .get("url")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| {
                        o.get("image_url").and_then(|u| u.get("url")).and_then(Value::as_str).map(str::to_owned)
                    })
                    .or_else(|| {
                        let data = o.get("data").and_then(Value::as_str)?;
                        let mime = o.get("media_type").and_then(Value::as_str).unwrap_or("image/png");
                        Some(format!("data:{mime};base64,{data}"))
                    })
                    .unwrap_or_default();
                json!({"type": "image_url", "image_url": {"url": url}})
            }
            Some("audio") => {
                // Republic's chat audio: inline data (a data URL decoded), in
                // one of the formats chat completions names.
                let (mime, data) = super::inline_media(o);
                let format = match mime.as_str() {
                    "audio/wav" | "audio/x-wav" => "wav",
                    "audio/mpeg" => "mp3",
                    other => other.split('/').nth(1).unwrap_or("wav"),
                };
                json!({"type": "input_audio", "input_audio": {"data": data, "format": format}})
            }
            Some("video") => json!({"type": "video_url", "video_url": {"url": super::media_url(o)}}),
            _ => Value::Object(o.clone()),
        },
        other => json!({"type": "text", "text": other.to_string()}),
    }
}

// Borrowed when it is a string already: a big message is written from
// where it is, not copied first.
fn content(c: &Value) -> Cow<'_, Value> {
    Cow::Owned(match c {
        Value::Array(parts) if super::has_media(c) => Value::Array(parts.iter().map(part).collect()),
        Value::Array(_) => Value::String(content_text(c)),
        Value::Null => Value::String(String::new()),
        Value::String(_) => return Cow::Borrowed(c),
        other => Value::String(other.to_string()),
    })
}

/// A message in chat-completions form, borrowing from the neutral one
/// (fields in the order `json!` would give them).
#[derive(serde::Serialize)]
#[serde(untagged)]
enum ChatMessage<'a> {
    Built(Value),
    Tool { role: &'static str, tool_call_id: Cow<'a, Value>, content: Cow<'a, Value> },
    Plain { role: &'a str, content: Cow<'a, Value> },
}

/// One neutral message in chat-completions form.
fn message<'a>(m: &'a Value, kind: &str) -> ChatMessage<'a> {
    let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
    match role {
        "assistant" => {
            let calls: Vec<Value> = m
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| {
                    // Always a JSON string: an old tape may hold `{}` as an
                    // object, which OpenAI rejects (Bub sends "{}").
                    let arguments = match c.get("arguments") {
                        None | Some(Value::Null) => json!("{}"),
                        Some(Value::String(s)) => json!(s),
                        Some(other) => json!(bub_kit::python::python_json(other)),
                    };
                    json!({"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": arguments}})
                })
                .collect();
            let text = content_text(m.get("content").unwrap_or(&Value::Null));
            let mut out = json!({"role": "assistant", "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { Value::String(text) }});
            if !calls.is_empty() {
                out["tool_calls"] = Value::Array(calls);
            }
            if REASONING_CONTENT_PROVIDERS.contains(&kind) {
                if let Some(r) = m.get("reasoning").and_then(Value::as_str) {
                    out["reasoning_content"] = json!(r);
                }
            }
            ChatMessage::Built(out)
        }
        "tool" => ChatMessage::Tool {
            role: "tool",
            tool_call_id: m.get("tool_call_id").map_or(Cow::Owned(Value::Null), Cow::Borrowed),
            content: content(m.get("content").unwrap_or(&Value::Null)),
        },
        _ => ChatMessage::Plain { role, content: content(m.get("content").unwrap_or(&Value::Null)) },
    }
}

/// Writes one message in chat-completions form. A plain stored message
/// (`{"role","content"}`, the content a string) is that form already,
/// whatever its role but `tool`: it is written from its role and content
/// as stored, and its JSON is never parsed. (One whose stored text is
/// exactly that form is not written at all: [`encoded`] borrows the text.)
fn write_message(m: &Message, kind: &str, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    match m.plain() {
        Some(p) => {
            for part in [r#"{"role":"#, p.role_json, r#","content":"#, p.content_json, "}"] {
                out.write_all(part.as_bytes())?;
            }
            Ok(())
        }
        None => serde_json::to_writer(out, &message(m.json(), kind)).map_err(std::io::Error::other),
    }
}

/// The request body (semantics §A6.4).
pub fn body(client: &ModelClient, request: &ModelRequest) -> Value {
    serde_json::from_slice(&encoded(client, request)).expect("the body is JSON")
}

/// The request body as sent: each message's wire form is kept with it
/// (see [`Message::wire`](crate::message::Message::wire)), so a long
/// context is encoded once, not once per step.
pub(crate) fn encoded(client: &ModelClient, request: &ModelRequest) -> Vec<u8> {
    let kind = client.config.kind.as_str();
    let form = if REASONING_CONTENT_PROVIDERS.contains(&kind) { WireForm::ChatWithReasoning } else { WireForm::Chat };
    let repaired = repair_tool_calls(&request.messages);
    let messages = JsonArray::new(repaired.iter().map(|m| match m.exact_text() {
        // Its stored text, borrowed: never copied into a kept wire text.
        Some(text) => Part::Text(Cow::Borrowed(text)),
        None => m.wire_part(form, move |m, out| write_message(m, kind, out)),
    }));
    let mut body = Map::new();
    body.insert("model".into(), json!(client.model));
    body.insert("messages".into(), json!(SPLICED));
    #[derive(serde::Serialize)]
    struct Function<'a> {
        name: &'a str,
        description: &'a str,
        parameters: &'a Value,
    }
    #[derive(serde::Serialize)]
    struct Tool<'a> {
        r#type: &'static str,
        function: Function<'a>,
    }
    let tools = splice_tools(&mut body, "chat", &request.tools, |t| Tool {
        r#type: "function",
        function: Function { name: &t.name, description: &t.description, parameters: &t.parameters },
    });
    if let Some(max) = request.max_tokens {
        let key = if MAX_TOKENS_PROVIDERS.contains(&kind) { "max_tokens" } else { "max_completion_tokens" };
        body.insert(key.into(), json!(max));
    }
    for key in PASSED {
        if let Some(v) = request.options.get(*key).filter(|v| !v.is_null()) {
            body.insert((*key).into(), v.clone());
        }
    }
    if let Some(effort) = request.options.get("reasoning_effort").filter(|v| !v.is_null()) {
        if kind == "openrouter" {
            body.insert("reasoning".into(), json!({"effort": effort}));
        } else {
            body.insert("reasoning_effort".into(), effort.clone());
        }
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    apply_extra_body(client, request, &mut body);
    encode(&body, &[("messages", Spliced::Array(&messages)), ("tools", Spliced::Text(&tools))])
}

fn usage(u: &Value, into: &mut Usage) {
    let n = |v: &Value| v.as_u64();
    if let Some(x) = n(&u["prompt_tokens"]) {
        into.input_tokens = x;
    }
    if let Some(x) = n(&u["completion_tokens"]) {
        into.output_tokens = x;
    }
    if let Some(x) = n(&u["completion_tokens_details"]["reasoning_tokens"]) {
        into.reasoning_tokens = x;
    }
    if let Some(x) = n(&u["prompt_tokens_details"]["cached_tokens"]) {
        into.cached_tokens = x;
    }
    into.total_tokens = into.input_tokens + into.output_tokens;
}

fn error_text(e: &Value) -> String {
    e.get("message").and_then(Value::as_str).map(str::to_owned).unwrap_or_else(|| e.to_string())
}

/// Runs a call.
pub async fn call(
    client: &ModelClient,
    request: &ModelRequest,
    on_delta: &mut (dyn FnMut(Delta) + Send),
) -> Result<ModelResponse, ProviderError> {
    let url = format!("{}/chat/completions", client.config.base_url);
    let resp = http::post(&client.config, &url, &http::bearer(&client.config), encoded(client, request)).await?;
    let mut events = http::events(&client.config, resp);
    let mut out = ModelResponse::default();
    let mut calls = ToolCallFragments::default();
    let mut total = Usage::default();
    let mut saw_usage = false;
    while let Some(event) = events.next().await {
        let event = event?;
        let data = event.data.trim();
        if data.is_empty() {
            continue;
        }
        if data == "[DONE]" {
            out.tool_calls = calls.finish();
            out.usage = saw_usage.then_some(total);
            return Ok(out);
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| ProviderError::Response(format!("malformed stream chunk ({e}): {data}")))?;
        if let Some(e) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(ProviderError::Response(error_text(e)));
        }
        let named = |k: &str| chunk.get(k).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
        if let Some(id) = named("id") {
            out.meta.id = Some(id);
        }
        if let Some(model) = named("model") {
            out.meta.model = Some(model);
        }
        // Choice 0 only, as Republic: other choices of an `n > 1` stream
        // would be interleaved into one garbled answer.
        let first = |c: &&Value| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0;
        for choice in chunk.get("choices").and_then(Value::as_array).into_iter().flatten().filter(first) {
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str).filter(|r| !r.is_empty()) {
                out.meta.finish_reason = Some(super::finish_reason_of(FINISH_REASONS, Some(reason)));
            }
            let delta = &choice["delta"];
            let reasoning = delta.get("reasoning_content").or_else(|| delta.get("reasoning")).and_then(Value::as_str);
            if let Some(r) = reasoning.filter(|r| !r.is_empty()) {
                out.reasoning.push_str(r);
                on_delta(Delta::Reasoning(r.to_owned()));
            }
            if let Some(t) = delta.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                out.text.push_str(t);
                on_delta(Delta::Text(t.to_owned()));
            }
            if let Some(t) = delta.get("refusal").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                out.refusal.push_str(t);
                on_delta(Delta::Text(t.to_owned()));
            }
            for tc in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                let key = tc.get("index").and_then(Value::as_u64).unwrap_or(0).to_string();
                let f = &tc["function"];
                calls.add(&key, tc["id"].as_str(), f["name"].as_str(), f["arguments"].as_str());
            }
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            saw_usage = true;
            usage(u, &mut total);
        }
    }
    Err(ProviderError::Incomplete)
}

/// Runs a call unstreamed, as Republic's `ChatModel.chat` does (no
/// `stream` keys; one JSON answer): what model-written code's
/// `republic.get_model().chat(...)` sends.
pub async fn call_whole(client: &ModelClient, request: &ModelRequest) -> Result<ModelResponse, ProviderError> {
    let mut sent = body(client, request);
    if let Some(keys) = sent.as_object_mut() {
        keys.remove("stream");
        keys.remove("stream_options");
    }
    let answer = http::post_json(client, "/chat/completions", &sent).await?;
    if let Some(e) = answer.get("error").filter(|e| !e.is_null()) {
        return Err(ProviderError::Response(error_text(e)));
    }
    let choice = answer["choices"].get(0).ok_or_else(|| ProviderError::Response(format!("no choices in {answer}")))?;
    let message = &choice["message"];
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    let mut out = ModelResponse {
        text: text(message.get("content")),
        refusal: text(message.get("refusal")),
        reasoning: text(message.get("reasoning_content").or_else(|| message.get("reasoning"))),
        ..ModelResponse::default()
    };
    let named = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
    out.meta = ResponseMeta {
        id: named(&answer, "id"),
        model: named(&answer, "model"),
        finish_reason: named(choice, "finish_reason").map(|r| super::finish_reason_of(FINISH_REASONS, Some(&r))),
    };
    if let Some(u) = answer.get("usage").filter(|u| u.is_object()) {
        let mut total = Usage::default();
        usage(u, &mut total);
        out.usage = Some(total);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use crate::provider::{settings::ModelSettings, ToolDef};

    fn client(spec: &str, client_args: Value) -> ModelClient {
        let mut file = Map::new();
        file.insert("client_args".into(), client_args);
        ModelSettings::from_sources(vec![], &file).unwrap().client(spec).unwrap()
    }

    /// A tape payload as its store answers it: still its text.
    fn stored(payload: &str) -> bub_abi::Value {
        let line = bub_abi::Value::from_json_shallow(&format!(r#"{{"id":1,"kind":"message","payload":{payload}}}"#));
        let payload = line.unwrap().as_ref().get("payload").unwrap().to_owned();
        assert!(payload.as_ref().lazy_json().is_some(), "{payload:?} is kept as text");
        payload
    }

    /// A plain stored message is sent as its
    /// stored text and parsed only when something reads it; everything
    /// else goes the parsed way, and the body reads the same either way.
    #[test]
    fn a_plain_stored_message_is_sent_as_its_text_and_parsed_only_when_read_behaviour_117_122() {
        let c = client("openai:m", json!({"api_format": "chat"}));
        let exact = r#"{"role":"user","content":"hi \u00e9 \"q\""}"#;
        let reordered = r#"{ "content": "answer", "role": "assistant" }"#;
        let other = r#"{"role":"developer","content":""}"#;
        let escaped = r#"{"role":"us\u0065r","content":"e"}"#;
        let plain = [exact, reordered, other, escaped];
        let messages: Vec<_> = plain.iter().map(|p| Message::stored(&stored(p)).expect("plain")).collect();
        assert_eq!(messages[0].plain().unwrap().exact, Some(exact));
        assert_eq!(messages[1].plain().unwrap().exact, None);
        let exact_texts: Vec<_> = messages.iter().map(|m| m.exact_text()).collect();
        assert_eq!(exact_texts, messages.iter().map(|m| m.plain().unwrap().exact).collect::<Vec<_>>());
        assert_eq!(messages.iter().map(|m| m.role()).collect::<Vec<_>>(), ["user", "assistant", "developer", "user"]);
        assert_eq!(messages[3].plain().unwrap().role_json, r#""us\u0065r""#);

        // Not plain: a tool message, another key, content that is not a
        // string, a missing or repeated key, a role that is not a string.
        for p in [
            r#"{"role":"tool","content":"x"}"#,
            r#"{"role":"user","content":"x","name":"n"}"#,
            r#"{"role":"user","content":[{"type":"text","text":"x"}]}"#,
            r#"{"role":"assistant","content":null}"#,
            r#"{"role":"user"}"#,
            r#"{"role":"user","content":"a","content":"b"}"#,
            r#"{"role":1,"content":"x"}"#,
        ] {
            assert!(Message::stored(&stored(p)).is_none(), "{p}");
        }
        // Parsed the same way, the same messages make the same body.
        let parsed: Vec<_> = plain.iter().map(|p| Message::new(serde_json::from_str(p).unwrap())).collect();
        let body_of = |messages: Vec<_>| body(&c, &ModelRequest { messages, ..Default::default() });
        let sent =
            String::from_utf8(encoded(&c, &ModelRequest { messages: messages.clone(), ..Default::default() })).unwrap();
        assert!(sent.contains(&format!(r#""messages":[{exact},{{"role":"assistant","content":"answer"}},"#)), "{sent}");
        assert_eq!(body_of(messages.clone()), body_of(parsed.clone()));
        // Sending never parsed them.
        assert!(messages.iter().all(|m| !m.is_parsed()));
        // Read: the same JSON as a full parse; changed: no longer plain.
        assert_eq!(messages, parsed);
        let mut changed = messages[0].clone();
        std::sync::Arc::make_mut(&mut changed).json_mut()["content"] = json!("new");
        assert!(changed.plain().is_none() && messages[0].plain().is_some());
        let sent =
            String::from_utf8(encoded(&c, &ModelRequest { messages: vec![changed], ..Default::default() })).unwrap();
        assert!(sent.contains(r#""messages":[{"role":"user","content":"new"}]"#), "{sent}");
    }

    /// Tool-call arguments replayed from an old tape as an
    /// object go out as the JSON string OpenAI expects.
    #[test]
    fn replayed_object_arguments_are_sent_as_json_text() {
        let c = client("openai:m", json!({}));
        let req = ModelRequest {
            messages: Message::all([
                json!({"role": "user", "content": "hi"}),
                json!({"role": "assistant", "content": "", "tool_calls": [
                    {"id": "a", "name": "tape_info", "arguments": {}},
                    {"id": "b", "name": "fs_read", "arguments": {"path": "x"}},
                ]}),
            ]),
            ..Default::default()
        };
        let b = body(&c, &req);
        let calls = &b["messages"][1]["tool_calls"];
        assert_eq!(calls[0]["function"]["arguments"], "{}");
        assert_eq!(calls[1]["function"]["arguments"], r#"{"path": "x"}"#);
    }

    #[test]
    fn body_has_bubs_keys_behaviour_217() {
        let c = client("openai:m", json!({}));
        let req = ModelRequest {
            messages: Message::all([json!({"role": "user", "content": "hi"})]),
            max_tokens: Some(16384),
            ..Default::default()
        };
        let b = body(&c, &req);
        assert_eq!(b["model"], "m");
        assert_eq!(b["max_completion_tokens"], 16384);
        assert_eq!(b["stream"], true);
        assert_eq!(b["stream_options"], json!({"include_usage": true}));
        assert!(b.get("tools").is_none());
        let req = ModelRequest {
            tools: vec![ToolDef { name: "fs_read".into(), description: "d".into(), parameters: json!({}).into() }],
            max_tokens: Some(42),
            ..req
        };
        assert_eq!(body(&c, &req)["tools"][0]["function"]["name"], "fs_read");
        assert_eq!(body(&client("ollama:m", json!({})), &req)["max_tokens"], 42);
    }

    #[test]
    fn reasoning_effort_per_provider_behaviour_218() {
        let mut options = Map::new();
        options.insert("reasoning_effort".into(), json!("high"));
        let req = ModelRequest { options, ..Default::default() };
        assert_eq!(body(&client("openai:m", json!({})), &req)["reasoning_effort"], "high");
        let openrouter = body(&client("openrouter:openrouter/auto", json!({})), &req);
        assert_eq!(openrouter["reasoning"], json!({"effort": "high"}));
        assert_eq!(openrouter["model"], "openrouter/auto");
        assert!(openrouter.get("reasoning_effort").is_none());
        let c = client("openrouter:x", json!({}));
        assert_eq!(c.config.base_url, "https://openrouter.ai/api/v1");
    }

    /// The messages and tools are spliced into the body as text; an
    /// `extra_body` value for either key (`null` too) is sent instead.
    #[test]
    fn spliced_keys_give_way_to_extra_body_behaviour_219() {
        let tools = vec![ToolDef {
            name: "fs_read".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}).into(),
        }];
        let req = ModelRequest {
            messages: Message::all([json!({"role": "user", "content": "hi"})]),
            tools,
            ..Default::default()
        };
        let plain = body(&client("openai:m", json!({})), &req);
        assert_eq!(plain["messages"], json!([{"role": "user", "content": "hi"}]));
        assert_eq!(
            plain["tools"],
            json!([{"type": "function", "function": {"name": "fs_read", "description": "d", "parameters": {"type": "object"}}}])
        );
        let extra = body(
            &client("openai:m", json!({"extra_body": {"tools": null, "messages": [{"role": "user", "content": "x"}]}})),
            &req,
        );
        assert_eq!(extra["tools"], Value::Null);
        assert_eq!(extra["messages"], json!([{"role": "user", "content": "x"}]));
    }

    #[test]
    fn extra_body_merges_deeply_behaviour_219() {
        let c = client("openai:m", json!({"extra_body": {"metadata": {"client": true}}}));
        let mut options = Map::new();
        options.insert("extra_body".into(), json!({"metadata": {"request": true}}));
        let b = body(&c, &ModelRequest { options, ..Default::default() });
        assert_eq!(b["metadata"], json!({"client": true, "request": true}));
    }
}
