//! `tape-postgres`: Bub's tapes in PostgreSQL, for deployments that
//! outgrow one machine: several `bub gateway` processes, on one machine or
//! many, share one database.
//!
//! - **Tapes** — `provide_tape_store` answers a store over the table
//!   `bub_tape_entries` (created on first use). Every tape operation of the
//!   agent works as with the builtin store (`bub_kit::tape::try_select` holds
//!   the query semantics; the anchor lookup runs in SQL). Ids are assigned
//!   by the insert itself (`MAX(id) + 1`, retried on the primary-key
//!   conflict a concurrent writer causes), so they are unique and
//!   increasing per tape across every process; a run's entries go in as
//!   one statement (`append_many`), all or none.
//! - **Search across tapes** — `tape.search sessions=all` reads a trigram
//!   index (`pg_trgm`, created when the database allows it) of each entry's
//!   text (its first 64 KiB, all a search reads, in the column
//!   `search_text`): it offers every entry that can match (those
//!   containing the query, then those sharing a trigram with it) and
//!   `bub_kit::search` decides, so the answer is a scan's. Without the
//!   extension the host reads each tape instead.
//! - **One turn per session at a time, across gateways** — `load_state`
//!   (run first, `tryfirst`) takes a PostgreSQL advisory lock named after
//!   the session on a connection of its own; `save_state` (run last,
//!   `trylast`, in the turn's `finally`) releases it. A second gateway's
//!   turn of the same session waits for it. A turn that never reaches
//!   `save_state` (it failed while building its prompt) or a gateway that
//!   dies cannot wedge a session: the lock is released after a lease
//!   (`lock_lease_seconds`, 900), and PostgreSQL drops the locks of a
//!   closed connection. Waiting is bounded (`lock_wait_seconds`, 240) and
//!   then fails the turn with a message naming the session. (Keep it under
//!   the host's `BUB_HOOK_TIMEOUT_SECONDS`, 300, which cancels any async
//!   hook that runs longer.)
//!
//! - **Outages** — a connection the server closed (a restart, a failover)
//!   is replaced at the next operation, reconnecting with backoff for up to
//!   `statement_timeout_seconds` (30); every operation waits at most that
//!   long for an answer, so a frozen server fails the turn with a message
//!   instead of hanging it, and the connection is replaced. Reads are
//!   retried once on a fresh connection; an append is not (it may have been
//!   stored before the connection dropped), so that turn fails and the next
//!   one works.
//!
//! Config: `url` (required; `postgres://user@host:port/db` or
//! `host=… user=… dbname=…`; `BUB_TAPE_POSTGRES__URL` keeps a password out
//! of files), `lock_lease_seconds`, `lock_wait_seconds`, `session_lock`
//! (`false` to store tapes only), `statement_timeout_seconds`. TLS is not
//! built in: reach a remote server through a local tunnel or socket.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use bub_abi::{
    resources::{Fut, TapeStore},
    types::{StateMap, TapeEntry, TapeMatch, TapeQuery},
    BoxError, Object, Plugin, PluginContext,
};
use serde_json::{Map, Value};
use tokio_postgres::{error::SqlState, Client, NoTls};

/// The plugin.
pub struct TapePostgres {
    shared: Arc<Shared>,
}

struct Shared {
    url: String,
    lease: Duration,
    wait: Duration,
    session_lock: bool,
    // The longest wait for the database's answer (and for reconnecting).
    timeout: Duration,
    // The connection tape operations share (tokio-postgres pipelines
    // concurrent queries on it); replaced when it closes or stops answering.
    tapes: tokio::sync::Mutex<Option<Arc<Client>>>,
    // Session locks held, by session: the connection holding it and a
    // token (the lease timer releases only the lock it was started for).
    held: Mutex<HashMap<String, (Arc<Client>, u64)>>,
    // Idle lock connections, reused for the next lock.
    idle: Mutex<Vec<Arc<Client>>>,
    tokens: std::sync::atomic::AtomicU64,
    // Whether the trigram index for searches across tapes exists (the
    // `pg_trgm` extension could be created or was there).
    trigrams: std::sync::atomic::AtomicBool,
}

