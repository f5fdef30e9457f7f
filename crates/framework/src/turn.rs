//! `process_inbound`: one turn (semantics §H1.1).

use bub_abi::abi_stable::std_types::RStr;
use bub_abi::{
    types::{Envelope, ErrorInfo, StateMap, StreamEvent},
    HookId, TurnState,
};
use serde_json::{json, Value};

/// How long a failed turn waits for its `on_error` observers before its
/// failure is returned (they are still told; see `Framework::tell_error`).
pub const TELLING_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// The host's map behind a [`TurnState`].
pub type SharedState = bub_abi::sdk::state::SharedMap;

use bub_kit::{
    envelope::{content_of, default_session_id, field_of, py_str, truthy, unpack_batch},
    prompt,
};

use crate::{scope, Framework, FrameworkError, TurnResult};
use bub_runtime::runtime::CallArgs;

impl Framework {
    /// One turn for `inbound`. A map inbound gets `session_id` set if it
    /// has none. On failure, `on_error(stage="turn")` is told first (see
    /// [`Framework::tell_error`]).
    pub async fn process_inbound(
        &self,
        inbound: &mut Envelope,
        stream_output: bool,
    ) -> Result<TurnResult, FrameworkError> {
        match self.turn(inbound, stream_output).await {
            Ok(result) => Ok(result),
            Err(e) => {
                tracing::error!(target: "bub::framework", "Error processing inbound message: {e}");
                self.tell_error("turn", e.info(), inbound.clone()).await;
                Err(e)
            }
        }
    }

    /// Tells the `on_error` observers of a failed turn, as Bub does before
    /// the failure is raised, unless they take longer than
    /// [`TELLING_PATIENCE`]: then the failure is returned and the telling
    /// goes on in a task of its own. A turn that failed because a plugin
    /// blocked (a Python hook holding the bridge's loop past its deadline)
    /// would otherwise wait for that plugin again in its observers (a
    /// Python `on_error` waits for the same loop), and its failure came
    /// when the blocking call ended (12 s against a 3 s deadline) instead
    /// of at the deadline.
    pub(crate) async fn tell_error(&self, stage: &'static str, error: ErrorInfo, message: Envelope) {
        let runtime = self.runtime.clone();
        let mut telling = Box::pin(async move { runtime.notify_error(stage, &error, Some(&message)).await });
        if tokio::runtime::Handle::try_current().is_err() {
            return telling.await;
        }
        if tokio::time::timeout(TELLING_PATIENCE, &mut telling).await.is_err() {
            tracing::warn!(
                target: "bub::framework",
                "the on_error observers of a failed turn ({stage}) take longer than {TELLING_PATIENCE:?}; the \
                 failure is answered now, and they are told as they can"
            );
            tokio::spawn(telling);
        }
    }

    async fn turn(&self, inbound: &mut Envelope, stream_output: bool) -> Result<TurnResult, FrameworkError> {
        let rt = &self.runtime;

        // 1. resolve_session: the first non-None answer, falsy → the default.
        let session_id = self.resolve_session(inbound).await?;
        if let Value::Object(m) = inbound {
            m.entry("session_id").or_insert_with(|| Value::String(session_id.clone()));
        }
        let inbound: &Envelope = inbound;
        // Every later stage passes the same message text: serialize it once,
        // when a stage first needs it.
        let message_value = std::sync::OnceLock::new();
        let message = || -> &bub_abi::Value { message_value.get_or_init(|| bub_abi::Value::from(inbound)) };

        // 2. state: runtime defaults, then every load_state, low priority first.
        let (state, state_map) = self.state_for(message(), &session_id).await?;
        // The builtin agent finds this framework through the state
        // (`Framework::of`; Bub keeps its agent in `state._runtime_agent`),
        // for this turn only.
        let _attached = self.attach(&state);

        // A delivery the platform repeats runs once (see `repeats`): after
        // load_state, where a shared store holds the session's lock.
        let keys = crate::repeats::keys_of(inbound);
        if !keys.is_empty() && self.is_repeat(&session_id, &keys).await {
            rt.save_state(&session_id, &state, message(), "").await?;
            drop(state);
            let state = state_map.into_map();
            return Ok(TurnResult {
                session_id,
                prompt: Vec::new(),
                model_output: String::new(),
                outbounds: Vec::new(),
                state,
                events: Vec::new(),
                repeated: true,
            });
        }

        // 3. build_prompt: the first non-None answer; falsy → the content.
        let content = self.prompt_for(message(), inbound, &session_id, &state).await?;

        // 4. the model stage, with save_state in its `finally`.
        let mut events = Vec::new();
        let model = self.model_stage(inbound, &content, &session_id, &state, stream_output, &mut events).await;
        // Borrowed: a big answer is not copied for save_state.
        let saved_output = model.as_ref().map(String::as_str).unwrap_or_default();
        rt.save_state(&session_id, &state, message(), saved_output).await?;
        let model_output = model?;

        // 6. render_outbound: batches concatenated; none → one default outbound.
        let mut outbounds = Vec::new();
        for answer in rt.render_outbound(message(), &session_id, &state, &model_output).await? {
            let value = answer
                .get()
                .map_err(|e| FrameworkError::InvalidInput(format!("render_outbound returned an invalid value: {e}")))?;
            outbounds.extend(unpack_batch(value));
        }
        if outbounds.is_empty() {
            let mut default = json!({"content": model_output, "session_id": session_id});
            for key in ["channel", "chat_id"] {
                if let Some(v) = field_of(inbound, key) {
                    default[key] = v.clone();
                }
            }
            outbounds.push(default);
        }

        // 7. dispatch_outbound: each outbound to every implementation.
        for outbound in &outbounds {
            rt.deliver_outbound(outbound).await?;
        }

        // The handle goes first: unless a plugin kept it, the map is then
        // taken rather than copied.
        drop(state);
        let mut state = state_map.into_map();
        // A marker for this turn only (see `Framework::attach`).
        state.shift_remove("_runtime_agent");
        Ok(TurnResult { session_id, prompt: content, model_output, outbounds, state, events, repeated: false })
    }

