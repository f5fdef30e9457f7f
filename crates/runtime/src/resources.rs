//! Typed handles over the objects that app hooks return.
//!
//! A provider hands the host an [`Object`] (kind, name, methods by name; see
//! `bub_abi::resources`). Here each kind gets a handle with typed methods, and
//! [`Resource::from_reply`] is where Bub's `isinstance` checks live: a
//! provider answering something else gets the `TypeError` Bub raises
//! (`hook.provide_environment must return Environment or None`, …).

use std::{sync::Arc, time::Duration};

use bub_abi::{
    resources::{
        clients::{
            ChannelClient, CommandClient, EnvironmentClient, LifespanClient, SteeringInboxClient, TapeContextClient,
            TapeStoreClient, ToolClient,
        },
        kinds, MethodError,
    },
    types::{
        AdmitDecision, ChannelInfo, CommandSpec, Envelope, ErrorInfo, ProcessOutput, ProcessRequest, StateMap,
        StreamEvent, TapeEntry, TapeQuery, ToolSpec, TurnSnapshot,
    },
    HookError, Object,
};
use serde_json::{Map, Value};

use crate::runtime::Reply;

/// A tape entry as a store answered it ([`TapeStore::fetch_all_hosted`]).
#[derive(Debug, Clone)]
pub struct FetchedEntry {
    /// The entry; its `payload` is left empty when
    /// [`message_payload`](Self::message_payload) holds it.
    pub entry: TapeEntry,
    /// A `message` entry's payload (a map) as the store's answer held it: a
    /// handle to that node, nothing copied, nothing read into `entry` (a
    /// message's payload becomes a context message, read from the host
    /// value). None for other entries.
    pub message_payload: Option<bub_abi::Value>,
}

impl FetchedEntry {
    /// The payload as JSON, wherever it is kept.
    pub fn payload_map(&self) -> Map<String, Value> {
        match &self.message_payload {
            Some(p) => p.deserialize().unwrap_or_default(),
            None => self.entry.payload.clone(),
        }
    }
}

/// A message entry with its payload (a map) left as the host value it
/// arrived in, read in one pass over its keys: serde's visitor for a map
/// of five keys was a tenth of a long session's first read, and a lookup
/// by key per field half as much again. `None` for any other entry, or a
/// field not of its type (which serde then reads, or reports).
fn message_entry(item: bub_abi::ValueRef<'_>) -> Option<(TapeEntry, bub_abi::ValueRef<'_>)> {
    let (mut id, mut kind, mut payload, mut meta, mut date) = (0, None, None, None, "");
    for (key, value) in item.entries() {
        match key {
            "id" => id = value.as_u64()?,
            "kind" => kind = Some(value.as_str()?),
            "payload" => payload = Some(value),
            "meta" => meta = Some(value),
            "date" => date = value.as_str()?,
            _ => {}
        }
    }
    let payload = payload.filter(|p| kind == Some("message") && p.is_object())?;
    let meta = match meta {
        Some(m) if !(m.is_object() && m.is_empty()) => m.deserialize().ok()?,
        _ => Map::new(),
    };
    let entry = TapeEntry { id, kind: "message".to_owned(), payload: Map::new(), meta, date: date.to_owned() };
    Some((entry, payload))
}

/// A resource method failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{kind} `{name}` of plugin '{plugin}' failed in `{method}`: {error}")]
pub struct ResourceError {
    /// The plugin that provided the resource.
    pub plugin: String,
    /// The resource kind.
    pub kind: &'static str,
    /// The resource's name (may be empty).
    pub name: String,
    /// The method.
    pub method: &'static str,
    /// What the plugin reported.
    pub error: HookError,
}

impl ResourceError {
    /// As handed to `on_error` observers and `exit` methods.
    pub fn info(&self) -> ErrorInfo {
        ErrorInfo { kind: self.error.kind.to_string(), message: self.to_string(), details: None }
    }
}

/// An object of a known kind, with the plugin that provided it.
#[derive(Clone)]
pub struct Resource {
    object: Object,
    plugin: Arc<str>,
    kind: &'static str,
    name: String,
}

impl std::fmt::Debug for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({}) from {}", self.kind, self.name, self.plugin)
    }
}

