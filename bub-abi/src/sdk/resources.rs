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

use std::{future::Future, sync::Arc};

use serde::{de::DeserializeOwned, Serialize};
use serde_json::{Map, Value};

use crate::{
    abi::HookError,
    sdk::{
        object::{ObjectFuture, ObjectImpl},
        plugin::BoxError,
    },
    types::{
        CommandSpec, Envelope, ErrorInfo, ProcessOutput, ProcessRequest, StateMap, StreamEvent, TapeContextSpec,
        TapeEntry, TapeQuery, ToolSpec,
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
}

/// The error kind an object answers for a method it does not have.
pub const UNSUPPORTED: crate::abi::ErrorKind = crate::abi::ErrorKind::UNSUPPORTED;

/// Shorthand for the futures the resource traits return.
pub trait Fut<T>: Future<Output = Result<T, BoxError>> + Send {}
impl<T, F: Future<Output = Result<T, BoxError>> + Send> Fut<T> for F {}

/// A resource entered once per `running()` scope (`provide_lifespan`).
pub trait Lifespan: Send + Sync + 'static {
    /// Runs when the scope is entered (before the tape store).
    fn enter(&self) -> impl Fut<()> {
        async { Ok(()) }
    }
    /// Runs when the scope exits, in reverse entry order, also on error;
    /// `error` is the scope body's (or a later provider's entry) failure.
    fn exit(&self, error: Option<ErrorInfo>) -> impl Fut<()> {
        let _ = error;
        async { Ok(()) }
    }
}

/// Where tapes live (`provide_tape_store`): Bub's `TapeStore`.
pub trait TapeStore: Send + Sync + 'static {
    /// The names of every tape.
    fn list_tapes(&self) -> impl Fut<Vec<String>>;
    /// Removes every entry of `tape`.
    fn reset(&self, tape: String) -> impl Fut<()>;
    /// The entries `query` selects, in order.
    fn fetch_all(&self, query: TapeQuery) -> impl Fut<Vec<TapeEntry>>;
    /// Appends `entry` (the store assigns its id) and returns it as stored;
    /// it is durable when this returns.
    fn append(&self, tape: String, entry: TapeEntry) -> impl Fut<TapeEntry>;
    /// Setup, when the scope enters the store.
    fn enter(&self) -> impl Fut<()> {
        async { Ok(()) }
    }
    /// Teardown, when the scope exits.
    fn exit(&self, error: Option<ErrorInfo>) -> impl Fut<()> {
        let _ = error;
        async { Ok(()) }
    }
}

/// Messages steering a running turn (`provide_steering_inbox`).
pub trait SteeringInbox: Send + Sync + 'static {
    /// Queues `message` for the turn `state` belongs to.
    fn enqueue_message(&self, message: Envelope, state: StateMap) -> impl Fut<()>;
    /// Removes and returns the queued messages of `state`'s turn (FIFO).
    fn drain_messages(&self, state: StateMap) -> impl Fut<Vec<Envelope>>;
    /// How many messages are queued for `state`'s turn.
    fn message_count(&self, state: StateMap) -> impl Fut<usize>;
    /// Setup, when the scope enters the inbox.
    fn enter(&self) -> impl Fut<()> {
        async { Ok(()) }
    }
    /// Teardown, when the scope exits.
    fn exit(&self, error: Option<ErrorInfo>) -> impl Fut<()> {
        let _ = error;
        async { Ok(()) }
    }
}

/// Where a session's commands and files live (`provide_environment`).
pub trait Environment: Send + Sync + 'static {
    /// The workspace, if the environment has one.
    fn workspace(&self) -> impl Fut<Option<String>>;
    /// Reads a text file.
    fn read_text(&self, path: String) -> impl Fut<String>;
    /// Writes a text file, creating its parents.
    fn write_text(&self, path: String, content: String) -> impl Fut<()>;
    /// Resolves `path` against the workspace.
    fn resolve_path(&self, path: String) -> impl Fut<String>;
    /// Runs a process to completion.
    fn run(&self, request: ProcessRequest) -> impl Fut<ProcessOutput>;
    /// Releases the environment (the scope's exit closes cached ones).
    fn close(&self) -> impl Fut<()> {
        async { Ok(()) }
    }
}

