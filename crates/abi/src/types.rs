//! Typed payloads of Bub's hooks (serde structs over host values).
//!
//! Names and fields follow Bub (`bub.core.events`, `bub.types`), so a JSON
//! payload written by a Python tool reads the same here. A plugin declaring
//! a parameter of one of these types reads the fields it names; fields of
//! type [`HostValue`] (tool arguments) are handles to the host's value, so a
//! 100 KB argument is neither copied in nor copied out.

use serde::{Deserialize, Serialize};
pub use serde_json::{Map, Value};

/// A host-owned value (see [`crate::value`]); named so here to tell it from
/// serde_json's `Value`.
pub use crate::value::Value as HostValue;

fn empty_map() -> HostValue {
    HostValue::object()
}

/// Any message value (Bub's `Envelope`): usually a JSON object with
/// `content`, `channel`, `chat_id`, `session_id`, ….
pub type Envelope = Value;

/// A JSON object: turn-state fragments, config dicts.
pub type StateMap = Map<String, Value>;

/// A prompt: a string (legacy text), or a list of content parts
/// (strings and `{type, media_type, url|data}` blocks).
pub type Prompt = Value;

/// What `render_outbound` returns: a list of envelopes or a single envelope.
pub type Outbound = Value;

/// An error as seen by `on_error` observers and in results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ErrorInfo {
    /// Error class or kind (`RuntimeError`, `TypeError`, `provider`, `tool`, …).
    pub kind: String,
    /// The message.
    pub message: String,
    /// Extra structured detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl std::fmt::Display for ErrorInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

/// The tape passed to `continue_prompt` (by name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TapeInfo {
    /// The tape's name.
    pub name: String,
}

/// A stream's state (`StreamState`): its error and usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct StreamState {
    /// The error the stream ended with, if any.
    #[serde(default)]
    pub error: Option<ErrorInfo>,
    /// Token usage reported by the provider.
    #[serde(default)]
    pub usage: Option<Value>,
}

/// One event of a model stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamEvent {
    /// `text`, `reasoning`, `tool_call`, `tool_result`, `usage`, `error`, `final`.
    pub kind: String,
    /// The event's data (`{"delta": …}` for text).
    #[serde(default)]
    pub data: Value,
}

/// One model choice offered by `provide_model_options`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ModelChoice {
    /// `provider:model`.
    pub id: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// Model choices (`ModelOptions`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ModelOptions {
    /// Offered models.
    #[serde(default)]
    pub models: Vec<ModelChoice>,
    /// The current model, if the provider knows it.
    #[serde(default)]
    pub current_model: Option<String>,
}

/// How a message is scheduled while a turn runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdmitAction {
    /// Run now, concurrently.
    Process,
    /// Discard.
    Drop,
    /// Queue after the running turn.
    FollowUp,
    /// Inject into the running turn through the steering inbox.
    Steer,
}

/// `AdmitDecision`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdmitDecision {
    /// The action.
    pub action: AdmitAction,
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `TurnSnapshot`: what is running in a session when a message arrives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TurnSnapshot {
    /// The session.
    pub session_id: String,
    /// Whether a turn is running.
    pub is_running: bool,
    /// Running turns.
    pub running_count: u32,
    /// Queued messages.
    pub pending_count: u32,
    /// Messages in the steering inbox.
    #[serde(default)]
    pub steering_count: u32,
}

/// What kind of channel an object is, and how the gateway treats it
/// (Bub's `Channel` subclasses and properties). Every field has Bub's
/// default, so a channel without an `info` method is a plain, enabled,
/// undebounced channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChannelInfo {
    /// `channel` (plain), `interface` (enabled only when named, like `cli`)
    /// or `lifecycle` (enabled with any plain channel unless excluded).
    pub role: ChannelRole,
    /// Whether the channel is usable at all (e.g. it has its token).
    pub enabled: bool,
    /// Whether inbound messages are debounced and batched per session.
    pub needs_debounce: bool,
}

impl Default for ChannelInfo {
    fn default() -> Self {
        ChannelInfo { role: ChannelRole::Channel, enabled: true, needs_debounce: false }
    }
}

/// [`ChannelInfo::role`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ChannelRole {
    /// A plain channel: enabled by `all` or by name.
    #[default]
    Channel,
    /// Enabled only when named explicitly (`cli`).
    Interface,
    /// Started alongside any plain channel unless excluded with `!name`.
    Lifecycle,
}