impl Resource {
    /// Checks that `object` is a `kind`.
    pub fn new(object: Object, plugin: &str, kind: &'static str) -> Result<Resource, String> {
        let actual = object.kind();
        if actual != kind {
            return Err(format!("got an object of kind `{actual}`"));
        }
        let name = object.name();
        Ok(Resource { object, plugin: plugin.into(), kind, name })
    }

    /// The resource in `reply`, which must be a `kind` object; otherwise the
    /// `TypeError` message Bub gives (`hook.<hook> must return <Type> or None`).
    pub fn from_reply(reply: &Reply, kind: &'static str, bub_type_error: &str) -> Result<Resource, String> {
        match reply.object() {
            Some(o) => Resource::new(o, &reply.plugin, kind).map_err(|_| bub_type_error.to_owned()),
            None => Err(format!("{bub_type_error} (plugin '{}' returned {})", reply.plugin, reply.type_name())),
        }
    }

    /// The provider.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The raw object.
    pub fn object(&self) -> &Object {
        &self.object
    }

    /// A client of this object's `Kind` protocol (`bub_abi::resources::clients`).
    fn client<'a, C>(&'a self, make: fn(&'a Object) -> C) -> C {
        make(&self.object)
    }

    /// Names a failed method call after this resource.
    fn context<T>(&self, result: Result<T, MethodError>) -> Result<T, ResourceError> {
        result.map_err(|e| ResourceError {
            plugin: self.plugin.to_string(),
            kind: self.kind,
            name: self.name.clone(),
            method: e.method,
            error: e.error,
        })
    }

    /// Enters a scoped resource (lifespans, tape stores and steering inboxes
    /// share the lifespan protocol's optional `enter` / `exit`).
    pub async fn enter(&self, deadline: Option<Duration>) -> Result<(), ResourceError> {
        let client = self.client(LifespanClient);
        self.within("enter", deadline, async { self.context(client.enter().await) }).await
    }

    /// Exits a scoped resource, telling it the scope's error.
    pub async fn exit(&self, error: Option<&ErrorInfo>, deadline: Option<Duration>) -> Result<(), ResourceError> {
        let client = self.client(LifespanClient);
        self.within("exit", deadline, async { self.context(client.exit(&error).await) }).await
    }

    /// Runs a scope method under `deadline` (the lifespan deadline,
    /// `RuntimeSettings::lifespan_timeout`: `BUB_LIFESPAN_TIMEOUT_SECONDS`,
    /// default 60; None = none): a resource
    /// that hangs on entry or exit is cancelled and named, instead of
    /// holding `bub` forever. (The gateway holds channels' `start` and
    /// `stop` to it too: they must not block.)
    pub async fn within(
        &self,
        method: &'static str,
        deadline: Option<Duration>,
        call: impl std::future::Future<Output = Result<(), ResourceError>>,
    ) -> Result<(), ResourceError> {
        let Some(limit) = deadline.filter(|_| tokio::runtime::Handle::try_current().is_ok()) else {
            return call.await;
        };
        let seconds = limit.as_secs_f64();
        match tokio::time::timeout(limit, call).await {
            Ok(r) => r,
            Err(_) => Err(ResourceError {
                plugin: self.plugin.to_string(),
                kind: self.kind,
                name: self.name.clone(),
                method,
                error: HookError::new(
                    bub_abi::ErrorKind::ERROR,
                    format!("did not finish within {seconds} s and was cancelled (BUB_LIFESPAN_TIMEOUT_SECONDS)"),
                ),
            }),
        }
    }
}

