//! From tape entries to model messages (semantics §A4.5): Bub's default context
//! selector, after the last anchor (the anchor itself left out) unless the
//! tape context names another anchor or none.
//!
//! A step's context is the session tape's selected entries followed by the
//! run's own (the fork's overlay). Re-reading and re-selecting the session
//! tape on every step made a step's cost grow with the tape, so
//! its messages are kept in a [`ContextCache`] shared by the turns of a
//! framework and brought up to date with what was appended since
//! ([`super::follow`]), an anchor of the context's kind starting them
//! afresh.

use std::sync::Arc;

use bub_abi::types::{TapeContextSpec, TapeEntry, TapeQuery};
use serde_json::{json, Map, Value};

use super::{
    follow::{Folds, Step},
    message::{Message, Shared},
    tape::RunTape,
    AgentError,
};

/// The query a tape context makes.
pub fn query(tape: &str, spec: &TapeContextSpec) -> TapeQuery {
    let mut q = TapeQuery { tape: tape.to_owned(), ..Default::default() };
    match spec.anchor.as_deref() {
        Some(TapeContextSpec::LAST_ANCHOR) => q.last_anchor = true,
        Some(name) => q.after_anchor = Some(name.to_owned()),
        None => {}
    }
    q
}

/// The context messages of the run's tape (shared with the kept context
/// and every request that carries them: see [`super::message`]).
pub async fn messages(tape: &RunTape, spec: &TapeContextSpec) -> Result<Vec<Shared>, AgentError> {
    Ok(for_request(tape, spec).await?.0)
}

/// [`messages`], and the slot where the requests over the kept context
/// leave their host list of messages (see [`super::message::ListSlot`]).
pub(crate) async fn for_request(
    tape: &RunTape,
    spec: &TapeContextSpec,
) -> Result<(Vec<Shared>, super::message::ListSlot), AgentError> {
    let query = query(tape.name(), spec);
    let (parent_hidden, own) = tape.own_entries(&query).await;
    let mut selector = if parent_hidden { Selector::default() } else { session_part(tape, &query).await };
    for e in &own {
        selector.push(e);
    }
    Ok((selector.messages, selector.list_slot))
}

/// The selector over the session tape's part of the context: kept from the
/// last step and brought up to date, or read in full. A read error counts
/// as no entries, as [`RunTape::fetch`] counts it.
async fn session_part(tape: &RunTape, query: &TapeQuery) -> Selector {
    let key = format!("{}\0{}\0{}", query.tape, query.last_anchor, query.after_anchor.as_deref().unwrap_or(""));
    let step = |e: &TapeEntry| if bub_kit::tape::starts_after(e, query) { Step::Restart } else { Step::Push };
    let push = |s: &mut Selector, e: &super::tape::FetchedEntry| s.push_fetched(e);
    match tape.contexts().contexts.follow(tape.store(), key, query, step, push).await {
        Ok(selector) => selector,
        Err(e) => {
            tracing::warn!(target: "bub::tape", "reading tape {}: {e}", query.tape);
            Selector::default()
        }
    }
}

/// What the agent keeps of the session tapes between the steps and turns
/// of one framework (see the module docs): their context messages and
/// their session settings. Bounded: past [`ContextCache::TAPES`] tapes, or
/// [`ContextCache::budget`] of context in all, the least recently
/// read tapes are dropped (a gateway serving many long sessions re-reads
/// rather than grows).
pub struct ContextCache {
    pub(crate) contexts: Folds<Selector>,
    pub(crate) settings: Folds<Map<String, Value>>,
    /// What each model's calls taught about its tokens (see [`super::budget`]).
    pub calibrations: super::budget::Calibrations,
}

impl Default for ContextCache {
    fn default() -> Self {
        ContextCache::of(Self::DEFAULT_BUDGET)
    }
}

impl std::fmt::Debug for ContextCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ContextCache")
    }
}