fn seconds(config: &Map<String, Value>, key: &str, default: u64) -> Result<Duration, BoxError> {
    match config.get(key) {
        None => Ok(Duration::from_secs(default)),
        Some(v) => v
            .as_f64()
            .or_else(|| v.as_str()?.parse().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
            .and_then(bub_kit::time::seconds)
            .ok_or_else(|| format!("tape-postgres: {key}={v} is not a positive number of seconds").into()),
    }
}

#[bub_abi::plugin]
impl Plugin for TapePostgres {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        let url = ctx.config.get("url").and_then(Value::as_str).map(str::trim).filter(|u| !u.is_empty()).ok_or(
            "tape-postgres needs a database: `bub plugins config tape-postgres url=postgres://user@host/db` \
             (or BUB_TAPE_POSTGRES__URL)",
        )?;
        let session_lock = !matches!(ctx.config.get("session_lock"), Some(Value::Bool(false)))
            && ctx.config.get("session_lock").and_then(Value::as_str) != Some("false");
        Ok(TapePostgres {
            shared: Arc::new(Shared {
                url: url.to_owned(),
                lease: seconds(&ctx.config, "lock_lease_seconds", 900)?,
                wait: seconds(&ctx.config, "lock_wait_seconds", 240)?,
                session_lock,
                timeout: seconds(&ctx.config, "statement_timeout_seconds", 30)?,
                tapes: tokio::sync::Mutex::new(None),
                held: Mutex::new(HashMap::new()),
                idle: Mutex::new(Vec::new()),
                tokens: Default::default(),
                trigrams: Default::default(),
            }),
        })
    }

    /// The PostgreSQL store (replacing the builtin JSONL files by priority).
    fn provide_tape_store(&self) -> Option<Object> {
        Some(Object::tape_store(PgStore(self.shared.clone())))
    }

    /// Waits for the session's lock: no other gateway runs a turn of it.
    #[tryfirst]
    async fn load_state(&self, session_id: String) -> Result<Option<StateMap>, BoxError> {
        if self.shared.session_lock {
            self.shared.lock_session(&session_id).await?;
        }
        Ok(None)
    }

    /// Releases the session's lock, after every other `save_state`.
    #[trylast]
    async fn save_state(&self, session_id: String) -> Result<(), BoxError> {
        if self.shared.session_lock {
            self.shared.unlock_session(&session_id).await;
        }
        Ok(())
    }
}

bub_abi::export_plugin!(TapePostgres);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS bub_tape_entries (
    tape    TEXT   NOT NULL,
    id      BIGINT NOT NULL,
    kind    TEXT   NOT NULL,
    anchor  TEXT,
    date    TEXT   NOT NULL,
    payload JSONB  NOT NULL,
    meta    JSONB  NOT NULL,
    PRIMARY KEY (tape, id)
);
CREATE INDEX IF NOT EXISTS bub_tape_anchors ON bub_tape_entries (tape, anchor, id) WHERE kind = 'anchor';
ALTER TABLE bub_tape_entries ADD COLUMN IF NOT EXISTS search_text TEXT;
";

/// The trigram index of the entries' text, for searches across tapes
/// (`pg_trgm`: a trusted extension since PostgreSQL 13, so a database
/// owner may create it). Without it, a search is the host's scan.
const TRIGRAM_SCHEMA: &str = "
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX IF NOT EXISTS bub_tape_search ON bub_tape_entries USING gin (search_text gin_trgm_ops);
";

impl Shared {
    /// A frozen or unreachable server's error, naming the setting that bounds the wait.
    fn no_answer(&self) -> String {
        format!(
            "tape-postgres: the database ({}) did not answer within {}s (statement_timeout_seconds)",
            redact(&self.url),
            self.timeout.as_secs_f64()
        )
    }

