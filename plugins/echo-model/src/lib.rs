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

#[cfg(test)]
mod tests {
    use bub_abi::{HookId, TurnState};
    use bub_runtime::{testing::PluginTest, CallArgs};
    use serde_json::json;

    bub_abi::static_plugin!(super::EchoModel, fn module, name = "echo-model", version = "0", description = "test");

    fn echo(config: serde_json::Value) -> PluginTest {
        let test = PluginTest::with_config("echo-model", module(), config.as_object().cloned().unwrap_or_default());
        assert!(test.loaded(), "{:?}", test.record());
        test
    }

    /// `run_model` answers with the prefix and the prompt's text: content
    /// parts joined by newlines, the prefix from the config.
    #[tokio::test]
    async fn answers_with_the_prompt_behind_the_prefix() {
        let rt = echo(json!({})).runtime();
        let state = TurnState::new();
        let ask = |prompt: serde_json::Value| {
            let rt = rt.clone();
            let state = state.clone();
            async move {
                let args = CallArgs::run_model(&prompt, &"s".to_owned(), &state).unwrap();
                rt.call_first(HookId::RunModel, &args).await.unwrap().unwrap().parse::<String>().unwrap()
            }
        };
        assert_eq!(ask(json!("hi")).await, "echo: hi");
        assert_eq!(ask(json!([{"type": "text", "text": "a"}, "b", {"type": "image", "url": "u"}])).await, "echo: a\nb");
        let rt = echo(json!({"prefix": "> "})).runtime();
        let args = CallArgs::run_model(&json!("x"), &"s".to_owned(), &state).unwrap();
        assert_eq!(rt.call_first(HookId::RunModel, &args).await.unwrap().unwrap().parse::<String>().unwrap(), "> x");
    }

    /// The stream: one `text` event per word, then `final` with the whole
    /// text; `[provider-error]` in the prompt adds an `error` event first.
    #[tokio::test]
    async fn streams_word_by_word_and_simulates_errors() {
        let rt = echo(json!({})).runtime();
        let state = TurnState::new();
        let args = CallArgs::run_model_stream(&json!("one two"), &"s".to_owned(), &state).unwrap();
        let mut stream = rt.run_model_stream(&args).await.unwrap().expect("a stream");
        let mut events = Vec::new();
        while let Some(event) = stream.next().await.unwrap() {
            events.push((event.kind, event.data));
        }
        let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds, ["text", "text", "text", "final"]);
        assert_eq!(events[3].1, json!({"ok": true, "text": "echo: one two"}));
        let args = CallArgs::run_model_stream(&json!("[provider-error]"), &"s".to_owned(), &state).unwrap();
        let stream = rt.run_model_stream(&args).await.unwrap().expect("a stream");
        let (text, errors) = stream.collect_text().await.unwrap();
        assert_eq!(text, "echo: [provider-error]");
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].message, "simulated provider error");
    }
}
