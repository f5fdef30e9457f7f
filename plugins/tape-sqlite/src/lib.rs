//! `tape-sqlite`: Bub's tapes in one embedded SQLite database.
//!
//! `provide_tape_store` answers a store over `<data dir>/tapes.sqlite3`
//! (config `path` to put it elsewhere). Every tape operation the agent uses
//! (append, fetch with anchors, kinds, text search and limits, reset,
//! list) works as with the builtin JSONL store; `bub_kit::tape::try_select`
//! holds the query semantics, the anchor lookup is pushed down to SQL.
//! A search across tapes (`tape.search sessions=all`) reads an FTS5
//! trigram index of each entry's text (its first 64 KiB, all a search
//! reads), built once for a database from before it existed; the index
//! offers every entry that can match and `bub_kit::search` decides, so the
//! answer is a scan's.
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
    types::{TapeEntry, TapeMatch, TapeQuery},
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
CREATE TABLE IF NOT EXISTS tape_text_rows (
    row  INTEGER PRIMARY KEY,
    tape TEXT    NOT NULL,
    id   INTEGER NOT NULL,
    UNIQUE (tape, id)
);
CREATE VIRTUAL TABLE IF NOT EXISTS tape_text USING fts5(
    text, content = '', contentless_delete = 1, tokenize = 'trigram'
);
";

/// `PRAGMA user_version` once every entry written before the text index
/// existed is in it.
const INDEXED: i64 = 1;

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
        let mut conn = conn;
        index_older_entries(&mut conn)
            .map_err(|e| format!("cannot index the tapes' text in {}: {e}", path.display()))?;
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

/// Puts the entries written before the text index existed (a database
/// from an older tape-sqlite) into it, once: in one write transaction, so
/// two processes opening the file at once do it once.
fn index_older_entries(conn: &mut Connection) -> Result<(), BoxError> {
    if conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))? >= INDEXED {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if tx.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))? < INDEXED {
        let count: i64 = tx.query_row("SELECT COUNT(*) FROM tape_entries", [], |r| r.get(0))?;
        if count > 0 {
            tracing::info!("tape-sqlite: indexing the text of {count} tape entries for search (once)");
        }
        {
            let mut rows = tx.prepare(
                "SELECT e.tape, e.id, e.payload FROM tape_entries e \
                 WHERE NOT EXISTS (SELECT 1 FROM tape_text_rows r WHERE r.tape = e.tape AND r.id = e.id)",
            )?;
            let mut found = rows.query([])?;
            while let Some(row) = found.next()? {
                let (tape, id, payload): (String, i64, String) = (row.get(0)?, row.get(1)?, row.get(2)?);
                let payload = match serde_json::from_str::<Value>(&payload) {
                    Ok(Value::Object(m)) => m,
                    _ => Map::new(),
                };
                index_text(&tx, &tape, id, &payload)?;
            }
        }
        tx.execute_batch(&format!("PRAGMA user_version = {INDEXED}"))?;
    }
    tx.commit()?;
    Ok(())
}

/// Adds one entry's text to the search index.
fn index_text(conn: &Connection, tape: &str, id: i64, payload: &Map<String, Value>) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT OR IGNORE INTO tape_text_rows (tape, id) VALUES (?1, ?2)")?
        .execute(params![tape, id])?;
    let row = conn.last_insert_rowid();
    conn.prepare_cached("INSERT INTO tape_text (rowid, text) VALUES (?1, ?2)")?
        .execute(params![row, bub_kit::search::searched_text(payload)])?;
    Ok(())
}

/// An FTS5 string: `text` quoted, its quotes doubled.
fn fts_string(text: &str) -> String {
    format!("\"{}\"", text.replace('"', "\"\""))
}

fn entry_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<TapeEntry> {
    entry_of_at(row, 0)
}

