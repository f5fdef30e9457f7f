//! The file store against its own files: torn tails, other processes'
//! appends, replaced files, windows at every size.
use std::io::Write;

use super::FileTapeStore;

fn line(id: u64, content: &str) -> String {
    format!("{{\"id\":{id},\"kind\":\"message\",\"payload\":{{\"content\":\"{content}\"}},\"date\":\"d\"}}\n")
}

#[test]
fn lines_split_as_split_does() {
    for text in ["", "a", "a\n", "\n", "\n\n", "ab\ncd", "ab\n\ncd\n"] {
        let want: Vec<&[u8]> = text.as_bytes().split(|b| *b == b'\n').collect();
        assert_eq!(super::lines(text.as_bytes()).collect::<Vec<_>>(), want, "{text:?}");
    }
}

/// The entries of an answer, read back.
fn answered(answer: super::TapeEntries) -> Vec<bub_abi::types::TapeEntry> {
    match answer {
        super::TapeEntries::Entries(entries) => entries,
        super::TapeEntries::Values(values) => values.iter().map(|v| v.deserialize().unwrap()).collect(),
    }
}

/// A line reads as the same entry whichever way it is parsed: the
/// store's own lines (keys in any order) scanned into their fields,
/// others through a map or a `TapeEntry`, the unreadable skipped.
#[test]
fn a_line_reads_the_same_whichever_way_it_is_parsed() {
    let read = |line: &str| super::Stored::parse(line.as_bytes()).map(|s| (s.id, s.value.to_json()));
    let written =
        r#"{"id":3,"kind":"message","payload":{"role":"user","content":"é \u00e9"},"meta":{"run_id":"r"},"date":"d"}"#;
    let full = bub_abi::Value::from_json(written).unwrap().to_json();
    assert_eq!(read(written), Ok((3, full)));
    let stored = super::Stored::written(written).expect("scanned into its fields");
    assert!(stored.value.as_ref().get("payload").unwrap().lazy_json().is_some(), "the payload kept as text");
    let canonical = r#"{"id":3,"kind":"message","payload":{"a":[1]},"meta":{},"date":"d"}"#;
    let reordered = r#"{"kind":"message", "id":3,"date":"d","meta":{},"payload":{"a":[1]}}"#;
    assert!(super::Stored::written(reordered).is_some());
    assert_eq!(read(reordered), Ok((3, canonical.to_owned())));
    // A repeated key: the last one, as Python's json reads it.
    let repeated = r#"{"id":3,"kind":"x","kind":"message","payload":{"a":[1]},"meta":{},"date":"d"}"#;
    assert!(super::Stored::written(repeated).is_none());
    assert_eq!(read(repeated), Ok((3, canonical.to_owned())));
    // Keys missing: read as a `TapeEntry` reads them.
    let short = r#"{"id":3,"kind":"message","payload":{"a":[1]}}"#;
    let entry: bub_abi::types::TapeEntry = serde_json::from_str(short).unwrap();
    assert_eq!(read(short), Ok((3, bub_abi::Value::from_serialize(&entry).unwrap().to_json())));
    for bad in [
        r#"{"id":3,"kind":"message","payload":[1],"meta":{},"date":"d"}"#,
        r#"{"id":3.0,"kind":"message","payload":{},"meta":{},"date":"d"}"#,
        r#"{"id":-3,"kind":"message","payload":{},"meta":{},"date":"d"}"#,
        r#"{"id":3,"kind":"message","payload":{"a":[1,}},"meta":{},"date":"d"}"#,
    ] {
        assert!(read(bad).is_err(), "{bad}");
    }
}