/// A way messages come in and go out (`provide_channels`): Bub's `Channel`.
pub trait Channel: Send + Sync + 'static {
    /// The channel's unique name.
    fn name(&self) -> String;
    /// Starts receiving; inbound messages go to the message handler the
    /// hook received. Returns when the channel is up.
    fn start(&self) -> impl Fut<()>;
    /// Stops receiving.
    fn stop(&self) -> impl Fut<()> {
        async { Ok(()) }
    }
    /// Delivers one outbound message.
    fn send(&self, message: Envelope) -> impl Fut<()> {
        let _ = message;
        async { Ok(()) }
    }
    /// One event of the model stream answering `message`, while the turn
    /// runs (Bub's `stream_events`): render it live. Default: nothing.
    fn stream_event(&self, message: Envelope, event: StreamEvent) -> impl Fut<()> {
        let _ = (message, event);
        async { Ok(()) }
    }
}

/// Something the model may call (`provide_tools`): Bub's `Tool`.
pub trait Tool: Send + Sync + 'static {
    /// Name, description and argument schema.
    fn spec(&self) -> ToolSpec;
    /// Runs the tool.
    fn call(&self, arguments: Map<String, Value>) -> impl Fut<Value>;
}

/// A subcommand of `bub` (`register_cli_commands`).
pub trait Command: Send + Sync + 'static {
    /// Its name and arguments.
    fn spec(&self) -> CommandSpec;
    /// Runs it with the parsed arguments (by argument name); a string result
    /// is printed, an error exits with status 1.
    fn run(&self, args: Map<String, Value>) -> impl Fut<Value>;
}

fn arg<T: DeserializeOwned>(args: &Value, kind: &str, method: &str, name: &str) -> Result<T, HookError> {
    let value = args.get(name).cloned().unwrap_or(Value::Null);
    serde_json::from_value(value).map_err(|e| {
        HookError::new(
            crate::abi::ErrorKind::ARGS,
            format!("{kind}.{method}: argument `{name}` could not be read: {e}"),
        )
    })
}

fn reply<R: Serialize>(result: Result<R, BoxError>) -> Result<Value, HookError> {
    match result {
        Ok(v) => serde_json::to_value(v).map_err(|e| HookError::new(crate::abi::ErrorKind::TYPE, e.to_string())),
        Err(e) => Err(match e.downcast::<HookError>() {
            Ok(h) => *h,
            Err(e) => HookError::plugin(e.to_string()),
        }),
    }
}

/// The answer of an object of `kind` to a `method` it does not have (error
/// kind [`UNSUPPORTED`], which the host reads as "nothing to do" for the
/// optional methods), naming the `known` ones.
pub fn unsupported(kind: &str, method: &str, known: &[&str]) -> ObjectFuture {
    let message = format!("a {kind} has no method `{method}` (it has: {})", known.join(", "));
    Box::pin(async move { Err(HookError::new(UNSUPPORTED, message)) })
}

// One adapter per trait: method names and their arguments, in one list.
macro_rules! adapter {
    ($Adapter:ident, $Trait:ident, $kind:expr, |$this:ident| $name:expr,
     [$($method:literal => $fname:ident($($a:ident: $aty:ty),*)),* $(,)?]) => {
        struct $Adapter<T>(Arc<T>);

        impl<T: $Trait> ObjectImpl for $Adapter<T> {
            fn kind(&self) -> &str {
                $kind
            }

            fn name(&self) -> String {
                let $this = &*self.0;
                $name
            }

            fn invoke(&self, method: &str, _args: Value) -> ObjectFuture {
                let _this = self.0.clone();
                match method {
                    $($method => Box::pin(async move {
                        $(let $a: $aty = arg(&_args, $kind, $method, stringify!($a))?;)*
                        reply(_this.$fname($($a),*).await)
                    }),)*
                    other => unsupported($kind, other, &[$($method),*]),
                }
            }
        }
    };
}

