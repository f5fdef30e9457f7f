//! The object protocol: a resource's methods called by name with their
//! arguments as one host value, generated once per kind by `protocol!`:
//! the adapter that turns a trait implementation into an object, and the
//! typed client the host (or a plugin) calls an object through.

use std::sync::Arc;

use serde::{de::DeserializeOwned, Serialize};
use serde_json::Value;

use super::*;

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
        pub(super) struct $Adapter<$T>(pub(super) Arc<$T>);

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
    search_tapes(tapes: Option<Vec<String>>, query: TapeQuery) -> Option<Vec<TapeMatch>>, opt;
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
