//! The tape store plugins (SQLite, PostgreSQL), through the real binary:
//! `tape-sqlite` with several processes on one file, and `tape-postgres`
//! with two gateways on one throw-away PostgreSQL server.

use bub_host::WithBuiltin as _;
use std::{path::Path, time::Duration};

use bub_abi::types::TapeEntry;
use bub_host::{framework::Framework, HostBuilder};
use bub_tests::{gateway::GatewayProcess, lib, postgres::Postgres, run_bub, Home};
use serde_json::{json, Value};

/// `n` hosts in this process over `home`'s plugins: `n` store instances,
/// each with its own connections, as `n` processes would have.
fn hosts(home: &Home, workspace: &Path, n: usize) -> Vec<Framework> {
    (0..n)
        .map(|_| {
            let host = HostBuilder::new().workspace(workspace).builtin().discovered(&home.search()).build();
            Framework::new(&host, workspace)
        })
        .collect()
}

/// A throw-away PostgreSQL server and a home with tape-postgres on it,
/// its session lock off (the store alone is under test); None, said on
/// stderr, where no server can start.
fn postgres_store_without_session_lock(test: &str) -> Option<(Postgres, Home)> {
    let pg = match Postgres::start() {
        Ok(pg) => pg,
        Err(why) => {
            eprintln!("SKIPPED {test}: {why}");
            return None;
        }
    };
    let home = Home::new();
    home.install("tape-postgres", &lib("tape-postgres"), json!({"url": pg.url(), "session_lock": false}));
    Some((pg, home))
}