    async fn connect(&self) -> Result<Client, BoxError> {
        let mut config: tokio_postgres::Config =
            self.url.parse().map_err(|e| format!("tape-postgres: url {} is not valid: {e}", redact(&self.url)))?;
        config.connect_timeout(self.timeout).keepalives(true).keepalives_idle(Duration::from_secs(30));
        let connected =
            tokio::time::timeout(self.timeout, config.connect(NoTls)).await.map_err(|_| self.no_answer())?;
        let (client, connection) = connected.map_err(|e| {
            format!("tape-postgres: cannot connect to the database ({}): {}", redact(&self.url), why(&e))
        })?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!("tape-postgres: a database connection closed: {e}");
            }
        });
        Ok(client)
    }

    /// The shared connection: the open one, else a new one (retried with
    /// backoff for up to the statement timeout), with the schema created.
    /// `CREATE … IF NOT EXISTS` is not safe against a concurrent creator, so
    /// creators take a transaction-scoped advisory lock: it is released by
    /// the commit, after the tables are visible to the next creator. (A
    /// session lock unlocked in the same batch was released *before* the
    /// batch's implicit transaction committed — CI caught the race.)
    async fn tapes(&self) -> Result<Arc<Client>, BoxError> {
        let mut slot = self.tapes.lock().await;
        if let Some(client) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(client.clone());
        }
        if slot.take().is_some() {
            tracing::warn!("tape-postgres: the database connection was closed; reconnecting");
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut delay = Duration::from_millis(100);
        loop {
            let attempt = async {
                let client = self.connect().await?;
                let setup = format!("BEGIN; SELECT pg_advisory_xact_lock(4207); {SCHEMA} COMMIT;");
                client
                    .batch_execute(&setup)
                    .await
                    .map_err(|e| format!("tape-postgres: cannot create the tables: {}", why(&e)))?;
                Ok::<_, BoxError>(client)
            };
            match tokio::time::timeout_at(deadline, attempt).await {
                Ok(Ok(client)) => {
                    self.set_up_search(&client).await;
                    let client = Arc::new(client);
                    *slot = Some(client.clone());
                    return Ok(client);
                }
                Ok(Err(e)) if tokio::time::Instant::now() + delay < deadline => {
                    tracing::debug!("tape-postgres: {e}; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(self.no_answer().into()),
            }
        }
    }

    /// Makes the text index for searches across tapes, once per
    /// connection: the trigram index where `pg_trgm` can be had (else the
    /// searches are the host's scan, said once in the log), and the text of
    /// entries stored before the column existed, in batches.
    async fn set_up_search(&self, client: &Client) {
        use std::sync::atomic::Ordering;
        let setup = format!("BEGIN; SELECT pg_advisory_xact_lock(4207); {TRIGRAM_SCHEMA} COMMIT;");
        let indexed = tokio::time::timeout(self.timeout, client.batch_execute(&setup)).await;
        match indexed {
            Ok(Ok(())) => self.trigrams.store(true, Ordering::SeqCst),
            Ok(Err(e)) => {
                let _ = client.batch_execute("ROLLBACK").await;
                if !self.trigrams.swap(false, Ordering::SeqCst) {
                    tracing::warn!(
                        "tape-postgres: no trigram index ({}); a search across tapes reads each tape instead. \
                         Install PostgreSQL's contrib extensions, or have the database owner run \
                         `CREATE EXTENSION pg_trgm`",
                        why(&e)
                    );
                }
            }
            Err(_) => tracing::warn!("tape-postgres: creating the trigram index took over {:?}", self.timeout),
        }
        let pending = "SELECT tape, id, payload FROM bub_tape_entries WHERE search_text IS NULL LIMIT 1000";
        let update = "UPDATE bub_tape_entries AS e SET search_text = t.text \
                      FROM unnest($1::text[], $2::bigint[], $3::text[]) AS t(tape, id, text) \
                      WHERE e.tape = t.tape AND e.id = t.id";
        loop {
            let rows = match client.query(pending, &[]).await {
                Ok(rows) if !rows.is_empty() => rows,
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!("tape-postgres: cannot index older entries' text: {}", why(&e));
                    break;
                }
            };
            let tapes: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
            let ids: Vec<i64> = rows.iter().map(|r| r.get(1)).collect();
            let texts: Vec<String> = rows
                .iter()
                .map(|r| match r.get::<_, Value>(2) {
                    Value::Object(m) => bub_kit::search::searched_text(&m),
                    _ => String::new(),
                })
                .collect();
            if let Err(e) = client.execute(update, &[&tapes, &ids, &texts]).await {
                tracing::warn!("tape-postgres: cannot index older entries' text: {}", why(&e));
                break;
            }
        }
    }

    /// Runs `op` on the shared connection within the statement timeout. A
    /// timeout or a closed connection drops the connection (the next
    /// operation reconnects); `retry` operations (reads) are tried once more
    /// on a fresh one.
    async fn with<T, F, Fut2>(&self, what: &str, retry: bool, op: F) -> Result<T, BoxError>
    where
        F: Fn(Arc<Client>) -> Fut2,
        Fut2: std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let mut tries = if retry { 2 } else { 1 };
        loop {
            tries -= 1;
            let client = self.tapes().await?;
            let error = match tokio::time::timeout(self.timeout, op(client.clone())).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e)) if !e.is_closed() && !client.is_closed() => return Err(failed(what, why(&e))),
                Ok(Err(e)) => failed(what, format!("the connection was lost ({})", why(&e))),
                Err(_) => failed(
                    what,
                    format!(
                        "the database did not answer within {}s (statement_timeout_seconds)",
                        self.timeout.as_secs_f64()
                    ),
                ),
            };
            // This connection is broken or wedged: the next operation gets a new one.
            let mut slot = self.tapes.lock().await;
            if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, &client)) {
                *slot = None;
            }
            drop(slot);
            if tries == 0 {
                return Err(error);
            }
        }
    }

    async fn lock_session(self: &Arc<Self>, session: &str) -> Result<(), BoxError> {
        let idle = bub_abi::sync::lock(&self.idle).pop();
        let client = match idle.filter(|c| !c.is_closed()) {
            Some(c) => c,
            None => Arc::new(self.connect().await?),
        };
        let wait_ms = self.wait.as_millis().to_string();
        let key = format!("bub-session:{session}");
        // The server enforces the lock wait; the client bounds a frozen one.
        let locked = tokio::time::timeout(self.wait + self.timeout, async {
            client.batch_execute(&format!("SET lock_timeout = {wait_ms}")).await?;
            client.execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", &[&key]).await
        })
        .await;
        match locked {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(format!(
                    "session {session:?} is still busy in another bub after {}s (tape-postgres lock_wait_seconds): {}",
                    self.wait.as_secs_f64(),
                    why(&e)
                )
                .into())
            }
            Err(_) => {
                return Err(format!(
                    "tape-postgres: the database did not answer the lock of session {session:?} within {}s",
                    (self.wait + self.timeout).as_secs_f64()
                )
                .into())
            }
        }
        let token = self.tokens.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        bub_abi::sync::lock(&self.held).insert(session.to_owned(), (client, token));
        // The lease: a turn that never reaches save_state must not wedge
        // the session.
        let (this, session, lease) = (self.clone(), session.to_owned(), self.lease);
        tokio::spawn(async move {
            tokio::time::sleep(lease).await;
            let still_ours = bub_abi::sync::lock(&this.held).get(&session).is_some_and(|h| h.1 == token);
            if still_ours {
                tracing::warn!(
                    "tape-postgres: session {session:?} was locked for {}s without its turn ending; released",
                    lease.as_secs_f64()
                );
                this.unlock_session(&session).await;
            }
        });
        Ok(())
    }

    async fn unlock_session(&self, session: &str) {
        let Some((client, _)) = bub_abi::sync::lock(&self.held).remove(session) else { return };
        let key = format!("bub-session:{session}");
        let unlocked = tokio::time::timeout(
            self.timeout,
            client.execute("SELECT pg_advisory_unlock(hashtextextended($1, 0))", &[&key]),
        )
        .await;
        let failure = match unlocked {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(why(&e)),
            Err(_) => Some(format!("no answer within {}s", self.timeout.as_secs_f64())),
        };
        match failure {
            None => {
                let mut idle = bub_abi::sync::lock(&self.idle);
                if idle.len() < 16 {
                    idle.push(client);
                }
            }
            // Dropping the connection releases its locks too.
            Some(e) => tracing::warn!("tape-postgres: cannot unlock session {session:?} ({e}); closing its connection"),
        }
    }
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url
            .split_whitespace()
            .map(|kv| if kv.starts_with("password=") { "password=***" } else { kv })
            .collect::<Vec<_>>()
            .join(" "),
    }
}

