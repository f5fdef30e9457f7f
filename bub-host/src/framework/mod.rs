//! The turn pipeline: Bub's `process_inbound` (spec §1.1).
//!
//! `resolve_session → load_state → build_prompt → model → save_state (in a
//! finally around the model stage) → render_outbound → dispatch_outbound`;
//! any failure is reported to `on_error` with stage `turn`, then returned.
//! The runtime resources of `running()` (lifespans, tape store, steering
//! inbox, environments) are not part of this module yet.

pub mod envelope;
pub mod prompt;

use std::path::PathBuf;

use bub_abi::{
    types::{Envelope, ErrorInfo, StateMap},
    HookId, TurnState,
};
use serde::Serialize;
use serde_json::{json, Value};

use self::envelope::{content_of, default_session_id, field_of, py_str, truthy, unpack_batch};
use crate::{error::HookFailure, runtime::CallArgs, Host, Runtime};

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
}

/// Why a turn failed (after `on_error(stage="turn")` was told).
#[derive(Debug, Clone, thiserror::Error)]
pub enum TurnError {
    /// A plugin failed in a hook.
    #[error(transparent)]
    Hook(#[from] HookFailure),
    /// A hook returned a value of the wrong type (Bub's `TypeError`).
    #[error("TypeError: {0}")]
    Type(String),
    /// A prompt or envelope that cannot be used (Bub's `invalid_input`).
    #[error("invalid input: {0}")]
    InvalidInput(String),
}

impl TurnError {
    /// As handed to `on_error` observers.
    pub fn info(&self) -> ErrorInfo {
        let (kind, message) = match self {
            TurnError::Hook(f) => (f.error.kind.to_string(), f.to_string()),
            TurnError::Type(m) => ("TypeError".into(), m.clone()),
            TurnError::InvalidInput(m) => ("invalid_input".into(), m.clone()),
        };
        ErrorInfo { kind, message, details: None }
    }
}

impl From<serde_json::Error> for TurnError {
    fn from(e: serde_json::Error) -> Self {
        TurnError::InvalidInput(format!("a value could not be serialized: {e}"))
    }
}

/// Runs turns over a host's plugins.
#[derive(Clone)]
pub struct Framework {
    runtime: Runtime,
    workspace: PathBuf,
}

impl Framework {
    /// A framework over `host`, working in `workspace`.
    pub fn new(host: &Host, workspace: impl Into<PathBuf>) -> Self {
        Framework { runtime: host.runtime(), workspace: workspace.into() }
    }

    /// The dispatcher.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// One turn for `inbound`. A map inbound gets `session_id` set if it
    /// has none. On failure, `on_error(stage="turn")` is told first.
    pub async fn process_inbound(&self, inbound: &mut Envelope, stream_output: bool) -> Result<TurnResult, TurnError> {
        match self.turn(inbound, stream_output).await {
            Ok(result) => Ok(result),
            Err(e) => {
                tracing::error!(target: "bub::framework", "Error processing inbound message: {e}");
                self.runtime.notify_error("turn", &e.info(), Some(inbound)).await;
                Err(e)
            }
        }
    }