    /// `resolve_session`: the first non-None answer; a falsy one (or none)
    /// → the default id (`session_id`, else `<channel>:<chat_id>`).
    pub async fn resolve_session(&self, inbound: &Envelope) -> Result<String, FrameworkError> {
        let answer = self.runtime.resolve_session(inbound).await?;
        match answer.map(|a| a.reply().parse::<Value>()).transpose() {
            Ok(Some(v)) if truthy(&v) => Ok(py_str(&v)),
            Ok(_) => Ok(default_session_id(inbound)),
            Err(e) => Err(FrameworkError::Type(format!("hook.resolve_session returned invalid JSON: {e}"))),
        }
    }

    /// Bub's `build_state`: the runtime defaults (workspace, steering inbox,
    /// environment), then every `load_state` fragment, low priority first.
    /// Returns the state handle and the host's map behind it.
    pub async fn build_state(
        &self,
        message: &Envelope,
        session_id: &str,
    ) -> Result<(TurnState, SharedState), FrameworkError> {
        self.state_for(&bub_abi::Value::from(message), session_id).await
    }

    async fn state_for(
        &self,
        message: &bub_abi::Value,
        session_id: &str,
    ) -> Result<(TurnState, SharedState), FrameworkError> {
        let mut defaults = StateMap::new();
        defaults.insert("_runtime_workspace".into(), Value::String(self.workspace_text.to_string()));
        defaults.insert("_runtime_steering_inbox".into(), self.scope.inbox_ref());
        // The channel the message came through, set by the channel plugin
        // (never by whoever wrote the message): command mode is allowed per
        // channel (see `agent::provider::settings`).
        if let Some(channel) = message.as_ref().get("channel").and_then(|c| c.as_str()) {
            defaults.insert("_runtime_channel".into(), Value::String(channel.to_owned()));
        }
        if let Some(env) = self.get_environment(session_id).await? {
            defaults.insert("_runtime_environment".into(), scope::object_ref(env.resource()));
        }
        // How deep this turn's message was born inside other turns (a
        // plugin handing messages back from its turn): what it hands over
        // in turn is one deeper, and the gateway bounds the depth.
        if let Some(depth) = message.as_ref().get("_inbound_depth").and_then(|d| d.as_u64()) {
            defaults.insert("_inbound_depth".into(), Value::from(depth));
        }
        // Bub's builtin load_state restores the session's settings (`,model`
        // and the other switches) from its tape. The framework holds the
        // store, so it does that for whichever plugins are loaded: the
        // settings are defaults under every fragment, as the builtin's (the
        // lowest-priority one) would have put them. Without a store, none.
        defaults.extend(self.session_settings(session_id).await);
        // The host's own state map: merged and read without JSON round trips.
        let (state, state_map) = TurnState::shared(defaults);
        // Bub ignores a fragment that is not a dict (`isinstance(…, dict)`).
        for answer in self.runtime.load_state(message, &session_id.to_owned()).await?.iter().rev() {
            if let Ok(fragment) = answer.get() {
                state_map.extend(fragment);
                // A fragment may hold live objects (a Python plugin's
                // scheduler through the python bridge): the map above got
                // their markers, the handle keeps the objects themselves.
                if let Some(raw) = answer.reply().value() {
                    for (key, value) in raw.entries().filter(|(_, v)| v.live_object().is_some()) {
                        let _ = state.handle().set(RStr::from_str(key), value.to_owned());
                    }
                }
            }
        }
        Ok((state, state_map))
    }

