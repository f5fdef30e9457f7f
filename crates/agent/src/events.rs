//! Agent events and the event bus (semantics §A2.11).
//!
//! Delivery: handlers in registration order; a handler subscribed to
//! [`Filter::Any`] or [`Filter::Tape`] (Bub's base types `AgentEvent` /
//! `TapeEvent`) receives every matching event; before each handler, a
//! stopped event (`LLMCallStarted` with a decision, `ToolCallStarted` with a
//! decision other than proceed) ends the delivery; a handler's error
//! propagates into the loop. An agent subscribes its tape recorder first,
//! then the plugin hooks, then whatever the embedder adds.

use std::{future::Future, pin::Pin, sync::Arc};

use bub_abi::{
    types::{LlmCallDecision, LlmCallResult, ToolAction, ToolCall, ToolCallDecision, ToolCallResult},
    TurnState,
};
use serde_json::Value;

use super::{message::CallRequest, tape::RunTape, AgentError};

/// Run, step and command outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Finished well.
    Ok,
    /// The step continues into another.
    Continue,
    /// Failed.
    Error,
    /// The step hit the context limit and the run goes on after a handoff.
    AutoHandoff,
    /// The consumer stopped reading.
    Cancelled,
}

impl Status {
    /// Bub's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Continue => "continue",
            Status::Error => "error",
            Status::AutoHandoff => "auto_handoff",
            Status::Cancelled => "cancelled",
        }
    }
}

/// What `ChatFinished` carries: one model step, as the recorder writes it.
#[derive(Debug, Clone, Default)]
pub struct ChatFinished {
    /// The step's run id.
    pub run_id: String,
    /// The model the request named (after rewrites).
    pub model: String,
    /// The system prompt, if any.
    pub system_prompt: Option<String>,
    /// The new user messages (pending + prompt), as recorded.
    pub new_messages: Vec<Value>,
    /// The answer text (None with tool calls and no text).
    pub response_text: Option<String>,
    /// `[{id, name, arguments, metadata}]`.
    pub tool_calls: Vec<Value>,
    /// The model-facing results, in call order.
    pub tool_results: Option<Vec<Value>>,
    /// Usage.
    pub usage: Option<Value>,
    /// The provider part of the model spec.
    pub provider: Option<String>,
    /// `reasoning`, `provider_data` (only non-empty ones).
    pub assistant_fields: serde_json::Map<String, Value>,
    /// An error to record.
    pub error: Option<Value>,
    /// A failure to read the tape context.
    pub context_error: Option<Value>,
}

/// An agent event.
#[derive(Debug, Clone)]
pub enum Event {
    /// A run started.
    RunStarted {
        /// The model spec.
        model: String,
        /// The prompt (user content).
        prompt: Value,
        /// Run metadata.
        metadata: serde_json::Map<String, Value>,
    },
    /// A run ended.
    RunFinished {
        /// ok, error or cancelled.
        status: Status,
        /// Steps started.
        steps: u32,
        /// Duration.
        elapsed_ms: u64,
        /// The failure.
        error: Option<String>,
    },
    /// A step started.
    StepStarted {
        /// From 1.
        step: u32,
        /// The step's user content, if any.
        prompt: Option<Value>,
    },
    /// A step ended.
    StepFinished {
        /// From 1.
        step: u32,
        /// ok, continue, error or auto_handoff.
        status: Status,
        /// Duration.
        elapsed_ms: u64,
        /// The failure.
        error: Option<String>,
        /// The next step's user content (set by `continue_prompt` handlers).
        next_prompt: Option<Vec<Value>>,
        /// The finished step's user content (None on continuation steps
        /// that had none).
        prompt: Option<Vec<Value>>,
        /// The finished step's token usage, as the provider reported it.
        usage: Option<Value>,
    },
    /// A command ran.
    CommandFinished {
        /// The line after the prefix.
        line: String,
        /// The tool that ran.
        name: String,
        /// ok or error.
        status: Status,
        /// Duration.
        elapsed_ms: u64,
        /// The output (or the error text).
        output: String,
    },
    /// A model call is about to start; handlers may rewrite the request or
    /// finish without calling the provider.
    LlmCallStarted {
        /// The request (replaceable; its messages are shared: change one
        /// through `Arc::make_mut` and [`Message::json_mut`](super::message::Message::json_mut)).
        request: CallRequest,
        /// Set to skip the provider.
        decision: Option<LlmCallDecision>,
    },
    /// A model call ended.
    LlmCallFinished {
        /// The request sent.
        request: CallRequest,
        /// What came back.
        result: LlmCallResult,
        /// The provider's id, model and finish reason for it, when given.
        response: super::provider::ResponseMeta,
    },
    /// A tool call is about to run; handlers may rewrite or decide it.
    ToolCallStarted {
        /// The call (replaceable).
        call: ToolCall,
        /// proceed (default), replace or deny.
        decision: ToolCallDecision,
    },
    /// A tool call ended; handlers share (and may change) the result.
    ToolCallFinished {
        /// The call.
        call: ToolCall,
        /// The result.
        result: ToolCallResult,
    },
    /// A model step was answered (the recorder writes it).
    ChatFinished(Box<ChatFinished>),
    /// A step is about to assemble its messages: handlers add pending user
    /// contents (the steering inbox).
    MessagesPending {
        /// User contents to send before the step's prompt.
        messages: Vec<Value>,
    },
}

