//! Per-session settings, kept as Bub keeps them: `<key>_switch` events on
//! the session tape (`{"name": "model_switch", "data": {"model": …}}`), the
//! latest of each winning, an empty value clearing it. A tape written by
//! Python Bub therefore carries its settings into bub-rs and back.

use bub_abi::types::{TapeEntry, TapeQuery};
use serde_json::{Map, Value};

use super::{follow::Step, tape::Store, AgentError};

/// Bub's `SESSION_SETTINGS`: what a switch event may set.
pub const KEYS: [&str; 3] = ["model", "reasoning_effort", "code_mode"];

/// The event that records `key` (`model` → `model_switch`).
pub fn event_name(key: &str) -> String {
    format!("{key}_switch")
}

/// Bub's `load_session_settings`: the latest recorded value of each setting
/// on `tape`.
pub async fn load(store: &Store, tape: &str) -> Result<Map<String, Value>, AgentError> {
    load_kept(store, tape, &super::context::ContextCache::default()).await
}

/// [`load`], kept in `cache` between turns: a turn reads only the events
/// appended since the last one (see [`super::follow`]).
pub async fn load_kept(
    store: &Store,
    tape: &str,
    cache: &super::context::ContextCache,
) -> Result<Map<String, Value>, AgentError> {
    let query = TapeQuery { tape: tape.to_owned(), kinds: vec!["event".into()], ..Default::default() };
    cache.settings.follow(store, tape.to_owned(), &query, |_| Step::Push, |s, e| apply(s, &e.entry)).await
}

/// Folds one event into the settings.
fn apply(settings: &mut Map<String, Value>, entry: &TapeEntry) {
    let Some(name) = entry.payload.get("name").and_then(Value::as_str) else { return };
    let Some(key) = KEYS.iter().find(|k| event_name(k) == name) else { return };
    let Some(value) = entry.payload.get("data").and_then(Value::as_object).and_then(|d| d.get(*key)) else {
        return;
    };
    if value.is_null() || value.as_str() == Some("") {
        settings.shift_remove(*key);
    } else {
        settings.insert((*key).to_owned(), value.clone());
    }
}