/// Runs `body` inside a `running()` scope over each store — the builtin
/// file store, tape-sqlite, and tape-postgres when a server can start —
/// each loaded through the real loader; `body` gets the store's name.
pub(crate) fn each_store<F, Fut>(test: &str, body: F)
where
    F: Fn(String, Framework) -> Fut,
    Fut: std::future::Future<Output = Result<(), bub_host::framework::FrameworkError>>,
{
    let (builtin, sqlite) = (Home::new(), Home::new());
    sqlite.install("tape-sqlite", &lib("tape-sqlite"), json!({}));
    let pg = postgres_store_without_session_lock(test);
    let mut homes = vec![("builtin", &builtin), ("tape-sqlite", &sqlite)];
    if let Some((_, home)) = &pg {
        homes.push(("tape-postgres", home));
    }
    let workspace = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for (name, home) in homes {
        let fw = hosts(home, workspace.path(), 1).pop().unwrap();
        rt.block_on(fw.scoped(|fw| body(name.to_owned(), fw))).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    drop(pg);
}

/// The ids of the entries `store` answers to query `q` (JSON).
async fn ids_of(
    store: &bub_host::resources::TapeStore,
    q: Value,
) -> Result<Vec<u64>, bub_host::resources::ResourceError> {
    let q = serde_json::from_value(q).unwrap();
    store.fetch_all(&q).await.map(|es| es.into_iter().map(|e| e.id).collect())
}

fn run(home: &Home, args: &[&str]) -> String {
    let (out, err, ok) = run_bub(home, args);
    assert!(ok, "bub {args:?} failed: {err}");
    out
}

/// Memory across processes, and every tape operation the agent uses:
/// search (newest first), anchors and handoff, info, reset with archive.
#[test]
fn tape_sqlite_answers_every_tape_operation_across_processes() {
    let home = Home::new();
    home.install("tape-sqlite", &lib("tape-sqlite"), json!({}));
    run(&home, &["run", "first message about apples"]);
    run(&home, &["run", "second message about pears"]);
    let found = run(&home, &["run", ",tape.search query=apples"]);
    assert!(found.contains("2 matches"), "{found}");
    assert!(!found.contains("pears"), "{found}");
    run(&home, &["run", ",tape.handoff name=phase-2 summary=moving-on"]);
    let anchors = run(&home, &["run", ",tape.anchors"]);
    assert!(anchors.contains("session/start") && anchors.contains("phase-2"), "{anchors}");
    let info = run(&home, &["run", ",tape.info"]);
    assert!(info.contains("last_anchor: phase-2"), "{info}");
    let reset = run(&home, &["run", ",tape.reset archive=true"]);
    assert!(reset.contains("Archived:"), "{reset}");
    let info = run(&home, &["run", ",tape.info"]);
    assert!(info.contains("anchors: 1"), "{info}");
    assert!(
        !home
            .path()
            .join("tapes")
            .read_dir()
            .is_ok_and(|d| d.flatten().any(|e| e.path().extension().is_some_and(|x| x == "jsonl"))),
        "the builtin JSONL store was used"
    );
    assert!(home.path().join("data/tape-sqlite/tapes.sqlite3").is_file());
}

/// Spec 5 (reliability) for SQLite: eight processes appending to one
/// session's tape at once all succeed (busy timeout, not "database is
/// locked"), and ids are 1..n, unique, in insertion order.
#[test]
fn tape_sqlite_ids_are_unique_across_concurrent_processes() {
    let home = Home::new();
    home.install("tape-sqlite", &lib("tape-sqlite"), json!({}));
    let runs: Vec<_> = (0..8)
        .map(|i| {
            std::process::Command::new(bub_tests::bub_bin())
                .arg("--home")
                .arg(home.path())
                .args(["run", "--session-id", "shared", &format!("message {i}")])
                .env_remove("BUB_PLUGIN_PATH")
                .output_async()
        })
        .collect();
    for r in runs {
        let out = r.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let db = rusqlite::Connection::open(home.path().join("data/tape-sqlite/tapes.sqlite3")).unwrap();
    let mut stmt = db
        .prepare("SELECT tape, COUNT(*), COUNT(DISTINCT id), MAX(id), MIN(id) FROM tape_entries GROUP BY tape")
        .unwrap();
    let rows: Vec<(String, i64, i64, i64, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let main = rows.iter().max_by_key(|r| r.1).unwrap();
    assert_eq!((main.1, main.2, main.3, main.4), (main.1, main.1, main.1, 1), "{rows:?}");
    let users: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM tape_entries WHERE tape = ?1 AND kind = 'message' AND payload LIKE '%\"role\":\"user\"%'",
            [&main.0],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(users, 8);
}

trait OutputAsync {
    fn output_async(&mut self) -> std::process::Child;
}

impl OutputAsync for std::process::Command {
    fn output_async(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("spawn bub")
    }
}

fn gateway_home(url: &str, trace: &std::path::Path) -> Home {
    let home = Home::new();
    home.install("http-channel", &lib("http-channel"), json!({"bind": "127.0.0.1:0", "token": "t"}));
    home.install("tape-postgres", &lib("tape-postgres"), json!({"url": url}));
    // Slow turns (300 ms) that record their start and end, in one trace
    // file both gateways append to.
    home.install(
        "turn-trace",
        &lib("tp-scripted"),
        json!({"trace": trace, "hooks": {
            "load_state": {"async": true, "sleep_ms": 300, "trace_arg": 1, "return": null},
            "save_state": {"trace_arg": 0, "return": null},
        }}),
    );
    home
}

/// Scale-out: two gateways (two homes, as on two machines) on one
/// PostgreSQL. Messages of three sessions go to both at once, interleaved.
/// A session's turns never overlap, even across gateways (the advisory
/// lock); both gateways write the same tapes, with unique ids, and each
/// sees the other's turns as the session's memory.
#[test]
fn tape_postgres_two_gateways_share_tapes_and_never_run_a_session_twice() {
    let pg = match Postgres::start() {
        Ok(pg) => pg,
        Err(why) => return eprintln!("SKIPPED tape_postgres_two_gateways…: {why}"),
    };
    let scratch = tempfile::tempdir().unwrap();
    let trace = scratch.path().join("turns.log");
    let (home_a, home_b) = (gateway_home(&pg.url(), &trace), gateway_home(&pg.url(), &trace));
    let mut a = GatewayProcess::start(home_a.path(), &[], &[]);
    let mut b = GatewayProcess::start(home_b.path(), &[], &[]);
    let (url_a, url_b) = (a.address(home_a.path(), "http-channel"), b.address(home_b.path(), "http-channel"));

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let client = reqwest::Client::new();
        let mut requests = Vec::new();
        for k in 0..3 {
            for session in ["s1", "s2", "s3"] {
                for (gateway, base) in [("a", &url_a), ("b", &url_b)] {
                    let (client, url) = (client.clone(), format!("{base}/v1/messages"));
                    let content = format!("{session} {k} via {gateway}");
                    requests.push(tokio::spawn(async move {
                        let body = json!({"content": content, "session_id": session});
                        let response = client.post(url).bearer_auth("t").json(&body).send().await.expect("request");
                        let status = response.status().as_u16();
                        let body: Value = response.json().await.unwrap();
                        (content, status, body)
                    }));
                }
            }
        }
        for r in requests {
            let (content, status, body) = r.await.unwrap();
            assert_eq!(status, 200, "{content}: {body}");
            assert!(body["reply"].as_str().unwrap().ends_with(&content), "{content}: {body}");
        }
    });
    a.signal("TERM");
    b.signal("TERM");
    assert!(a.wait(Duration::from_secs(30)).is_some_and(|s| s.success()), "{}", a.log());
    assert!(b.wait(Duration::from_secs(30)).is_some_and(|s| s.success()), "{}", b.log());

    let lines = std::fs::read_to_string(&trace).unwrap();
    for session in ["s1", "s2", "s3"] {
        let calls: Vec<&str> = lines
            .lines()
            .filter(|l| l.ends_with(&format!(":\"{session}\"")))
            .map(|l| l.split(':').nth(1).unwrap())
            .collect();
        assert_eq!(calls, ["load_state", "save_state"].repeat(6), "session {session} ran twice at once:\n{lines}");
    }
    // Tapes: in PostgreSQL, not in either home; ids 1..n per tape; each
    // session's tape has the six user messages from both gateways.
    for home in [&home_a, &home_b] {
        let jsonl = std::fs::read_dir(home.path().join("tapes")).map(|d| d.count()).unwrap_or(0);
        assert_eq!(jsonl, 0, "a gateway wrote JSONL tapes");
    }
    let Some(stats) = pg.psql(
        "SELECT COUNT(*) = COUNT(DISTINCT id) AND MIN(id) = 1 AND MAX(id) = COUNT(*), \
         COUNT(*) FILTER (WHERE kind = 'message' AND payload->>'role' = 'user') \
         FROM bub_tape_entries GROUP BY tape ORDER BY 2 DESC",
    ) else {
        return eprintln!("psql not installed: the database checks are skipped");
    };
    let rows: Vec<&str> = stats.lines().collect();
    assert!(rows.iter().all(|r| r.starts_with("t|")), "ids not 1..n: {rows:?}");
    let users: Vec<&str> = rows.iter().map(|r| r.split('|').nth(1).unwrap()).filter(|n| *n != "0").collect();
    assert_eq!(users, ["6", "6", "6"], "{rows:?}");
}

/// Spec 5 (reliability) for PostgreSQL, without the session lock: four
/// hosts in one process (four store instances, four connections) append
/// 25 runs of three entries each to one tape at once. Each run goes in as
/// one statement, retried when another writer took its ids: the ids are
/// 1..300 and every run's three entries sit next to each other.
#[test]
fn tape_postgres_concurrent_runs_get_unique_ids_and_stay_whole() {
    let Some((pg, home)) = postgres_store_without_session_lock("tape_postgres_concurrent_runs…") else { return };
    let workspace = tempfile::tempdir().unwrap();
    let hosts = hosts(&home, workspace.path(), 4);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(futures_util::future::try_join_all(hosts.iter().enumerate().map(|(w, fw)| {
        fw.scoped(move |fw| async move {
            let store = fw.get_tape_store().expect("tape-postgres answers");
            assert_eq!(store.resource().plugin(), "tape-postgres");
            for run in 0..25 {
                let entries: Vec<TapeEntry> = (0..3)
                    .map(|i| TapeEntry {
                        kind: "event".into(),
                        payload: serde_json::from_value(json!({"writer": w, "run": run, "i": i})).unwrap(),
                        ..Default::default()
                    })
                    .collect();
                let stored = store.append_many("shared", &entries).await?;
                assert!(stored.windows(2).all(|p| p[1].id == p[0].id + 1), "{stored:?}");
            }
            Ok(())
        })
    })))
    .unwrap();
    let Some(stats) = pg.psql(
        "SELECT COUNT(*), COUNT(DISTINCT id), MIN(id), MAX(id), \
         (SELECT COUNT(*) FROM (SELECT MAX(id) - MIN(id) AS span FROM bub_tape_entries \
          GROUP BY payload->>'writer', payload->>'run') runs WHERE span <> 2) \
         FROM bub_tape_entries WHERE tape = 'shared'",
    ) else {
        return eprintln!("psql not installed: the database checks are skipped");
    };
    assert_eq!(stats.trim(), "300|300|1|300|0", "count|distinct ids|min|max|runs split apart");
}

/// Found by CI: eight stores meeting a fresh database at once all create
/// the tables without tripping over each other. The schema lock used to be
/// released inside the creating transaction (a session lock unlocked in the
/// same implicit transaction), so a second creator could run before the
/// first committed and fail with "duplicate key value violates unique
/// constraint pg_type_typname_nsp_index". Five fresh starts, eight stores
/// each.
#[test]
fn tape_postgres_stores_meeting_a_fresh_database_create_the_tables_once() {
    let Some((pg, home)) = postgres_store_without_session_lock("tape_postgres_stores_meeting…") else { return };
    let workspace = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for round in 0..5 {
        let hosts = hosts(&home, workspace.path(), 8);
        let results = rt.block_on(futures_util::future::join_all(hosts.iter().map(|fw| {
            fw.scoped(move |fw| async move {
                let store = fw.get_tape_store().expect("tape-postgres answers");
                let entry = TapeEntry { kind: "event".into(), ..Default::default() };
                store.append_many(&format!("round-{round}"), &[entry]).await?;
                Ok(())
            })
        })));
        for result in results {
            result.unwrap_or_else(|e| panic!("round {round}: {e}"));
        }
        if pg.psql("DROP TABLE bub_tape_entries").is_none() {
            return eprintln!("psql not installed: one round only");
        }
    }
}

/// Every store answers Bub's queries the same way —
/// `between_anchors`, `between_dates` (days and datetimes, Bub's errors),
/// and the fuzzy text search (newest first, one per distinct text) — the
/// builtin file store, tape-sqlite and tape-postgres, each loaded through
/// the real loader.
#[test]
fn every_store_answers_anchor_date_and_fuzzy_queries_alike() {
    each_store("every_store_answers…", |name, fw| async move {
        let store = fw.get_tape_store().expect("a store");
        assert_eq!(store.resource().plugin(), if name == "builtin" { "builtin" } else { name.as_str() });
        let entry = |kind: &str, payload: Value, date: &str| TapeEntry {
            kind: kind.into(),
            payload: serde_json::from_value(payload).unwrap(),
            date: date.into(),
            ..Default::default()
        };
        let entries = [
            entry("message", json!({"role": "user", "content": "deploy to kubernetes"}), "2026-11-01T10:00:00+00:00"),
            entry("anchor", json!({"name": "a"}), "2026-11-02T10:00:00Z"),
            entry("message", json!({"role": "user", "content": "release notes"}), "2026-11-03T10:00:00.5Z"),
            entry("anchor", json!({"name": "b"}), "2026-11-04T10:00:00Z"),
            entry("message", json!({"role": "user", "content": "release notes"}), "2026-11-05T10:00:00Z"),
        ];
        store.append_many("q", &entries).await?;
        let ids = |q: Value| ids_of(&store, q);
        assert_eq!(ids(json!({"tape": "q", "between_anchors": ["a", "b"]})).await?, [3], "{name}");
        let missing = ids(json!({"tape": "q", "between_anchors": ["b", "zzz"]})).await.unwrap_err();
        assert!(missing.to_string().contains("Anchor 'zzz' was not found."), "{name}: {missing}");
        assert_eq!(ids(json!({"tape": "q", "between_dates": ["2026-11-03", "2026-11-05"]})).await?, [3, 4, 5]);
        assert_eq!(
            ids(json!({"tape": "q", "between_dates": ["2026-11-03T10:00:01", "2026-11-05T00:00:00"]})).await?,
            [4],
            "{name}"
        );
        let bad = ids(json!({"tape": "q", "between_dates": ["", "2026-11-05"]})).await.unwrap_err();
        assert!(bad.to_string().contains("Invalid ISO date or datetime: ''."), "{name}: {bad}");
        assert_eq!(ids(json!({"tape": "q", "query": "kubernets"})).await?, [1], "{name}: a typo still matches");
        assert_eq!(ids(json!({"tape": "q", "query": "RELEASE", "kinds": ["message"]})).await?, [5], "{name}");
        // Limits, with and without what selects by anchor or date (the
        // builtin store stops at the limit when nothing else selects).
        assert_eq!(ids(json!({"tape": "q", "kinds": ["anchor"], "limit": 1})).await?, [2], "{name}");
        assert_eq!(ids(json!({"tape": "q", "kinds": ["message"], "limit": 2})).await?, [1, 3], "{name}");
        assert_eq!(ids(json!({"tape": "q", "limit": 2})).await?, [1, 2], "{name}");
        assert_eq!(ids(json!({"tape": "q", "kinds": ["message"], "last_anchor": true})).await?, [5], "{name}");
        let between = json!({"tape": "q", "kinds": ["message"], "between_anchors": ["a", "b"], "limit": 1});
        assert_eq!(ids(between).await?, [3], "{name}");
        let dated =
            json!({"tape": "q", "kinds": ["message"], "between_dates": ["2026-11-02", "2026-11-06"], "limit": 1});
        assert_eq!(ids(dated).await?, [3], "{name}");
        // Ids go on after lines longer than the tail an append reads first
        // (4 KiB), and than its second try (64 KiB).
        let long =
            |n: usize| entry("message", json!({"role": "user", "content": "x".repeat(n)}), "2026-11-06T10:00:00Z");
        for e in [long(5_000), long(70_000), long(10)] {
            store.append_many("q", &[e]).await?;
        }
        assert_eq!(ids(json!({"tape": "q", "after_id": 5})).await?, [6, 7, 8], "{name}");
        Ok(())
    });
}

/// `after_id` in every store (applied before the anchor
/// fields), and the agent's context and session settings kept between
/// steps in a shared `ContextCache` equal to a full read and selection
/// after each change another writer makes: appends, a new anchor, a reset
/// with ids starting over, a context-less entry, a cleared setting. Behaviours 192–194 (the context after
/// the last anchor, anchors as text without one, `context: false` left out)
/// hold for the kept context as for a full read.
#[test]
fn every_store_answers_after_id_and_the_kept_context_follows_other_writers() {
    use bub_host::agent::{context, RunTape, Store};
    each_store("every_store_answers_after_id…", |name, fw| async move {
        let store = fw.get_tape_store().expect("a store");
        let message = |text: &str| TapeEntry {
            kind: "message".into(),
            payload: serde_json::from_value(json!({"role": "user", "content": text})).unwrap(),
            ..Default::default()
        };
        let anchor = |n: &str| TapeEntry {
            kind: "anchor".into(),
            payload: serde_json::from_value(json!({"name": n})).unwrap(),
            ..Default::default()
        };
        let entries = [message("one"), anchor("a"), message("two"), anchor("b"), message("three")];
        store.append_many("c", &entries).await?;
        let ids = |q: Value| ids_of(&store, q);
        assert_eq!(ids(json!({"tape": "c", "after_id": 2})).await?, [3, 4, 5], "{name}");
        assert_eq!(ids(json!({"tape": "c", "after_id": 2, "last_anchor": true})).await?, [5], "{name}");
        assert_eq!(ids(json!({"tape": "c", "after_id": 3, "after_anchor": "a"})).await?, [4, 5], "{name}");
        assert_eq!(ids(json!({"tape": "c", "after_id": 9})).await?, Vec::<u64>::new(), "{name}");

        let contexts = fw.contexts();
        for spec in [None, Some(bub_abi::types::TapeContextSpec::LAST_ANCHOR), Some("a")] {
            let spec = bub_abi::types::TapeContextSpec { anchor: spec.map(str::to_owned) };
            let step = || {
                let run = RunTape::fork(Store::Host(store.clone()), "c", &[], false).with_contexts(contexts.clone());
                let spec = spec.clone();
                async move { context::messages(&run, &spec).await.unwrap() }
            };
            let full = || {
                let store = store.clone();
                let spec = spec.clone();
                async move { context::select(&store.fetch_all(&context::query("c", &spec)).await.unwrap()) }
            };
            assert_eq!(step().await, full().await, "{name} {spec:?}: first read");
            assert_eq!(step().await, full().await, "{name} {spec:?}: kept");
            store.append("c", &message("four")).await?;
            assert_eq!(step().await, full().await, "{name} {spec:?}: an append");
            store.append_many("c", &[anchor("a"), message("five")]).await?;
            let now = step().await;
            assert_eq!(now, full().await, "{name} {spec:?}: a new anchor");
            if spec.anchor.is_some() {
                assert_eq!(now.len(), 1, "{name} {spec:?}: only `five` after the new anchor: {now:?}");
            }
            let mut hidden = message("hidden");
            hidden.meta.insert("context".into(), json!(false));
            store.append("c", &hidden).await?;
            assert_eq!(step().await, full().await, "{name} {spec:?}: a context-less entry");
            // Reset and written again: ids start over, below the kept one.
            store.reset("c").await?;
            store.append_many("c", &[message("fresh"), message("start")]).await?;
            let now = step().await;
            assert_eq!(now, full().await, "{name} {spec:?}: after a reset");
            assert_eq!(now.len(), 2, "{name} {spec:?}: {now:?}");
            store.reset("c").await?;
            store.append_many("c", &entries).await?;
        }

        // The session settings (`<key>_switch` events), kept the same way.
        use bub_host::agent::session_settings::{load, load_kept};
        let st = Store::Host(store.clone());
        let switch = |model: &str| TapeEntry {
            kind: "event".into(),
            payload: serde_json::from_value(json!({"name": "model_switch", "data": {"model": model}})).unwrap(),
            ..Default::default()
        };
        let model = || {
            let (st, contexts) = (st.clone(), contexts.clone());
            async move {
                let kept = load_kept(&st, "s", &contexts).await.unwrap();
                assert_eq!(kept, load(&st, "s").await.unwrap(), "kept settings equal a full read");
                kept.get("model").and_then(Value::as_str).map(str::to_owned)
            }
        };
        assert_eq!(model().await, None, "{name}");
        store.append_many("s", &[message("hi"), switch("a:one")]).await?;
        assert_eq!(model().await.as_deref(), Some("a:one"), "{name}");
        store.append_many("s", &[switch("a:two"), message("more")]).await?;
        assert_eq!(model().await.as_deref(), Some("a:two"), "{name}");
        store.append("s", &switch("")).await?;
        assert_eq!(model().await, None, "{name}: an empty value clears it");
        store.reset("s").await?;
        store.append_many("s", &[switch("b:after-reset")]).await?;
        assert_eq!(model().await.as_deref(), Some("b:after-reset"), "{name}");
        Ok(())
    });
}

/// A search across tapes answers the same on every store: the builtin
/// JSONL store by reading each tape, tape-sqlite and tape-postgres from
/// their trigram indexes. Exact matches newest first across tapes, then
/// fuzzy ones, sidecars left out, a list of tapes, kinds, a limit.
#[test]
fn every_store_searches_across_tapes_alike() {
    use bub_host::agent::Store;
    each_store("every_store_searches_across_tapes_alike", |name, fw| async move {
        let store = fw.get_tape_store().expect("a store");
        let say = |text: &str, date: &str| TapeEntry {
            kind: "message".into(),
            payload: serde_json::from_value(json!({"role": "user", "content": text})).unwrap(),
            date: date.into(),
            ..Default::default()
        };
        store
            .append_many("a", &[say("a KUMQUAT tree", "2026-01-01T00:00:01Z"), say("pears", "2026-01-01T00:00:02Z")])
            .await?;
        store.append("b", &say("kumqaut misspelled", "2026-01-01T00:00:03Z")).await?;
        store.append("a__sidecar__spill", &say("kumquat spilled", "2026-01-01T00:00:04Z")).await?;
        store.append("c", &say("100% kumquat_jam", "2026-01-01T00:00:05Z")).await?;
        let indexed =
            store.search_tapes(None, &serde_json::from_value(json!({"tape": "", "query": "kumquat"})).unwrap()).await?;
        assert_eq!(indexed.is_some(), name != "builtin", "{name}: answered from an index");
        let search = |tapes: Option<Vec<String>>, q: Value| {
            let st = Store::Host(store.clone());
            async move {
                let q = serde_json::from_value(q).unwrap();
                let found = st.search_tapes(tapes.as_deref(), &q).await.unwrap();
                found
                    .into_iter()
                    .map(|m| format!("{}:{}", m.tape, m.entry.payload["content"].as_str().unwrap()))
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(
            search(None, json!({"tape": "", "query": "kumquat"})).await,
            ["c:100% kumquat_jam", "a:a KUMQUAT tree", "b:kumqaut misspelled"],
            "{name}"
        );
        // `_` is LIKE's "any one character": unescaped, "t_e" would find "tree".
        let wildcards = search(None, json!({"tape": "", "query": "t_e"})).await;
        assert_eq!(wildcards, Vec::<String>::new(), "{name}: LIKE's wildcards are plain text");
        assert_eq!(search(None, json!({"tape": "", "query": "0% k"})).await, ["c:100% kumquat_jam"], "{name}");
        assert_eq!(
            search(Some(vec!["a".into(), "b".into()]), json!({"tape": "", "query": "kumquat", "limit": 1})).await,
            ["a:a KUMQUAT tree"],
            "{name}"
        );
        assert_eq!(
            search(None, json!({"tape": "", "query": "kumquat", "kinds": ["anchor"]})).await,
            Vec::<String>::new(),
            "{name}"
        );
        assert_eq!(
            search(None, json!({"tape": "", "query": "ar"})).await,
            ["a:pears"],
            "{name}: a short query is a scan"
        );
        Ok(())
    });
}

/// `tape.search` with `sessions` in command mode, through the real binary:
/// from one session it finds what was said in others, newest first,
/// naming each session (its tape's record says which); without
/// `sessions` it stays on its own tape. On the builtin JSONL store (each
/// tape read) and on tape-sqlite (its index).
#[test]
fn tape_search_finds_what_other_sessions_said() {
    let (builtin, sqlite) = (Home::new(), Home::new());
    sqlite.install("tape-sqlite", &lib("tape-sqlite"), json!({}));
    for home in [&builtin, &sqlite] {
        run(home, &["run", "--session-id", "garden", "the apricot tree needs water"]);
        run(home, &["run", "--session-id", "kitchen", "apricot jam recipe"]);
        let here = run(home, &["run", "--session-id", "office", ",tape.search query=apricot"]);
        assert!(here.contains("0 matches"), "{here}");
        let all = run(home, &["run", "--session-id", "office", ",tape.search query=apricot sessions=all"]);
        assert!(all.contains("4 matches"), "each message and its echo: {all}");
        let (jam, tree) = (all.find("apricot jam").unwrap(), all.find("apricot tree").unwrap());
        assert!(jam < tree, "newest first: {all}");
        assert!(all.contains("\"session\": \"garden\""), "each match names its session, from the tape's record: {all}");
        let named = run(home, &["run", "--session-id", "office", ",tape.search query=apricot sessions=garden,kitchen"]);
        assert!(named.contains("\"session\": \"garden\"") && named.contains("\"session\": \"kitchen\""), "{named}");
        let one = run(home, &["run", "--session-id", "office", ",tape.search query=apricot sessions=garden"]);
        assert!(one.contains("2 matches") && !one.contains("jam"), "{one}");
    }
}
