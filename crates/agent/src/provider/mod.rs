//! The provider path: from a model spec (`openai:gpt-4o`) and a list of
//! messages to a stream of text and a finished response (semantics §A6).
//!
//! Three wire formats, each a small module: OpenAI chat completions
//! ([`chat`], the default for `openai:`, `openrouter:` and every
//! OpenAI-compatible server), the OpenAI Responses API ([`responses`],
//! `api_format: "responses"`) and Anthropic Messages ([`anthropic`]). They
//! share the HTTP layer ([`http`]: Republic's retries and error texts) and
//! the server-sent-event parsing (`bub-sse`: linear and bounded). [`echo`]
//! is an offline model that repeats the user, the default when no model is
//! configured, so that bub-rs runs its whole agent loop without a network.
//!
//! Why no SDK crate: the agent must send Bub's exact bodies (the
//! `extra_body` deep merge, `max_completion_tokens` vs `max_tokens` per
//! provider, unannounced tool calls repaired) and retry as Republic does
//! (`retry-after`, 408/409/429/5xx), over three formats. async-openai types
//! only OpenAI's own API and owns its retry policy; genai hides the body
//! behind its own abstractions. The formats are a few hundred lines of
//! serde_json over reqwest.

pub mod anthropic;
pub mod chat;
pub mod codex;
pub mod decisions;
pub mod echo;
pub mod embeddings;
pub mod http;
pub mod responses;
pub mod settings;

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::message::{JsonArray, Message, Shared};

pub use self::settings::{ModelSettings, ProviderConfig};

/// Token usage of one call (Bub's usage event shape).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Reasoning tokens (part of the output).
    pub reasoning_tokens: u64,
    /// Prompt tokens served from a cache.
    pub cached_tokens: u64,
    /// Prompt tokens written to a cache.
    pub cache_write_tokens: u64,
    /// `input + output`.
    pub total_tokens: u64,
}

impl Usage {
    /// As JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    /// Model-facing name (`fs_read`).
    pub name: String,
    /// Description.
    pub description: String,
    /// JSON schema of the arguments (shared with the tool).
    pub parameters: Arc<Value>,
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallOut {
    /// The call's id (echoed in the tool message).
    pub id: String,
    /// Model-facing tool name.
    pub name: String,
    /// Raw JSON arguments, as the model sent them (`"{}"` when empty).
    pub arguments: String,
    /// Provider extras.
    #[serde(default)]
    pub metadata: Value,
}

impl ToolCallOut {
    /// `{id, name, arguments, metadata}`.
    pub fn to_json(&self) -> Value {
        json!({"id": self.id, "name": self.name, "arguments": self.arguments, "metadata": self.metadata})
    }
}

/// One call to a model.
#[derive(Debug, Clone, Default)]
pub struct ModelRequest {
    /// Messages in Bub's neutral shape: `{role, content}` (content a string
    /// or parts), assistant `tool_calls: [{id, name, arguments}]`, tool
    /// messages `{role: "tool", tool_call_id, name, content}`. Shared with
    /// the session's kept context: each keeps its wire form once encoded.
    pub messages: Vec<Shared>,
    /// Tools offered.
    pub tools: Vec<ToolDef>,
    /// Output token limit.
    pub max_tokens: Option<u64>,
    /// Chat options (completion args, reasoning effort): temperature, top_p,
    /// reasoning_effort, tool_choice, extra_body, ….
    pub options: Map<String, Value>,
}

/// What a finished call produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelResponse {
    /// Text.
    pub text: String,
    /// Refusal text.
    pub refusal: String,
    /// Reasoning text.
    pub reasoning: String,
    /// Tool calls, in the order the model first named them.
    pub tool_calls: Vec<ToolCallOut>,
    /// Usage, if the provider reported it.
    pub usage: Option<Usage>,
    /// Parts the provider needs back verbatim on the next call
    /// (`{"api_format", "payload"}`: Anthropic's thinking blocks and their
    /// order), kept on the tape with the assistant message.
    pub provider_data: Vec<Value>,
    /// What the provider said of its answer (for traces).
    pub meta: ResponseMeta,
}

