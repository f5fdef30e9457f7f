//! Whose a tape is: each session tape records the session it belongs to,
//! and a search across sessions stays inside one owner's sessions.
//!
//! A tape's name is two hashes (`md5(workspace)[:16]__md5(session)[:16]`),
//! so the store alone cannot say which session, let alone which person, a
//! tape holds. A gateway shared by several people (two Telegram users,
//! HTTP callers each confined to their own session) must not let one
//! read another's conversation through `tape.search(sessions="all")`.
//! So when a run first writes a session's tape it also writes the
//! session's **record**: a sidecar tape `<tape>__sidecar__session` with one
//! event, `session {session_id}`. It goes through the store like any
//! entry, so every store keeps it (JSONL, SQLite, PostgreSQL shared by
//! several gateways), and Bub, which mounts only the sidecars it is told
//! to, never reads it.
//!
//! The **owner** of a session is, by default, the session itself: in
//! Bub's channels a session id is the channel and the chat
//! (`telegram:<chat>`), so "the same channel and chat" is "the same
//! session". The operator joins sessions into one person with `people`
//! (name → session patterns, e.g. `{"ada": ["telegram:42", "slack:D0ADA",
//! "cli:*"]}`), and opens every session to the turns of the channels in
//! `search_open_channels` (default `cli`: the terminal is the operator).
//! A tape without a record (written before records existed, or by Python
//! Bub) has no known owner: only an open channel's turns find it.

use std::{collections::HashMap, sync::Arc};

use bub_abi::types::TapeQuery;
use serde_json::{json, Map, Value};

use super::{
    tape::{entry, sidecar_tape_name, Store, SIDECAR_MARK},
    AgentError,
};

/// The sidecar that holds a session tape's record.
pub const RECORD_SIDECAR: &str = "session";

/// The state key holding the session whose owner a turn acts for: set for
/// a subagent's run (its `temp/…` session is its parent's), else absent
/// and the turn's `session_id` counts.
pub const OWNER_SESSION_KEY: &str = "_runtime_owner_session";

/// Who may search whose sessions: the operator's settings
/// (`search_open_channels`, `people`).
#[derive(Debug, Clone, PartialEq)]
pub struct SearchScope {
    /// Channels whose turns search every session (`*`: every channel).
    pub open_channels: Vec<String>,
    /// People: a name and the session patterns (`telegram:42`, `cli:*`)
    /// that are one person's sessions.
    pub people: Vec<(String, Vec<String>)>,
}

impl Default for SearchScope {
    fn default() -> Self {
        SearchScope { open_channels: vec!["cli".into()], people: Vec::new() }
    }
}

/// Whether `pattern` matches `session`: exactly, or up to a trailing `*`.
pub fn pattern_matches(pattern: &str, session: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => session.starts_with(prefix),
        None => pattern == session,
    }
}

impl SearchScope {
    /// Whether a turn that came through `channel` may search every session.
    pub fn is_open(&self, channel: Option<&str>) -> bool {
        self.open_channels.iter().any(|c| c == "*" || Some(c.as_str()) == channel)
    }

    /// The owner of `session`: the person whose patterns match it, else
    /// the session itself.
    pub fn owner(&self, session: &str) -> Owner {
        for (name, patterns) in &self.people {
            if patterns.iter().any(|p| pattern_matches(p, session)) {
                return Owner::Person(name.clone());
            }
        }
        Owner::Session(session.to_owned())
    }

    /// Reads `people` (`{"name": ["pattern", …]}`) as the settings give it;
    /// `what` names the setting in the error.
    pub fn people_from(value: &Value, what: &str) -> Result<Vec<(String, Vec<String>)>, String> {
        let shape =
            || format!("{what} must be a JSON object: person → list of session patterns (\"telegram:42\", \"cli:*\")");
        let Value::Object(people) = value else { return Err(shape()) };
        let mut out = Vec::with_capacity(people.len());
        for (name, patterns) in people {
            let Value::Array(items) = patterns else { return Err(shape()) };
            let mut list = Vec::with_capacity(items.len());
            for item in items {
                match item.as_str().map(str::trim) {
                    Some(p) if !p.is_empty() && p != "*" => list.push(p.to_owned()),
                    // A bare `*` would make one person of everyone: that is
                    // `search_open_channels`' job, and says so there.
                    Some("*") => {
                        return Err(format!(
                            "{what}: person {name:?} names \"*\" (every session); open search with \
                             search_open_channels instead"
                        ))
                    }
                    _ => return Err(shape()),
                }
            }
            out.push((name.clone(), list));
        }
        Ok(out)
    }
}

/// Whose a session is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// A person the operator declared.
    Person(String),
    /// The session alone.
    Session(String),
}

/// The sessions of a store's tapes, as their records say, kept for the
/// life of the store's scope: a record never changes once written.
#[derive(Debug, Default)]
pub struct SessionIndex {
    // Tape → its session (None: the tape has no record).
    known: std::sync::Mutex<HashMap<String, Option<String>>>,
}

impl SessionIndex {
    /// A fresh, shared index.
    pub fn new() -> Arc<SessionIndex> {
        Arc::new(SessionIndex::default())
    }

    fn cached(&self, tape: &str) -> Option<Option<String>> {
        bub_abi::sync::lock(&self.known).get(tape).cloned()
    }

