//! A test plugin written as plugin authors write them: `#[bub_abi::plugin]`,
//! plain and `async fn` hooks declaring only the parameters they read,
//! markers, `tracing`, the live turn state (with a live object in it), and
//! typed errors.

use std::time::Duration;

use bub_abi::{
    resources::{Command, Fut, Tool},
    types::{CommandArg, CommandSpec, Envelope, Prompt, StateMap, ToolSpec},
    BoxError, Object, Plugin, PluginContext, TurnState,
};
use serde::Deserialize;
use serde_json::{Map, Value};

pub struct Sdk {
    name: String,
    // The host's message handler, from `provide_channels` (for `tell`).
    handler: std::sync::Arc<std::sync::Mutex<Option<Object>>>,
}

/// A plugin may read an argument as its own type.
#[derive(Deserialize)]
struct Chat {
    chat_id: String,
}

#[bub_abi::plugin]
impl Plugin for Sdk {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        tracing::info!(name = %ctx.name, "tp-sdk initialised");
        Ok(Sdk { name: ctx.name.clone(), handler: Default::default() })
    }

    /// Reads the message as its own struct.
    #[tryfirst]
    fn resolve_session(&self, message: Chat) -> Option<String> {
        Some(format!("{}:{}", self.name, message.chat_id))
    }

    /// Declares no parameters: never parses any.
    fn load_state(&self) -> Option<StateMap> {
        let mut m = StateMap::new();
        m.insert("from_sdk".into(), serde_json::json!(true));
        Some(m)
    }

    /// Reads the live state another hook may have written, and puts a live
    /// object into it (ABI 2.2) that every plugin's `save_state` calls.
    fn build_prompt(&self, message: Envelope, state: TurnState) -> Result<Option<Prompt>, BoxError> {
        let seen: Option<String> = state.get("note")?;
        state.set("built_by", &self.name)?;
        let counter = Counter { owner: self.name.clone(), calls: Default::default() };
        state.set_object("sdk.counter", &Object::new(counter))?;
        let content = message.get("content").and_then(|c| c.as_str()).unwrap_or_default();
        Ok(Some(Prompt::String(format!("{content} [note={}]", seen.unwrap_or_default()))))
    }

    /// An async hook using tokio's timer inside the plugin.
    async fn run_model(&self, prompt: Prompt, _session_id: String) -> Result<Option<String>, BoxError> {
        // "[agent]" leaves the turn to the next model hook (the builtin's agent).
        if prompt.as_str().is_some_and(|p| p.contains("[agent]")) {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        tracing::info!(plugin = %self.name, "model answered after sleeping");
        Ok(Some(format!("echo: {}", prompt.as_str().unwrap_or_default())))
    }

    /// Calls the live object some plugin's `build_prompt` left in the state
    /// (this one's, or another instance's) and records what it answered;
    /// panics (inside the future) when the state says `sdk.explode`.
    async fn save_state(&self, state: TurnState) -> Result<(), BoxError> {
        if matches!(state.get::<bool>("sdk.explode"), Ok(Some(true))) {
            panic!("tp-sdk exploded in a future");
        }
        if let Some(counter) = state.get_object("sdk.counter") {
            let answer = counter.invoke("next", &serde_json::json!({"caller": self.name})).await?;
            state.set(&format!("sdk.counted.{}", self.name), &answer)?;
        }

        Ok(())
    }

    /// A sync-only hook is a plain `fn` (an `async fn` here does not compile).
    fn system_prompt(&self) -> Option<String> {
        Some("from a plain fn".into())
    }

    /// A sync hook that runs async code on a runtime of its own.
    fn onboard_config(&self) -> Result<Option<StateMap>, BoxError> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
        let waited = rt.block_on(async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            "slept"
        });
        let mut m = StateMap::new();
        m.insert("sdk".into(), serde_json::json!({ "blocking": waited }));
        Ok(Some(m))
    }

    /// Panics on demand (sync).
    #[trylast]
    fn dispatch_outbound(&self, message: Envelope) -> Option<bool> {
        if message.get("content").and_then(|c| c.as_str()) == Some("boom") {
            panic!("tp-sdk was asked to explode");
        }
        Some(true)
    }

    /// An error through `Result`.
    fn render_outbound(&self, model_output: String) -> Result<Option<bub_abi::types::Outbound>, String> {
        if model_output == "fail" {
            return Err("cannot render 'fail'".into());
        }
        Ok(Some(serde_json::json!([{"content": model_output}])))
    }

    /// A subcommand of `bub`: `bub greet NAME [--shout]`.
    fn register_cli_commands(&self, app: Object) -> Option<Vec<Object>> {
        Some(vec![Object::cli_command(Greet { app }), Object::cli_command(Login)])
    }

    /// A tool, written against the typed trait.
    fn provide_tools(&self) -> Option<Vec<Object>> {
        Some(vec![Object::tool(Upper), Object::tool(TapeNote), Object::tool(Tell(self.handler.clone()))])
    }

    /// No channel of its own: keeps the host's message handler for `tell`.
    fn provide_channels(&self, message_handler: Object) -> Option<Vec<Object>> {
        *self.handler.lock().unwrap() = Some(message_handler);
        None
    }
}

