//! `tape-sqlite`: Bub's tapes in one embedded SQLite database.
//!
//! `provide_tape_store` answers a store over `<data dir>/tapes.sqlite3`
//! (config `path` to put it elsewhere). Every tape operation the agent uses
//! (append, fetch with anchors, kinds, text search and limits, reset,
//! list) works as with the builtin JSONL store; `bub_kit::tape::try_select`
//! holds the query semantics, the anchor lookup is pushed down to SQL.
//!
//! Several `bub` processes (a gateway and `bub run`s) share the file:
//! WAL journal (readers never block the writer), a busy timeout (config
//! `busy_timeout_ms`, 10 000) instead of "database is locked", and ids
//! assigned inside `BEGIN IMMEDIATE`, so they are unique and increasing per
//! tape across processes. `synchronous=FULL` by default: an append that
//! returned survives a power cut (config `synchronous = "normal"` trades
//! that for speed; a process crash never loses it either way).

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
};

use bub_abi::{
    resources::{Fut, TapeStore},
    types::{TapeEntry, TapeQuery},
    BoxError, Object, Plugin, PluginContext,
};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde_json::{Map, Value};

/// The plugin.
pub struct TapeSqlite {
    settings: Arc<Settings>,
}

struct Settings {
    path: PathBuf,
    busy_timeout_ms: u64,
    synchronous: &'static str,
}

#[bub_abi::plugin]
impl Plugin for TapeSqlite {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        let path = match ctx.config.get("path").and_then(Value::as_str) {
            Some(p) if !p.trim().is_empty() => ctx.home.join(p.trim()),
            _ => ctx.data_dir.join("tapes.sqlite3"),
        };
        let busy_timeout_ms = match ctx.config.get("busy_timeout_ms") {
            None => 10_000,
            Some(v) => v
                .as_u64()
                .or_else(|| v.as_str()?.parse().ok())
                .ok_or_else(|| format!("tape-sqlite: busy_timeout_ms={v} is not a number of milliseconds"))?,
        };
        let synchronous = match ctx.config.get("synchronous").and_then(Value::as_str).map(str::to_lowercase) {
            None => "FULL",
            Some(s) if s == "full" => "FULL",
            Some(s) if s == "normal" => "NORMAL",
            Some(other) => return Err(format!("tape-sqlite: synchronous={other:?}; use full or normal").into()),
        };
        Ok(TapeSqlite { settings: Arc::new(Settings { path, busy_timeout_ms, synchronous }) })
    }

    /// The SQLite store (replacing the builtin JSONL files by priority).
    fn provide_tape_store(&self) -> Option<Object> {
        Some(Object::tape_store(SqliteStore { settings: self.settings.clone(), conn: Default::default() }))
    }
}

bub_abi::export_plugin!(TapeSqlite);

