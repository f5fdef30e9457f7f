//! The run's tape: a fork of the session tape (semantics §A4.6, §A4.7).
//!
//! A run never writes the store directly. Appends to the session tape and
//! its sidecar tapes go to an in-memory overlay (ids from 1); reads see the
//! parent's entries followed by the overlay's. When the run ends the
//! overlay is merged into the store (sidecars first, then the main tape),
//! or dropped for `temp/` sessions. Every append first strips media from a
//! list-valued `content` / `prompt` field: user images reach the model once
//! and never the tape.

use std::{
    collections::HashMap,
    sync::{atomic::Ordering, Arc},
};

use bub_abi::types::{TapeEntry, TapeMatch, TapeQuery};
use bub_kit::tape::try_select;
use md5::{Digest, Md5};
use serde_json::{json, Map, Value};
use tokio::sync::Mutex;

pub use bub_runtime::resources::FetchedEntry;

use super::AgentError;

/// Where tapes are kept: a plugin's store (`provide_tape_store`) or memory.
#[derive(Clone)]
pub enum Store {
    /// A store object from a plugin.
    Host(bub_runtime::resources::TapeStore),
    /// In memory (tests, embedders without a store).
    Memory(Arc<std::sync::Mutex<HashMap<String, Vec<TapeEntry>>>>),
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Store::Host(s) => write!(f, "Store::Host({:?})", s.resource()),
            Store::Memory(_) => f.write_str("Store::Memory"),
        }
    }
}

impl Store {
    /// A fresh in-memory store.
    pub fn memory() -> Store {
        Store::Memory(Default::default())
    }

    /// `fetch_all`.
    pub async fn fetch_all(&self, query: &TapeQuery) -> Result<Vec<TapeEntry>, AgentError> {
        match self {
            Store::Host(s) => s.fetch_all(query).await.map_err(AgentError::store),
            Store::Memory(m) => {
                let entries = lock(m).get(&query.tape).cloned().unwrap_or_default();
                try_select(entries, query).map_err(AgentError::store)
            }
        }
    }

    /// `append`; returns the entry with its id.
    pub async fn append(&self, tape: &str, entry: &TapeEntry) -> Result<TapeEntry, AgentError> {
        match self {
            Store::Host(s) => s.append(tape, entry).await.map_err(AgentError::store),
            Store::Memory(m) => {
                let mut tapes = lock(m);
                let list = tapes.entry(tape.to_owned()).or_default();
                let mut e = entry.clone();
                e.id = list.last().map_or(1, |l| l.id + 1);
                list.push(e.clone());
                Ok(e)
            }
        }
    }

    /// As [`fetch_all`](Self::fetch_all), each message entry with its
    /// payload as the host value a plugin's store answered it in (see
    /// [`bub_runtime::resources::TapeStore::fetch_all_hosted`]); memory
    /// tapes have none.
    pub async fn fetch_all_hosted(&self, query: &TapeQuery) -> Result<Vec<FetchedEntry>, AgentError> {
        match self {
            Store::Host(s) => s.fetch_all_hosted(query).await.map_err(AgentError::store),
            Store::Memory(_) => {
                let entries = self.fetch_all(query).await?;
                Ok(entries.into_iter().map(|entry| FetchedEntry { entry, message_payload: None }).collect())
            }
        }
    }

    /// Several entries in order, at once where the store can: one lock and
    /// one sync for the builtin store (a crash mid-write leaves whole lines
    /// of the run's start and at most one torn line, which readers skip),
    /// one transaction for SQLite, one statement for PostgreSQL.
    pub async fn append_many(&self, tape: &str, entries: &[TapeEntry]) -> Result<Vec<TapeEntry>, AgentError> {
        match self {
            Store::Host(s) => s.append_many(tape, entries).await.map_err(AgentError::store),
            Store::Memory(_) => {
                let mut out = Vec::with_capacity(entries.len());
                for e in entries {
                    out.push(self.append(tape, e).await?);
                }
                Ok(out)
            }
        }
    }

