//! Tools on the agent side (semantics §A3): what a tool is, how its result is
//! rendered for the model, and the executor that runs one model response's
//! calls concurrently through the `ToolCallStarted` / `ToolCallFinished`
//! events (where the plugin interception hooks sit).

use std::{future::Future, pin::Pin, sync::Arc, time::Instant};

use bub_abi::{
    types::{ToolAction, ToolCall, ToolCallDecision, ToolCallResult},
    TurnState,
};
use serde_json::{json, Map, Value};

use super::{
    events::{Event, EventBus, EventContext},
    tape::RunTape,
    AgentError,
};

/// Where a tool may be called from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// The model (and code, in code mode).
    Auto,
    /// The model, also in code mode.
    Direct,
    /// Code mode only.
    Code,
    /// Only as a command (`,name`); never offered to the model.
    Command,
}

impl Exposure {
    /// Parses Bub's names; anything else is an error.
    pub fn parse(s: &str) -> Result<Exposure, String> {
        match s {
            "auto" | "" => Ok(Exposure::Auto),
            "direct" => Ok(Exposure::Direct),
            "code" => Ok(Exposure::Code),
            "command" => Ok(Exposure::Command),
            other => Err(format!("invalid tool exposure {other:?}: use auto, direct, code or command")),
        }
    }
}

/// Who made a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The model: the result is rendered for it (text or content parts).
    Model,
    /// A command (`,name …`): shown by its registry name, result as is.
    Command,
    /// Model-written code (`run_code`): model-facing name, structured
    /// result, and the hooks see `code_mode`.
    Code,
}

/// What a running tool is given.
#[derive(Clone)]
pub struct ToolContext {
    /// The run's tape.
    pub tape: Arc<RunTape>,
    /// The step's run id (`run_command` for commands).
    pub run_id: String,
    /// The turn state.
    pub state: TurnState,
    /// Whether the call is a command.
    pub command: bool,
    /// Whether model-written code made the call (Bub's `context.code_mode`).
    pub code_mode: bool,
    /// The agent's tools.
    pub tools: Arc<Vec<AgentTool>>,
    /// The run's event bus: a tool that calls tools (`run_code`) sends
    /// them through the same interception as the model's.
    pub events: EventBus,
    /// How long one tool call may run.
    pub tool_timeout: Option<std::time::Duration>,
}

impl ToolContext {
    /// Calls `tool` as model-written code does: through `before_tool_call` /
    /// `after_tool_call` with `code_mode` set; the structured value, or the
    /// failure's message.
    pub async fn call_from_code(&self, tool: &AgentTool, arguments: Map<String, Value>) -> Result<Value, String> {
        let cx = EventContext {
            state: self.state.clone(),
            tape: self.tape.clone(),
            tools: self.tools.clone(),
            tool_timeout: self.tool_timeout,
        };
        let call = PlannedCall { id: String::new(), tool: Some(tool.clone()), name: tool.name.clone(), arguments };
        let outcome = run_one(&self.events, &cx, &self.run_id, call, Origin::Code).await.map_err(|e| e.to_string())?;
        match outcome.failed {
            // As Bub's `str(BubError)`: `[kind] message`.
            Some(e) => Err(format!("[{}] {}", e.kind, e.message)),
            None => Ok(outcome.value),
        }
    }
}

/// Bub's `RUN_CODE_TOOL_NAME`.
pub const RUN_CODE: &str = "run_code";

/// Whether a tool is allowed this turn: all, unless the state's
/// `_runtime_allowed_tools` lists names (registry or model-facing).
pub fn allowed_in(state: &TurnState) -> impl Fn(&AgentTool) -> bool {
    let allowed: Option<Vec<String>> = state.get("_runtime_allowed_tools").ok().flatten();
    move |t| allowed.as_ref().is_none_or(|a| a.iter().any(|n| *n == t.name || *n == t.model_name()))
}

