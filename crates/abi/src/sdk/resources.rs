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
        object::{ObjectFuture, ObjectImpl, ValueFuture},
        plugin::BoxError,
    },
    types::{
        AdmitDecision, Bytes, ChannelInfo, CommandSpec, Delivery, Envelope, ErrorInfo, ProcessOutput, ProcessRequest,
        StateMap, StreamEvent, TapeContextSpec, TapeEntry, TapeQuery, ToolCallContext, ToolSpec, TurnSnapshot,
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
    /// What `fetch_all` answers the host: by default the entries of
    /// [`fetch_all`](Self::fetch_all). A store that keeps its entries as
    /// host values (built once, when it reads them) may answer those
    /// instead ([`TapeEntries::Values`], each in [`TapeEntry`]'s shape):
    /// they are shared with the host, not serialized again per read.
    fn fetch_all_answer(&self, query: TapeQuery) -> impl Fut<TapeEntries> {
        async move { Ok(TapeEntries::Entries(self.fetch_all(query).await?)) }
    }
    /// Appends `entry` (the store assigns its id) and returns it as stored;
    /// it is durable when this returns.
    fn append(&self, tape: String, entry: TapeEntry) -> impl Fut<TapeEntry>;
    /// Appends several entries in order, all durable when this returns
    /// (ABI 2.1): how the agent merges a run's entries. A store that can
    /// write them at once (one write and sync, one transaction) should: it
    /// saves a sync per entry, and a transaction keeps all or none of them.
    /// Default: [`append`](Self::append) one after the other.
    fn append_many(&self, tape: String, entries: Vec<TapeEntry>) -> impl Fut<Vec<TapeEntry>> {
        async move {
            let mut stored = Vec::with_capacity(entries.len());
            for entry in entries {
                stored.push(self.append(tape.clone(), entry).await?);
            }
            Ok(stored)
        }
    }
    /// What `append_many` does with the entries as the host sent them:
    /// host values in [`TapeEntry`]'s shape, handed over as handles. By
    /// default they are read into `TapeEntry`s for
    /// [`append_many`](Self::append_many). A store that writes JSON may
    /// write them as they are and answer them back with their ids
    /// ([`TapeEntries::Values`]): a run with a big prompt is then not
    /// copied twice more on its way to the store.
    fn append_many_values(&self, tape: String, entries: Vec<crate::Value>) -> impl Fut<TapeEntries> {
        async move {
            let entries = entries.iter().map(crate::Value::deserialize).collect::<Result<Vec<TapeEntry>, _>>()?;
            Ok(TapeEntries::Entries(self.append_many(tape, entries).await?))
        }
    }
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

/// Tape entries a store answers `fetch_all` or `append_many` with
/// ([`TapeStore::fetch_all_answer`], [`TapeStore::append_many_values`]).
#[derive(Serialize)]
#[serde(untagged)]
pub enum TapeEntries {
    /// Entries, serialized for the host.
    Entries(Vec<TapeEntry>),
    /// Entries the store holds as host values, each a map in
    /// [`TapeEntry`]'s shape (`id`, `kind`, `payload`, `meta`, `date`):
    /// handed over as handles, nothing copied.
    Values(Vec<crate::Value>),
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
    /// Reads a file's bytes (Bub's `read_bytes`). Since ABI 2.2.
    fn read_bytes(&self, path: String) -> impl Fut<Bytes> {
        let _ = path;
        async { Err("this environment cannot read bytes (read_bytes is not implemented)".into()) }
    }
    /// Starts a process whose input and output stream (Bub's `spawn`):
    /// answers its id for the methods below. `timeout_ms` is ignored: the
    /// caller decides when to `signal` it. Since ABI 2.2.
    fn spawn(&self, request: ProcessRequest) -> impl Fut<String> {
        let _ = request;
        async { Err("this environment cannot start streaming processes (spawn is not implemented)".into()) }
    }
    /// Writes `data` to the process's standard input; `close` closes it
    /// afterwards (end of input).
    fn write_stdin(&self, process: String, data: Bytes, close: bool) -> impl Fut<()> {
        let _ = (process, data, close);
        async { Err("spawn is not implemented".into()) }
    }
    /// Up to `max` bytes the process wrote to `stream` (`stdout` or
    /// `stderr`), waiting for some; `None` at the end of the stream.
    fn read_output(&self, process: String, stream: String, max: usize) -> impl Fut<Option<Bytes>> {
        let _ = (process, stream, max);
        async { Err("spawn is not implemented".into()) }
    }
    /// Sends TERM (or KILL) to the process and what it started; false when
    /// it is gone.
    fn signal(&self, process: String, kill: bool) -> impl Fut<bool> {
        let _ = (process, kill);
        async { Err("spawn is not implemented".into()) }
    }
    /// Waits for the process to end: its exit code, negative for a signal
    /// (Python's `returncode`). Its id is forgotten afterwards.
    fn wait(&self, process: String) -> impl Fut<i32> {
        let _ = process;
        async { Err("spawn is not implemented".into()) }
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
    /// Role, enablement and debouncing. Default: a plain, enabled,
    /// undebounced channel.
    fn info(&self) -> impl Fut<ChannelInfo> {
        async { Ok(ChannelInfo::default()) }
    }
    /// This channel's own admission decision for one of its messages, asked
    /// when no plugin's `admit_message` decided (Bub's builtin delegates to
    /// the channel). Default: None, the gateway's default scheduling.
    fn admit_message(
        &self,
        session_id: String,
        message: Envelope,
        turn: TurnSnapshot,
    ) -> impl Fut<Option<AdmitDecision>> {
        let _ = (session_id, message, turn);
        async { Ok(None) }
    }
}

/// Something the model may call (`provide_tools`): Bub's `Tool`.
pub trait Tool: Send + Sync + 'static {
    /// Name, description and argument schema.
    fn spec(&self) -> ToolSpec;
    /// Runs the tool.
    fn call(&self, arguments: Map<String, Value>) -> impl Fut<Value>;
    /// Runs the tool with the call's context (session, run, tape, state):
    /// called instead of [`call`](Self::call) when the spec says
    /// `context: true` (Bub's `context=ToolContext`). Default: `call`.
    fn call_in(&self, arguments: Map<String, Value>, context: ToolCallContext) -> impl Fut<Value> {
        let _ = context;
        self.call(arguments)
    }
}

/// A subcommand of `bub` (`register_cli_commands`).
pub trait Command: Send + Sync + 'static {
    /// Its name and arguments.
    fn spec(&self) -> CommandSpec;
    /// Runs it with the parsed arguments (by argument name); a string result
    /// is printed, an error exits with status 1.
    fn run(&self, args: Map<String, Value>) -> impl Fut<Value>;
}