    fn remember(&self, tape: &str, session: Option<String>) {
        bub_abi::sync::lock(&self.known).insert(tape.to_owned(), session);
    }

    /// Writes `tape`'s record (session `session`) unless it has one: once
    /// per tape and scope, a read of the small sidecar.
    pub async fn ensure_recorded(&self, store: &Store, tape: &str, session: &str) -> Result<(), AgentError> {
        if self.cached(tape).is_some_and(|s| s.is_some()) {
            return Ok(());
        }
        if let Some(found) = read_record(store, tape).await? {
            self.remember(tape, Some(found));
            return Ok(());
        }
        let mut meta = Map::new();
        meta.insert("context".into(), Value::Bool(false));
        let record = entry("event", json!({"name": "session", "data": {"session_id": session}}), meta);
        store.append(&sidecar_tape_name(tape, RECORD_SIDECAR), &record).await?;
        self.remember(tape, Some(session.to_owned()));
        Ok(())
    }

    /// The session `tape` belongs to, as its record says (None: no record).
    pub async fn session_of(&self, store: &Store, tape: &str) -> Result<Option<String>, AgentError> {
        if let Some(known) = self.cached(tape) {
            return Ok(known);
        }
        let found = read_record(store, tape).await?;
        // A missing record may be written later by another gateway: only a
        // found one is kept for good.
        if found.is_some() {
            self.remember(tape, found.clone());
        }
        Ok(found)
    }

    /// The session tapes of `store` (sidecars aside), each with its
    /// recorded session.
    pub async fn sessions(&self, store: &Store) -> Result<Vec<(String, Option<String>)>, AgentError> {
        let tapes = store.list_tapes().await?;
        let mut out = Vec::new();
        for tape in tapes.into_iter().filter(|t| !t.contains(SIDECAR_MARK)) {
            let session = match self.session_of(store, &tape).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(target: "bub::tape", "reading the session record of tape {tape}: {e}");
                    None
                }
            };
            out.push((tape, session));
        }
        Ok(out)
    }
}

async fn read_record(store: &Store, tape: &str) -> Result<Option<String>, AgentError> {
    let q = TapeQuery {
        tape: sidecar_tape_name(tape, RECORD_SIDECAR),
        kinds: vec!["event".into()],
        limit: Some(1),
        ..Default::default()
    };
    let entries = store.fetch_all(&q).await?;
    Ok(entries.first().and_then(|e| e.payload.get("data")?.get("session_id")?.as_str().map(str::to_owned)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(people: Value) -> SearchScope {
        SearchScope { people: SearchScope::people_from(&people, "people").unwrap(), ..Default::default() }
    }

    #[test]
    fn a_session_is_its_own_owner_unless_a_person_claims_it() {
        let s = scope(json!({"ada": ["telegram:42", "cli:*"]}));
        assert_eq!(s.owner("telegram:42"), Owner::Person("ada".into()));
        assert_eq!(s.owner("cli:local"), Owner::Person("ada".into()));
        assert_eq!(s.owner("telegram:421"), Owner::Session("telegram:421".into()), "a pattern is exact without *");
        assert_eq!(s.owner("telegram:7"), Owner::Session("telegram:7".into()));
    }

    #[test]
    fn only_the_open_channels_search_everything() {
        let s = SearchScope::default();
        assert!(s.is_open(Some("cli")));
        assert!(!s.is_open(Some("telegram")) && !s.is_open(None));
        let all = SearchScope { open_channels: vec!["*".into()], ..Default::default() };
        assert!(all.is_open(Some("telegram")) && all.is_open(None));
    }

    #[test]
    fn people_are_read_strictly() {
        assert!(SearchScope::people_from(&json!(["a"]), "people").is_err());
        assert!(SearchScope::people_from(&json!({"a": "telegram:1"}), "people").is_err());
        assert!(SearchScope::people_from(&json!({"a": [1]}), "people").is_err());
        let err = SearchScope::people_from(&json!({"a": ["*"]}), "people").unwrap_err();
        assert!(err.contains("search_open_channels"), "{err}");
    }

    #[tokio::test]
    async fn a_record_is_written_once_and_read_back() {
        let store = Store::memory();
        let index = SessionIndex::new();
        store.append("w__a", &entry("message", json!({"role": "user"}), Map::new())).await.unwrap();
        index.ensure_recorded(&store, "w__a", "telegram:1").await.unwrap();
        index.ensure_recorded(&store, "w__a", "telegram:1").await.unwrap();
        let fresh = SessionIndex::new();
        assert_eq!(fresh.session_of(&store, "w__a").await.unwrap().as_deref(), Some("telegram:1"));
        assert_eq!(fresh.session_of(&store, "w__b").await.unwrap(), None);
        let sidecar = TapeQuery { tape: sidecar_tape_name("w__a", RECORD_SIDECAR), ..Default::default() };
        assert_eq!(store.fetch_all(&sidecar).await.unwrap().len(), 1, "one record, however many runs");
        store.append("w__b", &entry("message", json!({"role": "user"}), Map::new())).await.unwrap();
        let listed = fresh.sessions(&store).await.unwrap();
        assert_eq!(listed, vec![("w__a".to_owned(), Some("telegram:1".to_owned())), ("w__b".to_owned(), None)]);
    }
}