/// The compact scan answers what serde_json's does, for the store's
/// own lines and for every variant of them it accepts: each line below
/// with one byte replaced by each byte that matters to JSON, and every
/// prefix of it.
#[test]
fn the_compact_scan_of_a_line_answers_as_serde_jsons_scan() {
    let read = |s: Option<super::Stored>| {
        s.map(|s| {
            (s.id, s.value.to_json(), s.value.as_ref().get("payload").and_then(|p| p.lazy_json().map(str::to_owned)))
        })
    };
    let lines = [
        // As the benchmarks' tapes hold them (`bub_tests::prefill_line`).
        r#"{"id":2,"kind":"message","payload":{"role":"user","content":"question 2: lorem ipsum lorem ipsum lorem ipsum lorem ipsum lorem ipsum lorem ipsum lorem ipsum lorem ipsum "},"meta":{},"date":"2026-12-01T00:00:00+00:00"}"#.to_owned(),
        r#"{"id":1,"kind":"anchor","payload":{"name":"session/start","state":{"owner":"human","n":[1,-2.5e3,true,null]}},"meta":{"run_id":"r"},"date":"2026-12-01T00:00:00.123456+00:00"}"#.to_owned(),
        r#"{"id":7,"kind":"message","payload":{"role":"tool","content":"line\nnext \"quoted\" \\ é"},"meta":{},"date":"d"}"#.to_owned(),
    ];
    let mut compact = 0;
    for line in &lines {
        assert!(super::Stored::compact(line).is_some(), "the store's own line, scanned: {line}");
        let mut variants: Vec<String> = (0..=line.len()).filter_map(|end| line.get(..end).map(str::to_owned)).collect();
        for at in 0..line.len() {
            for &b in b"\"\\{}[],:-.e01 9tnx\t/" {
                let mut m = line.as_bytes().to_vec();
                m[at] = b;
                variants.extend(String::from_utf8(m).ok());
            }
        }
        for v in &variants {
            if let Some(fast) = super::Stored::compact(v) {
                compact += 1;
                assert_eq!(read(Some(fast)), read(super::Stored::scanned(v)), "{v}");
            }
        }
    }
    assert!(compact > 100, "variants the compact scan reads: {compact}");
}

/// Bounded resources: the parsed tapes kept are bounded by count and
/// by bytes of tape text, the least recently read dropped first, and a
/// tape longer than the whole bound is not kept.
#[test]
fn parsed_tapes_are_bounded_by_count_and_bytes_least_recently_read_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileTapeStore::new(dir.path()).with_cache_bytes(100);
    let parsed = |offset: u64| super::Parsed {
        dev: 0,
        ino: 0,
        offset,
        base: 0,
        guard: Vec::new(),
        lines: 0,
        entries: Vec::new(),
    };
    let names = |s: &FileTapeStore| {
        let mut n: Vec<String> = bub_abi::sync::lock(&s.parsed).keys().map(|k| k.display().to_string()).collect();
        n.sort();
        n
    };
    let bytes = |s: &FileTapeStore| bub_abi::sync::lock(&s.parsed).weight();
    for name in ["a", "b", "c"] {
        store.keep(name.into(), parsed(10));
    }
    // "a" read again: "b" is now the least recently read.
    let a = bub_abi::sync::lock(&store.parsed).remove(std::path::Path::new("a")).unwrap();
    store.keep("a".into(), a);
    store.keep("d".into(), parsed(10));
    assert_eq!(names(&store), ["a", "b", "c", "d"], "within 128 tapes and 100 bytes");
    assert_eq!(bytes(&store), 40);
    // Over the byte bound (120 > 100): the oldest go until it fits.
    store.keep("e".into(), parsed(80));
    assert_eq!(names(&store), ["a", "d", "e"]);
    assert_eq!(bytes(&store), 100);
    // A tape longer than the whole bound is not kept (nor an older
    // parse of it), and the others stay.
    store.keep("d".into(), parsed(500));
    assert_eq!(names(&store), ["a", "e"]);
    assert_eq!(bytes(&store), 90);
    // Kept again under the same name: counted once.
    store.keep("a".into(), parsed(5));
    assert_eq!(bytes(&store), 85);
}