/// One connection per store object, opened on first use, used from the
/// blocking pool (SQLite calls block; the host's threads must not).
#[derive(Clone)]
struct SqliteStore {
    settings: Arc<Settings>,
    conn: Arc<Mutex<Option<Connection>>>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tape_entries (
    tape    TEXT    NOT NULL,
    id      INTEGER NOT NULL,
    kind    TEXT    NOT NULL,
    anchor  TEXT,
    date    TEXT    NOT NULL,
    payload TEXT    NOT NULL,
    meta    TEXT    NOT NULL,
    PRIMARY KEY (tape, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tape_anchors ON tape_entries (tape, anchor, id) WHERE kind = 'anchor';
";

impl SqliteStore {
    fn open(&self) -> Result<Connection, BoxError> {
        let path = &self.settings.path;
        if let Some(dir) = path.parent() {
            bub_kit::files::create_private_dir(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        // Conversations are secrets: the database is created 0600 before
        // SQLite opens it (its -wal and -shm files take the same mode).
        if !path.exists() {
            bub_kit::files::open_private_append(path)
                .map_err(|e| format!("cannot create the tape database {}: {e}", path.display()))?;
        }
        let conn =
            Connection::open(path).map_err(|e| format!("cannot open the tape database {}: {e}", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_millis(self.settings.busy_timeout_ms))?;
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!("{}: journal mode is {mode}, not WAL (a filesystem without shared memory?)", path.display());
        }
        conn.execute_batch(&format!("PRAGMA synchronous = {};", self.settings.synchronous))?;
        conn.execute_batch(SCHEMA).map_err(|e| format!("cannot set up the tape database {}: {e}", path.display()))?;
        Ok(conn)
    }

    /// Runs `f` with the connection on the blocking pool.
    async fn with<T: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut Connection) -> Result<T, BoxError> + Send + 'static,
    ) -> Result<T, BoxError> {
        let this = self.clone();
        let path = self.settings.path.clone();
        tokio::task::spawn_blocking(move || {
            let mut slot = bub_abi::sync::lock(&this.conn);
            if slot.is_none() {
                *slot = Some(this.open()?);
            }
            let conn = slot.as_mut().expect("opened above");
            f(conn).map_err(|e| format!("tape-sqlite: cannot {what} ({}): {e}", path.display()).into())
        })
        .await
        .map_err(|e| format!("tape-sqlite: the {what} task failed: {e}"))?
    }
}

fn entry_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<TapeEntry> {
    let json = |text: String| match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    Ok(TapeEntry {
        id: row.get::<_, i64>(0)? as u64,
        kind: row.get(1)?,
        date: row.get(2)?,
        payload: json(row.get(3)?),
        meta: json(row.get(4)?),
    })
}

impl TapeStore for SqliteStore {
    fn list_tapes(&self) -> impl Fut<Vec<String>> {
        let this = self.clone();
        async move {
            this.with("list tapes", |conn| {
                let mut stmt = conn.prepare("SELECT DISTINCT tape FROM tape_entries ORDER BY tape")?;
                let names = stmt.query_map([], |r| r.get(0))?.collect::<Result<Vec<String>, _>>()?;
                Ok(names)
            })
            .await
        }
    }

    fn reset(&self, tape: String) -> impl Fut<()> {
        let this = self.clone();
        async move {
            this.with("reset a tape", move |conn| {
                conn.execute("DELETE FROM tape_entries WHERE tape = ?1", params![tape])?;
                Ok(())
            })
            .await
        }
    }

    fn fetch_all(&self, query: TapeQuery) -> impl Fut<Vec<TapeEntry>> {
        let this = self.clone();
        async move {
            this.with("read a tape", move |conn| {
                // The anchor is found in SQL; only the entries after it are read.
                // `after_id` applies first: an anchor at or before it counts as none.
                let after = query.after_id.map_or(0, |a| i64::try_from(a).unwrap_or(i64::MAX));
                let start: Option<i64> = if query.between_anchors.is_some() {
                    None // try_select finds both anchors
                } else if query.last_anchor {
                    conn.query_row(
                        "SELECT MAX(id) FROM tape_entries WHERE tape = ?1 AND kind = 'anchor'",
                        params![query.tape],
                        |r| r.get(0),
                    )?
                } else if let Some(name) = &query.after_anchor {
                    conn.query_row(
                        "SELECT MAX(id) FROM tape_entries WHERE tape = ?1 AND kind = 'anchor' AND anchor = ?2",
                        params![query.tape, name],
                        |r| r.get(0),
                    )
                    .optional()?
                    .flatten()
                } else {
                    None
                };
                let mut stmt = conn.prepare_cached(
                    "SELECT id, kind, date, payload, meta FROM tape_entries WHERE tape = ?1 AND id > ?2 ORDER BY id",
                )?;
                let entries = stmt
                    .query_map(params![query.tape, start.unwrap_or(0).max(after)], entry_of)?
                    .collect::<Result<Vec<_>, _>>()?;
                let rest = TapeQuery { last_anchor: false, after_anchor: None, ..query };
                Ok(bub_kit::tape::try_select(entries, &rest)?)
            })
            .await
        }
    }

    fn append(&self, tape: String, entry: TapeEntry) -> impl Fut<TapeEntry> {
        let this = self.clone();
        async move {
            let mut stored = this.append_many(tape, vec![entry]).await?;
            stored.pop().ok_or_else(|| "tape-sqlite: the entry was not stored".into())
        }
    }

    /// One transaction for the lot: ids in order, all or none stored.
    fn append_many(&self, tape: String, mut entries: Vec<TapeEntry>) -> impl Fut<Vec<TapeEntry>> {
        let this = self.clone();
        async move {
            let now = bub_kit::tape::now();
            for e in entries.iter_mut().filter(|e| e.date.is_empty()) {
                e.date = now.clone();
            }
            this.with("append to a tape", move |conn| {
                // IMMEDIATE: the write lock first, so the id read below is
                // still the last one when the rows go in.
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let last: i64 = tx.query_row(
                    "SELECT COALESCE(MAX(id), 0) FROM tape_entries WHERE tape = ?1",
                    params![tape],
                    |r| r.get(0),
                )?;
                {
                    let mut insert = tx.prepare_cached(
                        "INSERT INTO tape_entries (tape, id, kind, anchor, date, payload, meta) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    )?;
                    for (i, entry) in entries.iter_mut().enumerate() {
                        entry.id = (last + 1 + i as i64) as u64;
                        let anchor = (entry.kind == "anchor")
                            .then(|| entry.payload.get("name").and_then(Value::as_str).map(str::to_owned))
                            .flatten();
                        insert.execute(params![
                            tape,
                            entry.id as i64,
                            entry.kind,
                            anchor,
                            entry.date,
                            Value::Object(entry.payload.clone()).to_string(),
                            Value::Object(entry.meta.clone()).to_string(),
                        ])?;
                    }
                }
                tx.commit()?;
                Ok(entries)
            })
            .await
        }
    }
}

#[cfg(test)]
mod tests {
    use bub_abi::types::{TapeEntry, TapeQuery};
    use bub_runtime::{resources::TapeStore, testing::PluginTest};
    use serde_json::{json, Map, Value};

    bub_abi::static_plugin!(super::TapeSqlite, fn module, name = "tape-sqlite", version = "0", description = "test");

    fn plugin(config: Value) -> PluginTest {
        PluginTest::with_config("tape-sqlite", module(), config.as_object().cloned().unwrap_or_default())
    }

    fn entry(kind: &str, payload: Value) -> TapeEntry {
        TapeEntry {
            id: 0,
            kind: kind.into(),
            payload: payload.as_object().cloned().unwrap(),
            meta: Map::new(),
            date: String::new(),
        }
    }

    async fn store(test: &PluginTest) -> TapeStore {
        assert!(test.loaded(), "{:?}", test.record());
        let answer = test.runtime().provide_tape_store().unwrap().expect("a store");
        TapeStore::from_reply(answer.reply()).unwrap()
    }

    /// Ids count from 1 per tape, in append order; dates are filled; the
    /// anchor queries start after the named (or the last) anchor; reset
    /// empties one tape only.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn appends_queries_and_resets() {
        let test = plugin(json!({}));
        let store = store(&test).await;
        let stored = store
            .append_many(
                "t",
                &[
                    entry("message", json!({"n": 1})),
                    entry("anchor", json!({"name": "a1"})),
                    entry("message", json!({"n": 2})),
                ],
            )
            .await
            .unwrap();
        assert_eq!(stored.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(stored.iter().all(|e| !e.date.is_empty()));
        store.append("t", &entry("anchor", json!({"name": "a2"}))).await.unwrap();
        store.append("t", &entry("message", json!({"n": 3}))).await.unwrap();
        store.append("other", &entry("message", json!({"n": 9}))).await.unwrap();
        let numbers = |entries: Vec<TapeEntry>| -> Vec<Value> {
            entries.into_iter().filter_map(|e| e.payload.get("n").cloned()).collect()
        };
        let query = |q: Value| serde_json::from_value::<TapeQuery>(q).unwrap();
        let all = store.fetch_all(&query(json!({"tape": "t"}))).await.unwrap();
        assert_eq!(all.len(), 5);
        assert_eq!(
            numbers(store.fetch_all(&query(json!({"tape": "t", "after_anchor": "a1"}))).await.unwrap()),
            [json!(2), json!(3)]
        );
        assert_eq!(
            numbers(store.fetch_all(&query(json!({"tape": "t", "last_anchor": true}))).await.unwrap()),
            [json!(3)]
        );
        assert_eq!(store.list_tapes().await.unwrap(), ["other", "t"]);
        store.reset("t").await.unwrap();
        assert!(store.fetch_all(&query(json!({"tape": "t"}))).await.unwrap().is_empty());
        assert_eq!(store.fetch_all(&query(json!({"tape": "other"}))).await.unwrap().len(), 1);
    }

    /// A busy timeout that is not a number, or a `synchronous` other than
    /// full/normal, fails the constructor with the setting named.
    #[test]
    fn bad_settings_are_refused_with_their_name() {
        for (config, named) in
            [(json!({"busy_timeout_ms": "soon"}), "busy_timeout_ms"), (json!({"synchronous": "off"}), "synchronous")]
        {
            let test = plugin(config);
            assert!(!test.loaded());
            let detail = format!("{:?}", test.record().status);
            assert!(detail.contains(named), "{detail}");
        }
        assert!(plugin(json!({"busy_timeout_ms": "250", "synchronous": "NORMAL"})).loaded());
    }
}