macro_rules! handle {
    ($(#[$doc:meta])* $Name:ident, $kind:expr, $bub:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $Name(pub Resource);

        impl $Name {
            /// The object kind this handle wraps.
            pub const KIND: &'static str = $kind;

            /// Bub's `TypeError` message for a provider answering something else.
            pub const TYPE_ERROR: &'static str = $bub;

            /// The handle in a provider's reply (see [`Resource::from_reply`]).
            pub fn from_reply(reply: &Reply) -> Result<Self, String> {
                Resource::from_reply(reply, $kind, $bub).map($Name)
            }

            /// `object`, provided by `plugin`, if it is of this kind.
            pub fn from_object(object: Object, plugin: &str) -> Result<Self, String> {
                Resource::new(object, plugin, $kind).map($Name)
            }

            /// The underlying resource.
            pub fn resource(&self) -> &Resource {
                &self.0
            }

            /// The object's name (channels, tools, sidecars and commands are
            /// deduplicated by it).
            pub fn name(&self) -> &str {
                self.0.name()
            }
        }
    };
}

handle!(
    /// A `provide_lifespan` result.
    Lifespan, kinds::LIFESPAN, "hook.provide_lifespan must return a lifespan or None"
);
handle!(
    /// The scope's tape store (`provide_tape_store`).
    TapeStore, kinds::TAPE_STORE, "hook.provide_tape_store must return TapeStore or None"
);
handle!(
    /// The scope's steering inbox (`provide_steering_inbox`).
    SteeringInbox, kinds::STEERING_INBOX, "hook.provide_steering_inbox must return SteeringInbox or None"
);
handle!(
    /// A session's environment (`provide_environment`).
    Environment, kinds::ENVIRONMENT, "hook.provide_environment must return Environment or None"
);
handle!(
    /// A channel (`provide_channels`).
    Channel, kinds::CHANNEL, "hook.provide_channels must return a list of Channel"
);
handle!(
    /// A tool (`provide_tools`).
    Tool, kinds::TOOL, "hook.provide_tools must return a list of Tool"
);
handle!(
    /// A tape sidecar (`provide_tape_sidecar`).
    TapeSidecar, kinds::TAPE_SIDECAR, "hook.provide_tape_sidecar must return TapeSidecar"
);
handle!(
    /// The agent's tape context (`build_tape_context`).
    TapeContext, kinds::TAPE_CONTEXT, "hook.build_tape_context must return TapeContext"
);
handle!(
    /// A plugin subcommand (`register_cli_commands`).
    CliCommand, kinds::CLI_COMMAND, "hook.register_cli_commands must return a list of commands or None"
);

impl TapeStore {
    /// Names of every tape.
    pub async fn list_tapes(&self) -> Result<Vec<String>, ResourceError> {
        self.0.context(self.0.client(TapeStoreClient).list_tapes().await)
    }
    /// Clears a tape.
    pub async fn reset(&self, tape: &str) -> Result<(), ResourceError> {
        self.0.context(self.0.client(TapeStoreClient).reset(tape).await)
    }
    /// A search across `tapes` (None: all) from the store's own index;
    /// `None` when the store has none (the caller then scans).
    pub async fn search_tapes(
        &self,
        tapes: Option<&[String]>,
        query: &TapeQuery,
    ) -> Result<Option<Vec<bub_abi::types::TapeMatch>>, ResourceError> {
        let tapes = tapes.map(<[String]>::to_vec);
        self.0.context(self.0.client(TapeStoreClient).search_tapes(&tapes, query).await)
    }
    /// The entries a query selects.
    pub async fn fetch_all(&self, query: &TapeQuery) -> Result<Vec<TapeEntry>, ResourceError> {
        self.0.context(self.0.client(TapeStoreClient).fetch_all(query).await)
    }

    /// As [`fetch_all`](Self::fetch_all), each entry with its payload as
    /// the host value it arrived in: a reader that hands payloads on as
    /// host values (the agent's context messages, to the interception
    /// hooks) keeps that node instead of building the same tree again.
    pub async fn fetch_all_hosted(&self, query: &TapeQuery) -> Result<Vec<FetchedEntry>, ResourceError> {
        const METHOD: &str = "fetch_all";
        let failed = |error: HookError| MethodError { method: METHOD, error };
        let unexpected = |e: &dyn std::fmt::Display| {
            failed(HookError::new(bub_abi::ErrorKind::TYPE, format!("unexpected result: {e}")))
        };
        let answer = async {
            let mut args = bub_abi::Value::object();
            args.insert("query", bub_abi::Value::from_serialize(query).map_err(failed)?);
            let answer = self.0.object.invoke_value(METHOD, args).await.map_err(failed)?;
            let items = answer.as_ref();
            if !items.is_array() {
                return Err(unexpected(&format_args!("expected a list of tape entries, got {:?}", items.kind())));
            }
            // Sized up front: a 10,000-entry tape's list grown by doubling
            // was copied twice over (and its pages faulted in again).
            let mut out = Vec::with_capacity(items.len());
            for item in items.items() {
                let fetched = match message_entry(item) {
                    // The payload stays a host value (see `FetchedEntry`).
                    Some((entry, payload)) => FetchedEntry { entry, message_payload: Some(payload.to_owned()) },
                    None => {
                        let entry = item.deserialize::<TapeEntry>().map_err(|e| unexpected(&e))?;
                        FetchedEntry { entry, message_payload: None }
                    }
                };
                out.push(fetched);
            }
            Ok(out)
        };
        self.0.context(answer.await)
    }
    /// Appends `entries` in order and returns them with their ids: at once
    /// where the store can (`append_many`), else one by one (a store built
    /// before ABI 2.1).
    pub async fn append_many(&self, tape: &str, entries: &[TapeEntry]) -> Result<Vec<TapeEntry>, ResourceError> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        // An older store answers "unsupported", read as nothing stored.
        let stored = self.0.context(self.0.client(TapeStoreClient).append_many(tape, entries).await)?;
        if self.all_stored(stored.len(), entries.len())? {
            return Ok(stored);
        }
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            out.push(self.append(tape, entry).await?);
        }
        Ok(out)
    }

    /// As [`append_many`](Self::append_many) for a caller that gives the
    /// entries up and needs only how many were stored. Each entry is
    /// written into the host list and dropped as it goes, so the entries
    /// are held once, not twice (for a run with a big prompt, its flush's
    /// peak); the store's answer (every entry again) is counted, not read.
    /// A store that cannot append many gets them one by one, read back
    /// from that list.
    ///
    /// A store that fails (out of descriptors, a database gone for a
    /// moment) is asked again after each of `retries`' waits with the same
    /// list; when it still fails the entries come back in the error
    /// ([`NotStored`]), so that the caller can keep them elsewhere rather
    /// than lose what a turn already answered. A retry after a write the
    /// store half did may store an entry twice: better than none.
    pub async fn append_many_counted(
        &self,
        tape: &str,
        entries: Vec<TapeEntry>,
        retries: &[Duration],
    ) -> Result<usize, NotStored> {
        if entries.is_empty() {
            return Ok(0);
        }
        const METHOD: &str = "append_many";
        let wanted = entries.len();
        let mut list = bub_abi::Value::array();
        // Given up one by one as they are written into the list: the
        // entries are never held twice (a run with a big prompt).
        let mut entries = entries.into_iter();
        while let Some(entry) = entries.next() {
            match bub_abi::Value::from_serialize(&entry) {
                Ok(v) => list.push(v),
                Err(e) => {
                    let mut back: Vec<TapeEntry> =
                        list.as_ref().items().filter_map(|item| item.deserialize::<TapeEntry>().ok()).collect();
                    back.push(entry);
                    back.extend(entries);
                    return Err(self.not_stored(METHOD, e, back));
                }
            };
        }
        // The entries back from the list, for an error that hands them back.
        let give_back = |error: bub_abi::HookError| {
            let entries = list.as_ref().items().filter_map(|item| item.deserialize::<TapeEntry>().ok()).collect();
            self.not_stored(METHOD, error, entries)
        };
        let mut waits = retries.iter();
        let stored = loop {
            let mut args = bub_abi::Value::object();
            args.insert("tape", tape);
            // Shared, not copied: the list stays ours for a retry and the fallback.
            args.insert_ref("entries", list.as_ref());
            match self.0.object().invoke_value(METHOD, args).await {
                Ok(answer) if answer.as_ref().is_array() => break answer.as_ref().len(),
                Ok(_) => {
                    let e =
                        bub_abi::HookError::new(bub_abi::ErrorKind::TYPE, "unexpected result: not a list of entries");
                    return Err(give_back(e));
                }
                Err(e) if e.kind == bub_abi::ErrorKind::UNSUPPORTED => break 0,
                Err(e) if matches!(e.kind, bub_abi::ErrorKind::ARGS | bub_abi::ErrorKind::TYPE) => {
                    return Err(give_back(e))
                }
                Err(e) => match waits.next() {
                    Some(wait) => {
                        tracing::warn!(
                            target: "bub::tape",
                            "the tape store ({}) failed to append {wanted} entries to tape {tape}: {}; again in {wait:?}",
                            self.0.plugin,
                            e.message
                        );
                        tokio::time::sleep(*wait).await;
                    }
                    None => return Err(give_back(e)),
                },
            }
        };
        match self.all_stored(stored, wanted) {
            Ok(true) => {}
            Ok(false) => {
                for item in list.as_ref().items() {
                    let entry: TapeEntry = match item.deserialize() {
                        Ok(e) => e,
                        Err(e) => {
                            return Err(give_back(bub_abi::HookError::new(bub_abi::ErrorKind::TYPE, e.to_string())))
                        }
                    };
                    if let Err(e) = self.append(tape, &entry).await {
                        return Err(give_back(e.error));
                    }
                }
            }
            Err(e) => return Err(give_back(e.error)),
        }
        Ok(wanted)
    }

    fn not_stored(&self, method: &'static str, error: bub_abi::HookError, entries: Vec<TapeEntry>) -> NotStored {
        let error = ResourceError {
            plugin: self.0.plugin.to_string(),
            kind: self.0.kind,
            name: self.0.name.clone(),
            method,
            error,
        };
        NotStored { error, entries }
    }

    /// What an `append_many` answer of `stored` entries means for `wanted`:
    /// all stored (`true`); nothing (`false`: a store built before ABI 2.1,
    /// which the caller then fills one by one); or part, an error.
    fn all_stored(&self, stored: usize, wanted: usize) -> Result<bool, ResourceError> {
        if stored == wanted {
            return Ok(true);
        }
        if stored == 0 {
            return Ok(false);
        }
        let error = bub_abi::HookError::new(bub_abi::ErrorKind::TYPE, format!("stored {stored} of {wanted} entries"));
        self.0.context(Err(MethodError { method: "append_many", error }))
    }

    /// Appends an entry; returns it with its id.
    pub async fn append(&self, tape: &str, entry: &TapeEntry) -> Result<TapeEntry, ResourceError> {
        self.0.context(self.0.client(TapeStoreClient).append(tape, entry).await)
    }
}