#[derive(Clone)]
struct PgStore(Arc<Shared>);

fn entry_of(row: &tokio_postgres::Row) -> TapeEntry {
    entry_of_at(row, 0)
}

/// The entry in `row`'s columns from `at` on: id, kind, date, payload, meta.
fn entry_of_at(row: &tokio_postgres::Row, at: usize) -> TapeEntry {
    let map = |v: Value| match v {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    TapeEntry {
        id: row.get::<_, i64>(at) as u64,
        kind: row.get(at + 1),
        date: row.get(at + 2),
        payload: map(row.get(at + 3)),
        meta: map(row.get(at + 4)),
    }
}

/// Offers `search` the rows of the trigram index that can match: those
/// containing its text (newest first: `C` collation, so dates compare as
/// the RFC 3339 UTC text stores write, which is by time), until they
/// settle the answer, then those containing one of its trigrams.
async fn search_index(
    db: &Client,
    search: &mut bub_kit::search::Search,
    tapes: &Option<Vec<String>>,
    kinds: &Option<Vec<String>>,
) -> Result<(), tokio_postgres::Error> {
    use tokio_postgres::types::ToSql;
    let like = |text: &str| format!("%{}%", text.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"));
    let filter = "($1::text[] IS NULL AND tape NOT LIKE '%\\_\\_sidecar\\_\\_%' OR tape = ANY($1)) \
                  AND ($2::text[] IS NULL OR kind = ANY($2))";
    let select = "SELECT tape, id, kind, date, payload, meta FROM bub_tape_entries";
    let exact = format!(
        "{select} WHERE search_text LIKE $3 AND {filter} \
         ORDER BY date COLLATE \"C\" DESC, tape COLLATE \"C\" DESC, id DESC"
    );
    let needle = like(search.needle());
    let params: [&(dyn ToSql + Sync); 3] = [tapes, kinds, &needle];
    let rows = db.query_raw(&exact, params).await?;
    let mut rows = std::pin::pin!(rows);
    while let Some(row) = next_row(rows.as_mut()).await? {
        let (tape, entry): (String, TapeEntry) = (row.get(0), entry_of_at(&row, 1));
        if search.settled_before(&entry.date) {
            break;
        }
        search.offer(&tape, entry);
    }
    let trigrams: Vec<String> = search.trigrams().iter().map(|t| like(t)).collect();
    if search.exact_full() || trigrams.is_empty() {
        return Ok(());
    }
    // One LIKE per trigram, ORed: each can use the GIN index (a LIKE ANY
    // of an array cannot).
    let any = (0..trigrams.len()).map(|i| format!("search_text LIKE ${}", i + 3)).collect::<Vec<_>>().join(" OR ");
    let fuzzy = format!("{select} WHERE ({any}) AND {filter}");
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![tapes, kinds];
    params.extend(trigrams.iter().map(|t| t as &(dyn ToSql + Sync)));
    let rows = db.query_raw(&fuzzy, params).await?;
    let mut rows = std::pin::pin!(rows);
    while let Some(row) = next_row(rows.as_mut()).await? {
        search.offer(&row.get::<_, String>(0), entry_of_at(&row, 1));
    }
    Ok(())
}

/// The next row of a streamed query.
async fn next_row(
    mut rows: std::pin::Pin<&mut tokio_postgres::RowStream>,
) -> Result<Option<tokio_postgres::Row>, tokio_postgres::Error> {
    use futures_core::Stream as _;
    std::future::poll_fn(|cx| rows.as_mut().poll_next(cx)).await.transpose()
}

fn failed(what: &str, e: impl std::fmt::Display) -> BoxError {
    format!("tape-postgres: cannot {what}: {e}").into()
}

/// A driver error with the server's own words: `tokio_postgres::Error`
/// displays a database error as just "db error".
fn why(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({detail}; SQLSTATE {})", db.message(), db.code().code()),
            None => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        },
        None => e.to_string(),
    }
}

