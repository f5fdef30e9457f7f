//! # bub-builtin — Bub's builtin plugin, registered first as `builtin`
//!
//! It is compiled into the host and goes through the same ABI and registry as
//! every installed plugin, so any installed plugin can override any of its
//! answers by priority, exactly as in Bub. It holds Bub's builtin behaviours
//! that need no LLM:
//!
//! - turn: `resolve_session`, `load_state`, `build_prompt` (context prefix,
//!   media), `save_state`, `render_outbound`, `dispatch_outbound` (to the
//!   started channels), `on_error` (an error outbound to the user);
//! - app: `system_prompt` (default + the workspace's `AGENTS.md`),
//!   `continue_prompt`, `build_tape_context`, `provide_environment`
//!   ([`environment`]), `provide_tape_store` ([`tape_store`]),
//!   `provide_lifespan` ([`shells`]), `provide_steering_inbox` ([`inbox`]),
//!   `provide_tape_sidecar` (`spill`), `provide_channels` ([`cli_channel`]),
//!   `provide_tools` (`bash`, `fs.*`, `web.fetch`);
//! - agent: `run_model_stream` / `run_model` (Bub's agent, [`crate::agent`],
//!   built for the turn; a plugin with its own model hook overrides it by
//!   priority), `before_tool_call` (a call to a tool the step did not offer
//!   is answered with the closest names).
//!
//! `onboard_config` is Bub's interactive onboarding ([`onboarding`]).
//!
//! It keeps no process globals: the home and the workspace come from the
//! host that registers it (`PluginContext`), and its channel router and
//! open shell scopes belong to its instance, one per host, so two hosts in
//! one process share nothing.

pub mod agent;
pub mod builtin_skills;
pub mod cli_channel;
pub mod code_mode;
pub mod confine;
pub mod environment;
pub mod inbox;
mod local_time;
pub mod onboarding;
pub mod otel;
pub mod own_tools;
pub mod shells;
pub mod skills;
pub mod spill;
pub mod suggest;
pub mod tape_store;
pub mod workspace_tools;

use bub_abi::{
    abi::PluginModRef,
    types::{
        Envelope, ErrorInfo, ModelOptions, Prompt, StateMap, StreamState, TapeContextSpec, ToolCall, ToolCallDecision,
    },
    BoxError, Object, Plugin, PluginContext, TurnState,
};
use serde_json::{json, Map, Value};

use bub_kit::envelope::{content_of, context_str, default_session_id, field_of, truthy};

/// The default system prompt (Bub's builtin prompt, shortened: no tools are
/// described here; tool plugins add their own blocks).
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are Bub, a helpful assistant working in the user's workspace. \
Answer concisely. Use the tools you are given when they help, and say what you did.";

/// Bub's builtin behaviours, for one host.
pub struct Builtin {
    home: std::path::PathBuf,
    workspace: std::path::PathBuf,
    // The host's variables the builtin reads outside a turn (`OWN_VARIABLES`).
    environment: bub_runtime::settings::Environment,
    router: std::sync::Arc<cli_channel::StartedChannels>,
    shells: std::sync::Arc<shells::OpenScopes>,
    // Messages starting with it are commands (`BUB_COMMAND_PREFIX`).
    // Read on the first prompt, not when the host starts (most commands,
    // `bub plugins list` say, never build one).
    command_prefix: std::sync::OnceLock<String>,
}

/// The host's variables the builtin reads outside a turn, where it has no
/// framework to ask (its tools' confinement, the cli channel's command
/// prefix, the models it offers). None is a secret, so they may travel in
/// its constructor config.
const OWN_VARIABLES: [&str; 8] = [
    // The local time zone of the prompt's date line (`local_time`).
    "TZ",
    "TZDIR",
    "BUB_CONFINE_WORKSPACE",
    "BUB_COMMAND_PREFIX",
    "BUB_MODEL",
    "BUB_FALLBACK_MODELS",
    "BUB_TOOL_MAX_BYTES",
    "BUB_TAPE_CACHE_MB",
];

/// The builtin's constructor config, from the host's settings: the
/// [`OWN_VARIABLES`] of its resolved environment.
fn config_from(settings: &bub_runtime::RuntimeSettings) -> Map<String, Value> {
    let own: Map<String, Value> = settings
        .environment
        .iter()
        .filter(|(k, _)| OWN_VARIABLES.contains(k))
        .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
        .collect();
    let mut config = Map::new();
    config.insert("environment".into(), Value::Object(own));
    config
}

