//! What a plugin implements for each kind of resource (Bub's types): a
//! tape store, a lifespan, an inbox, an environment, a channel, a tool, a
//! command, and the host's own objects it may be handed.

use super::*;

use crate::{
    sdk::plugin::BoxError,
    types::{
        AdmitDecision, Bytes, ChannelInfo, CommandSpec, Delivery, Envelope, ErrorInfo, ProcessOutput, ProcessRequest,
        StateMap, StreamEvent, TapeEntry, TapeMatch, TapeQuery, ToolSpec, TurnSnapshot,
    },
};

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
    /// Searches several tapes at once (since ABI 2.8): `tapes` (None: every
    /// tape but sidecars, `<tape>__sidecar__<name>`) for the entries
    /// `query`'s text, kinds and dates select (its `tape` and anchor
    /// fields are ignored), newest first across the tapes, at most
    /// `query.limit` (20 when unset). A store with a text index answers
    /// from it; the answer `None` (the default, and what a store built
    /// before 2.8 gives) makes the host read each tape with
    /// [`fetch_all`](Self::fetch_all) instead. Match as
    /// [`bub_kit::tape`'s search](https://docs.rs/bub-kit) does: the
    /// host's scan and an index then find the same entries.
    fn search_tapes(&self, tapes: Option<Vec<String>>, query: TapeQuery) -> impl Fut<Option<Vec<TapeMatch>>> {
        let _ = (tapes, query);
        async { Ok(None) }
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
