//! `echo-model`: a deterministic offline model for demos and tests.
//!
//! `run_model` answers with the prompt's text behind a prefix
//! (config `prefix`, default `"echo: "`), so a turn through Bub can run
//! without a network or an API key.

use bub_abi::{types::Prompt, BoxError, Plugin, PluginContext};

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

    /// Tells the agent what it is talking to.
    fn system_prompt(&self) -> Option<String> {
        Some("You are echo-model: you repeat the user's message.".to_owned())
    }
}

bub_abi::export_plugin!(EchoModel);