/// The host's message handler (handed to `provide_channels`): what a
/// channel calls with each inbound message. Implemented by the host.
pub trait MessageHandler: Send + Sync + 'static {
    /// Hands `message` to the host (Bub's `on_receive`). The gateway returns
    /// once the message is queued; `bub chat` once its turn is over. An
    /// error means the message was not taken (e.g. the gateway is stopping).
    fn handle(&self, message: Envelope) -> impl Fut<()>;
    /// Hands `message` to the host and returns what became of it: its turn's
    /// outbounds, or why it had none. For request/response channels.
    /// Default: [`handle`](Self::handle), then `processed`.
    fn submit(&self, message: Envelope) -> impl Fut<Delivery> {
        let handled = self.handle(message);
        async move {
            handled.await?;
            Ok(Delivery { status: "processed".into(), ..Default::default() })
        }
    }
    /// The channel has no more messages (end of input).
    fn close(&self) -> impl Fut<()> {
        async { Ok(()) }
    }
}

/// The host's command line (handed to `register_cli_commands`).
/// Implemented by the host.
pub trait CliApp: Send + Sync + 'static {
    /// The resolved workspace (`bub -w`).
    fn workspace(&self) -> impl Fut<String>;
    /// The host's home.
    fn home(&self) -> impl Fut<String>;
    /// The names of the commands already registered.
    fn commands(&self) -> impl Fut<Vec<String>>;
}