/// Bub's `_split_code_mode`: in code mode (state `code_mode` true and
/// `run_code` among `allowed`, see [`allowed_in`]), the tools only code may
/// call (`auto` and `code` ones, `run_code` aside); `None` outside code mode.
pub fn code_tools<'a>(
    tools: &'a [AgentTool],
    state: &TurnState,
    allowed: impl Fn(&AgentTool) -> bool,
) -> Option<Vec<&'a AgentTool>> {
    let on = state.get_value("code_mode").is_some_and(|v| bub_kit::envelope::truthy(&v));
    if !on || !tools.iter().any(|t| t.name == RUN_CODE && allowed(t)) {
        return None;
    }
    Some(
        tools
            .iter()
            .filter(|t| t.name != RUN_CODE && matches!(t.exposure, Exposure::Auto | Exposure::Code) && allowed(t))
            .collect(),
    )
}

/// A boxed tool future.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<Value, AgentError>> + Send>>;

/// How a tool runs.
#[derive(Clone)]
pub enum Handler {
    /// In the host.
    Native(Arc<dyn Fn(Map<String, Value>, ToolContext) -> ToolFuture + Send + Sync>),
    /// A plugin's `Tool` object (`provide_tools`).
    Plugin(bub_runtime::resources::Tool, bool),
}

/// A tool.
#[derive(Clone)]
pub struct AgentTool {
    /// Registry name (`fs.read`).
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON schema of the arguments (an object schema). Shared: a tool is
    /// cloned into every turn's agent and every step's request.
    pub parameters: Arc<Value>,
    /// Where it may be called from.
    pub exposure: Exposure,
    /// Hidden until `tool.describe` loads it.
    pub deferred: bool,
    /// How it runs.
    pub handler: Handler,
    /// Bub's `renderer`: the text the model (or a command's user) reads
    /// for a structured result; code gets the result itself.
    pub renderer: Option<Renderer>,
    /// How its parameters are declared (pydantic's errors depend on it).
    pub declared: super::arguments::Declared,
    /// Its result's Python type, as Bub's function annotates it (the code
    /// mode stub shows it; `None`: `Any`).
    pub returns: Option<&'static str>,
}

/// Turns a tool's structured result into the text shown for it.
pub type Renderer = Arc<dyn Fn(&Value) -> String + Send + Sync>;

impl std::fmt::Debug for AgentTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AgentTool({})", self.name)
    }
}