adapter!(LifespanObject, Lifespan, kinds::LIFESPAN, |_l| String::new(), [
    "enter" => enter(),
    "exit" => exit(error: Option<ErrorInfo>),
]);
adapter!(TapeStoreObject, TapeStore, kinds::TAPE_STORE, |_s| String::new(), [
    "list_tapes" => list_tapes(),
    "reset" => reset(tape: String),
    "fetch_all" => fetch_all(query: TapeQuery),
    "append" => append(tape: String, entry: TapeEntry),
    "enter" => enter(),
    "exit" => exit(error: Option<ErrorInfo>),
]);
adapter!(InboxObject, SteeringInbox, kinds::STEERING_INBOX, |_i| String::new(), [
    "enqueue_message" => enqueue_message(message: Envelope, state: StateMap),
    "drain_messages" => drain_messages(state: StateMap),
    "message_count" => message_count(state: StateMap),
    "enter" => enter(),
    "exit" => exit(error: Option<ErrorInfo>),
]);
adapter!(EnvironmentObject, Environment, kinds::ENVIRONMENT, |_e| String::new(), [
    "workspace" => workspace(),
    "read_text" => read_text(path: String),
    "write_text" => write_text(path: String, content: String),
    "resolve_path" => resolve_path(path: String),
    "run" => run(request: ProcessRequest),
    "close" => close(),
]);
adapter!(ChannelObject, Channel, kinds::CHANNEL, |c| c.name(), [
    "start" => start(),
    "stop" => stop(),
    "send" => send(message: Envelope),
    "stream_event" => stream_event(message: Envelope, event: StreamEvent),
]);

/// Gives `spec` (sync on the trait) the same async shape as the other methods.
trait SpecAsync {
    type Spec: Serialize + Send;
    fn spec_async(&self) -> impl Fut<Self::Spec>;
}

impl<T: Tool> SpecAsync for ToolAdapter<T> {
    type Spec = ToolSpec;
    fn spec_async(&self) -> impl Fut<ToolSpec> {
        let spec = self.0.spec();
        async { Ok(spec) }
    }
}

impl<T: Command> SpecAsync for CommandAdapter<T> {
    type Spec = CommandSpec;
    fn spec_async(&self) -> impl Fut<CommandSpec> {
        let spec = self.0.spec();
        async { Ok(spec) }
    }
}

struct ToolAdapter<T>(T);
struct CommandAdapter<T>(T);

/// `Tool` and `Command` share their shape: a spec and one call.
trait Callable: Send + Sync + 'static {
    fn call_with(&self, args: Map<String, Value>) -> impl Fut<Value>;
}

impl<T: Tool> Callable for ToolAdapter<T> {
    fn call_with(&self, args: Map<String, Value>) -> impl Fut<Value> {
        self.0.call(args)
    }
}

impl<T: Command> Callable for CommandAdapter<T> {
    fn call_with(&self, args: Map<String, Value>) -> impl Fut<Value> {
        self.0.run(args)
    }
}

struct SpecObject<A>(Arc<A>, &'static str, String);

impl<A: SpecAsync + Callable> ObjectImpl for SpecObject<A> {
    fn kind(&self) -> &str {
        self.1
    }

    fn name(&self) -> String {
        self.2.clone()
    }

    fn invoke(&self, method: &str, args: Value) -> ObjectFuture {
        let this = self.0.clone();
        let kind = self.1;
        match method {
            "spec" => Box::pin(async move { reply(this.spec_async().await) }),
            "call" => Box::pin(async move {
                let arguments: Map<String, Value> = arg(&args, kind, "call", "arguments")?;
                reply(this.call_with(arguments).await)
            }),
            other => unsupported(kind, other, &["spec", "call"]),
        }
    }
}

struct Plain(&'static str, String, Value);

impl ObjectImpl for Plain {
    fn kind(&self) -> &str {
        self.0
    }

    fn name(&self) -> String {
        self.1.clone()
    }

    fn invoke(&self, method: &str, _args: Value) -> ObjectFuture {
        match method {
            "describe" => {
                let v = self.2.clone();
                Box::pin(async move { Ok(v) })
            }
            other => unsupported(self.0, other, &["describe"]),
        }
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
        Object::new(SpecObject(Arc::new(ToolAdapter(tool)), kinds::TOOL, name))
    }

    /// A [`Command`] for `register_cli_commands`.
    pub fn cli_command(command: impl Command) -> Object {
        let name = command.spec().name;
        Object::new(SpecObject(Arc::new(CommandAdapter(command)), kinds::CLI_COMMAND, name))
    }

    /// A tape sidecar named `name` for `provide_tape_sidecar`.
    pub fn tape_sidecar(name: impl Into<String>) -> Object {
        Object::new(Plain(kinds::TAPE_SIDECAR, name.into(), Value::Null))
    }

    /// A tape context for `build_tape_context`.
    pub fn tape_context(spec: TapeContextSpec) -> Object {
        let v = serde_json::to_value(&spec).unwrap_or(Value::Null);
        Object::new(Plain(kinds::TAPE_CONTEXT, String::new(), v))
    }
}