/// A query looks only at what it can select (after
/// `after_id`, after its anchor, of its kinds) and still answers as
/// `try_select` over the whole tape: anchors stay for the anchor
/// fields. Lines in the store's own shape and others (no `meta`) alike.
#[test]
fn queries_look_only_at_what_they_select_and_answer_alike() {
    use bub_abi::types::TapeQuery;
    let dir = tempfile::tempdir().unwrap();
    let store = FileTapeStore::new(dir.path());
    let mut text = String::new();
    for (id, kind, name) in [
        (1, "message", ""),
        (2, "anchor", "a"),
        (3, "event", ""),
        (4, "message", ""),
        (5, "anchor", "b"),
        (6, "event", ""),
        (7, "message", ""),
    ] {
        let meta = if id % 2 == 0 { "" } else { "\"meta\":{}," };
        text += &format!(
            "{{\"id\":{id},\"kind\":\"{kind}\",\"payload\":{{\"name\":\"{name}\"}},{meta}\"date\":\"2026-12-0{id}\"}}\n"
        );
    }
    std::fs::write(dir.path().join("t.jsonl"), text).unwrap();
    let queries = [
        serde_json::json!({"tape": "t", "kinds": ["event"], "last_anchor": true}),
        serde_json::json!({"tape": "t", "kinds": ["message"], "between_anchors": ["a", "b"]}),
        serde_json::json!({"tape": "t", "kinds": ["message"], "after_anchor": "a", "after_id": 4}),
        serde_json::json!({"tape": "t", "after_id": 1, "last_anchor": true}),
        serde_json::json!({"tape": "t", "after_id": 5, "after_anchor": "b"}),
        serde_json::json!({"tape": "t", "between_dates": ["2026-12-02", "2026-12-04"], "limit": 2}),
        serde_json::json!({"tape": "t", "query": "a", "last_anchor": false}),
    ];
    for q in queries {
        let q: TapeQuery = serde_json::from_value(q).unwrap();
        let whole = bub_kit::tape::try_select(store.read("t").unwrap(), &q).unwrap();
        assert_eq!(answered(store.select(&q).unwrap()), whole, "{q:?}");
        assert!(!whole.is_empty(), "{q:?}");
    }
    let missing: TapeQuery =
        serde_json::from_value(serde_json::json!({"tape": "t", "between_anchors": ["a", "zz"]})).unwrap();
    assert!(store.select(&missing).is_err(), "an anchor the tape lacks fails the query");
}

/// A read from an id of a tape not kept parsed (the agent's
/// read between turns, once a gateway's sessions outgrow the cache)
/// parses the tape's last lines only and keeps nothing, and answers as
/// a read of the whole tape does: with ids out of order, unreadable and
/// blank lines, a torn last line; an id not among the last 64 KiB
/// falls back to a whole read, which is kept.
#[test]
fn a_read_from_an_id_of_a_tape_not_kept_parses_only_its_tail_and_answers_alike() {
    use bub_abi::types::TapeQuery;
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for id in 1..=1500u64 {
        if id == 700 {
            text += "{\"id\":700,\"kind\":\"anchor\",\"payload\":{\"name\":\"mid\"},\"meta\":{},\"date\":\"d\"}\n";
        } else {
            text += &line(id, &"x".repeat(60));
        }
    }
    // The end: an older id again, an unreadable line (with a low id),
    // a blank line, an anchor, then a torn line.
    text += &line(1490, "again");
    text += "{\"id\":3,\"kind\":\"message\",\"payload\":[1,}\n\n";
    text += "{\"id\":1501,\"kind\":\"anchor\",\"payload\":{\"name\":\"end\"},\"meta\":{},\"date\":\"d\"}\n";
    text += &line(1502, "torn")[..30];
    assert!(text.len() > 2 * super::TAIL_WINDOW as usize);
    std::fs::write(dir.path().join("t.jsonl"), &text).unwrap();
    let kept = |s: &FileTapeStore| bub_abi::sync::lock(&s.parsed).keys().count();
    for (after_id, tail) in
        [(1499, true), (1495, true), (1490, true), (1489, true), (1501, true), (9999, true), (3, false), (0, false)]
            .into_iter()
            // In the second and third windows, and around the first
            // window's start (a line cut by it is read in the next).
            .chain([(1400, true), (1100, true)])
            .chain((1455..=1475).map(|id| (id, true)))
    {
        for shape in [
            serde_json::json!({}),
            serde_json::json!({"kinds": ["message"], "limit": 3}),
            serde_json::json!({"last_anchor": true}),
            serde_json::json!({"after_anchor": "mid"}),
        ] {
            let mut q = shape.clone();
            q["tape"] = "t".into();
            q["after_id"] = after_id.into();
            let q: TapeQuery = serde_json::from_value(q).unwrap();
            let whole = FileTapeStore::new(dir.path());
            whole.read("t").unwrap();
            let fresh = FileTapeStore::new(dir.path());
            let (want, got) = (whole.select(&q), fresh.select(&q));
            match (want, got) {
                (Ok(want), Ok(got)) => assert_eq!(answered(got), answered(want), "{q:?}"),
                (want, got) => assert_eq!(want.is_err(), got.is_err(), "{q:?}"),
            }
            assert_eq!(kept(&fresh), usize::from(!tail), "after {after_id}: kept or not");
        }
    }
    // The first entries of a kind (the agent's "is there an anchor
    // yet?"): parsed up to the last one answered, and that kept; a read
    // from an id then reads the tail, the kept prefix left as it was.
    let offset = |s: &FileTapeStore| bub_abi::sync::lock(&s.parsed).get(&dir.path().join("t.jsonl")).map(|p| p.offset);
    let whole = FileTapeStore::new(dir.path());
    whole.read("t").unwrap();
    let store = FileTapeStore::new(dir.path());
    let torn = text.len() - 30;
    for (limit, parsed_to) in [(1, text.find("{\"id\":701,").unwrap()), (2, torn), (9, torn)] {
        let q: TapeQuery =
            serde_json::from_value(serde_json::json!({"tape": "t", "kinds": ["anchor"], "limit": limit})).unwrap();
        assert_eq!(answered(store.select(&q).unwrap()), answered(whole.select(&q).unwrap()), "{q:?}");
        let parsed_to = parsed_to as u64;
        assert_eq!(offset(&store), Some(parsed_to), "limit {limit}: parsed to the line after the last one answered");
        if limit == 1 {
            let q: TapeQuery = serde_json::from_value(serde_json::json!({"tape": "t", "after_id": 1499})).unwrap();
            assert_eq!(answered(store.select(&q).unwrap()), answered(whole.select(&q).unwrap()));
            assert_eq!(offset(&store), Some(parsed_to), "the kept prefix left as it was");
        }
    }
}

