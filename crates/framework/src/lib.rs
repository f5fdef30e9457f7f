//! # bub-framework — Bub's framework over a bub-rs runtime
//!
//! The layer above [`bub_runtime`] (load and dispatch) and below the
//! gateway, the builtin plugin and the `bub` binary. It owns what Bub's `BubFramework`
//! does with the hooks' answers, and the libraries built on it:
//!
//! - the turn ([`Framework::process_inbound`]) — `resolve_session →
//!   load_state → build_prompt → model → save_state (finally) →
//!   render_outbound → dispatch_outbound` (semantics §H1.1);
//! - [`scope`] — `running()`: lifespans, tape store, steering inbox, the
//!   per-session environment cache (semantics §H1.2, §H5);
//! - [`app`] — the app-hook accessors (system prompt, model options,
//!   channels, tools, sidecars, tape context, admission, steering);
//! - [`AgentPlugins`] — the framework's hooks on an agent's bus (the agent
//!   itself is the `bub-agent` crate: loop, tools, tape fork, context, the
//!   provider wire formats; the gateway over this crate is `bub-gateway`).
//!
//! It never names the builtin plugin: the builtin is a plugin over this
//! crate, and finds the framework running its turn with
//! [`Framework::of`] (no process-wide registry).
//!
//! ```no_run
//! use bub_framework::Framework;
//! use bub_runtime::HostBuilder;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let host = HostBuilder::new().workspace("/srv/project").build();
//! let framework = Framework::new(&host, "/srv/project");
//! let mut inbound = serde_json::json!({"channel": "cli", "chat_id": "42", "content": "hi"});
//! let result = framework.process_inbound(&mut inbound, false).await?;
//! println!("{} -> {}", result.session_id, result.model_output);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]
// No unsafe code above the runtime: the loader and the ABI hold it all.
#![forbid(unsafe_code)]

mod agent_plugins;
pub mod app;
mod error;
pub mod repeats;
pub mod scope;
mod turn;

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use bub_abi::types::{Envelope, StateMap};
use serde::Serialize;
use serde_json::Value;

pub use self::{
    agent_plugins::{AgentPlugins, PluginAgentHooks},
    error::FrameworkError,
    scope::Running,
};
use bub_runtime::{resources::Channel, Host, Runtime};

/// What one turn produced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnResult {
    /// The resolved session.
    pub session_id: String,
    /// The prompt, as user content.
    pub prompt: Vec<Value>,
    /// The model's output (or the fallback).
    pub model_output: String,
    /// The rendered outbound messages, in dispatch order.
    pub outbounds: Vec<Envelope>,
    /// The turn state at the end.
    pub state: StateMap,
    /// The model's stream events, in order (streamed turns only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<bub_abi::types::StreamEvent>,
    /// The message was delivered before and ran then: this turn ran
    /// nothing (see [`repeats`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub repeated: bool,
}

/// Runs turns and scopes over a host's plugins. Cheap to clone; clones share
/// the scope (tape store, inbox, environment cache).
#[derive(Clone)]
pub struct Framework {
    runtime: Runtime,
    // Shared: a turn clones its framework (`attach`), paths and all.
    home: Arc<Path>,
    workspace: Arc<Path>,
    // The workspace as turn states and providers receive it, made once.
    workspace_text: Arc<str>,
    scope: Arc<scope::Shared>,
}

impl Framework {
    /// A framework over `host`, working in `workspace`.
    pub fn new(host: &Host, workspace: impl Into<PathBuf>) -> Self {
        let workspace = workspace.into();
        let workspace_text = workspace.display().to_string().into();
        Framework {
            runtime: host.runtime(),
            home: host.places().home.as_path().into(),
            workspace: workspace.into(),
            workspace_text,
            scope: Default::default(),
        }
    }

    /// The dispatcher.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Binds `channels` as the stream router: a streamed turn shows each
    /// model event to the channel its message names (`output_channel`, else
    /// `channel`), as Bub's channel manager does. Replaces earlier bindings.
    /// Outbounds of turns and errors go to the bound channel they name
    /// (see `runtime::router`).
    pub fn bind_channels(&self, channels: Vec<Channel>) {
        self.runtime.bind_channels(channels);
    }

    /// The deadline of a resource's scope methods (the host's
    /// `RuntimeSettings::lifespan_timeout`).
    pub fn lifespan_timeout(&self) -> Option<std::time::Duration> {
        self.runtime.registry().settings().lifespan_timeout
    }

    /// The host's settings (`RuntimeSettings`, resolved once by whoever
    /// built the host: the `bub` binary from its environment).
    pub fn settings(&self) -> &bub_runtime::RuntimeSettings {
        self.runtime.registry().settings()
    }

    /// The agent's settings: the host's resolved environment over
    /// `<home>/config.json` (read on each call, so an edit applies to the
    /// next turn).
    pub fn model_settings(&self) -> Result<bub_agent::ModelSettings, String> {
        bub_agent::ModelSettings::load(&self.home, &self.settings().environment)
    }

    /// The host's home (`$BUB_HOME`): config, tapes.
    pub fn home(&self) -> &std::path::Path {
        &self.home
    }

    /// The workspace (`-w/--workspace`).
    pub fn workspace(&self) -> &std::path::Path {
        &self.workspace
    }

    /// Attaches this framework to `state` for as long as the returned
    /// [`Attached`] lives: a plugin compiled into this binary (the builtin
    /// agent) then finds it with [`Framework::of`]. A turn attaches itself
    /// to its state; so does any other run that hands a state to the
    /// builtin's hooks or tools (a subagent's). Sets Bub's
    /// `_runtime_agent` marker for the hooks that look for it.
    pub fn attach(&self, state: &bub_abi::TurnState) -> Attached {
        let owner = Arc::new(self.clone());
        state.attach(&owner);
        let _ = state.set_json("_runtime_agent", serde_json::json!({"$agent": "bub"}));
        Attached { _owner: owner }
    }

    /// The framework running the turn of `state` (see [`attach`](Self::attach)),
    /// if it is still running and the state was made in this binary.
    pub fn of(state: &bub_abi::TurnState) -> Option<Framework> {
        state.owner::<Framework>().map(|f| Framework::clone(&f))
    }
}

/// A framework attached to a turn state ([`Framework::attach`]); the state
/// holds it weakly, so it is found only while this lives.
#[must_use = "the framework is attached only while this value lives"]
pub struct Attached {
    _owner: Arc<Framework>,
}
