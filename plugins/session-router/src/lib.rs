//! `session-router`: decides which session a message belongs to.
//!
//! - `resolve_session` (tryfirst): an explicit, non-blank `session_id` wins;
//!   otherwise `"{channel}:{chat_id}"`, mapped through the `aliases` config
//!   (`{"telegram:raw": "tenant:canonical"}`), so several chats can share one
//!   session.
//! - `load_state` (async): seeds the turn state with the session and who
//!   routed it.

use std::collections::HashMap;

use bub_abi::{types::StateMap, BoxError, Plugin, PluginContext};
use serde::Deserialize;
use serde_json::json;

/// The plugin.
pub struct SessionRouter {
    aliases: HashMap<String, String>,
}

/// The parts of a message the router reads.
#[derive(Deserialize)]
struct Routing {
    session_id: Option<String>,
    channel: Option<String>,
    chat_id: Option<serde_json::Value>,
}

#[bub_abi::plugin]
impl Plugin for SessionRouter {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        let aliases = match ctx.config.get("aliases") {
            Some(v) => serde_json::from_value(v.clone())
                .map_err(|e| format!("config `aliases` must map strings to strings: {e}"))?,
            None => HashMap::new(),
        };
        Ok(SessionRouter { aliases })
    }

    #[tryfirst]
    fn resolve_session(&self, message: Routing) -> Option<String> {
        if let Some(id) = message.session_id.filter(|s| !s.trim().is_empty()) {
            return Some(id);
        }
        let chat = match message.chat_id {
            Some(serde_json::Value::String(s)) => s,
            Some(v) if !v.is_null() => v.to_string(),
            _ => "default".to_owned(),
        };
        let raw = format!("{}:{chat}", message.channel.as_deref().unwrap_or("default"));
        Some(self.aliases.get(&raw).cloned().unwrap_or(raw))
    }

    async fn load_state(&self, session_id: String) -> Option<StateMap> {
        let mut state = StateMap::new();
        state.insert("session_id".into(), json!(session_id));
        state.insert("routed_by".into(), json!("session-router"));
        Some(state)
    }
}

bub_abi::export_plugin!(SessionRouter);

#[cfg(test)]
mod tests {
    use bub_runtime::testing::PluginTest;
    use serde_json::json;

    bub_abi::static_plugin!(super::SessionRouter, fn module, name = "session-router", version = "0", description = "test");

    /// An explicit non-blank id wins; a blank one falls back to
    /// `channel:chat_id`, numbers included; aliases map a chat to another
    /// session; a bad `aliases` config fails the constructor.
    #[tokio::test]
    async fn sessions_and_aliases() {
        let config = json!({"aliases": {"telegram:7": "tenant:shared"}}).as_object().unwrap().clone();
        let test = PluginTest::with_config("session-router", module(), config);
        assert!(test.loaded(), "{:?}", test.record());
        let rt = test.runtime();
        let session = |m: serde_json::Value| {
            let rt = rt.clone();
            async move { rt.resolve_session(&m).await.unwrap().unwrap().get().unwrap() }
        };
        assert_eq!(session(json!({"session_id": "mine", "channel": "cli"})).await, "mine");
        assert_eq!(session(json!({"session_id": "  ", "channel": "cli", "chat_id": 42})).await, "cli:42");
        assert_eq!(session(json!({"channel": "telegram", "chat_id": "7"})).await, "tenant:shared");
        assert_eq!(session(json!({})).await, "default:default");

        let bad =
            PluginTest::with_config("session-router", module(), json!({"aliases": [1]}).as_object().unwrap().clone());
        assert!(!bad.loaded());
    }
}