/// The provider's own names for an answer, when it gave them: its id, the
/// model that answered and why it stopped (what a trace reports as
/// `gen_ai.response.*`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseMeta {
    /// The response id (`chatcmpl-…`).
    pub id: Option<String>,
    /// The model that answered.
    pub model: Option<String>,
    /// Why it stopped (`stop`, `tool_calls`, `length`, …).
    pub finish_reason: Option<String>,
}

/// A provider's finish reason in Republic's words (`table`'s; `other`
/// for one it does not name).
pub(crate) fn finish_reason_of(table: &[(&str, &str)], reason: Option<&str>) -> String {
    let found = table.iter().find(|(raw, _)| Some(*raw) == reason);
    found.map_or("other", |(_, name)| name).to_owned()
}

impl ModelResponse {
    /// Republic's `finish_reason`: the provider's when it is not `stop`;
    /// else `refusal` when the model refused, `tool_calls` when it called
    /// tools (a stream that never said why it stopped included), else the
    /// provider's.
    fn settle_finish_reason(&mut self) {
        let stopped = self.meta.finish_reason.as_deref().is_none_or(|r| r == "stop");
        if stopped && !self.refusal.is_empty() {
            self.meta.finish_reason = Some("refusal".into());
        } else if stopped && !self.tool_calls.is_empty() {
            self.meta.finish_reason = Some("tool_calls".into());
        }
    }
}

/// A live delta of a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Delta {
    /// Text (or refusal) chunk.
    Text(String),
    /// Reasoning chunk.
    Reasoning(String),
}

/// Why a call failed (Republic's error classes).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderError {
    /// HTTP error status after retries.
    #[error("Provider returned HTTP {status}: {body}")]
    Status {
        /// The status code.
        status: u16,
        /// The response body.
        body: String,
    },
    /// The connection failed.
    #[error("Provider connection failed: {0}")]
    Connection(String),
    /// The request or stream timed out.
    #[error("Provider request timed out")]
    Timeout,
    /// The provider reported an error inside a stream.
    #[error("Provider error: {0}")]
    Response(String),
    /// The call went past its deadline (`BUB_MODEL_TIMEOUT_SECONDS`).
    #[error("Provider call did not finish within {0:?}; the limit is BUB_MODEL_TIMEOUT_SECONDS (model_timeout_seconds in config.json, 0 = none)")]
    Deadline(std::time::Duration),
    /// The provider sent more than the call's limits allow.
    #[error("Provider answer too large: {0}")]
    TooLarge(String),
    /// The stream ended without its completion signal.
    #[error("Stream ended without a completion signal")]
    Incomplete,
    /// The model spec or settings are unusable.
    #[error("{0}")]
    Config(String),
    /// An account login is missing, unreadable or could not be refreshed
    /// (Republic's `AuthenticationError`).
    #[error("{0}")]
    Auth(String),
}

/// A configured model: provider, wire format, endpoint and credentials.
#[derive(Debug, Clone)]
pub struct ModelClient {
    /// The spec as configured (`openai:gpt-4o`).
    pub spec: String,
    /// The provider part, lowercased (`openai`).
    pub provider: String,
    /// The model id sent to the provider.
    pub model: String,
    /// Endpoint, credentials and client options.
    pub config: ProviderConfig,
}

/// The wire formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiFormat {
    /// `POST {base}/chat/completions`.
    Chat,
    /// `POST {base}/responses`.
    Responses,
    /// `POST {base}/messages` (Anthropic).
    Messages,
    /// The offline echo model.
    Echo,
}