/// Entries a tape store did not take, handed back with why
/// ([`TapeStore::append_many_counted`]).
#[derive(Debug)]
pub struct NotStored {
    /// The store's failure.
    pub error: ResourceError,
    /// The entries, in order (after a one-by-one fallback that failed
    /// part way, the ones already stored too).
    pub entries: Vec<TapeEntry>,
}

impl SteeringInbox {
    /// Queues a message for the turn of `state`.
    pub async fn enqueue_message(&self, message: &Envelope, state: &StateMap) -> Result<(), ResourceError> {
        self.0.context(self.0.client(SteeringInboxClient).enqueue_message(message, state).await)
    }
    /// Takes the queued messages of the turn of `state`.
    pub async fn drain_messages(&self, state: &StateMap) -> Result<Vec<Envelope>, ResourceError> {
        self.0.context(self.0.client(SteeringInboxClient).drain_messages(state).await)
    }
    /// Counts the queued messages of the turn of `state`.
    pub async fn message_count(&self, state: &StateMap) -> Result<usize, ResourceError> {
        self.0.context(self.0.client(SteeringInboxClient).message_count(state).await)
    }
}

impl Environment {
    /// The workspace.
    pub async fn workspace(&self) -> Result<Option<String>, ResourceError> {
        self.0.context(self.0.client(EnvironmentClient).workspace().await)
    }
    /// Reads a text file.
    pub async fn read_text(&self, path: &str) -> Result<String, ResourceError> {
        self.0.context(self.0.client(EnvironmentClient).read_text(path).await)
    }
    /// Writes a text file.
    pub async fn write_text(&self, path: &str, content: &str) -> Result<(), ResourceError> {
        self.0.context(self.0.client(EnvironmentClient).write_text(path, content).await)
    }
    /// Resolves a path against the workspace.
    pub async fn resolve_path(&self, path: &str) -> Result<String, ResourceError> {
        self.0.context(self.0.client(EnvironmentClient).resolve_path(path).await)
    }
    /// Runs a process.
    pub async fn run(&self, request: &ProcessRequest) -> Result<ProcessOutput, ResourceError> {
        self.0.context(self.0.client(EnvironmentClient).run(request).await)
    }
    /// Releases the environment.
    pub async fn close(&self) -> Result<(), ResourceError> {
        self.0.context(self.0.client(EnvironmentClient).close().await)
    }
    /// Reads a file's bytes.
    pub async fn read_bytes(&self, path: &str) -> Result<Vec<u8>, ResourceError> {
        self.0.context(self.0.client(EnvironmentClient).read_bytes(path).await).map(|b| b.0)
    }
    /// Starts a streaming process; its id.
    pub async fn spawn(&self, request: &ProcessRequest) -> Result<String, ResourceError> {
        self.0.context(self.0.client(EnvironmentClient).spawn(request).await)
    }
    /// Writes to a spawned process's input (`close`: then ends it).
    pub async fn write_stdin(&self, process: &str, data: &[u8], close: bool) -> Result<(), ResourceError> {
        let data = bub_abi::types::Bytes(data.to_vec());
        self.0.context(self.0.client(EnvironmentClient).write_stdin(process, &data, &close).await)
    }
    /// Up to `max` bytes of a spawned process's `stdout` or `stderr`; None at
    /// its end.
    pub async fn read_output(&self, process: &str, stream: &str, max: usize) -> Result<Option<Vec<u8>>, ResourceError> {
        self.0
            .context(self.0.client(EnvironmentClient).read_output(process, stream, &max).await)
            .map(|b| b.map(|b| b.0))
    }
    /// TERM (or KILL) to a spawned process and its group.
    pub async fn signal(&self, process: &str, kill: bool) -> Result<bool, ResourceError> {
        self.0.context(self.0.client(EnvironmentClient).signal(process, &kill).await)
    }
    /// Waits for a spawned process: its return code.
    pub async fn wait(&self, process: &str) -> Result<i32, ResourceError> {
        self.0.context(self.0.client(EnvironmentClient).wait(process).await)
    }
}