impl TapeStore for PgStore {
    fn list_tapes(&self) -> impl Fut<Vec<String>> {
        let this = self.clone();
        async move {
            let sql = "SELECT DISTINCT tape FROM bub_tape_entries ORDER BY tape";
            let rows = this.0.with("list tapes", true, |db| async move { db.query(sql, &[]).await }).await?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        }
    }

    fn reset(&self, tape: String) -> impl Fut<()> {
        let this = self.clone();
        async move {
            let tape = &tape;
            let sql = "DELETE FROM bub_tape_entries WHERE tape = $1";
            this.0.with("reset a tape", true, |db| async move { db.execute(sql, &[tape]).await }).await?;
            Ok(())
        }
    }

    /// From the trigram index, decided by `bub_kit::search::Search` as a
    /// scan decides: first the entries whose text contains the query,
    /// newest first, until the best `limit` of them are settled; then,
    /// unless those fill the answer, every entry containing one of the
    /// query's trigrams (the only ones a fuzzy match can come from). Rows
    /// are read as they come, never all held. Without the index, or for a
    /// query under three characters, the host scans.
    fn search_tapes(&self, tapes: Option<Vec<String>>, query: TapeQuery) -> impl Fut<Option<Vec<TapeMatch>>> {
        let this = self.clone();
        async move {
            let needle = query.query.as_deref().unwrap_or("").trim().to_lowercase();
            // The index is known once a connection was made.
            this.0.tapes().await?;
            if needle.chars().count() < 3 || !this.0.trigrams.load(std::sync::atomic::Ordering::SeqCst) {
                return Ok(None);
            }
            // Checked here, so a bad date is the query's error, not the database's.
            if bub_kit::search::Search::new(&query)?.is_none() {
                return Ok(Some(Vec::new()));
            }
            let kinds: Option<Vec<String>> = (!query.kinds.is_empty()).then(|| query.kinds.clone());
            let (query, tapes, kinds) = (&query, &tapes, &kinds);
            let found = this
                .0
                .with("search the tapes", true, |db| async move {
                    let mut search = bub_kit::search::Search::new(query).ok().flatten().expect("checked above");
                    search_index(&db, &mut search, tapes, kinds).await?;
                    Ok(search.finish())
                })
                .await?;
            Ok(Some(found))
        }
    }