    /// The session's settings recorded on its tape (none without a store; a
    /// store that cannot answer is logged and counts as none).
    async fn session_settings(&self, session_id: &str) -> StateMap {
        let Some(store) = self.get_tape_store() else { return StateMap::new() };
        let tape = bub_agent::tape::session_tape_name(&self.workspace, session_id);
        let store = bub_agent::tape::Store::Host(store);
        match bub_agent::session_settings::load_kept(&store, &tape, &self.contexts()).await {
            Ok(settings) => settings.into_iter().collect(),
            Err(e) => {
                tracing::warn!(target: "bub::framework", "session {session_id}: cannot read its settings from tape {tape}: {e}");
                StateMap::new()
            }
        }
    }

    /// Bub's `build_prompt`: the first non-None answer (falsy → the
    /// message's content), as user content items.
    pub async fn build_prompt_content(
        &self,
        message: &Envelope,
        session_id: &str,
        state: &TurnState,
    ) -> Result<Vec<Value>, FrameworkError> {
        self.prompt_for(&bub_abi::Value::from(message), message, session_id, state).await
    }

    async fn prompt_for(
        &self,
        message: &bub_abi::Value,
        inbound: &Envelope,
        session_id: &str,
        state: &TurnState,
    ) -> Result<Vec<Value>, FrameworkError> {
        let built =
            match self.runtime.build_prompt(message, &session_id.to_owned(), state).await? {
                Some(answer) => Some(answer.get().map_err(|e| {
                    FrameworkError::InvalidInput(format!("build_prompt returned an invalid value: {e}"))
                })?),
                None => None,
            };
        let prompt_value = built.filter(truthy).unwrap_or_else(|| Value::String(content_of(inbound)));
        prompt::to_content(&prompt_value).map_err(FrameworkError::InvalidInput)
    }

    /// The model adapter (semantics §H2.1): the hook chosen by the latest plugin
    /// declaring one; no output → `on_error(stage="run_model")` and the
    /// prompt (or the inbound content) as output.
    async fn model_stage(
        &self,
        inbound: &Envelope,
        content: &[Value],
        session_id: &str,
        state: &TurnState,
        stream_output: bool,
        events: &mut Vec<StreamEvent>,
    ) -> Result<String, FrameworkError> {
        let rt = &self.runtime;
        // The hook's legacy prompt lives in its arguments only: a big prompt
        // is not held a second time through the model stage.
        let args = CallArgs::run_model(&prompt::to_legacy_prompt(content), &session_id.to_owned(), state)?;
        // Streaming: the bound channel sees the events as they come.
        let channel = if stream_output { rt.bound_channel(inbound) } else { None };
        let output = match rt.select_model(stream_output).map(|s| s.hook) {
            None => None,
            Some(HookId::RunModel) => match rt.call_first(HookId::RunModel, &args).await? {
                None => None,
                Some(reply) => match reply.parse::<Value>() {
                    Ok(Value::String(s)) => {
                        // A text answer is a one-event stream to the channel.
                        if let Some(channel) = &channel {
                            let event = StreamEvent { kind: "text".into(), data: json!({ "delta": s }) };
                            if let Err(e) = channel.stream_event(inbound, &event).await {
                                tracing::warn!(target: "bub::framework", "{e}");
                            }
                        }
                        Some(s)
                    }
                    _ => return Err(FrameworkError::Type("hook.run_model must return str or None".into())),
                },
            },
            Some(_) => match rt.run_model_stream(&args).await {
                Ok(None) => None,
                Ok(Some(stream)) => {
                    let (text, errors) =
                        stream.collect_events_to(channel.as_ref().map(|c| (c, inbound)), Some(events)).await?;
                    // Bub's text path only joins a stream's text deltas: its
                    // error events reach `on_error` in stream mode only.
                    if stream_output {
                        for e in errors {
                            rt.notify_error("run_model", &e, Some(inbound)).await;
                        }
                    }
                    Some(text)
                }
                Err(f) if f.error.kind == bub_abi::ErrorKind::TYPE => {
                    return Err(FrameworkError::Type(f.error.message.to_string()))
                }
                Err(f) => return Err(f.into()),
            },
        };
        Ok(match output {
            Some(text) => text,
            None => {
                let error = ErrorInfo {
                    kind: "RuntimeError".into(),
                    message: "no model skill returned output".into(),
                    details: None,
                };
                rt.notify_error("run_model", &error, Some(inbound)).await;
                match prompt::to_legacy_prompt(content) {
                    Value::String(s) => s,
                    _ => content_of(inbound),
                }
            }
        })
    }
}