impl Channel {
    /// Starts it.
    pub async fn start(&self) -> Result<(), ResourceError> {
        self.0.context(self.0.client(ChannelClient).start().await)
    }
    /// Stops it.
    pub async fn stop(&self) -> Result<(), ResourceError> {
        self.0.context(self.0.client(ChannelClient).stop().await)
    }
    /// Delivers a message.
    pub async fn send(&self, message: &Envelope) -> Result<(), ResourceError> {
        self.0.context(self.0.client(ChannelClient).send(message).await)
    }
    /// Shows one stream event of the turn answering `message`.
    pub async fn stream_event(&self, message: &Envelope, event: &StreamEvent) -> Result<(), ResourceError> {
        self.0.context(self.0.client(ChannelClient).stream_event(message, event).await)
    }
    /// Its role, enablement and debouncing (Bub's defaults when it does not say).
    pub async fn info(&self) -> Result<ChannelInfo, ResourceError> {
        self.0.context(self.0.client(ChannelClient).info().await)
    }
    /// Its own admission decision for one of its messages.
    pub async fn admit_message(
        &self,
        session_id: &str,
        message: &Envelope,
        turn: &TurnSnapshot,
    ) -> Result<Option<AdmitDecision>, ResourceError> {
        self.0.context(self.0.client(ChannelClient).admit_message(session_id, message, turn).await)
    }
}