impl ContextCache {
    /// How many tapes' contexts (and settings) are kept.
    pub const TAPES: usize = 128;
    /// What each kept message weighs beside three times its JSON text:
    /// its kept forms (JSON, host value, wire text) and their allocations.
    /// Measured: 1,000 messages of ~150 bytes took 1.33 MB.
    pub const MESSAGE_OVERHEAD: usize = 768;

    /// How much the kept contexts may weigh in all (about their memory)
    /// unless `BUB_CONTEXT_CACHE_MB` says otherwise. It was 200,000
    /// messages of any size: 128 sessions holding a 60 MB prompt each
    /// could keep gigabytes.
    pub const DEFAULT_BUDGET: usize = 128 << 20;

    /// The budget `env` sets (`BUB_CONTEXT_CACHE_MB`), else the default.
    pub fn budget(env: &bub_runtime::settings::Environment) -> usize {
        let bytes = env.megabytes("BUB_CONTEXT_CACHE_MB", Self::DEFAULT_BUDGET as u64);
        usize::try_from(bytes).unwrap_or(usize::MAX)
    }

    /// A new, empty cache of at most `budget` (see [`Self::budget`]).
    pub fn with_budget(budget: usize) -> Arc<ContextCache> {
        Arc::new(ContextCache::of(budget))
    }

    fn of(budget: usize) -> ContextCache {
        ContextCache {
            contexts: Folds::new(Self::TAPES, budget, |s: &Selector| s.bytes),
            settings: Folds::new(Self::TAPES, Self::TAPES, |_| 1),
            calibrations: Default::default(),
        }
    }

    /// A new, empty cache.
    pub fn new() -> Arc<ContextCache> {
        Arc::default()
    }
}

fn upgrade_call(c: &Value) -> Value {
    // Chat-completions-style `{function: {name, arguments}}` (legacy payloads).
    // Arguments that are not a string are written as Bub's `json.dumps`
    // writes them (`{"a": 1}`, spaced); missing ones are `{}`.
    if let Some(f) = c.get("function").filter(|f| f.is_object()) {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).filter(|s| !s.is_empty()).unwrap_or("").to_owned();
        let arguments = match f.get("arguments") {
            Some(Value::String(s)) => s.clone(),
            Some(v) if bub_kit::envelope::truthy(v) => bub_kit::python::python_json(v),
            _ => "{}".to_owned(),
        };
        return json!({"id": text(c.get("id")), "name": text(f.get("name")), "arguments": arguments});
    }
    c.clone()
}

/// Bub's default selector: `message` → itself, `tool_call` → an assistant
/// message with the calls, `tool_result` → one tool message per (call,
/// result), `anchor` → `[Anchor created: <name>]: <state>`; entries with
/// `meta.context == false` and everything else are left out.
pub fn select(entries: &[TapeEntry]) -> Vec<Shared> {
    let mut selector = Selector::default();
    for e in entries {
        selector.push(e);
    }
    selector.messages
}

/// [`select`], fed one entry at a time: the messages so far and the calls
/// the next `tool_result` answers.
#[derive(Debug, Clone, Default)]
pub struct Selector {
    messages: Vec<Shared>,
    last_calls: Vec<Value>,
    /// What the messages weigh in a [`ContextCache`] (see
    /// [`ContextCache::budget`]).
    bytes: usize,
    /// Where the requests over these messages leave their host list for
    /// the next step or turn (shared by the kept selector's copies).
    list_slot: super::message::ListSlot,
}