/// A live object: counts its calls, says whose it is.
struct Counter {
    owner: String,
    calls: std::sync::atomic::AtomicU64,
}

impl bub_abi::sdk::object::ObjectImpl for Counter {
    fn kind(&self) -> &str {
        "counter"
    }

    fn name(&self) -> String {
        self.owner.clone()
    }

    fn invoke(&self, method: &str, args: Value) -> bub_abi::sdk::object::ObjectFuture {
        let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let (owner, method) = (self.owner.clone(), method.to_owned());
        Box::pin(async move {
            match method.as_str() {
                "next" => Ok(serde_json::json!({"owner": owner, "call": n, "caller": args["caller"]})),
                other => Err(bub_abi::HookError::plugin(format!("a counter has no method {other}"))),
            }
        })
    }
}

struct Greet {
    app: Object,
}

impl Command for Greet {
    fn spec(&self) -> CommandSpec {
        CommandSpec {
            name: "greet".into(),
            about: "Greets someone from the workspace (tp-sdk)".into(),
            args: vec![
                CommandArg { name: "name".into(), help: "who".into(), required: true, ..Default::default() },
                CommandArg { name: "shout".into(), help: "louder".into(), flag: true, ..Default::default() },
            ],
            ..Default::default()
        }
    }

    fn run(&self, args: Map<String, Value>) -> impl Fut<Value> {
        let app = self.app.clone();
        async move {
            let workspace = bub_abi::resources::clients::CliAppClient(&app).workspace().await?;
            let name = args.get("name").and_then(Value::as_str).unwrap_or_default();
            let mut text = format!("hello {name} from {workspace}");
            if args.get("shout") == Some(&Value::Bool(true)) {
                text = text.to_uppercase();
            }
            Ok(Value::String(text))
        }
    }
}

/// `bub login tp-sdk`: a plugin's login, in Bub's `login` group (ABI 2.9).
struct Login;

impl Command for Login {
    fn spec(&self) -> CommandSpec {
        CommandSpec {
            name: "tp-sdk".into(),
            about: "Logs in to tp-sdk's pretend service".into(),
            args: vec![CommandArg {
                name: "token".into(),
                help: "the token".into(),
                option: true,
                ..Default::default()
            }],
            group: Some("login".into()),
        }
    }

    fn run(&self, args: Map<String, Value>) -> impl Fut<Value> {
        let token = args.get("token").and_then(Value::as_str).unwrap_or("none").to_owned();
        async move { Ok(Value::String(format!("tp-sdk login: ok (token {token})"))) }
    }
}

struct Upper;

impl Tool for Upper {
    fn spec(&self) -> ToolSpec {
        ToolSpec { name: "upper".into(), description: "Upper-cases `text`".into(), ..Default::default() }
    }

    fn call(&self, arguments: Map<String, Value>) -> impl Fut<Value> {
        let text = arguments.get("text").and_then(Value::as_str).unwrap_or_default().to_uppercase();
        async move { Ok(Value::String(text)) }
    }
}

/// A context tool using the live tape and state (ABI 2.2, Bub's
/// `context.tape` / `context.state`): records an event on the run's tape,
/// sets a state key, and answers the tape's anchors and the state's keys.
struct TapeNote;

impl Tool for TapeNote {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "tape_note".into(),
            description: "Notes `text` on the tape".into(),
            context: true,
            ..Default::default()
        }
    }

    fn call(&self, _arguments: Map<String, Value>) -> impl Fut<Value> {
        async { Err("tape_note needs its context".into()) }
    }

    fn call_in(&self, arguments: Map<String, Value>, context: bub_abi::types::ToolCallContext) -> impl Fut<Value> {
        let (tape, state) = (context.live_tape(), context.live_state());
        async move {
            let (Some(tape), Some(state)) = (tape, state) else { return Err("no live tape or state".into()) };
            let text = arguments.get("text").cloned().unwrap_or_default();
            tape.invoke("event", &serde_json::json!({"name": "sdk.note", "data": {"text": text}})).await?;
            state.invoke("set", &serde_json::json!({"key": "sdk.noted", "value": text})).await?;
            let anchors = tape.invoke("anchors", &serde_json::json!({})).await?;
            let noted = state.invoke("get", &serde_json::json!({"key": "sdk.noted"})).await?;
            Ok(serde_json::json!({"tape": tape.name(), "anchors": anchors, "noted": noted}))
        }
    }
}

/// Hands `text` to the host's message handler from inside a turn, as a
/// plugin that answers later or forwards a message does.
struct Tell(std::sync::Arc<std::sync::Mutex<Option<Object>>>);

impl Tool for Tell {
    fn spec(&self) -> ToolSpec {
        ToolSpec { name: "tell".into(), description: "Sends `text` as a new message".into(), ..Default::default() }
    }

    fn call(&self, arguments: Map<String, Value>) -> impl Fut<Value> {
        let handler = self.0.lock().unwrap().clone();
        async move {
            let handler = handler.ok_or("no message handler")?;
            let text = arguments.get("text").cloned().unwrap_or_default();
            let message = serde_json::json!({"channel": "cli", "content": text});
            bub_abi::resources::clients::MessageHandlerClient(&handler).handle(&message).await?;
            Ok(Value::String("told".into()))
        }
    }
}

bub_abi::export_plugin!(Sdk);