impl Tool {
    /// Its spec.
    pub async fn spec(&self) -> Result<ToolSpec, ResourceError> {
        self.0.context(self.0.client(ToolClient).spec().await)
    }
    /// Runs it.
    pub async fn call(&self, arguments: &Map<String, Value>) -> Result<Value, ResourceError> {
        self.0.context(self.0.client(ToolClient).call(arguments).await)
    }
    /// Runs it with the call's context (a tool whose spec asks for it).
    pub async fn call_in(
        &self,
        arguments: &Map<String, Value>,
        context: &bub_abi::types::ToolCallContext,
    ) -> Result<Value, ResourceError> {
        self.call_in_live(arguments, context, &[]).await
    }

    /// [`call_in`](Self::call_in), with live objects added to the context
    /// under their names (ABI 2.2: the run's tape, the turn state); a tool
    /// reads them with `ToolCallContext::live_tape()` / `live_state()`.
    /// On a host value table without objects the context goes without them.
    pub async fn call_in_live(
        &self,
        arguments: &Map<String, Value>,
        context: &bub_abi::types::ToolCallContext,
        live: &[(&str, bub_abi::Object)],
    ) -> Result<Value, ResourceError> {
        let fail = |e: HookError| {
            self.0.context::<Value>(Err(bub_abi::resources::MethodError { method: "call_in", error: e }))
        };
        let mut context_value = match bub_abi::Value::from_serialize(context) {
            Ok(v) => v,
            Err(e) => return fail(e),
        };
        for (name, object) in live {
            if let Ok(v) = bub_abi::Value::from_live_object(object) {
                context_value = context_value.as_ref().with(name, v);
            }
        }
        let arguments = match bub_abi::Value::from_serialize(arguments) {
            Ok(v) => v,
            Err(e) => return fail(e),
        };
        let args =
            bub_abi::Value::object().as_ref().with("arguments", arguments).as_ref().with("context", context_value);
        match self.0.object().invoke_value("call_in", args).await {
            Ok(answer) => answer
                .deserialize()
                .or_else(|e| fail(HookError::new(bub_abi::ErrorKind::TYPE, format!("unexpected result: {e}")))),
            Err(e) => fail(e),
        }
    }
}