/// The host's framework (handed to `on_error`). Implemented by the host.
pub trait FrameworkOps: Send + Sync + 'static {
    /// Sends `message` through every `dispatch_outbound` implementation;
    /// their answers, in call order (None included).
    fn dispatch_outbound(&self, message: Envelope) -> impl Fut<Vec<Value>>;
}

fn hook_error(e: BoxError) -> HookError {
    match e.downcast::<HookError>() {
        Ok(h) => *h,
        Err(e) => HookError::plugin(e.to_string()),
    }
}

/// Argument `name` of `kind.method`, read from the host value itself.
fn arg_value<T: DeserializeOwned>(args: &crate::Value, kind: &str, method: &str, name: &str) -> Result<T, HookError> {
    let value = args.as_ref().get(name).unwrap_or(crate::ValueRef::null());
    value.deserialize().map_err(|e| {
        HookError::new(
            crate::abi::ErrorKind::ARGS,
            format!("{kind}.{method}: argument `{name}` could not be read: {e}"),
        )
    })
}

/// A method's answer, built as a host value.
fn reply_value<R: Serialize>(result: Result<R, BoxError>) -> Result<crate::Value, HookError> {
    match result {
        Ok(v) => crate::Value::from_serialize(&v),
        Err(e) => Err(hook_error(e)),
    }
}

/// The answer of an object of `kind` to a `method` it does not have (error
/// kind [`UNSUPPORTED`], which the host reads as "nothing to do" for the
/// optional methods), naming the `known` ones.
pub fn unsupported(kind: &str, method: &str, known: &[&str]) -> ObjectFuture {
    let message = format!("a {kind} has no method `{method}` (it has: {})", known.join(", "));
    Box::pin(async move { Err(HookError::new(UNSUPPORTED, message)) })
}

// The object protocol: each kind's methods, declared once. One declaration
// generates the plugin-side adapter (method name → trait method, argument
// names → parameters) and the host-side client (`clients::<Kind>Client`,
// typed methods that send exactly those names and keys), so the two sides
// cannot drift apart. `opt` marks a method an object may lack: the client
// reads the `UNSUPPORTED` answer as "nothing to do".
macro_rules! protocol {
    // The object side calls the trait method of the same name with the
    // declared arguments, or the one given after `=>` with its own (the
    // same names, read as other types: host values kept as handles, say);
    // either answer serializes as the declared type.
    (@answer $this:ident, $args:ident, $kind:expr, $method:ident($($a:ident: $aty:ty),*)) => {{
        $(let $a: $aty = arg_value(&$args, $kind, stringify!($method), stringify!($a))?;)*
        reply_value($this.$method($($a),*).await)
    }};
    (@answer $this:ident, $args:ident, $kind:expr, $method:ident($($a:ident: $aty:ty),*) => $via:ident($($va:ident: $vaty:ty),*)) => {{
        $(let $va: $vaty = arg_value(&$args, $kind, stringify!($method), stringify!($va))?;)*
        reply_value($this.$via($($va),*).await)
    }};
    ($(#[$doc:meta])* $Adapter:ident<$T:ident: $Bound:path>, $Client:ident, $kind:expr, |$this:ident| $name:expr,
     [$($method:ident($($a:ident: $aty:ty),*) -> $ret:ty $(, $opt:ident)? $(=> $via:ident($($va:ident: $vaty:ty),*))?;)*]) => {
        struct $Adapter<$T>(Arc<$T>);

        impl<$T: $Bound> ObjectImpl for $Adapter<$T> {
            fn kind(&self) -> &str {
                $kind
            }

            fn name(&self) -> String {
                let $this = &*self.0;
                $name
            }

            // The host calls `invoke_value`; this JSON form (for a caller
            // that holds JSON) goes through it.
            fn invoke(&self, method: &str, args: Value) -> ObjectFuture {
                let answer = self.invoke_value(method, crate::Value::from(&args));
                Box::pin(async move {
                    answer.await?.deserialize().map_err(|e| HookError::new(crate::abi::ErrorKind::TYPE, e.to_string()))
                })
            }

            fn invoke_value(&self, method: &str, _args: crate::Value) -> ValueFuture {
                let _this = self.0.clone();
                match method {
                    $(stringify!($method) => Box::pin(async move {
                        protocol!(@answer _this, _args, $kind, $method($($a: $aty),*) $(=> $via($($va: $vaty),*))?)
                    }),)*
                    other => {
                        let unsupported = unsupported($kind, other, &[$(stringify!($method)),*]);
                        Box::pin(async move { unsupported.await.map(|v| crate::Value::from(&v)) })
                    }
                }
            }
        }

        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $Client<'a>(pub &'a Object);

        impl $Client<'_> {
            $(
                #[doc = concat!("Calls `", stringify!($method), "` on the object.")]
                #[allow(clippy::unused_unit)]
                pub async fn $method(&self, $($a: &(impl ArgOf<$aty> + ?Sized)),*) -> Result<$ret, MethodError> {
                    const METHOD: &str = stringify!($method);
                    #[allow(unused_mut)]
                    let mut args = crate::Value::object();
                    $(args.insert(stringify!($a), crate::Value::from_serialize($a).map_err(|e| MethodError::new(METHOD, e))?);)*
                    let optional = false $(|| { let _ = stringify!($opt); true })?;
                    finish::<$ret>(METHOD, optional, self.0.invoke_value(METHOD, args).await)
                }
            )*
        }
    };
}