impl Builtin {
    /// The agent's settings as the builtin sees them outside a turn.
    fn model_settings(&self) -> Result<bub_agent::ModelSettings, String> {
        bub_agent::ModelSettings::load(&self.home, &self.environment)
    }

    /// The command prefix, read once (`,` when the settings cannot be read).
    fn command_prefix(&self) -> &str {
        self.command_prefix
            .get_or_init(|| self.model_settings().map(|s| s.command_prefix).unwrap_or_else(|_| ",".into()))
    }
}

/// Bub's prompt text: `<context>\n---Date: <local ISO time>---\n<content>`,
/// the prefix only when the context is not empty.
fn prompt_text(context: &str, content: String, environment: &bub_runtime::settings::Environment) -> String {
    if context.is_empty() {
        return content;
    }
    // Python's `datetime.now().astimezone().isoformat(timespec="seconds")`.
    let now = jiff::Timestamp::now().to_zoned(local_time::zone(environment)).strftime("%Y-%m-%dT%H:%M:%S%:z");
    format!("{context}\n---Date: {now}---\n{content}")
}

/// The message's media as prompt parts. An item without a source (no
/// non-empty `url` or `data`: a channel that could not fetch it, or a
/// Python `MediaItem` with only a `data_fetcher`) is left out with a log
/// line: sent on, it reached the model as an image with an empty URL.
fn media_parts(message: &Envelope) -> Vec<Value> {
    let Some(Value::Array(media)) = field_of(message, "media") else { return Vec::new() };
    let source = |m: &Value, key: &str| m.get(key).and_then(Value::as_str).is_some_and(|s| !s.trim().is_empty());
    media
        .iter()
        .filter_map(|m| {
            let kind = m.get("type").and_then(Value::as_str).unwrap_or("image");
            if !matches!(kind, "image" | "audio" | "video") {
                return None;
            }
            if !source(m, "url") && !source(m, "data") {
                tracing::warn!(
                    "a message's {kind} has no url or data (its channel could not fetch it); it is left out of the \
                     prompt"
                );
                return None;
            }
            let mut part = m.clone();
            part["type"] = json!(kind);
            Some(part)
        })
        .collect()
}