/// A runtime worker reads within a budget, and only a read
/// that would parse more is put off (to the blocking pool): a read from
/// an id of a long tape not kept, or one a kept prefix answers, is not;
/// a first whole read, or a long stretch appended, is. A read put off
/// leaves what was kept as it was, and the read without a budget
/// answers as a fresh store does.
#[test]
fn a_read_within_a_budget_is_put_off_only_when_it_would_parse_more() {
    use bub_abi::types::TapeQuery;
    let budget = Some(super::BLOCKING_READ);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let mut text =
        "{\"id\":1,\"kind\":\"anchor\",\"payload\":{\"name\":\"start\"},\"meta\":{},\"date\":\"d\"}\n".to_owned();
    for id in 2..=1500u64 {
        text += &line(id, &"x".repeat(60));
    }
    assert!(text.len() as u64 > 2 * super::BLOCKING_READ);
    std::fs::write(&path, &text).unwrap();
    let query = |q: serde_json::Value| -> TapeQuery {
        let mut q = q;
        q["tape"] = "t".into();
        serde_json::from_value(q).unwrap()
    };
    let (all, tail, first_anchor) = (
        query(serde_json::json!({})),
        query(serde_json::json!({"after_id": 1497})),
        query(serde_json::json!({"kinds": ["anchor"], "limit": 1})),
    );
    let offset = |s: &FileTapeStore| bub_abi::sync::lock(&s.parsed).get(&path).map(|p| p.offset);
    let fresh = || FileTapeStore::new(dir.path());
    let within = |s: &FileTapeStore, q: &TapeQuery| s.select_within(q, budget).unwrap().map(answered);
    let whole = |q: &TapeQuery| answered(fresh().select(q).unwrap());

    let store = fresh();
    assert_eq!(within(&store, &all), None, "a first whole read is put off");
    assert_eq!(within(&store, &first_anchor), None, "so is a first prefix read: its length is not known");
    assert_eq!(offset(&store), None, "nothing parsed, nothing kept");
    assert_eq!(within(&store, &tail), Some(whole(&tail)), "the lines after an id: read here");
    // A kept prefix answers the first anchor without parsing.
    store.select(&first_anchor).unwrap();
    let prefix = offset(&store);
    assert_eq!(within(&store, &first_anchor), Some(whole(&first_anchor)));
    assert_eq!(within(&store, &tail), Some(whole(&tail)));
    assert_eq!(offset(&store), prefix, "the kept prefix left as it was");

    // A kept whole tape: a few lines appended are read here, a long
    // stretch is put off and the kept tape left as it was.
    store.read("t").unwrap();
    let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut file, line(1501, "more").as_bytes()).unwrap();
    assert_eq!(within(&store, &all), Some(whole(&all)));
    let kept = offset(&store);
    assert_eq!(kept, Some(std::fs::metadata(&path).unwrap().len()));
    let long: String = (1502..=3000u64).map(|id| line(id, &"y".repeat(60))).collect();
    std::io::Write::write_all(&mut file, long.as_bytes()).unwrap();
    assert_eq!(within(&store, &all), None);
    assert_eq!(offset(&store), kept, "put off: what was kept is kept");
    assert_eq!(answered(store.select(&all).unwrap()), whole(&all));
    assert_eq!(within(&store, &all), Some(whole(&all)), "all parsed now: read here");
}