impl CliCommand {
    /// Its spec.
    pub async fn spec(&self) -> Result<CommandSpec, ResourceError> {
        self.0.context(self.0.client(CommandClient).spec().await)
    }
    /// Runs it with parsed arguments.
    pub async fn run(&self, args: &Map<String, Value>) -> Result<Value, ResourceError> {
        self.0.context(self.0.client(CommandClient).call(args).await)
    }
}

impl TapeContext {
    /// The context's settings.
    pub async fn describe(&self) -> Result<Value, ResourceError> {
        self.0.context(self.0.client(TapeContextClient).describe().await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass read of a message entry gives the entry serde gives
    /// (but its payload, kept apart), or nothing where serde has an error;
    /// any other entry is left to serde.
    #[test]
    fn a_message_entry_head_reads_as_serde_reads_it() {
        let heads = [
            r#"{"id":7,"kind":"message","payload":{},"meta":{},"date":"2026-12-01T00:00:00+00:00"}"#,
            r#"{"kind":"message","payload":{"role":"user"}}"#,
            r#"{"id":7,"kind":"message","payload":{},"meta":{"run_id":"r"},"date":"d"}"#,
            r#"{"id":7,"kind":"message","payload":{},"meta":null}"#,
            r#"{"id":-1,"kind":"message","payload":{}}"#,
            r#"{"id":1.5,"kind":"message","payload":{}}"#,
            r#"{"id":"7","kind":"message","payload":{}}"#,
            r#"{"id":7,"payload":{}}"#,
            r#"{"id":7,"kind":3,"payload":{}}"#,
            r#"{"id":7,"kind":"message","payload":{},"date":null}"#,
            r#"{"id":7,"kind":"message","payload":{},"extra":1}"#,
        ];
        let show = |h: &TapeEntry| format!("{} {} {:?} {}", h.id, h.kind, h.meta, h.date);
        for text in heads {
            let item = bub_abi::Value::from_json(text).unwrap();
            let quick = message_entry(item.as_ref()).map(|(h, _)| show(&h));
            assert_eq!(quick, item.deserialize::<TapeEntry>().ok().map(|h| show(&h)), "{text}");
        }
        let item = bub_abi::Value::from_json(heads[2]).unwrap();
        let (head, payload) = message_entry(item.as_ref()).unwrap();
        assert_eq!(show(&head), r#"7 message {"run_id": String("r")} d"#);
        assert!(payload.is_object() && payload.is_empty());
        // Not a message, or a payload that is not a map: serde's.
        for text in [r#"{"id":7,"kind":"event","payload":{}}"#, r#"{"id":7,"kind":"message","payload":[1]}"#] {
            assert!(message_entry(bub_abi::Value::from_json(text).unwrap().as_ref()).is_none(), "{text}");
        }
    }
}