    /// [`append_many`](Self::append_many), answering how many were stored;
    /// a failing store is asked again after each of `retries`' waits, and
    /// the entries come back with the error when it still fails.
    pub async fn append_many_counted(
        &self,
        tape: &str,
        entries: Vec<TapeEntry>,
        retries: &[std::time::Duration],
    ) -> Result<usize, (AgentError, Vec<TapeEntry>)> {
        match self {
            Store::Host(s) => {
                s.append_many_counted(tape, entries, retries).await.map_err(|n| (AgentError::store(n.error), n.entries))
            }
            Store::Memory(_) => match self.append_many(tape, &entries).await {
                Ok(stored) => Ok(stored.len()),
                Err(e) => Err((e, entries)),
            },
        }
    }

    /// `list_tapes`.
    pub async fn list_tapes(&self) -> Result<Vec<String>, AgentError> {
        match self {
            Store::Host(s) => s.list_tapes().await.map_err(AgentError::store),
            Store::Memory(m) => {
                let mut names: Vec<String> = lock(m).keys().cloned().collect();
                names.sort();
                Ok(names)
            }
        }
    }

    /// A search across `tapes` (None: every tape but the sidecars), best
    /// first ([`bub_kit::search`]): from the store's own index where it has
    /// one (`search_tapes`, ABI 2.8), else [`Store::scan_tapes`].
    pub async fn search_tapes(
        &self,
        tapes: Option<&[String]>,
        query: &TapeQuery,
    ) -> Result<Vec<TapeMatch>, AgentError> {
        if let Store::Host(s) = self {
            if let Some(found) = s.search_tapes(tapes, query).await.map_err(AgentError::store)? {
                return Ok(found);
            }
        }
        self.scan_tapes(tapes, query).await
    }

    /// The same search, by reading each tape in turn (each tape's best,
    /// then the best of those): what a store's index must agree with. A
    /// tape that cannot be read is skipped and logged.
    pub async fn scan_tapes(&self, tapes: Option<&[String]>, query: &TapeQuery) -> Result<Vec<TapeMatch>, AgentError> {
        let names = match tapes {
            Some(t) => t.to_vec(),
            None => self.list_tapes().await?.into_iter().filter(|t| !t.contains(SIDECAR_MARK)).collect(),
        };
        let mut found = Vec::new();
        for tape in names {
            let q = TapeQuery {
                tape: tape.clone(),
                query: query.query.clone(),
                kinds: query.kinds.clone(),
                between_dates: query.between_dates.clone(),
                limit: query.limit,
                ..Default::default()
            };
            match self.fetch_all(&q).await {
                Ok(entries) => found.extend(entries.into_iter().map(|entry| TapeMatch { tape: tape.clone(), entry })),
                Err(e) => tracing::warn!(target: "bub::tape", "searching tape {tape}: {e}"),
            }
        }
        bub_kit::search::search_across(found, query).map_err(AgentError::store)
    }