impl ModelClient {
    /// The wire format: `api_format` if given, else the provider's default.
    pub fn format(&self) -> Result<ApiFormat, ProviderError> {
        if self.config.kind == "codex" && self.config.api_format.as_deref().is_some_and(|f| f != "responses") {
            return Err(ProviderError::Config(format!(
                "model {} is a Codex model, which speaks only the Responses API: remove api_format from client_args",
                self.spec
            )));
        }
        match self.config.api_format.as_deref() {
            Some("chat" | "completion" | "chat_completions") => Ok(ApiFormat::Chat),
            Some("responses") => Ok(ApiFormat::Responses),
            Some("messages" | "anthropic") => Ok(ApiFormat::Messages),
            Some(other) => Err(ProviderError::Config(format!(
                "unknown api_format {other:?} for model {}: use \"chat\", \"responses\" or \"messages\"",
                self.spec
            ))),
            None => Ok(match self.config.kind.as_str() {
                "echo" => ApiFormat::Echo,
                "codex" => ApiFormat::Responses,
                "anthropic" => ApiFormat::Messages,
                _ => ApiFormat::Chat,
            }),
        }
    }

    /// Runs one call whole, as Republic's `ChatModel.chat` does: one JSON
    /// answer in the chat-completions format; the other formats stream and
    /// are gathered.
    pub async fn call_whole(&self, request: &ModelRequest) -> Result<ModelResponse, ProviderError> {
        if self.format()? != ApiFormat::Chat {
            return self.call(request, &mut |_| {}).await;
        }
        self.finish(chat::call_whole(self, request)).await
    }