#[bub_abi::plugin]
impl Plugin for Builtin {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        Ok(Builtin {
            home: ctx.home.clone(),
            workspace: ctx.workspace.clone(),
            environment: bub_runtime::settings::Environment::from_pairs(
                ctx.config
                    .get("environment")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))),
            ),
            router: Default::default(),
            shells: Default::default(),
            command_prefix: std::sync::OnceLock::new(),
        })
    }

    /// The envelope's `session_id`, else `<channel>:<chat_id>`; a blank
    /// (whitespace) id counts as none (semantics §H4.1), a non-blank one
    /// is kept verbatim.
    fn resolve_session(&self, message: Envelope) -> Option<String> {
        let blank = message.get("session_id").and_then(Value::as_str).is_some_and(|s| s.trim().is_empty());
        if blank {
            let mut without = message.clone();
            if let Value::Object(m) = &mut without {
                m.remove("session_id");
            }
            return Some(default_session_id(&without));
        }
        Some(default_session_id(&message))
    }

    /// The session id, for hooks that read it from the state; the message's
    /// context string (`context`, semantics §H4.2); and, as Bub, the
    /// message context's `model` (this turn's model, over the session's) and
    /// `thread_id` (the steering key). The session's settings (`,model`,
    /// `,reasoning_effort`, code mode) come from its tape's switch events,
    /// which the framework reads just before this fragment.
    fn load_state(&self, message: Envelope, session_id: String) -> Option<StateMap> {
        let mut m = Map::new();
        m.insert("session_id".into(), Value::String(session_id.clone()));
        let context = context_str(&message);
        if !context.is_empty() {
            m.insert("context".into(), Value::String(context));
        }
        let from_context = |k: &str| message.get("context").and_then(|c| c.get(k)).filter(|v| truthy(v)).cloned();
        if let Some(model) = from_context("model") {
            m.insert("model".into(), model);
        }
        if let Some(thread) = from_context("thread_id") {
            m.insert("_runtime_thread_id".into(), thread);
        }
        Some(m)
    }

    /// The content, prefixed by the message context; media as content parts.
    /// A command (the content starts with the command prefix) is passed
    /// trimmed, without the context.
    fn build_prompt(&self, message: Envelope) -> Option<Prompt> {
        let content = content_of(&message);
        let prefix = self.command_prefix();
        if content.trim().starts_with(prefix) {
            return Some(Value::String(content.trim().to_owned()));
        }
        let text = prompt_text(&context_str(&message), content, &self.environment);
        let media = media_parts(&message);
        if media.is_empty() {
            return Some(Value::String(text));
        }
        let mut parts = vec![json!({"type": "text", "text": text})];
        parts.extend(media);
        Some(Value::Array(parts))
    }

    /// After `,quit`, the session's running shells are stopped (Bub's
    /// `terminate_session`).
    async fn save_state(&self, session_id: String, state: TurnState) -> Result<(), BoxError> {
        if state.get_value("_runtime_quit").is_some_and(|q| truthy(&q)) {
            if let Some(scope) = self.shells.current() {
                let stopped = scope.kill_session(&session_id).await;
                tracing::info!(target: "bub::builtin", "quit: stopped {stopped} shell(s) of session {session_id}");
            }
        }
        Ok(())
    }

    /// One outbound copying the message's addressing; a command's is
    /// `kind: command` (Bub's build_prompt marks the message so).
    fn render_outbound(&self, message: Envelope, session_id: String, model_output: String) -> Option<Value> {
        let mut out = json!({"session_id": session_id, "content": model_output});
        for key in ["channel", "chat_id", "output_channel", "kind"] {
            if let Some(v) = field_of(&message, key).filter(|v| truthy(v)) {
                out[key] = v.clone();
            }
        }
        let prefix = self.command_prefix();
        if content_of(&message).trim().starts_with(prefix) {
            out["kind"] = json!("command");
        }
        // An inbound that names a silent marker (a scheduled heartbeat) and
        // an answer that is exactly it: recorded, sent nowhere.
        let marker = field_of(&message, "context").and_then(|c| c.get("silent_marker")).and_then(Value::as_str);
        if marker.is_some_and(|m| !m.is_empty() && model_output.trim() == m) {
            out["kind"] = json!(bub_kit::envelope::SILENT_KIND);
        }
        Some(out)
    }

    /// To the started channel the message names; false when none runs. A
    /// silent outbound (see `render_outbound`) goes to no channel.
    fn dispatch_outbound(&self, message: Envelope) -> Option<bool> {
        if bub_kit::envelope::is_silent(&message) {
            return Some(true);
        }
        Some(self.router.route(&message))
    }

    /// An error outbound to the channel and chat the failed message came from.
    async fn on_error(
        &self,
        stage: String,
        error: ErrorInfo,
        message: Option<Envelope>,
        framework: Option<Object>,
    ) -> Result<(), BoxError> {
        let (Some(message), Some(framework)) = (message, framework) else { return Ok(()) };
        let mut outbound = json!({
            "kind": "error",
            "content": format!("An error occurred at stage '{stage}': {}", error.message),
        });
        for key in ["channel", "chat_id", "session_id", "output_channel"] {
            if let Some(v) = field_of(&message, key) {
                outbound[key] = v.clone();
            }
        }
        bub_abi::resources::clients::FrameworkClient(&framework).dispatch_outbound(&outbound).await?;
        Ok(())
    }

    /// The default prompt, plus the workspace's `AGENTS.md`.
    fn system_prompt(&self, state: TurnState) -> Option<String> {
        let mut prompt = DEFAULT_SYSTEM_PROMPT.to_owned();
        if let Some(Value::String(ws)) = state.get_value("_runtime_workspace") {
            if let Ok(text) = std::fs::read_to_string(std::path::Path::new(&ws).join("AGENTS.md")) {
                if !text.trim().is_empty() {
                    prompt.push_str(&format!("\n\n<workspace_instruction>\n{}\n</workspace_instruction>", text.trim()));
                }
            }
        }
        Some(prompt)
    }

    /// After an unfinished step (an error), ask the model to go on.
    fn continue_prompt(&self, state: StreamState) -> Option<String> {
        state.error.map(|e| format!("The previous step failed ({}). Continue from where you stopped.", e.message))
    }

    /// From the last anchor (Bub's default).
    fn build_tape_context(&self) -> Option<Object> {
        Some(Object::tape_context(TapeContextSpec::default()))
    }

    /// The local machine, rooted at the workspace.
    fn provide_environment(&self, workspace: String) -> Option<Object> {
        Some(Object::environment(environment::LocalEnvironment::new(workspace)))
    }

    /// JSONL files under `<home>/tapes`.
    fn provide_tape_store(&self) -> Option<Object> {
        let store = tape_store::FileTapeStore::new(self.home.join("tapes"));
        // `BUB_TAPE_CACHE_MB`: how much tape text it keeps parsed.
        let cache = self.environment.megabytes("BUB_TAPE_CACHE_MB", tape_store::DEFAULT_CACHE_BYTES);
        Some(Object::tape_store(store.with_cache_bytes(cache)))
    }

    /// The background shells of the scope.
    fn provide_lifespan(&self) -> Option<Object> {
        Some(Object::lifespan(shells::ShellLifespan::new(self.shells.clone())))
    }

    /// An in-memory inbox per scope.
    fn provide_steering_inbox(&self) -> Option<Object> {
        Some(Object::steering_inbox(inbox::MemoryInbox::default()))
    }

    /// Bub's `spill` sidecar (large tool outputs).
    fn provide_tape_sidecar(&self) -> Option<Object> {
        Some(Object::tape_sidecar("spill"))
    }

    /// The `cli` channel.
    fn provide_channels(&self, message_handler: Object) -> Option<Vec<Object>> {
        let history = self.home.join("chat_history");
        let channel =
            cli_channel::CliChannel::new(message_handler, Some(history), self.router.clone(), self.command_prefix());
        Some(vec![Object::channel(channel)])
    }

    /// A call to a tool the step did not offer is answered with the closest
    /// names (Bub's text), so the model can correct itself; commands and
    /// offered tools pass.
    fn before_tool_call(&self, call: ToolCall, state: TurnState) -> Option<ToolCallDecision> {
        if call.run_id == "run_command" {
            return None;
        }
        let mut offered: Vec<String> = state.get("_runtime_tool_names").ok().flatten()?;
        // In code mode, code may call the code tools too.
        let code: Vec<String> = state.get("_runtime_code_tools").ok().flatten().unwrap_or_default();
        offered.extend(code);
        if offered.contains(&call.tool) {
            return None;
        }
        let close = suggest::close_matches(&call.tool, offered.iter().map(String::as_str), 3, 0.6);
        let text = if close.is_empty() && offered.iter().any(|t| t == "skill") {
            format!("Tool `{}` does not exist. Invoke the `skill` tool to list available skills.", call.tool)
        } else if close.is_empty() {
            format!("Tool `{}` does not exist. No similar tool is available.", call.tool)
        } else {
            let list: String = close.iter().map(|n| format!("\n- {n}")).collect();
            format!("Tool `{}` does not exist. Did you mean one of the following?{list}", call.tool)
        };
        Some(ToolCallDecision::replace(Value::String(text)))
    }

    /// Bub's interactive onboarding (see [`onboarding`]): the model
    /// connection, the channels and stream output, answered on standard
    /// input.
    fn onboard_config(&self, current_config: StateMap) -> Option<StateMap> {
        Some(onboarding::collect(&current_config, &mut onboarding::Stdio).into_iter().collect())
    }

    /// Bub's: the configured model, then the fallbacks, once each; the
    /// first is the current one. None when the settings cannot be read.
    fn provide_model_options(&self, session_id: String, workspace: Option<String>) -> Option<ModelOptions> {
        let _ = (session_id, workspace);
        let settings = self.model_settings().ok()?;
        let mut models: Vec<String> = Vec::new();
        for model in std::iter::once(settings.default_model()).chain(settings.fallback_models) {
            if !model.is_empty() && !models.contains(&model) {
                models.push(model);
            }
        }
        let current = models.first().cloned();
        let models = models
            .into_iter()
            .map(|id| bub_abi::types::ModelChoice { name: Some(id.clone()), id, ..Default::default() })
            .collect();
        Some(ModelOptions { models, current_model: current })
    }

    /// `bash`, `bash.output`, `bash.kill`, `fs.read`, `fs.write`, `fs.edit`
    /// and `web.fetch`, in the host's workspace (`bub -w`).
    fn provide_tools(&self) -> Option<Vec<Object>> {
        let settings = self.model_settings().ok();
        let confined = settings.as_ref().is_some_and(|s| s.confine_workspace);
        let max_bytes = settings.map_or(bub_agent::provider::settings::DEFAULT_TOOL_MAX_BYTES, |s| s.tool_max_bytes);
        let ws = workspace_tools::Workspace {
            root: self.workspace.clone(),
            scopes: self.shells.clone(),
            confined,
            max_bytes,
        };
        Some(ws.objects())
    }

    /// The agent (Bub's `BubAgent`), for the turn running in a framework;
    /// None outside one. Events stream as they come; a failed run fails
    /// the stream, so the turn fails.
    async fn run_model_stream(
        &self,
        prompt: Prompt,
        session_id: String,
        state: TurnState,
    ) -> Result<Option<Object>, BoxError> {
        let Some(framework) = bub_framework::Framework::of(&state) else { return Ok(None) };
        let content = bub_kit::prompt::to_content(&prompt)?;
        // Not held through the run: a big prompt is held by the agent alone.
        drop(prompt);
        // A failing command fails here (Bub raises from `start()`).
        let mut run =
            crate::agent::run_stream(&framework, &session_id, content, state).await.map_err(|e| e.explained())?;
        let (tx, stream) = bub_abi::ModelStream::channel(64);
        tokio::spawn(async move {
            loop {
                let item = tokio::select! {
                    item = run.next() => item,
                    _ = tx.closed() => return, // the host dropped the stream: the run cancels
                };
                let sent = match item {
                    None => return,
                    Some(Ok(event)) => tx.send(event).await,
                    Some(Err(e)) => tx.fail(bub_abi::HookError::new(bub_abi::ErrorKind::ERROR, e.explained())).await,
                };
                if sent.is_err() {
                    return;
                }
            }
        });
        Ok(Some(stream))
    }

    /// The agent's text: every `text` delta of every step, concatenated.
    async fn run_model(
        &self,
        prompt: Prompt,
        session_id: String,
        state: TurnState,
    ) -> Result<Option<String>, BoxError> {
        let Some(framework) = bub_framework::Framework::of(&state) else { return Ok(None) };
        let content = bub_kit::prompt::to_content(&prompt)?;
        // Not held through the run: a big prompt is held by the agent alone.
        drop(prompt);
        let run = crate::agent::run_stream(&framework, &session_id, content, state).await.map_err(|e| e.explained())?;
        let (events, error) = run.collect().await;
        if let Some(e) = error {
            return Err(e.explained().into());
        }
        Ok(Some(events.iter().filter_map(bub_kit::envelope::text_delta).collect()))
    }
}