/// A value that may be passed where a method declares `T`: `T` itself, a
/// `str` for a `String`, a slice for a `Vec`, `Option<&T>` for an `Option<T>`.
pub trait ArgOf<T: ?Sized>: Serialize {}
impl<T: Serialize + ?Sized> ArgOf<T> for T {}
impl ArgOf<String> for str {}
impl<T: Serialize> ArgOf<Vec<T>> for [T] {}
impl<T: Serialize> ArgOf<Option<T>> for Option<&T> {}

/// A method call on an object that failed, with the method's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodError {
    /// The method.
    pub method: &'static str,
    /// What the object (or reading its answer) reported.
    pub error: HookError,
}

impl MethodError {
    fn new(method: &'static str, error: HookError) -> Self {
        MethodError { method, error }
    }
}

impl std::fmt::Display for MethodError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.method, self.error)
    }
}

impl std::error::Error for MethodError {}

fn finish<R: DeserializeOwned + Default>(
    method: &'static str,
    optional: bool,
    result: Result<crate::Value, HookError>,
) -> Result<R, MethodError> {
    match result {
        Ok(v) => v.deserialize().map_err(|e| {
            MethodError::new(method, HookError::new(crate::abi::ErrorKind::TYPE, format!("unexpected result: {e}")))
        }),
        Err(e) if optional && e.kind == UNSUPPORTED => Ok(R::default()),
        Err(e) => Err(MethodError::new(method, e)),
    }
}

/// The host-side clients of every object kind (one per `protocol!`).
pub mod clients {
    pub use super::{
        ChannelClient, CliAppClient, CommandClient, EnvironmentClient, FrameworkClient, LifespanClient,
        MessageHandlerClient, SteeringInboxClient, StreamClient, TapeContextClient, TapeStoreClient, ToolClient,
    };
}

