//! Typed resources: what the object-returning app hooks hand to the host.
//!
//! Bub's app hooks return Python objects (a tape store, an environment, a
//! channel, …). Across the ABI every one of them is an [`Object`]: a kind, a
//! name and methods called by name with JSON arguments. This module gives each
//! kind a Rust trait, so a plugin implements `TapeStore` rather than a method
//! dispatcher, and the `Object::…` constructors that turn an implementation
//! into the object the hook returns. The host wraps the same kinds in typed
//! handles (`bub_host::resources`), and checks an object's kind where Bub
//! checks a type: a provider returning the wrong kind gets Bub's `TypeError`.
//!
//! Resources entered by a `running()` scope (lifespans, tape stores, steering
//! inboxes) have `enter` and `exit`; `exit` receives the scope body's error,
//! like a generator sees the exception at its `yield`. Both default to
//! nothing, so a store without setup or teardown implements neither.
//!
//! Arguments travel as one JSON object whose fields are the parameter names
//! (`{"tape": "t", "entry": {…}}`); results as JSON. Every method call runs
//! inside the plugin's future bridge, so a panic becomes an error.
//!
//! A plugin providing a lifespan (entered and exited with each `running()`
//! scope) and a tool:
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//!
//! use bub_abi::{
//!     resources::{Fut, Lifespan, Tool},
//!     types::{ErrorInfo, ToolSpec},
//!     BoxError, Object, Plugin, PluginContext,
//! };
//! use serde_json::{json, Map, Value};
//!
//! pub struct Counter;
//!
//! static OPEN_SCOPES: AtomicUsize = AtomicUsize::new(0);
//!
//! struct Scope;
//!
//! impl Lifespan for Scope {
//!     fn enter(&self) -> impl Fut<()> {
//!         OPEN_SCOPES.fetch_add(1, Ordering::Relaxed);
//!         async { Ok(()) }
//!     }
//!     fn exit(&self, error: Option<ErrorInfo>) -> impl Fut<()> {
//!         OPEN_SCOPES.fetch_sub(1, Ordering::Relaxed);
//!         if let Some(e) = error {
//!             tracing::warn!("the scope ended with an error: {e}");
//!         }
//!         async { Ok(()) }
//!     }
//! }
//!
//! struct OpenScopes;
//!
//! impl Tool for OpenScopes {
//!     fn spec(&self) -> ToolSpec {
//!         ToolSpec { name: "open_scopes".into(), description: "How many scopes are open".into(), ..Default::default() }
//!     }
//!     fn call(&self, _arguments: Map<String, Value>) -> impl Fut<Value> {
//!         async { Ok(json!(OPEN_SCOPES.load(Ordering::Relaxed))) }
//!     }
//! }
//!
//! #[bub_abi::plugin]
//! impl Plugin for Counter {
//!     fn new(_ctx: &PluginContext) -> Result<Self, BoxError> {
//!         Ok(Counter)
//!     }
//!
//!     fn provide_lifespan(&self) -> Option<Object> {
//!         Some(Object::lifespan(Scope))
//!     }
//!
//!     fn provide_tools(&self) -> Option<Vec<Object>> {
//!         Some(vec![Object::tool(OpenScopes)])
//!     }
//! }
//!
//! bub_abi::export_plugin!(Counter);
//! # fn main() {}
//! ```

mod protocol;
mod traits;

pub use protocol::*;
pub use traits::*;

use std::{future::Future, sync::Arc};

use serde::Serialize;
use serde_json::{Map, Value};

use crate::{
    abi::HookError,
    sdk::{
        object::{ObjectFuture, ObjectImpl, ValueFuture},
        plugin::BoxError,
    },
    types::{
        AdmitDecision, Bytes, ChannelInfo, CommandSpec, Delivery, Envelope, ErrorInfo, ProcessOutput, ProcessRequest,
        StateMap, StreamEvent, TapeContextSpec, TapeEntry, TapeMatch, TapeQuery, ToolCallContext, ToolSpec,
        TurnSnapshot,
    },
    Object,
};

