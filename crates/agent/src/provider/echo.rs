//! The offline `echo` model: answers with the text of the last user message.
//! The default when no model is configured, so the whole agent loop (hooks,
//! tape, events) runs without a network or a key.

use super::{content_text, Delta, ModelRequest, ModelResponse, Usage};

/// Answers at once.
pub fn call(request: &ModelRequest, on_delta: &mut (dyn FnMut(Delta) + Send)) -> ModelResponse {
    let last_user = request.messages.iter().rev().find(|m| m.role() == "user");
    let text =
        last_user.map(|m| content_text(m.get("content").unwrap_or(&serde_json::Value::Null))).unwrap_or_default();
    if !text.is_empty() {
        on_delta(Delta::Text(text.clone()));
    }
    ModelResponse { text, usage: Some(Usage::default()), ..Default::default() }
}