    async fn turn(&self, inbound: &mut Envelope, stream_output: bool) -> Result<TurnResult, TurnError> {
        let rt = &self.runtime;

        // 1. resolve_session: the first non-None answer, falsy → the default.
        let answer =
            rt.call_first_with::<TurnError>(HookId::ResolveSession, || CallArgs::resolve_session(inbound)).await?;
        let session_id = match answer.map(|r| r.parse::<Value>()).transpose() {
            Ok(Some(v)) if truthy(&v) => py_str(&v),
            Ok(_) => default_session_id(inbound),
            Err(e) => return Err(TurnError::Type(format!("hook.resolve_session returned invalid JSON: {e}"))),
        };
        if let Value::Object(m) = inbound {
            m.entry("session_id").or_insert_with(|| Value::String(session_id.clone()));
        }

        // 2. state: runtime defaults, then every load_state, low priority first.
        let mut defaults = StateMap::new();
        defaults.insert("_runtime_workspace".into(), json!(self.workspace.display().to_string()));
        defaults.insert("_runtime_steering_inbox".into(), Value::Null);
        let state = TurnState::from_map(defaults);
        let loaded =
            rt.call_many_with::<TurnError>(HookId::LoadState, || CallArgs::load_state(inbound, &session_id)).await?;
        for reply in loaded.iter().rev().flatten() {
            if let Ok(Value::Object(fragment)) = reply.parse::<Value>() {
                state.extend(fragment).map_err(|e| TurnError::InvalidInput(e.to_string()))?;
            }
        }

        // 3. build_prompt: the first non-None answer; falsy → the content.
        let built = rt
            .call_first_with::<TurnError>(HookId::BuildPrompt, || CallArgs::build_prompt(inbound, &session_id, &state))
            .await?;
        let built = match built {
            Some(reply) => Some(
                reply
                    .parse::<Value>()
                    .map_err(|e| TurnError::InvalidInput(format!("build_prompt returned invalid JSON: {e}")))?,
            ),
            None => None,
        };
        let prompt_value = built.filter(truthy).unwrap_or_else(|| Value::String(content_of(inbound)));
        let content = prompt::to_content(&prompt_value).map_err(TurnError::InvalidInput)?;
        let legacy = prompt::to_legacy_prompt(&content);

        // 4. the model stage, with save_state in its `finally`.
        let model = self.model_stage(inbound, &legacy, &session_id, &state, stream_output).await;
        let saved_output = model.as_ref().ok().cloned().unwrap_or_default();
        rt.call_many_with::<TurnError>(HookId::SaveState, || {
            CallArgs::save_state(&session_id, &state, inbound, &saved_output)
        })
        .await?;
        let model_output = model?;

        // 6. render_outbound: batches concatenated; none → one default outbound.
        let mut outbounds = Vec::new();
        let rendered = rt
            .call_many_with::<TurnError>(HookId::RenderOutbound, || {
                CallArgs::render_outbound(inbound, &session_id, &state, &model_output)
            })
            .await?;
        for reply in rendered.into_iter().flatten() {
            let value = reply
                .parse::<Value>()
                .map_err(|e| TurnError::InvalidInput(format!("render_outbound returned invalid JSON: {e}")))?;
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
            rt.call_many_with::<TurnError>(HookId::DispatchOutbound, || CallArgs::dispatch_outbound(outbound)).await?;
        }

        Ok(TurnResult { session_id, prompt: content, model_output, outbounds, state: state.to_map() })
    }

    /// The model adapter (spec §2.1): the hook chosen by the latest plugin
    /// declaring one; no output → `on_error(stage="run_model")` and the
    /// prompt (or the inbound content) as output.
    async fn model_stage(
        &self,
        inbound: &Envelope,
        legacy: &Value,
        session_id: &str,
        state: &TurnState,
        stream_output: bool,
    ) -> Result<String, TurnError> {
        let rt = &self.runtime;
        let args = CallArgs::run_model(legacy, &session_id.to_owned(), state)?;
        let output = match rt.select_model(stream_output).map(|s| s.hook) {
            None => None,
            Some(HookId::RunModel) => match rt.call_first(HookId::RunModel, &args).await? {
                None => None,
                Some(reply) => match reply.parse::<Value>() {
                    Ok(Value::String(s)) => Some(s),
                    _ => return Err(TurnError::Type("hook.run_model must return str or None".into())),
                },
            },
            Some(_) => match rt.run_model_stream(&args).await {
                Ok(None) => None,
                Ok(Some(stream)) => {
                    let (text, errors) = stream.collect_text().await?;
                    for e in errors {
                        rt.notify_error("run_model", &e, Some(inbound)).await;
                    }
                    Some(text)
                }
                Err(f) if f.error.kind.as_str() == "type" => return Err(TurnError::Type(f.error.message.to_string())),
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
                match legacy {
                    Value::String(s) => s.clone(),
                    _ => content_of(inbound),
                }
            }
        })
    }
}