/// The `kind` strings of the resource objects (Bub's types).
pub mod kinds {
    /// [`Lifespan`](super::Lifespan) (`provide_lifespan`).
    pub const LIFESPAN: &str = "lifespan";
    /// [`TapeStore`](super::TapeStore) (`provide_tape_store`).
    pub const TAPE_STORE: &str = "tape_store";
    /// [`SteeringInbox`](super::SteeringInbox) (`provide_steering_inbox`).
    pub const STEERING_INBOX: &str = "steering_inbox";
    /// [`Environment`](super::Environment) (`provide_environment`).
    pub const ENVIRONMENT: &str = "environment";
    /// [`Channel`](super::Channel) (`provide_channels`).
    pub const CHANNEL: &str = "channel";
    /// [`Tool`](super::Tool) (`provide_tools`).
    pub const TOOL: &str = "tool";
    /// A tape sidecar (`provide_tape_sidecar`): a name.
    pub const TAPE_SIDECAR: &str = "tape_sidecar";
    /// A tape context strategy (`build_tape_context`).
    pub const TAPE_CONTEXT: &str = "tape_context";
    /// [`Command`](super::Command) (`register_cli_commands`).
    pub const CLI_COMMAND: &str = "cli_command";
    /// The host's CLI application, handed to `register_cli_commands`.
    pub const CLI_APP: &str = "cli_app";
    /// The host's message handler, handed to `provide_channels`.
    pub const MESSAGE_HANDLER: &str = "message_handler";
    /// A model stream (`run_model_stream`).
    pub const STREAM: &str = "stream";
    /// The host's framework, handed to `on_error`.
    pub const FRAMEWORK: &str = "framework";
}

/// The host-side clients of every object kind (one per `protocol!`).
pub mod clients {
    pub use super::protocol::{
        ChannelClient, CliAppClient, CommandClient, EnvironmentClient, FrameworkClient, LifespanClient,
        MessageHandlerClient, SteeringInboxClient, StreamClient, TapeContextClient, TapeStoreClient, ToolClient,
    };
}

/// The error kind an object answers for a method it does not have.
pub const UNSUPPORTED: crate::abi::ErrorKind = crate::abi::ErrorKind::UNSUPPORTED;

/// A [`Tool`]'s methods as the object protocol declares them.
#[doc(hidden)]
pub trait ToolMethods: Send + Sync + 'static {
    fn name(&self) -> String;
    fn spec(&self) -> impl Fut<ToolSpec>;
    fn call(&self, arguments: Map<String, Value>) -> impl Fut<Value>;
    fn call_in(&self, arguments: Map<String, Value>, context: ToolCallContext) -> impl Fut<Value>;
}

struct ToolAdapter<T>(T, String);

impl<T: Tool> ToolMethods for ToolAdapter<T> {
    fn name(&self) -> String {
        self.1.clone()
    }
    fn spec(&self) -> impl Fut<ToolSpec> {
        let spec = self.0.spec();
        async { Ok(spec) }
    }
    fn call(&self, arguments: Map<String, Value>) -> impl Fut<Value> {
        self.0.call(arguments)
    }
    fn call_in(&self, arguments: Map<String, Value>, context: ToolCallContext) -> impl Fut<Value> {
        self.0.call_in(arguments, context)
    }
}

/// A [`Command`]'s methods as the object protocol declares them.
#[doc(hidden)]
pub trait CommandMethods: Send + Sync + 'static {
    fn name(&self) -> String;
    fn spec(&self) -> impl Fut<CommandSpec>;
    fn call(&self, arguments: Map<String, Value>) -> impl Fut<Value>;
}

struct CommandAdapter<T>(T, String);

impl<T: Command> CommandMethods for CommandAdapter<T> {
    fn name(&self) -> String {
        self.1.clone()
    }
    fn spec(&self) -> impl Fut<CommandSpec> {
        let spec = self.0.spec();
        async { Ok(spec) }
    }
    fn call(&self, arguments: Map<String, Value>) -> impl Fut<Value> {
        self.0.run(arguments)
    }
}