/// What became of a message handed to the host with
/// `MessageHandler::submit`: the answer a request/response channel (HTTP)
/// sends back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Delivery {
    /// `processed`, `failed`, `dropped` (admission), `steered` (folded into
    /// the session's running turn, which answers it), `ignored` (unknown
    /// channel, inactive message), or `cancelled` (the gateway stopped).
    pub status: String,
    /// The resolved session, when known.
    #[serde(default)]
    pub session_id: Option<String>,
    /// The turn's model output (`processed`).
    #[serde(default)]
    pub model_output: Option<String>,
    /// The turn's rendered outbounds (`processed`).
    #[serde(default)]
    pub outbounds: Vec<Envelope>,
    /// Why (`failed`, `dropped`, `ignored`, `cancelled`).
    #[serde(default)]
    pub error: Option<String>,
}

/// `LLMCallRequest`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct LlmCallRequest {
    /// Run id (`run-YYYYMMDDTHHMMSSffffffZ`).
    pub run_id: String,
    /// `provider:model`.
    pub model: String,
    /// Chat messages.
    #[serde(default)]
    pub messages: Vec<Value>,
    /// Tools offered (observational).
    #[serde(default)]
    pub tool_names: Vec<String>,
    /// Output token limit.
    #[serde(default)]
    pub max_tokens: Option<u64>,
}

/// `LLMCallDecision`: finish without calling the provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmCallDecision {
    /// Always `finish`.
    pub action: String,
    /// The text to answer with.
    #[serde(default)]
    pub text: String,
}

impl LlmCallDecision {
    /// `LLMCallDecision.finish(text)`.
    pub fn finish(text: impl Into<String>) -> Self {
        LlmCallDecision { action: "finish".into(), text: text.into() }
    }
}

/// What `before_llm_call` may return: a rewritten request or a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BeforeLlmCall {
    /// Replace the request (later implementations see it).
    Request(LlmCallRequest),
    /// Stop the chain and skip the provider.
    Decision(LlmCallDecision),
}

/// `LLMCallResult`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct LlmCallResult {
    /// Run id.
    pub run_id: String,
    /// The answer text (None if empty).
    #[serde(default)]
    pub text: Option<String>,
    /// Tool calls requested by the model.
    #[serde(default)]
    pub tool_calls: Vec<Value>,
    /// Usage.
    #[serde(default)]
    pub usage: Option<Value>,
    /// The error the call failed with.
    #[serde(default)]
    pub error: Option<ErrorInfo>,
    /// Duration.
    #[serde(default)]
    pub duration_ms: u64,
}

/// `ToolCall`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Run id.
    pub run_id: String,
    /// Tool name.
    pub tool: String,
    /// Arguments: a map, as a handle to the host's value (read what you
    /// need; `arguments.as_ref().with(k, v)` derives new arguments without
    /// copying the rest).
    #[serde(default = "empty_map")]
    pub arguments: HostValue,
    /// Whether model-written code made the call (`run_code`; Bub's
    /// `call.context.code_mode`). Since ABI 2.2.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub code_mode: bool,
}

impl Default for ToolCall {
    fn default() -> Self {
        ToolCall { run_id: String::new(), tool: String::new(), arguments: empty_map(), code_mode: false }
    }
}

/// `ToolCallDecision.action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ToolAction {
    /// Continue (maybe with new arguments).
    #[default]
    Proceed,
    /// Skip the handler and use `result`.
    Replace,
    /// Skip the handler and fail with `message`.
    Deny,
}

/// `ToolCallDecision`. Absent fields are left out when it is built (every
/// reader treats a missing field as `None`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ToolCallDecision {
    /// The action.
    #[serde(default)]
    pub action: ToolAction,
    /// New arguments (proceed): a map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<HostValue>,
    /// The replacement result (replace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The denial message (deny).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl ToolCallDecision {
    /// `ToolCallDecision.proceed(arguments)`: new arguments (a map), or
    /// `None` to keep them.
    pub fn proceed(arguments: Option<HostValue>) -> Self {
        ToolCallDecision { action: ToolAction::Proceed, arguments, ..Default::default() }
    }

    /// `ToolCallDecision.replace(result)`.
    pub fn replace(result: Value) -> Self {
        ToolCallDecision { action: ToolAction::Replace, result: Some(result), ..Default::default() }
    }

    /// `ToolCallDecision.deny(message)`.
    pub fn deny(message: impl Into<String>) -> Self {
        ToolCallDecision { action: ToolAction::Deny, message: Some(message.into()), ..Default::default() }
    }
}

