//! # bub-agent — Bub's agent as a library
//!
//! Bub's loop of model calls and tool calls over a tape. It knows nothing
//! of turns, hooks or channels: the framework attaches those
//! (`bub_framework::AgentPlugins`), so the loop can be tested and embedded
//! on its own.
//!
//! - [`events`] — the event types and the bus every observer hangs on;
//! - [`run`] — [`Agent::start`]: runs, steps, the stream a consumer reads;
//! - [`tools`] — tools, result rendering, the concurrent executor;
//! - [`command`] — command mode (`,bash ls`, `,fs.read path=a.txt`);
//! - [`tape`] — the run's fork of the session tape, merged when it ends;
//! - [`context`] — tape entries to model messages;
//! - [`budget`], [`fold`] — the context budget, and folding what passes it
//!   into a summary;
//! - [`message`] — those messages, shared by the steps of a session;
//! - [`recorder`] — events to tape entries (subscribed first);
//! - [`provider`] — model specs, settings and the three wire formats.
//!
//! An embedder builds an [`Agent`], attaches a framework's plugins to it
//! with `bub_framework::AgentPlugins::attach`, and reads [`RunStream`]s; the builtin
//! plugin does exactly that for every turn (with its own tools: tape, spill,
//! subagent, …; see the `bub-builtin` crate). The user's guide is
//! `docs/agent.md`.
//!
//! ```no_run
//! use std::sync::Arc;
//! use bub_agent::{events::{handler, Event, Filter}, Agent, ModelSettings, RunOptions, Store};
//!
//! # async fn demo(settings: ModelSettings) -> Result<(), Box<dyn std::error::Error>> {
//! let mut agent = Agent::new(settings, Store::memory()); // the tape recorder is subscribed first
//! agent.events.on(Filter::Kind("ToolCallFinished"), handler(|event, _cx| {
//!     if let Event::ToolCallFinished { call, .. } = event {
//!         println!("ran {}", call.tool);
//!     }
//!     Box::pin(async { Ok(()) })
//! }));
//! let agent = Arc::new(agent);
//! let options = RunOptions { tape: "my-tape".into(), merge_back: true, ..Default::default() };
//! let mut stream = agent.start(vec!["list the files".into()], options).await?;
//! while let Some(event) = stream.next().await {
//!     println!("{:?}", event?);
//! }
//! # Ok(()) }
//! ```

#![warn(missing_docs)]
// No unsafe code above the runtime: the loader and the ABI hold it all.
#![forbid(unsafe_code)]

pub mod arguments;
pub mod budget;
pub mod command;
pub mod context;
pub mod events;
pub mod fold;
mod follow;
pub mod live;
pub mod message;
pub mod provider;
pub mod recorder;
pub mod rescue;
pub mod run;
pub mod session_settings;
pub mod sessions;
pub mod tape;
pub mod tools;

use std::sync::Arc;

use bub_abi::types::{ErrorInfo, TapeContextSpec};
use serde_json::{Map, Value};

pub use self::{
    events::{Event, EventBus, EventContext, Filter},
    provider::ModelSettings,
    run::{RunOptions, RunStream},
    tape::{RunTape, Store},
    tools::{AgentTool, Exposure, ToolContext},
};

/// Why a run, a step or a tool failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AgentError {
    /// Bub's `BubError(kind, message, details)`.
    #[error("[{kind}] {message}")]
    Bub {
        /// `tool`, `invalid_input`, `not_found`, …
        kind: String,
        /// The message.
        message: String,
        /// Structured detail.
        details: Option<Value>,
    },
    /// A provider call failed.
    #[error(transparent)]
    Provider(#[from] provider::ProviderError),
    /// A usage error (Python's `ValueError` / `RuntimeError`).
    #[error("{0}")]
    Value(String),
    /// The tape store failed.
    #[error("tape store: {0}")]
    Store(String),
    /// The consumer stopped the run.
    #[error("cancelled")]
    Cancelled,
}

impl AgentError {
    /// A `BubError`.
    pub fn bub(kind: &str, message: impl Into<String>, details: Option<Value>) -> AgentError {
        AgentError::Bub { kind: kind.into(), message: message.into(), details }
    }

    /// A `ValueError`-like error.
    pub fn value(message: impl Into<String>) -> AgentError {
        AgentError::Value(message.into())
    }

    /// A failure of the tape store or another host resource the run reads.
    pub fn store(e: impl std::fmt::Display) -> AgentError {
        AgentError::Store(e.to_string())
    }

    /// The message with its cause, for people (Bub's text, then the
    /// `details.error` a failed tool carries: "[tool] Tool 'fs.read'
    /// execution failed: cannot read a.txt: …"). The model and the tape get
    /// Bub's text alone.
    pub fn explained(&self) -> String {
        let cause = match self {
            AgentError::Bub { details: Some(details), .. } => details.get("error").and_then(Value::as_str),
            _ => None,
        };
        match cause {
            Some(cause) => format!("{}: {cause}", self.to_string().trim_end_matches('.')),
            None => self.to_string(),
        }
    }