impl Selector {
    /// Adds what `e` selects.
    pub fn push(&mut self, e: &TapeEntry) {
        if e.meta.get("context") == Some(&Value::Bool(false)) {
            return;
        }
        match e.kind.as_str() {
            "message" => self.push_message(Value::Object(e.payload.clone()), None),
            "tool_call" => {
                let calls = e.payload.get("calls").and_then(Value::as_array);
                self.last_calls = calls.into_iter().flatten().map(upgrade_call).collect();
                let mut m = json!({
                    "role": "assistant",
                    "content": e.payload.get("content").cloned().unwrap_or(json!("")),
                    "tool_calls": self.last_calls,
                });
                for k in ["reasoning", "provider_data"] {
                    if let Some(v) = e.payload.get(k) {
                        m[k] = v.clone();
                    }
                }
                self.add(Message::new(m));
            }
            "tool_result" => {
                let results = e.payload.get("results").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
                let answers: Vec<Shared> = (self.last_calls.iter().zip(results))
                    .map(|(call, result)| {
                        Message::new(json!({
                            "role": "tool",
                            "tool_call_id": call.get("id").cloned().unwrap_or_default(),
                            "name": call.get("name").cloned().unwrap_or_default(),
                            "content": tool_message_content(result),
                        }))
                    })
                    .collect();
                for m in answers {
                    self.add(m);
                }
            }
            "anchor" => {
                let name = e.payload.get("name").and_then(Value::as_str).unwrap_or("");
                // Bub: `json.dumps(payload.get('state'), ensure_ascii=False)`.
                let state = bub_kit::python::python_json(e.payload.get("state").unwrap_or(&Value::Null));
                self.add(Message::new(
                    json!({"role": "assistant", "content": format!("[Anchor created: {name}]: {state}")}),
                ));
            }
            _ => {}
        }
    }

    /// Adds what a fetched entry selects (see [`super::tape::FetchedEntry`]:
    /// a message entry's payload arrives as a host value, which becomes the
    /// message's own unless the selector rewrites the message).
    pub fn push_fetched(&mut self, e: &super::tape::FetchedEntry) {
        match &e.message_payload {
            Some(p) => {
                if e.entry.meta.get("context") == Some(&Value::Bool(false)) {
                    return;
                }
                // A plain payload still as its stored text stays text; any
                // other is parsed straight into JSON (once), not into host
                // nodes and then JSON.
                if let Some(m) = Message::stored(p) {
                    self.add(m);
                    return;
                }
                let json = match p.as_ref().lazy_json() {
                    Some(text) => serde_json::from_str::<Value>(text).ok(),
                    None => p.deserialize::<Value>().ok(),
                };
                let json = json.unwrap_or_else(|| json!({}));
                self.push_message(json, Some(p));
            }
            None => self.push(&e.entry),
        }
    }

    /// A `message` entry's payload as a message; `hosted` is the same
    /// payload as a host value, kept unless legacy tool calls are rewritten.
    fn push_message(&mut self, mut m: Value, hosted: Option<&bub_abi::Value>) {
        match m.get("tool_calls").and_then(Value::as_array) {
            Some(calls) => m["tool_calls"] = Value::Array(calls.iter().map(upgrade_call).collect()),
            None => {
                if let Some(hosted) = hosted {
                    self.add(Message::with_hosted(m, hosted.clone()));
                    return;
                }
            }
        }
        self.add(Message::new(m));
    }

    fn add(&mut self, m: Shared) {
        // A plain stored message is held once, as its text.
        self.bytes += match m.plain() {
            Some(p) => p.role_json.len() + p.content_json.len() + 32,
            None => 3 * super::budget::json_bytes(m.json()),
        } + ContextCache::MESSAGE_OVERHEAD;
        self.messages.push(m);
    }

    /// The messages so far.
    pub fn messages(&self) -> &[Shared] {
        &self.messages
    }
}

