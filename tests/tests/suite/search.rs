//! Text search over tapes (`tape.search`, `sessions=…`): exact hits rank
//! before near misses, and a store's index answers as a scan does
//! (docs/agent.md "Searching tapes").

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use bub_abi::types::{TapeEntry, TapeQuery};
use bub_host::agent::Store;
use bub_tests::{run_bub, Home};
use serde_json::{json, Value};

use crate::tape_stores::each_store;

/// SplitMix64: a seeded generator, so a failing case is reproducible
/// (`BUB_SEARCH_SEED` runs another seed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const WORDS: &[&str] = &[
    "halcyon",
    "jira-5521",
    "jira-5522",
    "kumquat",
    "kumqaut",
    "deploy",
    "depoly",
    "kubernetes",
    "release",
    "notes",
    "apricot",
    "tree",
    "the",
    "a",
    "of",
    "to",
    "is",
    "at",
    "prod",
    "server",
    "database",
    "migration",
    "postgres",
    "sqlite",
    "tape",
    "tapes",
    "4242",
    "2026",
    "ann",
    "sender",
    "chat",
    "Halcyon",
    "KUMQUAT",
    "release-notes",
    "café",
    "naïve",
    "x_y",
    "a/b",
    "tonight",
    "abcde",
    "abxde",
];

/// A word with a typo: two letters swapped, one dropped or one changed.
fn typo(rng: &mut Rng, word: &str) -> String {
    let mut chars: Vec<char> = word.chars().collect();
    if chars.len() < 3 {
        return word.to_owned();
    }
    let at = rng.below(chars.len() - 1);
    match rng.below(3) {
        0 => chars.swap(at, at + 1),
        1 => {
            chars.remove(at);
        }
        _ => chars[at] = 'x',
    }
    chars.into_iter().collect()
}

/// A message's text: a few words, some with typos, sometimes after the
/// context line a channel message carries.
fn text(rng: &mut Rng, minute: usize) -> String {
    let n = 1 + rng.below(8);
    let words: Vec<String> = (0..n)
        .map(|_| {
            let w = rng.pick(WORDS);
            if rng.chance(15) {
                typo(rng, w)
            } else {
                w.to_owned()
            }
        })
        .collect();
    let body = words.join(if rng.chance(20) { ", " } else { " " });
    if rng.chance(40) {
        let who = rng.below(5000);
        format!(
            "sender_id={who}|channel=telegram|chat_id={who}\n---Date: 2026-12-06T10:{:02}:{:02}+00:00---\n{body}",
            minute % 60,
            rng.below(60)
        )
    } else {
        body
    }
}

/// Tapes of generated entries (messages of both roles, events, anchors;
/// repeated texts; dates as stores write them, some equal across tapes).
fn tapes(rng: &mut Rng) -> Vec<(String, Vec<TapeEntry>)> {
    let mut out: Vec<(String, Vec<TapeEntry>)> = (0..5).map(|t| (format!("tape-{t}"), Vec::new())).collect();
    out.push(("side__sidecar__session".into(), Vec::new()));
    let mut said: Vec<String> = Vec::new();
    for i in 0..240 {
        let t = rng.below(out.len());
        let content =
            if !said.is_empty() && rng.chance(10) { said[rng.below(said.len())].clone() } else { text(rng, i) };
        said.push(content.clone());
        let (kind, payload) = match rng.below(10) {
            0 => {
                ("anchor", json!({"name": rng.pick(&["phase/one", "handoff", "kumquat"]), "state": {"note": content}}))
            }
            1 => ("event", json!({"name": "run", "data": {"said": content, "n": i}})),
            2..=5 => ("message", json!({"role": "assistant", "content": content})),
            _ => ("message", json!({"role": "user", "content": content})),
        };
        // Several entries share a second; both UTC forms stores see.
        let second = i / 2;
        let date = if rng.chance(50) {
            format!("2026-12-06T11:{:02}:{:02}.{:06}Z", second / 60, second % 60, 0)
        } else {
            format!("2026-12-06T11:{:02}:{:02}.000000+00:00", second / 60, second % 60)
        };
        let entry =
            TapeEntry { kind: kind.into(), payload: payload.as_object().unwrap().clone(), date, ..Default::default() };
        out[t].1.push(entry);
    }
    out
}

/// Queries: words, typos, fragments, phrases, short and context-only
/// ones, with kinds, limits and dates.
fn queries(rng: &mut Rng) -> Vec<TapeQuery> {
    (0..120)
        .map(|_| {
            let text = match rng.below(7) {
                0 => rng.pick(WORDS).to_owned(),
                1 => {
                    let w = rng.pick(WORDS);
                    typo(rng, w)
                }
                2 => format!("{} {}", rng.pick(WORDS), rng.pick(WORDS)),
                3 => {
                    let w = rng.pick(WORDS);
                    let chars: Vec<char> = w.chars().collect();
                    let from = rng.below(chars.len());
                    chars[from..].iter().take(3 + rng.below(4)).collect()
                }
                4 => rng.pick(&["sender_id", "chat_id=4", "---date", "10:3", "+00:00", "role: user", "0"]).to_owned(),
                5 => {
                    let w = rng.pick(WORDS);
                    format!("{} {} {}", typo(rng, w), rng.pick(WORDS), rng.pick(WORDS))
                }
                _ => rng.pick(&["ab", "  ", "tapes of", "KUMQUAT TREE", "x", "to the"]).to_owned(),
            };
            let mut q = json!({"tape": "", "query": text});
            if rng.chance(30) {
                q["limit"] = json!(1 + rng.below(25));
            }
            if rng.chance(15) {
                q["kinds"] = json!([rng.pick(&["message", "anchor", "event"])]);
            }
            if rng.chance(10) {
                q["between_dates"] = json!(["2026-12-06T11:00:30Z", "2026-12-06T11:01:10Z"]);
            }
            serde_json::from_value(q).unwrap()
        })
        .collect()
}