/// The entry in `row`'s columns `at..at + 5` (id, kind, date, payload,
/// meta); a payload or meta that is not a JSON object reads as empty.
fn entry_of_at(row: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<TapeEntry> {
    let json = |text: String| match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    Ok(TapeEntry {
        id: row.get::<_, i64>(at)? as u64,
        kind: row.get(at + 1)?,
        date: row.get(at + 2)?,
        payload: json(row.get(at + 3)?),
        meta: json(row.get(at + 4)?),
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
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                tx.execute(
                    "DELETE FROM tape_text WHERE rowid IN (SELECT row FROM tape_text_rows WHERE tape = ?1)",
                    params![tape],
                )?;
                tx.execute("DELETE FROM tape_text_rows WHERE tape = ?1", params![tape])?;
                tx.execute("DELETE FROM tape_entries WHERE tape = ?1", params![tape])?;
                tx.commit()?;
                Ok(())
            })
            .await
        }
    }

    /// From the trigram index, decided by `bub_kit::search::Search` as a
    /// scan decides: first the entries that contain the query, newest
    /// first, until the best `limit` of them are settled; then, unless
    /// those fill the answer, every entry sharing a trigram with the query
    /// (the only ones a fuzzy match can come from). A query under three
    /// characters has no trigram: the host scans.
    fn search_tapes(&self, tapes: Option<Vec<String>>, query: TapeQuery) -> impl Fut<Option<Vec<TapeMatch>>> {
        let this = self.clone();
        async move {
            let needle = query.query.as_deref().unwrap_or("").trim().to_lowercase();
            if needle.chars().count() < 3 {
                return Ok(None);
            }
            this.with("search the tapes", move |conn| {
                let Some(mut search) = bub_kit::search::Search::new(&query)? else { return Ok(Some(Vec::new())) };
                let tapes = tapes.map(|t| Value::from(t).to_string());
                let kinds = (!query.kinds.is_empty()).then(|| Value::from(query.kinds.clone()).to_string());
                let sql = |order: &str| {
                    format!(
                        "SELECT r.tape, e.id, e.kind, e.date, e.payload, e.meta FROM tape_text t \
                         JOIN tape_text_rows r ON r.row = t.rowid \
                         JOIN tape_entries e ON e.tape = r.tape AND e.id = r.id \
                         WHERE tape_text MATCH ?1 \
                         AND (?2 IS NULL AND r.tape NOT LIKE '%\\_\\_sidecar\\_\\_%' ESCAPE '\\' \
                              OR r.tape IN (SELECT value FROM json_each(?2))) \
                         AND (?3 IS NULL OR e.kind IN (SELECT value FROM json_each(?3))) {order}"
                    )
                };
                let read = |r: &rusqlite::Row<'_>| -> rusqlite::Result<(String, TapeEntry)> {
                    Ok((r.get(0)?, entry_of_at(r, 1)?))
                };
                // Newest first, as a search ranks exact matches (dates as
                // stores write them, RFC 3339 UTC, sort as they read).
                let mut exact = conn.prepare(&sql("ORDER BY e.date DESC, r.tape DESC, e.id DESC"))?;
                let mut rows = exact.query(params![fts_string(search.needle()), tapes, kinds])?;
                while let Some(row) = rows.next()? {
                    let (tape, entry) = read(row)?;
                    if search.settled_before(&entry.date) {
                        break;
                    }
                    search.offer(&tape, entry);
                }
                drop(rows);
                let trigrams = search.trigrams();
                if !search.exact_full() && !trigrams.is_empty() {
                    let any = trigrams.iter().map(|t| fts_string(t)).collect::<Vec<_>>().join(" OR ");
                    let mut fuzzy = conn.prepare(&sql(""))?;
                    let mut rows = fuzzy.query(params![any, tapes, kinds])?;
                    while let Some(row) = rows.next()? {
                        let (tape, entry) = read(row)?;
                        search.offer(&tape, entry);
                    }
                }
                Ok(Some(search.finish()))
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
                        index_text(&tx, &tape, entry.id as i64, &entry.payload)?;
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

    /// A search across tapes from the trigram index finds what a scan
    /// finds: the entries containing the query (newest first), then the
    /// fuzzy ones, naming their tapes, never a sidecar's; a reset takes a
    /// tape's entries out of the index; a database written before the
    /// index existed is indexed when it is opened.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn searches_across_tapes_from_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.sqlite3");
        {
            // A database of the schema before the index.
            let db = rusqlite::Connection::open(&path).unwrap();
            db.execute_batch(
                "CREATE TABLE tape_entries (tape TEXT NOT NULL, id INTEGER NOT NULL, kind TEXT NOT NULL, \
                 anchor TEXT, date TEXT NOT NULL, payload TEXT NOT NULL, meta TEXT NOT NULL, PRIMARY KEY (tape, id)) \
                 WITHOUT ROWID;
                 INSERT INTO tape_entries VALUES ('old', 1, 'message', NULL, '2026-01-01T00:00:00Z', \
                 '{\"role\":\"user\",\"content\":\"an old kumquat\"}', '{}');",
            )
            .unwrap();
        }
        let test = plugin(json!({"path": path}));
        let store = store(&test).await;
        let say = |text: &str| entry("message", json!({"role": "user", "content": text}));
        store.append_many("a", &[say("I like the KUMQUAT tree"), say("nothing here")]).await.unwrap();
        store.append("x__sidecar__spill", &say("kumquat in a sidecar")).await.unwrap();
        store.append("b", &say("a kumqaut, misspelled")).await.unwrap();
        let query = |q: Value| serde_json::from_value::<TapeQuery>(q).unwrap();
        let found = |tapes: Option<Vec<String>>, q: Value| {
            let store = store.clone();
            async move {
                let found = store.search_tapes(tapes.as_deref(), &query(q)).await.unwrap().expect("an indexed answer");
                found.into_iter().map(|m| (m.tape, m.entry.payload["content"].clone())).collect::<Vec<_>>()
            }
        };
        assert_eq!(
            found(None, json!({"tape": "", "query": "kumquat"})).await,
            [
                ("a".to_owned(), json!("I like the KUMQUAT tree")),
                ("old".to_owned(), json!("an old kumquat")),
                ("b".to_owned(), json!("a kumqaut, misspelled")),
            ]
        );
        assert_eq!(found(Some(vec!["a".into()]), json!({"tape": "", "query": "kumquat"})).await.len(), 1);
        assert_eq!(found(None, json!({"tape": "", "query": "kumquat", "limit": 1})).await.len(), 1);
        assert!(found(None, json!({"tape": "", "query": "kumquat", "kinds": ["anchor"]})).await.is_empty());
        assert!(store.search_tapes(None, &query(json!({"tape": "", "query": "ku"}))).await.unwrap().is_none());
        store.reset("a").await.unwrap();
        assert_eq!(found(None, json!({"tape": "", "query": "tree"})).await, []);
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