    /// Runs one call, sending deltas to `on_delta` as they arrive.
    pub async fn call(
        &self,
        request: &ModelRequest,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<ModelResponse, ProviderError> {
        let call = async {
            match self.format()? {
                ApiFormat::Chat => chat::call(self, request, on_delta).await,
                ApiFormat::Responses => responses::call(self, request, on_delta).await,
                ApiFormat::Messages => anthropic::call(self, request, on_delta).await,
                ApiFormat::Echo => Ok(echo::call(request, on_delta)),
            }
        };
        self.finish(call).await
    }

    /// Runs `call` within `model_timeout_seconds` (the whole call,
    /// streaming included), its finish reason in Republic's words.
    async fn finish(
        &self,
        call: impl std::future::Future<Output = Result<ModelResponse, ProviderError>>,
    ) -> Result<ModelResponse, ProviderError> {
        let mut response = match self.config.call_timeout {
            Some(limit) => tokio::time::timeout(limit, call).await.unwrap_or(Err(ProviderError::Deadline(limit))),
            None => call.await,
        }?;
        response.settle_finish_reason();
        Ok(response)
    }
}

/// Deep-merges the provider's `extra_body` (client args) and then the
/// call's own (completion args) into `body`: call values win.
pub(crate) fn apply_extra_body(client: &ModelClient, request: &ModelRequest, body: &mut Map<String, Value>) {
    use bub_runtime::config::deep_merge;
    let mut extra = client.config.extra_body.clone();
    if let Some(Value::Object(call_extra)) = request.options.get("extra_body") {
        deep_merge(&mut extra, call_extra.clone());
    }
    deep_merge(body, extra);
}

/// What a spliced key holds in the body until [`encode`] writes its text
/// (a string no configuration sets, so an `extra_body` value for the key,
/// `null` included, replaces it and is sent as it is).
pub(crate) const SPLICED: &str = "\u{0}bub:spliced";

/// The offered `tools` as the JSON text [`encode`] splices in under
/// `tools` (written from the tools' shared schemas, not copied into the
/// body), each tool in `form`'s shape (`shape`), with the key's
/// placeholder put in `body`; none, no key.
///
/// A session offers the same tools at every step, so the last text of each
/// form is kept and reused while the tools are the same: the same names and
/// descriptions, and the same schemas (the same shared `Arc`s, which the
/// cache holds, so an address is never reused for another schema).
pub(crate) fn splice_tools<'t, T: Serialize>(
    body: &mut Map<String, Value>,
    form: &'static str,
    tools: &'t [ToolDef],
    shape: impl Fn(&'t ToolDef) -> T,
) -> Arc<str> {
    type Kept = Vec<(&'static str, Vec<ToolDef>, Arc<str>)>;
    static KEPT: std::sync::Mutex<Kept> = std::sync::Mutex::new(Vec::new());
    if tools.is_empty() {
        return Arc::from("");
    }
    body.insert("tools".into(), json!(SPLICED));
    let same = |kept: &[ToolDef]| {
        kept.len() == tools.len()
            && kept.iter().zip(tools).all(|(a, b)| {
                a.name == b.name && a.description == b.description && Arc::ptr_eq(&a.parameters, &b.parameters)
            })
    };
    if let Some((_, _, text)) = bub_abi::sync::lock(&KEPT).iter().find(|(f, k, _)| *f == form && same(k)) {
        return text.clone();
    }
    // Written outside the lock: every session of a gateway shares it.
    let shaped: Vec<T> = tools.iter().map(shape).collect();
    let text: Arc<str> = serde_json::to_string(&shaped).expect("tools always serialize").into();
    let mut kept = bub_abi::sync::lock(&KEPT);
    kept.retain(|(f, _, _)| *f != form);
    kept.push((form, tools.to_vec(), text.clone()));
    text
}

/// What [`encode`] writes for a key holding the [`SPLICED`] placeholder.
pub(crate) enum Spliced<'a> {
    /// JSON text, as is (the tools, written from their shared schemas).
    Text(&'a str),
    /// A list written from its parts (the messages, from their kept wire
    /// forms).
    Array(&'a JsonArray<'a>),
}

impl Spliced<'_> {
    fn len(&self) -> usize {
        match self {
            Spliced::Text(t) => t.len(),
            Spliced::Array(a) => a.len(),
        }
    }
}

/// `body` as JSON bytes, with each `(key, spliced)` written for `key` while
/// it holds the [`SPLICED`] placeholder. The buffer is sized first, so the
/// messages are copied once, into it.
pub(crate) fn encode(body: &Map<String, Value>, spliced: &[(&str, Spliced<'_>)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(spliced.iter().map(|(_, s)| s.len()).sum::<usize>() + 512);
    out.push(b'{');
    for (i, (k, v)) in body.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, k).expect("a string always serializes");
        out.push(b':');
        match spliced.iter().find(|(key, _)| key == k).filter(|_| v.as_str() == Some(SPLICED)) {
            Some((_, Spliced::Text(text))) => out.extend_from_slice(text.as_bytes()),
            Some((_, Spliced::Array(array))) => array.write_to(&mut out),
            None => serde_json::to_writer(&mut out, v).expect("a JSON value always serializes"),
        }
    }
    out.push(b'}');
    out
}

/// Accumulates streamed tool-call fragments keyed by index: id and name are
/// the latest non-empty value, arguments concatenate in arrival order.
#[derive(Debug, Default)]
pub(crate) struct ToolCallFragments {
    order: Vec<String>,
    calls: std::collections::HashMap<String, ToolCallOut>,
}

impl ToolCallFragments {
    pub(crate) fn add(&mut self, key: &str, id: Option<&str>, name: Option<&str>, arguments: Option<&str>) {
        let call = self.calls.entry(key.to_owned()).or_insert_with(|| {
            self.order.push(key.to_owned());
            ToolCallOut { id: String::new(), name: String::new(), arguments: String::new(), metadata: json!({}) }
        });
        if let Some(id) = id.filter(|s| !s.is_empty()) {
            call.id = id.to_owned();
        }
        if let Some(name) = name.filter(|s| !s.is_empty()) {
            call.name = name.to_owned();
        }
        if let Some(a) = arguments {
            call.arguments.push_str(a);
        }
    }

