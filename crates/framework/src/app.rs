//! The app-hook accessors (semantics §H2.2): what the framework makes of
//! `system_prompt`, `provide_model_options`, `provide_channels`,
//! `provide_tools`, `provide_tape_sidecar`, `build_tape_context`,
//! `admit_message`, `continue_prompt`, `register_cli_commands` and steering.
//!
//! Wrong types get the `TypeError` message Bub raises; object lists are
//! flattened in priority order and deduplicated by name, first one wins.

use std::collections::HashSet;

use bub_abi::{
    types::{AdmitDecision, Envelope, ModelOptions, Prompt, StateMap, StreamState, TapeInfo, TurnSnapshot},
    Object, TurnState,
};
use serde_json::Value;

use super::{Framework, FrameworkError};
use bub_runtime::{
    resources::{Channel, CliCommand, TapeContext, TapeSidecar, Tool},
    runtime::{typed::Answered, Reply},
};

impl Framework {
    /// The system prompt: every block, lowest priority first, empty ones
    /// dropped, joined by a blank line (a plugin adds, never replaces).
    pub fn system_prompt(&self, prompt: &Prompt, state: &TurnState) -> Result<String, FrameworkError> {
        // Only non-empty string blocks count (not `str()` of other values).
        let blocks: Vec<String> = (self.runtime.system_prompt(prompt, state)?.iter().rev())
            .filter_map(|a| a.reply().value()?.as_str().filter(|s| !s.is_empty()).map(str::to_owned))
            .collect();
        Ok(blocks.join("\n\n"))
    }

    /// Every plugin's model options merged: `models` in priority order,
    /// `current_model` the first non-empty one. `workspace` None → the
    /// framework's workspace.
    pub async fn get_model_options(
        &self,
        session_id: &str,
        workspace: Option<&std::path::Path>,
    ) -> Result<ModelOptions, FrameworkError> {
        let workspace = workspace.unwrap_or(&self.workspace);
        let workspace = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
        let answers = self.runtime.provide_model_options(&session_id, &Some(workspace.display().to_string())).await?;
        let mut merged = ModelOptions::default();
        for answer in &answers {
            let options = answer.get().map_err(|_| {
                FrameworkError::Type("hook.provide_model_options must return ModelOptions or None".into())
            })?;
            merged.models.extend(options.models);
            if merged.current_model.as_deref().unwrap_or("").is_empty() {
                merged.current_model = options.current_model.filter(|m| !m.is_empty());
            }
        }
        Ok(merged)
    }

    /// The channels, given the host's `message_handler`; deduplicated by name.
    pub fn get_channels(&self, message_handler: &Object) -> Result<Vec<Channel>, FrameworkError> {
        let answers = self.runtime.provide_channels(message_handler)?;
        collect_named(&answers, Channel::from_object, Channel::name, Channel::TYPE_ERROR)
    }

    /// The tools (`provide_tools`); deduplicated by name.
    pub fn get_tools(&self) -> Result<Vec<Tool>, FrameworkError> {
        let answers = self.runtime.provide_tools()?;
        collect_named(&answers, Tool::from_object, Tool::name, Tool::TYPE_ERROR)
    }

    /// The tape sidecars; deduplicated by name.
    pub fn get_tape_sidecars(&self) -> Result<Vec<TapeSidecar>, FrameworkError> {
        let answers = self.runtime.provide_tape_sidecar()?;
        collect_named(&answers, TapeSidecar::from_object, TapeSidecar::name, TapeSidecar::TYPE_ERROR)
    }

    /// The subcommands plugins add to `bub`, given the host's `app` object.
    pub fn get_cli_commands(&self, app: &Object) -> Result<Vec<CliCommand>, FrameworkError> {
        let answers = self.runtime.register_cli_commands(app)?;
        collect_named(&answers, CliCommand::from_object, CliCommand::name, CliCommand::TYPE_ERROR)
    }

    /// The agent's tape context; none is a `TypeError`.
    pub fn build_tape_context(&self) -> Result<TapeContext, FrameworkError> {
        const ERR: &str = TapeContext::TYPE_ERROR;
        let answer = self.runtime.build_tape_context()?.ok_or_else(|| FrameworkError::Type(ERR.into()))?;
        TapeContext::from_reply(answer.reply()).map_err(|_| FrameworkError::Type(ERR.into()))
    }

    /// `admit_message`: the first decision, or None (default scheduling).
    pub async fn admit_message(
        &self,
        session_id: &str,
        message: &Envelope,
        turn: &TurnSnapshot,
    ) -> Result<Option<AdmitDecision>, FrameworkError> {
        let answer = self.runtime.admit_message(&session_id, message, turn).await?;
        answer
            .map(|a| a.get())
            .transpose()
            .map_err(|_| FrameworkError::Type("hook.admit_message must return AdmitDecision or None".into()))
    }

    /// `continue_prompt`: the next user message of a continuing agent step.
    pub async fn continue_prompt(
        &self,
        prompt: Option<&Prompt>,
        tape: &TapeInfo,
        state: &StreamState,
    ) -> Result<Option<String>, FrameworkError> {
        let answer = self.runtime.continue_prompt(&prompt, tape, state).await?;
        // Strictly a string (Bub checks `isinstance(next_prompt, str)`).
        match answer.as_ref().map(|a| a.reply().value().and_then(|v| v.as_str())) {
            None => Ok(None),
            Some(Some(s)) => Ok(Some(s.to_owned())),
            Some(None) => Err(FrameworkError::Type("hook.continue_prompt must return str or None".into())),
        }
    }

    /// Hands `message` to the scope's steering inbox (Bub's `steer_message`):
    /// false without an inbox.
    pub async fn steer_message(
        &self,
        mut message: Envelope,
        session_id: &str,
        state: &mut StateMap,
        reason: Option<&str>,
    ) -> Result<bool, FrameworkError> {
        let Some(inbox) = self.get_steering_inbox() else { return Ok(false) };
        state.entry("session_id").or_insert_with(|| Value::String(session_id.to_owned()));
        if let (Some(reason), Value::Object(m)) = (reason, &mut message) {
            let context = m.entry("context").or_insert_with(|| Value::Object(Default::default()));
            if let Value::Object(c) = context {
                c.insert("steering_reason".into(), Value::String(reason.to_owned()));
            }
        }
        inbox.enqueue_message(&message, state).await?;
        Ok(true)
    }
}

/// Objects from every answer, flattened in priority order and deduplicated
/// by name (the first wins).
fn collect_named<H, T>(
    answers: &[Answered<T>],
    convert: fn(Object, &str) -> Result<H, String>,
    name: fn(&H) -> &str,
    type_error: &str,
) -> Result<Vec<H>, FrameworkError> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for answer in answers {
        let reply = answer.reply();
        for object in objects_of(reply, type_error)? {
            let item = convert(object, &reply.plugin).map_err(|_| FrameworkError::Type(type_error.into()))?;
            if seen.insert(name(&item).to_owned()) {
                out.push(item);
            }
        }
    }
    Ok(out)
}

/// A reply's objects: a list, or one object (a single channel or sidecar).
fn objects_of(reply: &Reply, type_error: &str) -> Result<Vec<Object>, FrameworkError> {
    if let Some(list) = reply.objects() {
        return Ok(list);
    }
    if let Some(one) = reply.object() {
        return Ok(vec![one]);
    }
    match reply.parse::<Value>() {
        Ok(Value::Array(a)) if a.is_empty() => Ok(Vec::new()),
        _ => Err(FrameworkError::Type(type_error.into())),
    }
}