/// A tape context's method as the object protocol declares it.
#[doc(hidden)]
pub trait TapeContextMethods: Send + Sync + 'static {
    fn name(&self) -> String;
    fn describe(&self) -> impl Fut<Value>;
}

/// A model stream's methods as the object protocol declares them.
#[doc(hidden)]
pub trait StreamMethods: Send + Sync + 'static {
    fn next(&self) -> impl Fut<Option<StreamEvent>>;
    fn next_many(&self) -> impl Fut<Vec<StreamEvent>>;
    fn close(&self) -> impl Fut<()>;
}

/// A stream object over `methods` (the SDK's channel-backed stream).
pub(crate) fn stream_object(methods: impl StreamMethods) -> Object {
    Object::new(StreamObject(Arc::new(methods)))
}

/// A named object with no methods but `describe` (tape sidecars and
/// contexts).
struct Plain(String, Value);

impl TapeContextMethods for Plain {
    fn name(&self) -> String {
        self.0.clone()
    }
    fn describe(&self) -> impl Fut<Value> {
        let v = self.1.clone();
        async { Ok(v) }
    }
}

/// A tape sidecar: a kind and a name, no methods.
struct Sidecar(String);

impl ObjectImpl for Sidecar {
    fn kind(&self) -> &str {
        kinds::TAPE_SIDECAR
    }
    fn name(&self) -> String {
        self.0.clone()
    }
    fn invoke(&self, method: &str, _args: Value) -> ObjectFuture {
        unsupported(kinds::TAPE_SIDECAR, method, &[])
    }
}

impl Object {
    /// A [`Lifespan`] for `provide_lifespan`.
    pub fn lifespan(lifespan: impl Lifespan) -> Object {
        Object::new(LifespanObject(Arc::new(lifespan)))
    }

    /// A [`TapeStore`] for `provide_tape_store`.
    pub fn tape_store(store: impl TapeStore) -> Object {
        Object::new(TapeStoreObject(Arc::new(store)))
    }

    /// A [`SteeringInbox`] for `provide_steering_inbox`.
    pub fn steering_inbox(inbox: impl SteeringInbox) -> Object {
        Object::new(InboxObject(Arc::new(inbox)))
    }

    /// An [`Environment`] for `provide_environment`.
    pub fn environment(environment: impl Environment) -> Object {
        Object::new(EnvironmentObject(Arc::new(environment)))
    }

    /// A [`Channel`] for `provide_channels`.
    pub fn channel(channel: impl Channel) -> Object {
        Object::new(ChannelObject(Arc::new(channel)))
    }

    /// A [`Tool`] for `provide_tools`.
    pub fn tool(tool: impl Tool) -> Object {
        let name = tool.spec().name;
        Object::new(ToolObject(Arc::new(ToolAdapter(tool, name))))
    }

    /// A [`Command`] for `register_cli_commands`.
    pub fn cli_command(command: impl Command) -> Object {
        let name = command.spec().name;
        Object::new(CommandObject(Arc::new(CommandAdapter(command, name))))
    }

    /// The host's message handler (what `provide_channels` receives).
    pub fn message_handler(handler: impl MessageHandler) -> Object {
        Object::new(MessageHandlerObject(Arc::new(handler)))
    }

    /// The host's command-line object (what `register_cli_commands` receives).
    pub fn cli_app(app: impl CliApp) -> Object {
        Object::new(CliAppObject(Arc::new(app)))
    }

    /// The host's framework object (what `on_error` receives).
    pub fn framework(framework: impl FrameworkOps) -> Object {
        Object::new(FrameworkObject(Arc::new(framework)))
    }

    /// A tape sidecar named `name` for `provide_tape_sidecar`.
    pub fn tape_sidecar(name: impl Into<String>) -> Object {
        Object::new(Sidecar(name.into()))
    }

    /// A tape context for `build_tape_context`.
    pub fn tape_context(spec: TapeContextSpec) -> Object {
        let v = serde_json::to_value(&spec).unwrap_or(Value::Null);
        Object::new(TapeContextObject(Arc::new(Plain(String::new(), v))))
    }
}