    pub(crate) fn arguments_of(&self, key: &str) -> Option<&str> {
        self.calls.get(key).map(|c| c.arguments.as_str())
    }

    pub(crate) fn finish(mut self) -> Vec<ToolCallOut> {
        self.order
            .iter()
            .filter_map(|k| self.calls.remove(k))
            .map(|mut c| {
                if c.arguments.trim().is_empty() {
                    c.arguments = "{}".into();
                }
                c
            })
            .collect()
    }
}

/// A media part's URL as Republic's `data_url`: its remote URL, else its
/// inline data as a data URL.
pub(crate) fn media_url(part: &Map<String, Value>) -> String {
    if let Some(url) = part.get("url").and_then(Value::as_str).filter(|u| !u.is_empty()) {
        return url.to_owned();
    }
    let (mime, data) = inline_media(part);
    format!("data:{mime};base64,{data}")
}

/// A media part's `(media type, base64 data)`: its `data`, or the payload
/// of a data URL (Republic decodes those into data); empty when it has
/// neither.
pub(crate) fn inline_media(part: &Map<String, Value>) -> (String, String) {
    let mime = part.get("media_type").and_then(Value::as_str).unwrap_or_default().to_owned();
    if let Some(data) = part.get("data").and_then(Value::as_str) {
        return (mime, data.to_owned());
    }
    let url = part.get("url").and_then(Value::as_str).unwrap_or_default();
    match url.strip_prefix("data:").and_then(|rest| rest.split_once(',')) {
        Some((header, payload)) => {
            let header_mime = header.strip_suffix(";base64").unwrap_or(header);
            (if mime.is_empty() { header_mime.to_owned() } else { mime }, payload.to_owned())
        }
        None => (mime, String::new()),
    }
}

/// Whether a message content holds anything but text: every wire format
/// sends such content as parts, and text alone as a string, as Republic does.
pub(crate) fn has_media(content: &Value) -> bool {
    content.as_array().is_some_and(|parts| {
        parts.iter().any(|p| !p.is_string() && p.get("type").and_then(Value::as_str) != Some("text"))
    })
}

/// The text of a message's content: a string, or its text parts joined.
pub(crate) fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("text") => {
                    o.get("text").and_then(Value::as_str)
                }
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(""),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The messages with every tool message's call announced: a tool message
/// whose call no earlier assistant message names gets that call added to the
/// preceding assistant message (or a new one); assistant messages with
/// nothing in them are dropped (semantics §A6.4, behaviour 122).
/// The messages themselves, not copied, when nothing needs repair (a long
/// context is then not copied once more per step).
pub(crate) fn repair_tool_calls(messages: &[Shared]) -> std::borrow::Cow<'_, [Shared]> {
    let mut announced = std::collections::HashSet::new();
    let mut sound = true;
    // A plain message (see `Message::plain`) neither calls a tool nor
    // answers one: it is not parsed for this.
    for m in messages.iter().filter(|m| !m.is_plain()) {
        match m.role() {
            "assistant" => {
                let calls = m.get("tool_calls").and_then(Value::as_array).into_iter().flatten();
                announced.extend(calls.filter_map(|c| c.get("id").and_then(Value::as_str)));
            }
            "tool" if !announced.contains(m.get("tool_call_id").and_then(Value::as_str).unwrap_or("")) => {
                sound = false;
                break;
            }
            _ => {}
        }
    }
    if sound {
        std::borrow::Cow::Borrowed(messages)
    } else {
        std::borrow::Cow::Owned(repaired(messages))
    }
}