impl AgentTool {
    /// A host tool.
    pub fn native<F, Fut>(name: &str, description: &str, parameters: Value, exposure: Exposure, f: F) -> AgentTool
    where
        F: Fn(Map<String, Value>, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, AgentError>> + Send + 'static,
    {
        AgentTool {
            name: name.into(),
            description: description.into(),
            parameters: Arc::new(parameters),
            exposure,
            deferred: false,
            handler: Handler::Native(Arc::new(move |args, cx| Box::pin(f(args, cx)))),
            renderer: None,
            declared: Default::default(),
            returns: None,
        }
    }

    /// The tool, its result typed `hint` in the code mode stub (a Python
    /// annotation: `TapeInfoResult`, `dict[str, str]`).
    pub fn returning(mut self, hint: &'static str) -> AgentTool {
        self.returns = Some(hint);
        self
    }

    /// The tool, its parameters declared by a pydantic model in Bub
    /// (`@tool(model=…)`: `tape.search`, `subagent`).
    pub fn declared_by_model(mut self) -> AgentTool {
        self.declared = super::arguments::Declared::Model;
        self
    }

    /// The tool with `renderer` for its results (see [`AgentTool::renderer`]).
    pub fn rendered(mut self, renderer: impl Fn(&Value) -> String + Send + Sync + 'static) -> AgentTool {
        self.renderer = Some(Arc::new(renderer));
        self
    }

    /// A plugin's tool, described by its `spec()`; one that asks for the
    /// call's context (`spec.context`) is called with it.
    pub async fn from_plugin(tool: bub_runtime::resources::Tool) -> Result<AgentTool, AgentError> {
        let spec = tool.spec().await.map_err(|e| AgentError::value(e.to_string()))?;
        let exposure = Exposure::parse(&spec.exposure).map_err(AgentError::value)?;
        let mut parameters = Value::Object(spec.parameters);
        if parameters.as_object().is_some_and(Map::is_empty) {
            parameters = json!({"type": "object", "properties": {}});
        }
        Ok(AgentTool {
            name: spec.name,
            description: spec.description,
            parameters: Arc::new(parameters),
            exposure,
            deferred: false,
            handler: Handler::Plugin(tool, spec.context),
            renderer: None,
            declared: Default::default(),
            returns: None,
        })
    }

    /// The name the model sees: `.` → `_`.
    pub fn model_name(&self) -> String {
        model_name(&self.name)
    }

    /// The parameter names in schema order.
    pub fn parameter_names(&self) -> Vec<String> {
        self.parameters
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether an argument the schema does not name is refused: a host
    /// tool's signature refuses it (`validate_call`); a plugin's tool may be
    /// declared by a model, which ignores extras, so the host leaves those
    /// to it.
    fn refuses_extras(&self) -> bool {
        matches!(self.handler, Handler::Native(_)) && self.declared == super::arguments::Declared::Signature
    }

    /// Runs the handler.
    async fn invoke(&self, args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
        // Checked as pydantic checks Bub's tools' arguments.
        let checked = super::arguments::check(&self.parameters, self.declared, self.refuses_extras(), args);
        // Bub names the tool object it ran: a model's call has the
        // model-facing name (`fs_read`), a command the registry's (`fs.read`).
        let shown = if cx.command { self.name.clone() } else { self.model_name() };
        let args = match checked {
            Ok(args) => args,
            Err(errors) => {
                return Err(AgentError::bub(
                    "invalid_input",
                    format!("Tool '{shown}' argument validation failed."),
                    Some(json!({"errors": errors})),
                ));
            }
        };
        let result = match &self.handler {
            Handler::Native(f) => f(args, cx).await,
            Handler::Plugin(t, wants_context) => {
                // A context tool also gets the live tape and state (ABI 2.2).
                let called = if *wants_context {
                    t.call_in_live(&args, &call_context(&cx), &super::live::objects(&cx.tape, &cx.state)).await
                } else {
                    t.call(&args).await
                };
                called.map_err(|e| AgentError::value(e.error.message.to_string()))
            }
        };
        result.map_err(|e| match e {
            AgentError::Bub { .. } | AgentError::Cancelled => e,
            other => AgentError::bub(
                "tool",
                // Named as above.
                format!("Tool '{shown}' execution failed."),
                Some(json!({"error": other.to_string()})),
            ),
        })
    }
}

/// The longest model-facing tool name: OpenAI's and Anthropic's limit.
pub const MAX_MODEL_NAME: usize = 64;

/// The name a model sees: `.` → `_` (Bub's rule), any other character
/// outside `[A-Za-z0-9_-]` → `_`, and a name over 64 characters cut to 55
/// plus `_` and 8 hex digits of a hash of the whole name — so every
/// provider accepts it, and it is stable and distinct for distinct long
/// names (an MCP server's `mcp_<server>_<tool>` easily runs past 64).
pub fn model_name(name: &str) -> String {
    let clean: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    if clean.len() <= MAX_MODEL_NAME {
        return clean;
    }
    // FNV-1a: stable across runs and builds (unlike the std hasher).
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    format!("{}_{:08x}", &clean[..MAX_MODEL_NAME - 9], hash as u32)
}

/// A content result (`{"type": "tool_content", "content": [...]}`) as a
/// terminal shows it: its text, and one line per media part saying what it
/// is (the model gets the media itself).
pub fn describe_content(value: &Value) -> String {
    let parts = value.get("content").and_then(Value::as_array).into_iter().flatten();
    let lines: Vec<String> = parts
        .map(|p| match p {
            Value::String(s) => s.clone(),
            Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("text") => {
                o.get("text").and_then(Value::as_str).unwrap_or_default().to_owned()
            }
            Value::Object(o) => {
                let kind = o.get("type").and_then(Value::as_str).unwrap_or("media");
                let mime = o.get("media_type").and_then(Value::as_str).unwrap_or("?");
                match o.get("data").and_then(Value::as_str) {
                    Some(data) => format!("[{kind}: {mime}, {} bytes]", data.len() / 4 * 3),
                    None => format!("[{kind}: {mime}, {}]", o.get("url").and_then(Value::as_str).unwrap_or("")),
                }
            }
            other => other.to_string(),
        })
        .collect();
    lines.join("\n")
}

/// A tool's value as the model sees it: strings as they are, content
/// results untouched, anything else as JSON (non-ASCII kept).
pub fn render(value: Value) -> Value {
    match value {
        Value::String(_) => value,
        Value::Object(ref o) if o.get("type").and_then(Value::as_str) == Some("tool_content") => value,
        other => Value::String(bub_kit::python::python_json(&other)),
    }
}

/// One resolved call of a model response.
pub struct PlannedCall {
    /// The provider's call id.
    pub id: String,
    /// The tool (None: unknown name).
    pub tool: Option<AgentTool>,
    /// The model-facing name it was called by.
    pub name: String,
    /// Parsed arguments.
    pub arguments: Map<String, Value>,
}

/// What a call left: the model-facing value and, when no handler replaced
/// it, the failure behind it.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// What the model sees.
    pub value: Value,
    /// The failure, unless an `after` handler assigned a result.
    pub failed: Option<bub_abi::types::ErrorInfo>,
}

/// Runs calls concurrently (at most `limit` at once), results in call order.
pub async fn execute(
    bus: &EventBus,
    cx: &EventContext,
    run_id: &str,
    calls: Vec<PlannedCall>,
    limit: Option<usize>,
    origin: Origin,
) -> Result<Vec<Outcome>, AgentError> {
    let semaphore = limit.map(|n| Arc::new(tokio::sync::Semaphore::new(n)));
    let futures = calls.into_iter().map(|call| {
        let semaphore = semaphore.clone();
        async move {
            let _permit = match &semaphore {
                Some(s) => Some(s.acquire().await.map_err(|_| AgentError::Cancelled)?),
                None => None,
            };
            run_one(bus, cx, run_id, call, origin).await
        }
    });
    futures_util::future::join_all(futures).await.into_iter().collect()
}

/// One call through the events; the model-facing value.
pub async fn run_one(
    bus: &EventBus,
    cx: &EventContext,
    run_id: &str,
    call: PlannedCall,
    origin: Origin,
) -> Result<Outcome, AgentError> {
    // The hooks see what the caller named: the model and code the
    // model-facing name (Bub's code tools are `model_tools`), a command the
    // registry name.
    let display = match origin {
        Origin::Model => call.name.clone(),
        Origin::Code => call.tool.as_ref().map_or(call.name.clone(), |t| t.model_name()),
        Origin::Command => call.tool.as_ref().map_or(call.name.clone(), |t| t.name.clone()),
    };
    let arguments = bub_abi::Value::from(&Value::Object(call.arguments));
    let code_mode = origin == Origin::Code;
    let hook_call = ToolCall { run_id: run_id.to_owned(), tool: display.clone(), arguments, code_mode };
    let mut started = Event::ToolCallStarted { call: hook_call, decision: ToolCallDecision::proceed(None) };
    let _ = cx.state.set("_runtime_tape", cx.tape.name());
    bus.emit(&mut started, cx).await?;
    let Event::ToolCallStarted { call: hook_call, decision } = started else { unreachable!("same event") };
    let started_at = Instant::now();
    let outcome: Result<Value, AgentError> = match decision.action {
        ToolAction::Deny => Err(AgentError::bub(
            "tool",
            decision.message.unwrap_or_else(|| format!("Tool '{display}' call denied by policy hook.")),
            None,
        )),
        ToolAction::Replace => Ok(decision.result.unwrap_or(Value::Null)),
        ToolAction::Proceed => {
            let args: Map<String, Value> = hook_call.arguments.deserialize().unwrap_or_default();
            match &call.tool {
                None => Err(AgentError::bub("tool", format!("Unknown tool name: {}.", call.name), None)),
                Some(tool) => {
                    let tcx = ToolContext {
                        tape: cx.tape.clone(),
                        run_id: run_id.to_owned(),
                        state: cx.state.clone(),
                        command: origin == Origin::Command,
                        code_mode,
                        tools: cx.tools.clone(),
                        events: bus.clone(),
                        tool_timeout: cx.tool_timeout,
                    };
                    let invoked = match cx.tool_timeout {
                        Some(limit) => tokio::time::timeout(limit, tool.invoke(args, tcx)).await.unwrap_or_else(|_| {
                            Err(AgentError::bub(
                                "tool",
                                format!("Tool '{}' timed out after {} seconds.", tool.name, limit.as_secs_f64()),
                                None,
                            ))
                        }),
                        None => tool.invoke(args, tcx).await,
                    };
                    match (invoked, &tool.renderer) {
                        (Ok(v), Some(r)) if origin != Origin::Code => Ok(Value::String(r(&v))),
                        (Ok(v), _) if origin == Origin::Model => Ok(render(v)),
                        (other, _) => other,
                    }
                }
            }
        }
    };
    if matches!(outcome, Err(AgentError::Cancelled)) {
        return Err(AgentError::Cancelled);
    }
    let (value, error) = match outcome {
        Ok(v) => (Some(v), None),
        Err(e) => (None, Some(e.info())),
    };
    let result = ToolCallResult {
        run_id: run_id.to_owned(),
        tool: display,
        arguments: hook_call.arguments.clone(),
        result: value,
        error,
        duration_ms: started_at.elapsed().as_millis() as u64,
    };
    let mut finished = Event::ToolCallFinished { call: hook_call, result };
    bus.emit(&mut finished, cx).await?;
    let Event::ToolCallFinished { result, .. } = finished else { unreachable!("same event") };
    Ok(match (result.result, result.error) {
        (Some(v), _) => Outcome { value: v, failed: None },
        (None, Some(e)) => Outcome { value: error_dict(&e), failed: Some(e) },
        (None, None) => Outcome { value: Value::Null, failed: None },
    })
}

/// Bub's `error.as_dict()`: `{kind, message, details?}`.
pub fn error_dict(e: &bub_abi::types::ErrorInfo) -> Value {
    let mut d = json!({"kind": e.kind, "message": e.message});
    if let Some(details) = &e.details {
        d["details"] = details.clone();
    }
    d
}

/// What a plugin tool declared with `context: true` is told about its call.
fn call_context(cx: &ToolContext) -> bub_abi::types::ToolCallContext {
    let mut state = cx.state.to_map();
    state.retain(|k, _| !k.starts_with("_runtime_"));
    bub_abi::types::ToolCallContext {
        session_id: state.get("session_id").and_then(Value::as_str).map(str::to_owned),
        run_id: cx.run_id.clone(),
        tape: cx.tape.name().to_owned(),
        command: cx.command,
        code_mode: cx.code_mode,
        state,
    }
}

#[cfg(test)]
mod name_tests {
    use super::*;

    /// Names every provider accepts, stable and distinct.
    #[test]
    fn model_names_are_valid_for_every_provider() {
        assert_eq!(model_name("fs.read"), "fs_read");
        assert_eq!(model_name("mcp.my server_get/thing"), "mcp_my_server_get_thing");
        let long_a = format!("mcp.{}_tool_a", "very-long-server-name".repeat(4));
        let long_b = format!("mcp.{}_tool_b", "very-long-server-name".repeat(4));
        let (a, b) = (model_name(&long_a), model_name(&long_b));
        assert_eq!(a.len(), MAX_MODEL_NAME);
        assert_ne!(a, b);
        assert_eq!(a, model_name(&long_a), "stable");
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
    }
}