protocol!(
    /// Calls a [`Lifespan`] object.
    LifespanObject<T: Lifespan>, LifespanClient, kinds::LIFESPAN, |_l| String::new(), [
    enter() -> (), opt;
    exit(error: Option<ErrorInfo>) -> (), opt;
]);
protocol!(
    /// Calls a [`TapeStore`] object.
    TapeStoreObject<T: TapeStore>, TapeStoreClient, kinds::TAPE_STORE, |_s| String::new(), [
    list_tapes() -> Vec<String>;
    reset(tape: String) -> ();
    fetch_all(query: TapeQuery) -> Vec<TapeEntry> => fetch_all_answer(query: TapeQuery);
    append(tape: String, entry: TapeEntry) -> TapeEntry;
    append_many(tape: String, entries: Vec<TapeEntry>) -> Vec<TapeEntry>, opt
        => append_many_values(tape: String, entries: Vec<crate::Value>);
    enter() -> (), opt;
    exit(error: Option<ErrorInfo>) -> (), opt;
]);
protocol!(
    /// Calls a [`SteeringInbox`] object.
    InboxObject<T: SteeringInbox>, SteeringInboxClient, kinds::STEERING_INBOX, |_i| String::new(), [
    enqueue_message(message: Envelope, state: StateMap) -> ();
    drain_messages(state: StateMap) -> Vec<Envelope>;
    message_count(state: StateMap) -> usize;
    enter() -> (), opt;
    exit(error: Option<ErrorInfo>) -> (), opt;
]);
protocol!(
    /// Calls an [`Environment`] object.
    EnvironmentObject<T: Environment>, EnvironmentClient, kinds::ENVIRONMENT, |_e| String::new(), [
    workspace() -> Option<String>;
    read_text(path: String) -> String;
    write_text(path: String, content: String) -> ();
    resolve_path(path: String) -> String;
    run(request: ProcessRequest) -> ProcessOutput;
    close() -> (), opt;
    read_bytes(path: String) -> Bytes;
    spawn(request: ProcessRequest) -> String;
    write_stdin(process: String, data: Bytes, close: bool) -> ();
    read_output(process: String, stream: String, max: usize) -> Option<Bytes>;
    signal(process: String, kill: bool) -> bool;
    wait(process: String) -> i32;
]);
protocol!(
    /// Calls a [`Channel`] object.
    ChannelObject<T: Channel>, ChannelClient, kinds::CHANNEL, |c| c.name(), [
    start() -> ();
    stop() -> (), opt;
    send(message: Envelope) -> (), opt;
    stream_event(message: Envelope, event: StreamEvent) -> (), opt;
    info() -> ChannelInfo, opt;
    admit_message(session_id: String, message: Envelope, turn: TurnSnapshot) -> Option<AdmitDecision>, opt;
]);
protocol!(
    /// Calls a [`Tool`] object.
    ToolObject<T: ToolMethods>, ToolClient, kinds::TOOL, |t| t.name(), [
    spec() -> ToolSpec;
    call(arguments: Map<String, Value>) -> Value;
    call_in(arguments: Map<String, Value>, context: ToolCallContext) -> Value;
]);
protocol!(
    /// Calls a [`Command`] object.
    CommandObject<T: CommandMethods>, CommandClient, kinds::CLI_COMMAND, |c| c.name(), [
    spec() -> CommandSpec;
    call(arguments: Map<String, Value>) -> Value;
]);
protocol!(
    /// Calls a tape context object (`build_tape_context`).
    TapeContextObject<T: TapeContextMethods>, TapeContextClient, kinds::TAPE_CONTEXT, |c| c.name(), [
    describe() -> Value;
]);
protocol!(
    /// Calls a model stream object (`run_model_stream`).
    StreamObject<T: StreamMethods>, StreamClient, kinds::STREAM, |_s| String::new(), [
    next() -> Option<StreamEvent>;
    next_many() -> Vec<StreamEvent>;
    close() -> (), opt;
]);

protocol!(
    /// Calls the host's message handler (what a channel does).
    MessageHandlerObject<T: MessageHandler>, MessageHandlerClient, kinds::MESSAGE_HANDLER, |_h| String::new(), [
    handle(message: Envelope) -> ();
    submit(message: Envelope) -> Delivery, opt;
    close() -> (), opt;
]);
protocol!(
    /// Calls the host's command line object.
    CliAppObject<T: CliApp>, CliAppClient, kinds::CLI_APP, |_a| String::new(), [
    workspace() -> String;
    home() -> String;
    commands() -> Vec<String>;
]);
protocol!(
    /// Calls the host's framework (what `on_error` may do).
    FrameworkObject<T: FrameworkOps>, FrameworkClient, kinds::FRAMEWORK, |_f| String::new(), [
    dispatch_outbound(message: Envelope) -> Vec<Value>;
]);

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