fn repaired(messages: &[Shared]) -> Vec<Shared> {
    let mut out: Vec<Shared> = Vec::with_capacity(messages.len());
    let mut announced = std::collections::HashSet::new();
    for m in messages {
        let role = m.role();
        if role == "assistant" {
            for c in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                if let Some(id) = c.get("id").and_then(Value::as_str) {
                    announced.insert(id.to_owned());
                }
            }
        }
        if role == "tool" {
            let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("").to_owned();
            if !announced.contains(&id) {
                let call = json!({"id": id, "name": m.get("name").cloned().unwrap_or(json!("")), "arguments": "{}"});
                match out.last_mut() {
                    Some(prev) if prev.role() == "assistant" => {
                        let prev = Arc::make_mut(prev).json_mut();
                        let calls =
                            prev.as_object_mut().expect("message object").entry("tool_calls").or_insert(json!([]));
                        if let Value::Array(a) = calls {
                            a.push(call);
                        }
                    }
                    Some(prev) if prev.role() == "tool" => {
                        // Announce it on the assistant message that opened this run of tool messages.
                        if let Some(a) = out.iter_mut().rev().find(|m| m.role() == "assistant") {
                            let a = Arc::make_mut(a).json_mut();
                            if let Value::Array(calls) =
                                a.as_object_mut().expect("object").entry("tool_calls").or_insert(json!([]))
                            {
                                calls.push(call);
                            }
                        }
                    }
                    _ => out.push(Message::new(json!({"role": "assistant", "content": null, "tool_calls": [call]}))),
                }
                announced.insert(id);
            }
        }
        out.push(m.clone());
    }
    // An empty assistant answer stays (as in Bub): dropping it would put
    // two user turns in a row. Anthropic, which refuses empty
    // content, leaves it out in its own format.
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tools' text is kept per form while the tools are the same, and
    /// written afresh for another name, description or schema.
    #[test]
    fn the_tools_text_is_reused_only_for_the_same_tools() {
        let schema = Arc::new(json!({"type": "object", "properties": {"path": {"type": "string"}}}));
        let tool = |name: &str, description: &str, parameters: &Arc<Value>| ToolDef {
            name: name.into(),
            description: description.into(),
            parameters: parameters.clone(),
        };
        let text = |form: &'static str, tools: &[ToolDef]| {
            let mut body = Map::new();
            let text = splice_tools(
                &mut body,
                form,
                tools,
                |t| json!({"name": t.name, "d": t.description, "p": *t.parameters}),
            );
            assert_eq!(body.get("tools").is_some(), !tools.is_empty());
            text
        };
        // A form name no other test uses: the kept texts are per process.
        let (a, b) = ("test-form-a", "test-form-b");
        let tools = vec![tool("fs_read", "Read a file.", &schema)];
        let first = text(a, &tools);
        assert!(Arc::ptr_eq(&first, &text(a, &tools.clone())), "the same tools were written again");
        let expected = serde_json::to_string(&json!([{"name": "fs_read", "d": "Read a file.", "p": *schema}])).unwrap();
        assert_eq!(&*first, expected);
        let renamed = text(a, &[tool("fs_write", "Read a file.", &schema)]);
        assert!(renamed.contains("fs_write"));
        assert!(text(a, &[tool("fs_read", "Other.", &schema)]).contains("Other."));
        let other_schema = Arc::new(json!({"type": "object"}));
        assert!(!text(a, &[tool("fs_read", "Read a file.", &other_schema)]).contains("path"));
        // Each form keeps its own.
        let in_b = text(b, &tools);
        assert!(!Arc::ptr_eq(&in_b, &text(a, &tools)));
        assert!(Arc::ptr_eq(&in_b, &text(b, &tools)));
        assert_eq!(&*text(a, &[]), "");
    }

    #[test]
    fn fragments_concatenate_arguments_in_order_behaviour_220_221() {
        let mut f = ToolCallFragments::default();
        f.add("0", Some("call_1"), Some("fs_read"), Some("{\"pa"));
        f.add("1", Some("call_2"), Some("bash"), None);
        f.add("0", None, None, Some("th\": \"a.txt\"}"));
        let calls = f.finish();
        assert_eq!(calls[0].arguments, "{\"path\": \"a.txt\"}");
        assert_eq!(calls[1].arguments, "{}");
        assert_eq!(calls[1].name, "bash");
    }

    #[test]
    fn an_unannounced_tool_call_is_announced_behaviour_122() {
        let messages = Message::all([
            json!({"role": "user", "content": "hi"}),
            json!({"role": "tool", "tool_call_id": "c1", "name": "bash", "content": "ok"}),
        ]);
        let fixed = repair_tool_calls(&messages);
        assert_eq!(fixed.len(), 3);
        assert_eq!(fixed[1]["role"], "assistant");
        assert_eq!(fixed[1]["tool_calls"][0]["id"], "c1");
    }

    #[test]
    fn deep_merge_merges_objects_behaviour_219() {
        let mut a = json!({"metadata": {"client": true}}).as_object().unwrap().clone();
        bub_runtime::config::deep_merge(&mut a, json!({"metadata": {"request": true}}).as_object().unwrap().clone());
        assert_eq!(Value::Object(a), json!({"metadata": {"client": true, "request": true}}));
    }
}