/// Which events a handler receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// Every event (Bub's `AgentEvent`).
    Any,
    /// Events with a tape (Bub's `TapeEvent`: all but the tool-call events).
    Tape,
    /// One kind, by its name ([`Event::name`]).
    Kind(&'static str),
}

impl Event {
    /// Bub's class name.
    pub fn name(&self) -> &'static str {
        match self {
            Event::RunStarted { .. } => "RunStarted",
            Event::RunFinished { .. } => "RunFinished",
            Event::StepStarted { .. } => "StepStarted",
            Event::StepFinished { .. } => "StepFinished",
            Event::CommandFinished { .. } => "CommandFinished",
            Event::LlmCallStarted { .. } => "LLMCallStarted",
            Event::LlmCallFinished { .. } => "LLMCallFinished",
            Event::ToolCallStarted { .. } => "ToolCallStarted",
            Event::ToolCallFinished { .. } => "ToolCallFinished",
            Event::ChatFinished(_) => "ChatFinished",
            Event::MessagesPending { .. } => "MessagesPending",
        }
    }

    /// Whether delivery has ended.
    pub fn stopped(&self) -> bool {
        match self {
            Event::LlmCallStarted { decision, .. } => decision.is_some(),
            Event::ToolCallStarted { decision, .. } => decision.action != ToolAction::Proceed,
            _ => false,
        }
    }

    fn matches(&self, filter: Filter) -> bool {
        match filter {
            Filter::Any => true,
            Filter::Tape => !matches!(self, Event::ToolCallStarted { .. } | Event::ToolCallFinished { .. }),
            Filter::Kind(name) => self.name() == name,
        }
    }
}

/// What every handler is given besides the event: the run's turn state and
/// tape.
#[derive(Clone)]
pub struct EventContext {
    /// The turn state (the same object everywhere in the run).
    pub state: TurnState,
    /// The run's tape (its fork).
    pub tape: Arc<RunTape>,
    /// The agent's tools (for tools that describe tools).
    pub tools: Arc<Vec<super::tools::AgentTool>>,
    /// How long one tool call may run.
    pub tool_timeout: Option<std::time::Duration>,
}

/// A boxed future of a handler.
pub type HandlerFuture<'a> = Pin<Box<dyn Future<Output = Result<(), AgentError>> + Send + 'a>>;

/// An event handler.
pub type Handler = Arc<dyn for<'a> Fn(&'a mut Event, &'a EventContext) -> HandlerFuture<'a> + Send + Sync>;

/// Handlers in registration order. Cheap to clone (a running tool that
/// calls tools, as code mode does, holds one).
#[derive(Clone, Default)]
pub struct EventBus {
    handlers: Arc<Vec<(Filter, Handler)>>,
}

impl EventBus {
    /// An empty bus.
    pub fn new() -> Self {
        EventBus::default()
    }

    /// Adds a handler after the existing ones.
    pub fn on(&mut self, filter: Filter, handler: Handler) {
        Arc::make_mut(&mut self.handlers).push((filter, handler));
    }

    /// How many handlers there are.
    pub fn len(&self) -> usize {
        self.handlers.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.handlers.is_empty()
    }

    /// Delivers `event` to every matching handler until it is stopped.
    pub async fn emit(&self, event: &mut Event, cx: &EventContext) -> Result<(), AgentError> {
        for (filter, handler) in self.handlers.iter() {
            if event.stopped() {
                break;
            }
            if event.matches(*filter) {
                handler(event, cx).await?;
            }
        }
        Ok(())
    }
}

/// A [`Handler`] from a closure `|event, cx| Box::pin(async move { … })`.
pub fn handler<F>(f: F) -> Handler
where
    F: for<'a> Fn(&'a mut Event, &'a EventContext) -> HandlerFuture<'a> + Send + Sync + 'static,
{
    Arc::new(f)
}

/// A boxed, sendable future of `T`.
pub type HandlerFutureOf<T> = Pin<Box<dyn Future<Output = Result<T, AgentError>> + Send>>;