/// A tool result as tool-message content: text as is, a content result as
/// its parts, anything else as JSON text.
pub fn tool_message_content(result: &Value) -> Value {
    match result {
        Value::String(s) => Value::String(s.clone()),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("tool_content") => {
            o.get("content").cloned().unwrap_or(json!([]))
        }
        other => Value::String(bub_kit::python::python_json(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetched(payload: &Value) -> crate::tape::FetchedEntry {
        let entry = TapeEntry { id: 1, kind: "message".into(), ..Default::default() };
        crate::tape::FetchedEntry { entry, message_payload: Some(bub_abi::Value::from(payload)) }
    }

    #[test]
    fn a_stored_message_keeps_its_payload_node_and_a_legacy_one_is_upgraded_behaviour_123() {
        let long = "x".repeat(100);
        let plain = json!({"role": "user", "content": long});
        let stored = fetched(&plain);
        let hosted = stored.message_payload.as_ref().unwrap();
        let mut selector = Selector::default();
        selector.push_fetched(&stored);
        let text = |v: &bub_abi::Value| v.as_ref().get("content").unwrap().as_str().unwrap().as_ptr();
        let kept = selector.messages()[0].hosted();
        // The store's node itself, not a copy built from the JSON.
        assert_eq!(text(kept), text(hosted));
        assert_eq!(kept.deserialize::<Value>().unwrap(), plain);

        // A legacy `function` call is rewritten, so the payload's node is
        // not the message: the host value follows the rewritten JSON.
        let legacy = json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]});
        selector.push_fetched(&fetched(&legacy));
        let upgraded = selector.messages()[1].hosted().deserialize::<Value>().unwrap();
        assert_eq!(upgraded["tool_calls"][0], json!({"id": "c1", "name": "f", "arguments": "{}"}));
        assert_eq!(&upgraded, selector.messages()[1].json());
        // Arguments that are not text are written as `json.dumps` writes them.
        let spaced = json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": {"path": "a.txt", "n": 1}}}]});
        selector.push_fetched(&fetched(&spaced));
        let spaced_up = selector.messages()[2].json().clone();
        assert_eq!(spaced_up["tool_calls"][0]["arguments"], "{\"path\": \"a.txt\", \"n\": 1}");
    }

    #[test]
    fn a_fetched_message_is_read_from_its_payload_node_behaviour_123() {
        use crate::tape::FetchedEntry;
        let long = "y".repeat(100);
        let plain = json!({"role": "assistant", "content": long});
        let hosted = bub_abi::Value::from(&plain);
        let head = |meta: Value| TapeEntry {
            id: 3,
            kind: "message".into(),
            meta: meta.as_object().unwrap().clone(),
            ..Default::default()
        };
        let mut selector = Selector::default();
        selector.push_fetched(&FetchedEntry { entry: head(json!({})), message_payload: Some(hosted.clone()) });
        // Left out of the context, as a typed entry would be.
        selector.push_fetched(&FetchedEntry {
            entry: head(json!({"context": false})),
            message_payload: Some(hosted.clone()),
        });
        assert_eq!(selector.messages().len(), 1);
        assert_eq!(selector.messages()[0].json(), &plain);
        let text = |v: &bub_abi::Value| v.as_ref().get("content").unwrap().as_str().unwrap().as_ptr();
        assert_eq!(text(selector.messages()[0].hosted()), text(&hosted));
        assert_eq!(
            FetchedEntry { entry: head(json!({})), message_payload: Some(hosted) }.payload_map(),
            *plain.as_object().unwrap()
        );
    }

    /// Bounded resources: a selector weighs its messages' text (three
    /// times, plus a fixed overhead each), so the context cache's budget is
    /// in bytes, not in messages of any size.
    #[test]
    fn a_selector_weighs_its_messages_text() {
        let mut selector = Selector::default();
        let small = TapeEntry {
            kind: "message".into(),
            payload: json!({"role": "user", "content": "hi"}).as_object().unwrap().clone(),
            ..Default::default()
        };
        selector.push(&small);
        let one = selector.bytes;
        assert!((ContextCache::MESSAGE_OVERHEAD..ContextCache::MESSAGE_OVERHEAD + 200).contains(&one), "{one}");
        let big = TapeEntry {
            kind: "message".into(),
            payload: json!({"role": "user", "content": "x".repeat(1 << 20)}).as_object().unwrap().clone(),
            ..Default::default()
        };
        selector.push(&big);
        assert!(selector.bytes - one > 3 << 20, "{}", selector.bytes);
    }
}