/// Media in tool results and prompts, in each wire format, as Republic
/// (Bub 0.6.0a3's provider layer) writes it.
#[cfg(test)]
mod media_tests {
    use serde_json::{json, Value};

    use crate::message::{Message, Shared};

    fn tool_message(content: Value) -> Shared {
        Message::new(json!({"role": "tool", "tool_call_id": "c1", "content": content}))
    }

    fn parts() -> Value {
        json!([{"type": "text", "text": "look"}, {"type": "image", "media_type": "image/png", "url": "https://x/dot.png"},
               {"type": "image", "media_type": "image/png", "data": "iVBO"}])
    }

    /// Responses: a tool result with media is a list of input parts (text
    /// alone stays text).
    #[test]
    fn responses_tool_results_keep_their_images() {
        let items = super::responses::tests_items(&tool_message(parts()));
        assert_eq!(
            items[0]["output"],
            json!([{"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": "https://x/dot.png"},
                   {"type": "input_image", "image_url": "data:image/png;base64,iVBO"}])
        );
        let text = super::responses::tests_items(&tool_message(json!([{"type": "text", "text": "only"}])));
        assert_eq!(text[0]["output"], "only");
    }

    /// Anthropic: a tool result with media is a list of blocks; a remote
    /// image is a URL source, inline data (a data URL too) base64.
    #[test]
    fn anthropic_tool_results_keep_their_images() {
        let mut content = parts();
        content.as_array_mut().unwrap().push(json!({"type": "image", "url": "data:image/jpeg;base64,/9j/"}));
        // (The call is announced first: an assistant message.)
        let messages = super::anthropic::tests_messages(&[tool_message(content)]);
        let result = &messages.last().unwrap()["content"][0];
        assert_eq!(result["type"], "tool_result");
        assert_eq!(
            result["content"],
            json!([{"type": "text", "text": "look"},
                   {"type": "image", "source": {"type": "url", "url": "https://x/dot.png"}},
                   {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
                   {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}}])
        );
    }

    /// Chat completions: an mp3 is `format: "mp3"`, a data-URL audio's data
    /// is its payload, a video with data is a data URL.
    #[test]
    fn chat_audio_and_video_are_republics() {
        let part = super::chat::tests_part;
        assert_eq!(
            part(&json!({"type": "audio", "media_type": "audio/mpeg", "data": "SUQz"})),
            json!({"type": "input_audio", "input_audio": {"data": "SUQz", "format": "mp3"}})
        );
        assert_eq!(
            part(&json!({"type": "audio", "url": "data:audio/wav;base64,UklG"})),
            json!({"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}})
        );
        assert_eq!(
            part(&json!({"type": "video", "media_type": "video/mp4", "data": "AAAA"})),
            json!({"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}})
        );
    }
}