/// `ToolCallResult` (shared by all `after_tool_call` implementations).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ToolCallResult {
    /// Run id.
    pub run_id: String,
    /// Tool name.
    pub tool: String,
    /// The arguments the tool ran with (a map).
    #[serde(default = "empty_map")]
    pub arguments: HostValue,
    /// The result passed on to the model.
    #[serde(default)]
    pub result: Option<Value>,
    /// The original failure, if any.
    #[serde(default)]
    pub error: Option<ErrorInfo>,
    /// Duration.
    #[serde(default)]
    pub duration_ms: u64,
}

/// `TapeEntry`: one record of a tape. The store assigns `id` (1-based, per tape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TapeEntry {
    /// Position in the tape, from 1; `0` until the store assigns it.
    #[serde(default)]
    pub id: u64,
    /// `message`, `system`, `anchor`, `tool_call`, `tool_result`, `error` or `event`.
    pub kind: String,
    /// The entry's content.
    #[serde(default)]
    pub payload: Map<String, Value>,
    /// Metadata (`context: false` keeps an entry out of the model's context).
    #[serde(default)]
    pub meta: Map<String, Value>,
    /// ISO-8601 UTC time the entry was made.
    #[serde(default)]
    pub date: String,
}

/// One entry a search across tapes found, and its tape
/// ([`TapeStore::search_tapes`](crate::resources::TapeStore::search_tapes),
/// since ABI 2.8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TapeMatch {
    /// The tape the entry is on.
    pub tape: String,
    /// The entry.
    pub entry: TapeEntry,
}

/// `TapeQuery`: what `fetch_all` returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TapeQuery {
    /// The tape.
    pub tape: String,
    /// Only entries containing this text (case-insensitive; Bub's stores
    /// then answer newest first, one entry per distinct payload).
    #[serde(default)]
    pub query: Option<String>,
    /// Only entries after the anchor of this name.
    #[serde(default)]
    pub after_anchor: Option<String>,
    /// Only entries after the last anchor.
    #[serde(default)]
    pub last_anchor: bool,
    /// Only entries between the last anchor named `.0` and the next anchor
    /// named `.1` (both must exist; it wins over the two fields above).
    /// Since ABI 2.2: stores built with an older SDK ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub between_anchors: Option<(String, String)>,
    /// Only entries dated from `.0` to `.1` inclusive: ISO dates (a whole
    /// day) or datetimes (UTC when they name no offset). Since ABI 2.2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub between_dates: Option<(String, String)>,
    /// Only these kinds (all when empty).
    #[serde(default)]
    pub kinds: Vec<String>,
    /// At most this many entries: the first ones (chronologically, or the
    /// newest of a text query).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Only entries whose id is above this one, applied before everything
    /// else (the anchor fields then look among those entries only). The
    /// agent reads what was appended since its last step with it. Since ABI
    /// 2.5: a store built with an older SDK ignores it and answers as if it
    /// were unset, and the host drops the older entries itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_id: Option<u64>,
}

/// A process to run in an [`Environment`](crate::resources::Environment).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ProcessRequest {
    /// A shell command line (run by `sh -c`) …
    #[serde(default)]
    pub command: Option<String>,
    /// … or an argv, run directly.
    #[serde(default)]
    pub argv: Vec<String>,
    /// Working directory, relative to the workspace.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: Map<String, Value>,
    /// Kill the process group after this many milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// Bytes crossing the boundary (a file's contents, a process's output):
/// base64 text in the value, raw bytes here.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bytes(pub Vec<u8>);

impl Serialize for Bytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use base64::Engine;
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use base64::Engine;
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD.decode(text).map(Bytes).map_err(serde::de::Error::custom)
    }
}

/// What a finished process left.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ProcessOutput {
    /// Exit code; `None` when killed by a signal.
    pub returncode: Option<i32>,
    /// Standard output (lossy UTF-8).
    pub stdout: String,
    /// Standard error (lossy UTF-8).
    pub stderr: String,
    /// Whether the timeout killed it.
    #[serde(default)]
    pub timed_out: bool,
}