bub_abi::static_plugin!(
    Builtin,
    fn builtin_module,
    name = "builtin",
    version = env!("CARGO_PKG_VERSION"),
    description = "Bub's builtin hooks"
);

/// The builtin's root module.
pub fn module() -> PluginModRef {
    builtin_module()
}

/// The builtin on a [`HostBuilder`](bub_runtime::HostBuilder):
/// `HostBuilder::new().builtin()`.
pub trait WithBuiltin {
    /// Adds Bub's builtin plugin, registered as `builtin`, first.
    fn builtin(self) -> Self;
}

impl WithBuiltin for bub_runtime::HostBuilder {
    fn builtin(self) -> Self {
        self.with_static_from_settings("builtin", module(), config_from)
    }
}

/// The usual host: `builtin`, then every plugin found on `search`.
pub fn discover(search: &bub_runtime::discovery::SearchPath) -> bub_runtime::Host {
    use bub_runtime::HostBuilder;
    HostBuilder::new().builtin().discovered(search).build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_without_a_source_is_left_out_of_the_prompt() {
        let message = json!({"media": [
            {"type": "image", "url": ""},
            {"type": "image", "data": null, "media_type": "image/png"},
            {"type": "image", "media_type": "image/png", "data": "iVBO"},
            {"type": "audio", "url": "https://x/a.mp3"},
            {"type": "document", "url": "https://x/d.pdf"},
        ]});
        let parts = media_parts(&message);
        assert_eq!(parts.len(), 2, "{parts:?}");
        assert_eq!(parts[0]["data"], "iVBO");
        assert_eq!(parts[1]["type"], "audio");
    }

    /// The variables the builtin reads outside a turn reach it, and no
    /// other: `BUB_TAPE_CACHE_MB` was read by the store but never passed,
    /// so the documented setting did nothing.
    #[test]
    fn the_builtin_gets_its_own_variables_and_no_others() {
        let mut vars: Vec<(std::ffi::OsString, std::ffi::OsString)> =
            OWN_VARIABLES.iter().map(|k| (k.into(), "1".into())).collect();
        vars.push(("OPENAI_API_KEY".into(), "secret".into()));
        let config = config_from(&bub_runtime::RuntimeSettings::from_vars(vars));
        let env = config["environment"].as_object().unwrap();
        assert_eq!(env.keys().map(String::as_str).collect::<std::collections::BTreeSet<_>>(), OWN_VARIABLES.into());
        let ctx = PluginContext {
            name: "builtin".into(),
            config,
            home: "/nonexistent".into(),
            workspace: "/nonexistent".into(),
            data_dir: "/nonexistent".into(),
        };
        let builtin = <Builtin as Plugin>::new(&ctx).unwrap();
        assert_eq!(builtin.environment.megabytes("BUB_TAPE_CACHE_MB", 7), 1 << 20);
    }
}