    /// As an [`ErrorInfo`] (`{kind, message, details}`).
    pub fn info(&self) -> ErrorInfo {
        match self {
            AgentError::Bub { kind, message, details } => {
                ErrorInfo { kind: kind.clone(), message: message.clone(), details: details.clone() }
            }
            AgentError::Provider(e) => ErrorInfo { kind: "provider".into(), message: e.to_string(), details: None },
            AgentError::Value(m) => ErrorInfo { kind: "ValueError".into(), message: m.clone(), details: None },
            AgentError::Store(m) => ErrorInfo { kind: "store".into(), message: m.clone(), details: None },
            AgentError::Cancelled => ErrorInfo { kind: "cancelled".into(), message: "cancelled".into(), details: None },
        }
    }
}

/// What a system-prompt section is given.
#[derive(Clone)]
pub struct PromptContext {
    /// The step's prompt (`[]` on continuation steps).
    pub prompt: Arc<[Value]>,
    /// The turn state.
    pub state: bub_abi::TurnState,
    /// The model-facing tool names of the step.
    pub tools: Vec<String>,
    /// The model spec.
    pub model: String,
}

/// A system-prompt section: text, or nothing.
pub type Section = Arc<dyn Fn(PromptContext) -> events::HandlerFutureOf<Option<String>> + Send + Sync>;

/// Whether the run should go on after a text-only step (the steering inbox
/// holds messages for it).
pub type PendingCheck = Arc<dyn Fn(bub_abi::TurnState) -> events::HandlerFutureOf<bool> + Send + Sync>;

/// An agent: a model, tools, a tape store and the observers of its events.
pub struct Agent {
    /// Its name (`bub`).
    pub name: String,
    /// The default model spec.
    pub model: Option<String>,
    /// Providers, keys, retries, fallbacks.
    pub settings: Arc<ModelSettings>,
    /// Where tapes live.
    pub store: Store,
    /// Tools in registry order. Shared with every run's context (a run
    /// cloned them all, schemas included, and dropped them at its end);
    /// change them with [`add_tool`](Self::add_tool) or `Arc::make_mut`.
    pub tools: Arc<Vec<AgentTool>>,
    /// System-prompt sections, in order.
    pub sections: Vec<Section>,
    /// Which entries become the model's context.
    pub context: TapeContextSpec,
    /// Sidecars mounted on every tape.
    pub sidecars: Vec<String>,
    /// Steps per run (None: unbounded).
    pub max_steps: Option<u32>,
    /// Tools run at once (None: all of a response's calls; from the
    /// settings, `BUB_MAX_TOOL_CONCURRENCY`, 16 by default).
    pub max_tool_concurrency: Option<usize>,
    /// How long one tool call may run before it fails as timed out
    /// (`BUB_TOOL_TIMEOUT_SECONDS`, default 600; None: forever).
    pub tool_timeout: Option<std::time::Duration>,
    /// The command prefix (None: no command mode).
    pub command_prefix: Option<String>,
    /// The bus: the recorder first, then what is attached.
    pub events: EventBus,
    /// The "keep going" check after a text-only step.
    pub pending: Option<PendingCheck>,
    /// Chat options sent with every call (completion args).
    pub options: Map<String, Value>,
    /// Where the session tapes' context messages are kept between steps:
    /// the agent's own by default; share one (the framework's
    /// `bub_framework::Framework::contexts`) to keep them between turns too.
    pub contexts: Arc<context::ContextCache>,
    /// Which session each tape holds (see [`sessions`]): the agent's own
    /// by default; share one (the framework's
    /// `bub_framework::Framework::session_index`) to read each record once
    /// per scope.
    pub sessions: Arc<sessions::SessionIndex>,
    /// Where a run's entries go when the store will not take them, for the
    /// session's next run to store (see [`rescue`]); None: they are lost
    /// with an error.
    pub rescue: Option<rescue::Rescue>,
}

impl Agent {
    /// An agent with the recorder on its bus and nothing else.
    pub fn new(settings: ModelSettings, store: Store) -> Agent {
        let tool_timeout = settings.tool_timeout;
        let max_tool_concurrency = settings.max_tool_concurrency;
        let mut events = EventBus::new();
        recorder::subscribe(&mut events);
        Agent {
            name: "bub".into(),
            model: settings.model.clone(),
            max_steps: settings.max_steps,
            command_prefix: Some(settings.command_prefix.clone()),
            options: settings.completion_args.clone(),
            settings: Arc::new(settings),
            store,
            tools: Default::default(),
            sections: Vec::new(),
            context: TapeContextSpec::default(),
            sidecars: Vec::new(),
            max_tool_concurrency,
            tool_timeout,
            events,
            pending: None,
            contexts: context::ContextCache::new(),
            sessions: sessions::SessionIndex::new(),
            rescue: None,
        }
    }

    /// Sets the tool concurrency limit; 0 is refused (Bub's ValueError).
    pub fn with_max_tool_concurrency(mut self, limit: Option<usize>) -> Result<Agent, AgentError> {
        if limit == Some(0) {
            return Err(AgentError::value("max_tool_concurrency must be >= 1"));
        }
        self.max_tool_concurrency = limit;
        Ok(self)
    }

    /// Adds a tool; one of the same name is replaced in place.
    pub fn add_tool(&mut self, tool: AgentTool) {
        let tools = Arc::make_mut(&mut self.tools);
        match tools.iter_mut().find(|t| t.name == tool.name) {
            Some(slot) => *slot = tool,
            None => tools.push(tool),
        }
    }

    /// The tool registered (or reachable by model name) as `name`.
    pub fn tool(&self, name: &str) -> Option<&AgentTool> {
        self.tools.iter().find(|t| t.name == name).or_else(|| self.tools.iter().find(|t| t.model_name() == name))
    }
}
