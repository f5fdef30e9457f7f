//! {{project-name}}: {{description}}
//!
//! Built with `bub_abi`: each hook declares only the arguments it reads (by
//! Bub's names), may be a plain `fn` or an `async fn`, and may carry
//! `#[tryfirst]` or `#[trylast]`. See the `bub_abi` crate docs.

use bub_abi::{BoxError, Plugin, PluginContext};
{% if hooks == "session" %}use bub_abi::types::{Envelope, StateMap};
{% elsif hooks == "model" %}use bub_abi::types::Prompt;
{% else %}use bub_abi::types::{ToolCall, ToolCallDecision, ToolCallResult};
{% endif %}
/// The plugin.
pub struct {{crate_name | pascal_case}} {
    /// Read from the plugin's config in its manifest.
    greeting: String,
}

#[bub_abi::plugin]
impl Plugin for {{crate_name | pascal_case}} {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        let greeting = ctx.config.get("greeting").and_then(|v| v.as_str()).unwrap_or("hello");
        tracing::info!(name = %ctx.name, "{{project-name}} loaded");
        Ok(Self { greeting: greeting.to_owned() })
    }
{% if hooks == "session" %}
    /// One session per channel and chat.
    #[tryfirst]
    {% if style == "async" %}async {% endif %}fn resolve_session(&self, message: Envelope) -> Option<String> {
        let channel = message.get("channel")?.as_str()?;
        let chat = message.get("chat_id")?.as_str()?;
        Some(format!("{channel}:{chat}"))
    }

    /// Seeds the turn's state.
    {% if style == "async" %}async {% endif %}fn load_state(&self, session_id: String) -> Option<StateMap> {
        let mut state = StateMap::new();
        state.insert("greeting".into(), serde_json::json!(format!("{} {session_id}", self.greeting)));
        Some(state)
    }
{% elsif hooks == "model" %}
    /// The model stage: answers with the prompt.
    {% if style == "async" %}async {% endif %}fn run_model(&self, prompt: Prompt) -> Option<String> {
        {% if style == "async" %}tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        {% endif %}Some(format!("{}: {}", self.greeting, prompt.as_str().unwrap_or_default()))
    }

    /// One block of the system prompt (system_prompt is dispatched sync-only,
    /// so it stays a plain fn).
    fn system_prompt(&self) -> Option<String> {
        Some("{{description}}".to_owned())
    }
{% else %}
    /// Blocks the tool named `forbidden`; lets everything else through.
    #[tryfirst]
    {% if style == "async" %}async {% endif %}fn before_tool_call(&self, call: ToolCall) -> Option<ToolCallDecision> {
        (call.tool == "forbidden").then(|| ToolCallDecision::deny(format!("{}: not allowed", self.greeting)))
    }

    /// Observes every tool call; `None` leaves its result as it is.
    #[trylast]
    {% if style == "async" %}async {% endif %}fn after_tool_call(&self, call: ToolCall, result: ToolCallResult) -> Option<serde_json::Value> {
        tracing::info!(tool = %call.tool, ok = result.error.is_none(), "tool call finished");
        None
    }
{% endif %}}

bub_abi::export_plugin!({{crate_name | pascal_case}});

// The same plugin compiled into a test (`bub_runtime::testing::PluginTest`,
// see tests/load.rs): its hooks run through the real registry and runtime
// without building the library first.
bub_abi::static_plugin!(
    {{crate_name | pascal_case}},
    fn test_module,
    name = env!("CARGO_PKG_NAME"),
    version = env!("CARGO_PKG_VERSION"),
    description = env!("CARGO_PKG_DESCRIPTION")
);