/// The searched text of each entry that only one of two answers holds.
fn differing(
    generated: &[(String, Vec<TapeEntry>)],
    a: &Result<Vec<(String, u64)>, String>,
    b: &Result<Vec<(String, u64)>, String>,
) -> String {
    let (a, b) = (a.clone().unwrap_or_default(), b.clone().unwrap_or_default());
    let only: Vec<&(String, u64)> =
        a.iter().filter(|x| !b.contains(x)).chain(b.iter().filter(|x| !a.contains(x))).collect();
    only.iter()
        .filter_map(|(tape, id)| {
            let entries = &generated.iter().find(|(t, _)| t == tape)?.1;
            let entry = entries.get(usize::try_from(*id).ok()?.checked_sub(1)?)?;
            Some(format!("{tape}#{id} {:?}: {:?}", entry.date, bub_kit::search::searched_text(&entry.payload)))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The index and the scan answer alike: on generated tapes (five tapes
/// and a sidecar, 240 entries) and 120 generated queries, each store's
/// index (tape-sqlite's FTS5 trigrams, tape-postgres's `pg_trgm`) gives
/// exactly what reading each tape gives, and every store gives what the
/// builtin JSONL store gives: the same entries, in the same order.
#[test]
fn the_index_and_the_scan_answer_alike_on_generated_tapes() {
    let seed = std::env::var("BUB_SEARCH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_2026_u64);
    let mut rng = Rng(seed);
    let generated = Arc::new(tapes(&mut rng));
    let asked = Arc::new(queries(&mut rng));
    type Answers = Vec<Result<Vec<(String, u64)>, String>>;
    let answers: Arc<Mutex<BTreeMap<String, Answers>>> = Arc::default();
    let (g, a, out) = (generated.clone(), asked.clone(), answers.clone());
    each_store("the_index_and_the_scan_answer_alike_on_generated_tapes", move |name, fw| {
        let (generated, asked, out) = (g.clone(), a.clone(), out.clone());
        async move {
            let store = fw.get_tape_store().expect("a store");
            for (tape, entries) in generated.iter() {
                store.append_many(tape, entries).await?;
            }
            let scan = Store::Host(store.clone());
            let ids = |found: Vec<bub_abi::types::TapeMatch>| {
                found.into_iter().map(|m| (m.tape, m.entry.id)).collect::<Vec<_>>()
            };
            let mut mine = Vec::new();
            let mut indexed = 0;
            for (n, q) in asked.iter().enumerate() {
                let scanned = scan.scan_tapes(None, q).await.map(ids).map_err(|e| e.to_string());
                if let Some(found) = store.search_tapes(None, q).await.map_err(|e| e.to_string()).transpose() {
                    indexed += 1;
                    let found = found.map(ids);
                    if found != scanned {
                        let texts = differing(&generated, &found, &scanned);
                        panic!(
                            "{name}: seed {seed:#x}, query {n}: {q:?}: the index found {found:?}, the scan \
                             {scanned:?}; the entries only one found:\n{texts}"
                        );
                    }
                }
                mine.push(scanned);
            }
            if name != "builtin" {
                assert!(indexed > asked.len() / 2, "{name}: only {indexed} queries were answered by the index");
            }
            out.lock().unwrap().insert(name, mine);
            Ok(())
        }
    });
    let answers = answers.lock().unwrap();
    let reference = &answers["builtin"];
    let hits: usize = reference.iter().map(|a| a.as_ref().map_or(0, Vec::len)).sum();
    assert!(hits > 300, "the generated queries find too little to prove anything ({hits} matches)");
    for (name, theirs) in answers.iter() {
        for (n, (mine, reference)) in theirs.iter().zip(reference).enumerate() {
            assert_eq!(mine, reference, "{name} and the builtin store: seed {seed:#x}, query {n}: {:?}", asked[n]);
        }
    }
}

/// Exact hits outrank newer near misses: a codename and a ticket said
/// once in one session are the first matches from another session, after
/// thirty newer turns elsewhere about a near-miss word and ticket (each a
/// fuzzy match). Through the real binary, on the builtin store.
#[test]
fn exact_hits_outrank_thirty_newer_near_misses() {
    let home = Home::new();
    let run = |session: &str, text: &str| {
        let (out, err, ok) = run_bub(&home, &["run", "--session-id", session, text]);
        assert!(ok, "{err}");
        out
    };
    run("planning", "the codename is Halcyon and the ticket is JIRA-5521");
    for i in 0..30 {
        run("chatter", &format!("halcion pills and JIRA-5522 again, number {i}"));
    }
    for query in ["Halcyon", "JIRA-5521"] {
        let out = run("office", &format!(",tape.search query={query} sessions=all"));
        let first = out.lines().find(|l| l.starts_with("{\"date\": ")).unwrap_or_else(|| panic!("{out}"));
        let first: Value = serde_json::from_str(first).unwrap_or_else(|e| panic!("{e}: {first}"));
        assert!(first.to_string().contains("the codename is Halcyon"), "{query}: the first match is {first}");
        assert_eq!(first["session"], "planning", "{first}");
        assert!(out.contains("halcion pills") || out.contains("jira-5522") || out.contains("JIRA-5522"), "{out}");
    }
}