    fn fetch_all(&self, query: TapeQuery) -> impl Fut<Vec<TapeEntry>> {
        let this = self.clone();
        async move {
            let q = &query;
            let rows = this
                .0
                .with("read a tape", true, |db| async move {
                    let anchor = if q.between_anchors.is_some() {
                        None // try_select finds both anchors
                    } else if q.last_anchor {
                        let sql = "SELECT MAX(id) FROM bub_tape_entries WHERE tape = $1 AND kind = 'anchor'";
                        Some(db.query_one(sql, &[&q.tape]).await?)
                    } else if let Some(name) = &q.after_anchor {
                        let sql =
                            "SELECT MAX(id) FROM bub_tape_entries WHERE tape = $1 AND kind = 'anchor' AND anchor = $2";
                        Some(db.query_one(sql, &[&q.tape, name]).await?)
                    } else {
                        None
                    };
                    let start: i64 = anchor.and_then(|row| row.get::<_, Option<i64>>(0)).unwrap_or(0);
                    // `after_id` applies first: an anchor at or before it counts as none.
                    let start = start.max(q.after_id.map_or(0, |a| i64::try_from(a).unwrap_or(i64::MAX)));
                    db.query(
                        "SELECT id, kind, date, payload, meta FROM bub_tape_entries WHERE tape = $1 AND id > $2 \
                         ORDER BY id",
                        &[&q.tape, &start],
                    )
                    .await
                })
                .await?;
            let entries = rows.iter().map(entry_of).collect();
            let rest = TapeQuery { last_anchor: false, after_anchor: None, ..query };
            Ok(bub_kit::tape::try_select(entries, &rest)?)
        }
    }

