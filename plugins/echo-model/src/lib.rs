//! `echo-model`: a deterministic offline model for demos and tests.
//!
//! `run_model` (and `run_model_stream`, word by word) answer with the prompt's text behind a prefix
//! (config `prefix`, default `"echo: "`), so a turn through Bub can run
//! without a network or an API key.

use bub_abi::{
    types::{Prompt, StreamEvent},
    BoxError, ModelStream, Object, Plugin, PluginContext,
};
use serde_json::json;

/// The plugin.
pub struct EchoModel {
    prefix: String,
}

/// The text of a prompt: a string as is; content parts joined by newlines.
fn prompt_text(prompt: &Prompt) -> String {
    match prompt {
        Prompt::String(s) => s.clone(),
        Prompt::Array(parts) => parts
            .iter()
            .filter_map(|p| p.as_str().or_else(|| p.get("text").and_then(|t| t.as_str())))
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

#[bub_abi::plugin]
impl Plugin for EchoModel {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        let prefix = ctx.config.get("prefix").and_then(|v| v.as_str()).unwrap_or("echo: ");
        Ok(EchoModel { prefix: prefix.to_owned() })
    }

    /// The model stage.
    fn run_model(&self, prompt: Prompt) -> Option<String> {
        tracing::debug!(%prompt, "echoing");
        Some(format!("{}{}", self.prefix, prompt_text(&prompt)))
    }

    /// The same answer as a stream, one word per `text` event. A prompt
    /// containing `[provider-error]` also yields an `error` event (for demos
    /// of error reporting).
    fn run_model_stream(&self, prompt: Prompt) -> Option<Object> {
        let text = format!("{}{}", self.prefix, prompt_text(&prompt));
        let mut events = Vec::new();
        if text.contains("[provider-error]") {
            events.push(StreamEvent {
                kind: "error".into(),
                data: json!({"kind": "provider", "message": "simulated provider error"}),
            });
        }
        for word in text.split_inclusive(' ') {
            events.push(StreamEvent { kind: "text".into(), data: json!({"delta": word}) });
        }
        events.push(StreamEvent { kind: "final".into(), data: json!({"ok": true, "text": text}) });
        Some(ModelStream::from_events(events))
    }

    /// Tells the agent what it is talking to.
    fn system_prompt(&self) -> Option<String> {
        Some("You are echo-model: you repeat the user's message.".to_owned())
    }
}

bub_abi::export_plugin!(EchoModel);