    /// `reset`.
    pub async fn reset(&self, tape: &str) -> Result<(), AgentError> {
        match self {
            Store::Host(s) => s.reset(tape).await.map_err(AgentError::store),
            Store::Memory(m) => {
                lock(m).remove(tape);
                Ok(())
            }
        }
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    bub_abi::sync::lock(m)
}

/// Bub's session tape name: `md5(workspace)[:16]__md5(session)[:16]`.
pub fn session_tape_name(workspace: &std::path::Path, session_id: &str) -> String {
    let ws = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    format!("{}__{}", md5_16(&ws.to_string_lossy()), md5_16(session_id))
}

/// The first 16 hex digits of `text`'s MD5: each half of a session tape's name.
fn md5_16(text: &str) -> String {
    let digest = Md5::digest(text.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// What separates a tape's name from its sidecar's.
pub const SIDECAR_MARK: &str = "__sidecar__";

/// A sidecar's tape: `<tape>__sidecar__<name>`.
pub fn sidecar_tape_name(tape: &str, sidecar: &str) -> String {
    format!("{tape}{SIDECAR_MARK}{sidecar}")
}

/// The tape of session `session_id` in the same workspace as session tape
/// `tape` (whose name starts with the workspace's hash).
pub fn sibling_session_tape(tape: &str, session_id: &str) -> String {
    let workspace = tape.split_once("__").map_or(tape, |(w, _)| w);
    format!("{workspace}__{}", md5_16(session_id))
}

/// A new entry dated now.
pub fn entry(kind: &str, payload: Value, meta: Map<String, Value>) -> TapeEntry {
    let payload = match payload {
        Value::Object(m) => m,
        other => {
            let mut m = Map::new();
            m.insert("value".into(), other);
            m
        }
    };
    TapeEntry { id: 0, kind: kind.into(), payload, meta, date: bub_kit::tape::now() }
}

#[derive(Default)]
struct Overlay {
    entries: Vec<TapeEntry>,
    reset: bool,
}

/// A run's fork of one session tape and its sidecar tapes.
pub struct RunTape {
    name: String,
    store: Store,
    managed: Vec<String>,
    overlay: Mutex<HashMap<String, Overlay>>,
    merge_back: bool,
    contexts: Arc<super::context::ContextCache>,
    // Where entries the store would not take are kept (None: they are lost
    // with an error).
    rescue: Option<super::rescue::Rescue>,
    // What every entry's meta gets unless it says otherwise: the open
    // trace span's ids when traces are on (Bub's `tracing.correlation()`).
    correlation: std::sync::Mutex<Option<Map<String, Value>>>,
    // Whether one was ever set: the first stamps the run's bootstrap, and
    // until then `put` need not look.
    correlated: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for RunTape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RunTape({})", self.name)
    }
}

/// Adds `meta`'s keys to `entry`'s meta, keeping those it has.
fn stamp(entry: &mut TapeEntry, meta: &Map<String, Value>) {
    for (k, v) in meta {
        entry.meta.entry(k.clone()).or_insert_with(|| v.clone());
    }
}

/// Keeps only the text parts of a list-valued `content` / `prompt` field,
/// as text blocks (`{"type": "text", "text": …}`, behaviour 199).
fn strip_media(payload: &mut Map<String, Value>) {
    for key in ["content", "prompt"] {
        if let Some(Value::Array(parts)) = payload.get_mut(key) {
            // Content with blocks (media) is Bub's block list; plain text
            // lists stay as they are.
            let blocks = parts.iter().any(|p| !p.is_string());
            parts.retain(|p| match p {
                Value::String(_) => true,
                Value::Object(o) => o.get("type").and_then(Value::as_str) == Some("text"),
                _ => false,
            });
            for part in parts.iter_mut().filter(|_| blocks) {
                if let Value::String(text) = part {
                    *part = serde_json::json!({"type": "text", "text": std::mem::take(text)});
                }
            }
        }
    }
}

impl RunTape {
    /// Forks `name` (and the tapes of `sidecars`) over `store`.
    pub fn fork(store: Store, name: &str, sidecars: &[String], merge_back: bool) -> RunTape {
        let mut managed = vec![name.to_owned()];
        managed.extend(sidecars.iter().map(|s| sidecar_tape_name(name, s)));
        let contexts = super::context::ContextCache::new();
        RunTape {
            name: name.to_owned(),
            store,
            managed,
            overlay: Default::default(),
            merge_back,
            contexts,
            rescue: None,
            correlation: std::sync::Mutex::new(None),
            correlated: Default::default(),
        }
    }

    /// Sets the meta every entry appended from now on carries (its own
    /// meta wins), as Bub stamps the open trace span's `trace_id` and
    /// `span_id` on each entry; `None` stops it. The first time, the run's
    /// entries written so far (its bootstrap, before the run's span could
    /// open) get it too: in Bub the run's span opens before them.
    pub async fn set_correlation(&self, meta: Option<Map<String, Value>>) {
        let first = {
            let mut slot = bub_abi::sync::lock(&self.correlation);
            let first = slot.is_none() && meta.is_some() && !self.correlated.swap(true, Ordering::Relaxed);
            slot.clone_from(&meta);
            first
        };
        if let (true, Some(meta)) = (first, meta) {
            let mut overlay = self.overlay.lock().await;
            for entry in overlay.values_mut().flat_map(|o| o.entries.iter_mut()) {
                stamp(entry, &meta);
            }
        }
    }

    /// Keeps the entries a failing store would not take in `rescue`, for
    /// the next run to store (see [`super::rescue`]).
    pub fn with_rescue(mut self, rescue: Option<super::rescue::Rescue>) -> RunTape {
        self.rescue = rescue;
        self
    }

    /// The tapes the run writes: the session tape, then its sidecars'.
    pub fn tapes(&self) -> &[String] {
        &self.managed
    }

    /// Keeps the session tape's context messages in `contexts` (shared by
    /// the runs of a framework) instead of a cache of this run's own.
    pub fn with_contexts(mut self, contexts: Arc<super::context::ContextCache>) -> RunTape {
        self.contexts = contexts;
        self
    }

    /// Where the session tape's context messages are kept.
    pub fn contexts(&self) -> &super::context::ContextCache {
        &self.contexts
    }

    /// The session tape's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The store under the fork.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Appends to the main tape.
    pub async fn append(&self, kind: &str, payload: Value, meta: Map<String, Value>) -> Result<TapeEntry, AgentError> {
        self.append_to(&self.name.clone(), entry(kind, payload, meta)).await
    }

    /// Appends an event entry `{name, data}`.
    pub async fn event(&self, name: &str, data: Value, meta: Map<String, Value>) -> Result<TapeEntry, AgentError> {
        self.append("event", json!({"name": name, "data": data}), meta).await
    }

    /// Appends to the main tape, answering nothing: the entry moves into
    /// the run's overlay (or the store) without a copy. A 60 MB prompt is
    /// recorded three times per run (`loop.start`, `loop.step.start`, the
    /// user message); a copy of each for the answer doubled that.
    pub async fn record(&self, kind: &str, payload: Value, meta: Map<String, Value>) -> Result<(), AgentError> {
        self.record_to(&self.name.clone(), entry(kind, payload, meta)).await
    }

    /// [`record`](Self::record)s an event entry `{name, data}`.
    pub async fn record_event(&self, name: &str, data: Value, meta: Map<String, Value>) -> Result<(), AgentError> {
        self.record("event", json!({"name": name, "data": data}), meta).await
    }

    /// [`append_to`](Self::append_to) without the answer (and its copy).
    pub async fn record_to(&self, tape: &str, entry: TapeEntry) -> Result<(), AgentError> {
        self.put(tape, entry, false).await.map(drop)
    }

    /// Appends to `tape` (managed tapes go to the overlay).
    pub async fn append_to(&self, tape: &str, entry: TapeEntry) -> Result<TapeEntry, AgentError> {
        // `put` answers the entry whenever it is asked to.
        Ok(self.put(tape, entry, true).await?.unwrap_or_default())
    }

    /// Stores `entry` in `tape` (a managed tape: in the run's overlay); with
    /// `answer`, a copy of it as stored (with its id) for the caller.
    async fn put(&self, tape: &str, mut entry: TapeEntry, answer: bool) -> Result<Option<TapeEntry>, AgentError> {
        strip_media(&mut entry.payload);
        // Untraced runs (nearly all) never take the lock.
        if self.correlated.load(Ordering::Relaxed) {
            if let Some(correlation) = bub_abi::sync::lock(&self.correlation).as_ref() {
                stamp(&mut entry, correlation);
            }
        }
        if !self.managed.iter().any(|t| t == tape) {
            let stored = self.store.append(tape, &entry).await?;
            return Ok(answer.then_some(stored));
        }
        let mut overlay = self.overlay.lock().await;
        let o = overlay.entry(tape.to_owned()).or_default();
        entry.id = o.entries.last().map_or(1, |e| e.id + 1);
        let copy = answer.then(|| entry.clone());
        o.entries.push(entry);
        Ok(copy)
    }

    /// Entries of `query.tape` as the run sees them: the parent's (unless
    /// reset in the run), then the overlay's; an overlay anchor satisfying
    /// the query's anchor selection hides everything before it. Overlay
    /// entries are filtered by kinds and limit only (Bub's quirk).
    pub async fn fetch(&self, query: &TapeQuery) -> Result<Vec<TapeEntry>, AgentError> {
        if !self.managed.contains(&query.tape) {
            return self.store.fetch_all(query).await;
        }
        let (parent_hidden, own) = self.own_entries(query).await;
        let mut out = Vec::new();
        if !parent_hidden {
            // A parent read error counts as no entries (the overlay still answers).
            match self.store.fetch_all(query).await {
                Ok(entries) => out = entries,
                Err(e) => tracing::warn!(target: "bub::tape", "reading tape {}: {e}", query.tape),
            }
        }
        out.extend(own);
        if let Some(limit) = query.limit {
            out.truncate(limit);
        }
        Ok(out)
    }

    /// The run's own entries of managed tape `query.tape` that the query
    /// sees (after an overlay anchor satisfying its anchor selection, of
    /// its kinds), and whether the parent's entries are hidden (by such an
    /// anchor, or a reset in the run).
    pub(crate) async fn own_entries(&self, query: &TapeQuery) -> (bool, Vec<TapeEntry>) {
        let overlay = self.overlay.lock().await;
        let Some(o) = overlay.get(&query.tape) else { return (false, Vec::new()) };
        let cut = o.entries.iter().rposition(|e| bub_kit::tape::starts_after(e, query));
        let start = cut.map_or(0, |i| i + 1);
        let kinds = |e: &&TapeEntry| query.kinds.is_empty() || query.kinds.contains(&e.kind);
        (cut.is_some() || o.reset, o.entries[start..].iter().filter(kinds).cloned().collect())
    }

    /// Every entry of the main tape.
    pub async fn entries(&self) -> Result<Vec<TapeEntry>, AgentError> {
        self.fetch(&TapeQuery { tape: self.name.clone(), ..Default::default() }).await
    }

    /// Anchor `{name, state}` then event `handoff {name, state}`.
    pub async fn handoff(&self, name: &str, state: Option<Value>) -> Result<(), AgentError> {
        let mut payload = json!({"name": name});
        if let Some(s) = &state {
            payload["state"] = s.clone();
        }
        self.record("anchor", payload, Map::new()).await?;
        self.record_event("handoff", json!({"name": name, "state": state.unwrap_or(json!({}))}), Map::new()).await?;
        Ok(())
    }

    /// Adds the bootstrap anchor (`session/start {owner: "human"}`) when the
    /// tape has no anchor.
    pub async fn ensure_bootstrap(&self) -> Result<(), AgentError> {
        let q =
            TapeQuery { tape: self.name.clone(), kinds: vec!["anchor".into()], limit: Some(1), ..Default::default() };
        if self.fetch(&q).await?.is_empty() {
            self.handoff("session/start", Some(json!({"owner": "human"}))).await?;
        }
        Ok(())
    }

    /// The mounted sidecars: `(name, tape)`.
    pub fn sidecars(&self) -> Vec<(String, String)> {
        let names = self.managed.iter().skip(1);
        names.map(|t| (t.rsplit(SIDECAR_MARK).next().unwrap_or(t).to_owned(), t.clone())).collect()
    }

    /// Clears the main tape (in the fork), restarts it with
    /// `session/start {owner: "human", …state}`, and resets the sidecars.
    pub async fn reset(&self, state: Map<String, Value>) -> Result<(), AgentError> {
        self.reset_keeping(state, &[]).await
    }

    /// [`reset`](Self::reset), leaving the sidecars named in `keep` alone.
    pub async fn reset_keeping(&self, state: Map<String, Value>, keep: &[String]) -> Result<(), AgentError> {
        let kept: Vec<String> = keep.iter().map(|k| sidecar_tape_name(&self.name, k)).collect();
        {
            let mut overlay = self.overlay.lock().await;
            for tape in self.managed.iter().filter(|t| !kept.contains(t)) {
                let o = overlay.entry(tape.clone()).or_default();
                o.entries.clear();
                o.reset = true;
            }
        }
        let mut s = json!({"owner": "human"});
        for (k, v) in state {
            s[k] = v;
        }
        self.handoff("session/start", Some(s)).await?;
        for (name, _) in self.sidecars() {
            let meta = context_false();
            let data = if keep.contains(&name) {
                json!({"sidecar": name, "status": "skipped", "reason": "tape.reset", "cause": "archive_failed"})
            } else {
                json!({"sidecar": name, "status": "ok", "reason": "tape.reset"})
            };
            self.record_event("sidecar.reset", data, meta).await?;
        }
        Ok(())
    }

    /// Writes the overlay into the store (sidecars first, then the main
    /// tape), or drops it without `merge_back`. A failed sidecar merge is
    /// recorded on the main tape and the main merge still happens.
    pub async fn merge(&self) -> Result<(), AgentError> {
        let mut overlay = std::mem::take(&mut *self.overlay.lock().await);
        if !self.merge_back {
            return Ok(());
        }
        for tape in self.managed.iter().skip(1) {
            let Some(o) = overlay.remove(tape) else { continue };
            if let Err(e) = self.merge_one(tape, o).await {
                tracing::warn!(target: "bub::tape", "merging sidecar tape {tape}: {e}");
                let main = overlay.entry(self.name.clone()).or_default();
                let mut meta = context_false();
                meta.insert("merge".into(), json!(true));
                main.entries.push(entry(
                    "event",
                    json!({"name": "sidecar.merge", "data": {"tape": tape, "status": "error", "error": e.to_string()}}),
                    meta,
                ));
            }
        }
        if let Some(o) = overlay.remove(&self.name) {
            self.merge_one(&self.name, o).await?;
        }
        Ok(())
    }

    async fn merge_one(&self, tape: &str, o: Overlay) -> Result<(), AgentError> {
        if o.reset {
            self.store.reset(tape).await?;
        }
        // At once: one sync for the run instead of one per entry; the
        // entries are given up as they are sent, and the stored entries
        // the store answers are only counted. A store that keeps failing
        // hands them back: they are rescued rather than lost.
        let Err((error, entries)) =
            self.store.append_many_counted(tape, o.entries, &super::rescue::STORE_RETRIES).await
        else {
            return Ok(());
        };
        let Some(rescue) = &self.rescue else { return Err(error) };
        match rescue.keep(tape, &entries) {
            Ok(path) => {
                tracing::error!(
                    target: "bub::tape",
                    "the tape store failed ({error}); the run's {} entries of tape {tape} are kept in {} and go to \
                     the store at the session's next run",
                    entries.len(),
                    path.display()
                );
                Ok(())
            }
            Err(io) => {
                tracing::error!(
                    target: "bub::tape",
                    "the tape store failed ({error}) and the run's {} entries of tape {tape} could not be kept in {} \
                     either ({io}): they are lost",
                    entries.len(),
                    rescue.dir().display()
                );
                Err(error)
            }
        }
    }
}

/// `{context: false}`: an entry the model never sees.
pub fn context_false() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("context".into(), Value::Bool(false));
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sibling_session_tape_is_the_other_sessions_tape_in_the_same_workspace() {
        let ws = std::env::temp_dir();
        assert_eq!(sibling_session_tape(&session_tape_name(&ws, "a"), "b"), session_tape_name(&ws, "b"));
    }
}