    fn append(&self, tape: String, entry: TapeEntry) -> impl Fut<TapeEntry> {
        let this = self.clone();
        async move {
            let mut stored = this.append_many(tape, vec![entry]).await?;
            stored.pop().ok_or_else(|| "tape-postgres: the entry was not stored".into())
        }
    }

    /// One statement for the lot: all or none stored, ids in order.
    fn append_many(&self, tape: String, mut entries: Vec<TapeEntry>) -> impl Fut<Vec<TapeEntry>> {
        let this = self.clone();
        async move {
            let now = bub_kit::tape::now();
            for e in entries.iter_mut().filter(|e| e.date.is_empty()) {
                e.date = now.clone();
            }
            let kinds: Vec<&str> = entries.iter().map(|e| e.kind.as_str()).collect();
            let anchors: Vec<Option<&str>> = entries
                .iter()
                .map(|e| (e.kind == "anchor").then(|| e.payload.get("name").and_then(Value::as_str)).flatten())
                .collect();
            let dates: Vec<&str> = entries.iter().map(|e| e.date.as_str()).collect();
            let payloads: Vec<Value> = entries.iter().map(|e| Value::Object(e.payload.clone())).collect();
            let metas: Vec<Value> = entries.iter().map(|e| Value::Object(e.meta.clone())).collect();
            let texts: Vec<String> = entries.iter().map(|e| bub_kit::search::searched_text(&e.payload)).collect();
            // The ids are taken by the insert (the tape's last id + the
            // row's position); a concurrent writer that took one of them
            // fails the whole statement on the primary key, and it tries
            // again.
            let sql = "INSERT INTO bub_tape_entries (tape, id, kind, anchor, date, payload, meta, search_text) \
                       SELECT $1, last.id + t.ord, t.kind, t.anchor, t.date, t.payload, t.meta, t.text \
                       FROM (SELECT COALESCE(MAX(id), 0) AS id FROM bub_tape_entries WHERE tape = $1) AS last, \
                       unnest($2::text[], $3::text[], $4::text[], $5::jsonb[], $6::jsonb[], $7::text[]) \
                       WITH ORDINALITY AS t(kind, anchor, date, payload, meta, text, ord) \
                       ORDER BY t.ord RETURNING id";
            let (tape, kinds, anchors, dates, payloads, metas, texts) =
                (&tape, &kinds, &anchors, &dates, &payloads, &metas, &texts);
            let ids = this
                .0
                .with("append to a tape", false, |db| async move {
                    for _ in 0..100 {
                        match db.query(sql, &[tape, kinds, anchors, dates, payloads, metas, texts]).await {
                            Ok(rows) => return Ok(Some(rows.iter().map(|r| r.get::<_, i64>(0)).collect::<Vec<_>>())),
                            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => continue,
                            Err(e) => return Err(e),
                        }
                    }
                    Ok(None)
                })
                .await?;
            let Some(mut ids) = ids else {
                return Err(failed("append to a tape", format!("tape {tape:?} is under too much concurrent writing")));
            };
            ids.sort_unstable();
            for (entry, id) in entries.iter_mut().zip(ids) {
                entry.id = id as u64;
            }
            Ok(entries)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn passwords_never_reach_a_log_line() {
        assert_eq!(redact("postgres://u:pw@db/x"), "postgres://u:***@db/x");
        assert_eq!(redact("postgres://u@db/x"), "postgres://u@db/x");
        assert_eq!(redact("host=db user=u password=pw dbname=x"), "host=db user=u password=*** dbname=x");
    }

    #[test]
    fn timeouts_are_positive_seconds() {
        let config = |v: Value| json!({"t": v}).as_object().unwrap().clone();
        assert_eq!(seconds(&Map::new(), "t", 30).unwrap(), Duration::from_secs(30));
        assert_eq!(seconds(&config(json!(1.5)), "t", 30).unwrap(), Duration::from_millis(1500));
        assert_eq!(seconds(&config(json!("2")), "t", 30).unwrap(), Duration::from_secs(2));
        for bad in [json!(0), json!(-1), json!("inf"), json!("soon"), json!(null)] {
            assert!(seconds(&config(bad.clone()), "t", 30).is_err(), "{bad} accepted");
        }
    }
}