/// How a tool presents itself to the model (`Tool` minus the handler).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ToolSpec {
    /// Unique name (`.` becomes `_` in model-facing names).
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// JSON schema of the arguments.
    #[serde(default)]
    pub parameters: Map<String, Value>,
    /// `auto`, `direct`, `code` or `command` (never offered to the model).
    #[serde(default = "default_exposure")]
    pub exposure: String,
    /// Call it with the call's context (`Tool::call_in`), as Bub's tools
    /// declared with `context=True` get their `ToolContext`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub context: bool,
}

/// What a tool declared with `context: true` learns about its call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ToolCallContext {
    /// The turn's session, when it has one.
    #[serde(default)]
    pub session_id: Option<String>,
    /// The step's run id (`run_command` for a command).
    #[serde(default)]
    pub run_id: String,
    /// The run's tape.
    #[serde(default)]
    pub tape: String,
    /// Whether the call is a command (`,name …`), not the model's.
    #[serde(default)]
    pub command: bool,
    /// Whether model-written code made the call (`run_code`). Since ABI 2.2.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub code_mode: bool,
    /// The turn state, without the host's `_runtime_*` handles (a copy;
    /// [`live_state`](Self::live_state) is the live one).
    #[serde(default)]
    pub state: Map<String, Value>,
}

impl ToolCallContext {
    /// The run's tape, live (ABI 2.2; call it inside `call_in`): an
    /// [`Object`](crate::Object) of kind `tape` with the methods `append`
    /// `{kind, payload, meta?}`, `event` `{name, data, meta?}`, `handoff`
    /// `{name, state?}`, `anchors` `{}`, `entries` `{}` and `append_to`
    /// `{tape, kind, payload, meta?}` (a sidecar). `None` on an older host.
    pub fn live_tape(&self) -> Option<crate::Object> {
        crate::sdk::object::live_argument(&["context", "live_tape"])
    }

    /// The live turn state (ABI 2.2; inside `call_in`): an object of kind
    /// `state` with `get {key}`, `set {key, value}`, `remove {key}` and
    /// `keys {}`; what it sets, every later hook and tool of the turn sees.
    pub fn live_state(&self) -> Option<crate::Object> {
        crate::sdk::object::live_argument(&["context", "live_state"])
    }
}

fn default_exposure() -> String {
    "auto".into()
}

/// A subcommand a plugin adds to `bub` (`register_cli_commands`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct CommandSpec {
    /// The subcommand's name.
    pub name: String,
    /// One-line help.
    #[serde(default)]
    pub about: String,
    /// Its arguments, in order.
    #[serde(default)]
    pub args: Vec<CommandArg>,
    /// The builtin command group it joins (ABI 2.9): `"login"` makes it
    /// `bub login <name>`, as Bub's plugins attach commands to its `login`
    /// group. None: a top-level `bub <name>`. Older hosts ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// One argument of a [`CommandSpec`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct CommandArg {
    /// Name; the key of the parsed value.
    pub name: String,
    /// Help text.
    #[serde(default)]
    pub help: String,
    /// `--name VALUE` when true, a positional otherwise.
    #[serde(default)]
    pub option: bool,
    /// `--name` without a value (a boolean); implies `option`.
    #[serde(default)]
    pub flag: bool,
    /// Must be given.
    #[serde(default)]
    pub required: bool,
    /// Value when not given.
    #[serde(default)]
    pub default: Option<String>,
    /// Takes every remaining word of the command line, options and `--help`
    /// included, as a list (ABI 2.3): for commands that parse their own
    /// arguments, such as a Python plugin's Typer app. Older hosts ignore
    /// it and pass one word.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trailing: bool,
}

/// Which tape entries an agent's context starts from (`TapeContext`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TapeContextSpec {
    /// `"$last"` (the last anchor, Bub's default), `null` (the whole tape) or an anchor name.
    pub anchor: Option<String>,
}

impl Default for TapeContextSpec {
    fn default() -> Self {
        TapeContextSpec { anchor: Some(TapeContextSpec::LAST_ANCHOR.into()) }
    }
}

impl TapeContextSpec {
    /// The anchor value meaning "the last anchor of the tape".
    pub const LAST_ANCHOR: &'static str = "$last";
}