thread_local! {
    /// Bytes `read_exact_from` read on this thread.
    pub(super) static READ: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Bounded resources: the first entries of a kind (the
/// agent's "is there an anchor yet?") are read in growing windows from
/// the tape's start, not with the whole tape at once, and answer as a
/// whole read does wherever the answer lies: in the first window,
/// across windows, after a line longer than a window, or nowhere.
#[test]
fn a_prefix_read_reads_windows_until_its_answer() {
    use bub_abi::types::TapeQuery;
    let anchor = |id: u64| {
        format!("{{\"id\":{id},\"kind\":\"anchor\",\"payload\":{{\"name\":\"a{id}\"}},\"meta\":{{}},\"date\":\"d\"}}\n")
    };
    let filler = |from: u64, to: u64| (from..to).map(|id| line(id, &"x".repeat(200))).collect::<String>();
    let window = super::PREFIX_FIRST_WINDOW as usize;
    let tapes = [
        ("first", anchor(1) + &filler(2, 20_000)),
        ("later", filler(1, 2_000) + &anchor(2_000) + &filler(2_001, 20_000)),
        ("long line", line(1, &"y".repeat(3 * window)) + &anchor(2) + &filler(3, 20_000)),
        ("none", filler(1, 2_000) + &line(2_000, "torn")[..20]),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in &tapes {
        let tape = name.replace(' ', "_");
        std::fs::write(dir.path().join(format!("{tape}.jsonl")), text).unwrap();
        let q: TapeQuery =
            serde_json::from_value(serde_json::json!({"tape": tape, "kinds": ["anchor"], "limit": 1})).unwrap();
        let whole = FileTapeStore::new(dir.path());
        whole.read(&tape).unwrap();
        let store = FileTapeStore::new(dir.path());
        READ.with(|r| r.set(0));
        assert_eq!(answered(store.select(&q).unwrap()), answered(whole.select(&q).unwrap()), "{name}");
        let read = READ.with(|r| r.get()) as usize;
        let answer_end = text.find("\"kind\":\"anchor\"").map(|at| at + text[at..].find('\n').unwrap() + 1);
        match answer_end {
            // Windows of 1, 4, 16, … times the first, the last one
            // less than four times what the answer needed.
            Some(end) => assert!(read <= window.max(6 * end), "{name}: read {read} bytes for an answer {end} in"),
            // A window's unfinished last line is read again with the
            // next one.
            None => assert!(read >= text.len() && read < 2 * text.len(), "{name}: read {read} of {}", text.len()),
        }
        if *name == "first" {
            assert_eq!(read, window, "the first window holds the answer");
        }
    }
}

/// What the store parsed once it hands out as shared host
/// values; a line not in its shape is answered in that shape.
#[test]
fn answers_share_the_parsed_entries() {
    use bub_abi::types::TapeQuery;
    let dir = tempfile::tempdir().unwrap();
    let store = FileTapeStore::new(dir.path());
    let text = "{\"id\":1,\"kind\":\"message\",\"payload\":{\"content\":\"hi\"},\"meta\":{},\"date\":\"d\"}\n\
                {\"kind\":\"message\",\"id\":2,\"payload\":{\"content\":\"there\"},\"extra\":1}\n";
    std::fs::write(dir.path().join("t.jsonl"), text).unwrap();
    let q: TapeQuery = serde_json::from_value(serde_json::json!({"tape": "t"})).unwrap();
    let values = |answer| match answer {
        super::TapeEntries::Values(v) => v,
        super::TapeEntries::Entries(_) => panic!("expected host values"),
    };
    let (first, second) = (values(store.select(&q).unwrap()), values(store.select(&q).unwrap()));
    let content =
        |v: &bub_abi::Value| v.as_ref().get("payload").unwrap().get("content").unwrap().as_str().unwrap().as_ptr();
    assert_eq!(content(&first[0]), content(&second[0]), "the same node, not a copy");
    let keys: Vec<&str> = second[1].as_ref().entries().map(|(k, _)| k).collect();
    assert_eq!(keys, ["id", "kind", "payload", "meta", "date"]);
    assert_eq!(second[1].as_ref().get("payload").unwrap().get("content").unwrap().as_str(), Some("there"));
}

/// Memory of a big run: the host's values are written as
/// `append_many` writes the same entries, answered back with their
/// ids and sharing their payloads; a value that is not an entry is
/// refused as a `TapeEntry` argument would be.
#[test]
fn appended_values_are_written_as_entries_and_answered_uncopied() {
    use bub_abi::{resources::TapeStore, types::TapeEntry, Value};
    let dir = tempfile::tempdir().unwrap();
    let store = FileTapeStore::new(dir.path());
    let entries: Vec<TapeEntry> = serde_json::from_value(serde_json::json!([
        {"kind": "message", "payload": {"role": "user", "content": "hi"}, "meta": {"run": 1}, "date": "d1"},
        {"kind": "event", "payload": {"name": "loop.step", "data": {"n": 1.5}}, "date": "d2"},
    ]))
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(store.append_many("typed".into(), entries.clone())).unwrap();
    let values: Vec<Value> = entries.iter().map(|e| Value::from_serialize(e).unwrap()).collect();
    let answer = rt.block_on(store.append_many_values("hosted".into(), values.clone())).unwrap();
    let typed = std::fs::read_to_string(dir.path().join("typed.jsonl")).unwrap();
    let hosted = std::fs::read_to_string(dir.path().join("hosted.jsonl")).unwrap();
    assert_eq!(hosted, typed);
    let super::TapeEntries::Values(answer) = answer else { panic!("expected host values") };
    let ids: Vec<u64> = answer.iter().map(|v| v.as_ref().get("id").unwrap().as_u64().unwrap()).collect();
    assert_eq!(ids, [1, 2]);
    let content = |v: &Value| v.as_ref().get("payload").unwrap().get("content").unwrap().as_str().unwrap().as_ptr();
    assert_eq!(content(&answer[0]), content(&values[0]), "the payload is shared, not copied");
    // No date: the store's; no meta: `{}`.
    let bare = Value::from_serialize(&serde_json::json!({"kind": "event", "payload": {}})).unwrap();
    rt.block_on(store.append_many_values("hosted".into(), vec![bare])).unwrap();
    let last = store.read("hosted").unwrap().pop().unwrap();
    assert_eq!((last.id, last.meta.len(), last.date.is_empty()), (3, 0, false));
    // Not an entry: refused, nothing written.
    let wrong = Value::from_serialize(&serde_json::json!({"kind": 7})).unwrap();
    let Err(err) = rt.block_on(store.append_many_values("hosted".into(), vec![wrong])) else {
        panic!("a value that is not an entry was stored")
    };
    assert!(err.to_string().contains("kind") || err.to_string().contains("invalid type"), "{err}");
    assert_eq!(store.read("hosted").unwrap().len(), 3);
}

fn ids(store: &FileTapeStore) -> Vec<u64> {
    store.read("t").unwrap().iter().map(|e| e.id).collect()
}

/// Reads parse only what was appended since, and still see
/// every change another writer made: appends, a torn line completed
/// later, a file rewritten or replaced.
#[test]
fn incremental_reads_follow_appends_torn_lines_and_rewrites() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileTapeStore::new(dir.path());
    let path = dir.path().join("t.jsonl");
    assert!(store.read("t").unwrap().is_empty());
    std::fs::write(&path, line(1, "a") + &line(2, "b")).unwrap();
    assert_eq!(ids(&store), [1, 2]);
    // Another process appends, the last line torn (no newline yet).
    let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(line(3, "c").as_bytes()).unwrap();
    let four = line(4, "d");
    f.write_all(&four.as_bytes()[..10]).unwrap();
    assert_eq!(ids(&store), [1, 2, 3], "the torn line is skipped");
    f.write_all(&four.as_bytes()[10..]).unwrap();
    assert_eq!(ids(&store), [1, 2, 3, 4], "…and read once it is complete");
    assert_eq!(ids(&store), [1, 2, 3, 4], "nothing read twice");
    // Rewritten in place (same file, longer, other bytes before the
    // parsed offset): read again in full.
    std::fs::write(&path, line(7, "x") + &line(8, "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy") + &line(9, "z"))
        .unwrap();
    assert_eq!(ids(&store), [7, 8, 9]);
    // Truncated, then replaced by another file.
    std::fs::write(&path, line(1, "a")).unwrap();
    assert_eq!(ids(&store), [1]);
    std::fs::remove_file(&path).unwrap();
    assert!(store.read("t").unwrap().is_empty());
    std::fs::write(&path, line(5, "e")).unwrap();
    assert_eq!(ids(&store), [5]);
}
