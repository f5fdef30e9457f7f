//! Text search over tape entries: what a query matches, how the matches
//! rank, and what a store's index must offer for its answer to be a scan's.
//!
//! One [`Search`] decides for every store: the builtin file store and the
//! agent's in-memory tapes read each entry; tape-sqlite and tape-postgres
//! read only what their trigram index offers. Both hand entries to the
//! same [`Search::offer`], so they agree whenever the index offers every
//! entry that can match, which the rules are chosen to make possible:
//!
//! - an entry is searched by its text ([`searched_text`]: the payload as
//!   YAML, lower-cased, its first [`INDEXED_TEXT_BYTES`]), which is
//!   exactly what an index holds;
//! - an **exact** match contains the query (trimmed, lower-cased) as a
//!   substring: a substring index finds each one;
//! - a **fuzzy** match ([`crate::fuzzy`]) is a word of three characters or
//!   more (or a run of them) close to the query by WRatio that shares a
//!   trigram with it: an index of trigrams offers each one. The message
//!   context line (`sender_id=…|chat_id=…` and `---Date: …---`) takes no
//!   part: its digits and ids were in every message, so a fuzzy match
//!   through them depended on the second a message was written.
//!
//! Matches rank exact before fuzzy, then by score (WRatio; every exact
//! match scores alike), then newest (by date, then tape and id), each
//! distinct text once per tape, `limit` (20) of them. Bub lists matches
//! newest first only, so an exact hit fell behind any number of newer
//! near-misses; here it cannot.

use std::{
    borrow::Cow,
    cmp::Reverse,
    collections::{BTreeMap, HashMap},
    hash::{Hash, Hasher},
};

use bub_abi::types::{TapeEntry, TapeMatch, TapeQuery};
use serde_json::{Map, Value};

use crate::{
    fuzzy::FuzzyQuery,
    tape::{date_bounds, entry_text, instant, within, QueryError},
};

/// How much of an entry's text a search reads, and a store's index holds:
/// the first 64 KiB (a 60 MB prompt is neither indexed nor scanned whole).
pub const INDEXED_TEXT_BYTES: usize = 64 << 10;

/// The text a search reads of an entry, and a store's index holds: the
/// payload's text ([`entry_text`]), lower-cased, its first
/// [`INDEXED_TEXT_BYTES`].
pub fn searched_text(payload: &Map<String, Value>) -> String {
    let mut text = entry_text(payload).to_lowercase();
    if text.len() > INDEXED_TEXT_BYTES {
        let mut end = INDEXED_TEXT_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// `text` (a [`searched_text`]) with each message context blanked: a line
/// `---date: …---` and, on the line before it, the context string
/// (`key=value|…`, after its `key: ` or `- `). Blanked with spaces, so
/// every other word stays where the index has it.
pub fn without_context(text: &str) -> Cow<'_, str> {
    if !text.contains("---date: ") {
        return Cow::Borrowed(text);
    }
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out: Vec<Cow<'_, str>> = lines.iter().map(|l| Cow::Borrowed(*l)).collect();
    for (i, line) in lines.iter().enumerate() {
        if !(line.starts_with("---date: ") && line.ends_with("---") && line.len() >= 12) {
            continue;
        }
        out[i] = Cow::Owned(" ".repeat(line.len()));
        let Some(before) = i.checked_sub(1).map(|j| lines[j]) else { continue };
        let start = [before.find(": ").map(|k| k + 2), before.find("- ").map(|k| k + 2)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(0);
        let context = &before[start..];
        if context.contains('=') {
            out[i - 1] = Cow::Owned(format!("{}{}", &before[..start], " ".repeat(context.len())));
        }
    }
    Cow::Owned(out.join("\n"))
}

/// Where a match stands: better ranks sort first (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    exact: bool,
    /// WRatio in thousandths (every exact match: 100 000).
    score: u32,
    /// The entry's date (None, unreadable: after every readable one).
    at: Option<jiff::Timestamp>,
    tape: String,
    id: u64,
}

/// A text query, answered over entries offered one at a time in any
/// order, holding only the best `limit` matches: the same answer however
/// the entries arrive, so a store's index, a scan of each tape and a
/// scan's per-tape answers joined all agree.
pub struct Search {
    needle: String,
    fuzzy: Option<FuzzyQuery>,
    kinds: Vec<String>,
    dates: Option<(jiff::Timestamp, jiff::Timestamp)>,
    limit: usize,
    /// The matches kept, best first, each with its text's hash.
    kept: BTreeMap<Reverse<Rank>, (u64, TapeMatch)>,
    /// The rank kept for each (tape, text hash): a distinct text once.
    texts: HashMap<(String, u64), Rank>,
}

impl Search {
    /// A search for `query`'s text among the entries of its `kinds` dated
    /// within its `between_dates`, at most its `limit` (20); None when the
    /// text is only whitespace (it matches nothing).
    pub fn new(query: &TapeQuery) -> Result<Option<Search>, QueryError> {
        let dates = date_bounds(query)?;
        let needle = query.query.as_deref().unwrap_or("").trim().to_lowercase();
        if needle.is_empty() {
            return Ok(None);
        }
        Ok(Some(Search {
            fuzzy: FuzzyQuery::new(&needle),
            needle,
            kinds: query.kinds.clone(),
            dates,
            limit: query.limit.unwrap_or(20),
            kept: BTreeMap::new(),
            texts: HashMap::new(),
        }))
    }

    /// The query, trimmed and lower-cased: what an exact match contains.
    pub fn needle(&self) -> &str {
        &self.needle
    }

    /// The trigrams every fuzzy match shares with its entry (none when
    /// the query has no word of three characters): an index offering each
    /// entry that contains one of them offers every fuzzy match.
    pub fn trigrams(&self) -> Vec<String> {
        self.fuzzy.as_ref().map(FuzzyQuery::trigrams).unwrap_or_default()
    }

    /// Considers one entry of `tape`; kept when it matches and ranks among
    /// the best `limit`.
    pub fn offer(&mut self, tape: &str, entry: TapeEntry) {
        if self.limit == 0
            || !(self.kinds.is_empty() || self.kinds.contains(&entry.kind))
            || !within(&entry.date, self.dates)
        {
            return;
        }
        let text = searched_text(&entry.payload);
        let exact = text.contains(&self.needle);
        let score = if exact {
            100_000
        } else if self.exact_full() {
            return;
        } else {
            let Some(fuzzy) = &self.fuzzy else { return };
            let Some(score) = fuzzy.score(&without_context(&text)) else { return };
            (score * 1000.0).round() as u32
        };
        let rank = Rank { exact, score, at: instant(&entry.date), tape: tape.to_owned(), id: entry.id };
        if self.kept.len() >= self.limit && self.kept.last_key_value().is_some_and(|(worst, _)| rank <= worst.0) {
            return;
        }
        let hash = text_hash(&text);
        let key = (tape.to_owned(), hash);
        if let Some(held) = self.texts.get(&key) {
            if *held >= rank {
                return;
            }
            self.kept.remove(&Reverse(held.clone()));
        }
        self.texts.insert(key, rank.clone());
        self.kept.insert(Reverse(rank), (hash, TapeMatch { tape: tape.to_owned(), entry }));
        if self.kept.len() > self.limit {
            if let Some((Reverse(worst), (hash, _))) = self.kept.pop_last() {
                self.texts.remove(&(worst.tape, hash));
            }
        }
    }

    /// Whether `limit` exact matches are kept: no fuzzy match can enter.
    pub fn exact_full(&self) -> bool {
        self.limit == 0 || (self.kept.len() >= self.limit && self.kept.last_key_value().is_some_and(|(r, _)| r.0.exact))
    }

    /// Whether no exact match dated `date` or earlier can enter: `limit`
    /// exact matches are kept, each newer. A store offering the entries
    /// that contain the query newest first (by date as stored, which for
    /// the RFC 3339 UTC dates stores write is by time) stops there.
    pub fn settled_before(&self, date: &str) -> bool {
        self.exact_full()
            && match (instant(date), self.kept.last_key_value().and_then(|(r, _)| r.0.at)) {
                (Some(at), Some(worst)) => at < worst,
                _ => false,
            }
    }

    /// The matches, best first.
    pub fn finish(self) -> Vec<TapeMatch> {
        self.kept.into_values().map(|(_, m)| m).collect()
    }
}

/// A text's hash, for telling distinct texts apart without keeping them.
fn text_hash(text: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// A search across tapes (`TapeStore::search_tapes`) over `candidates`,
/// in any order; an entry offered twice counts once, so a store may join
/// the lists its index queries found. See [`Search`].
pub fn search_across(candidates: Vec<TapeMatch>, query: &TapeQuery) -> Result<Vec<TapeMatch>, QueryError> {
    let Some(mut search) = Search::new(query)? else { return Ok(Vec::new()) };
    for m in candidates {
        search.offer(&m.tape, m.entry);
    }
    Ok(search.finish())
}

/// The search of one tape's `entries` (already selected by kind, date
/// and anchor) for `text`: the best `limit`, best first.
pub(crate) fn search_tape(entries: Vec<TapeEntry>, text: &str, limit: usize) -> Vec<TapeEntry> {
    let query = TapeQuery { query: Some(text.to_owned()), limit: Some(limit), ..Default::default() };
    let Ok(Some(mut search)) = Search::new(&query) else { return Vec::new() };
    for entry in entries.into_iter().rev() {
        search.offer("", entry);
    }
    search.finish().into_iter().map(|m| m.entry).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn said(id: u64, text: &str, date: &str) -> TapeEntry {
        TapeEntry {
            id,
            kind: "message".into(),
            payload: json!({"role": "user", "content": text}).as_object().unwrap().clone(),
            date: date.into(),
            ..Default::default()
        }
    }

    fn found(entries: Vec<TapeEntry>, q: &str, limit: usize) -> Vec<u64> {
        search_tape(entries, q, limit).into_iter().map(|e| e.id).collect()
    }

    #[test]
    fn exact_hits_rank_before_newer_fuzzy_ones() {
        let mut tape = vec![said(1, "the halcyon project", "2026-01-01T00:00:00Z")];
        for i in 2..40 {
            tape.push(said(i, &format!("halcyan days {i}"), &format!("2026-01-02T00:00:{i:02}Z")));
        }
        let ids = found(tape, "halcyon", 20);
        assert_eq!(ids[0], 1, "{ids:?}");
        assert_eq!(ids.len(), 20);
        assert_eq!(ids[1], 39, "then by score, then newest");
    }

    #[test]
    fn a_perfect_fuzzy_score_is_still_not_exact() {
        // "kubernetes of" is in neither; each scores 100 through "kubernetes".
        let tape = vec![
            said(1, "kubernetes now", "2026-01-01T00:00:01Z"),
            said(2, "kubernetes again", "2026-01-01T00:00:02Z"),
            said(3, "kubernetes of ours", "2026-01-01T00:00:00Z"),
        ];
        assert_eq!(found(tape, "kubernetes of", 2), vec![3, 2]);
    }

    #[test]
    fn the_context_line_never_matches_fuzzily() {
        let context = "sender_id=ann|channel=telegram|chat_id=4242\n---Date: 2026-12-06T10:12:42+00:00---\nhello";
        let tape = vec![said(1, context, "2026-01-01T00:00:00Z")];
        assert_eq!(found(tape.clone(), "4243", 20), Vec::<u64>::new(), "digits of the context");
        assert_eq!(found(tape.clone(), "sendr_id", 20), Vec::<u64>::new());
        assert_eq!(found(tape.clone(), "hellp", 20), vec![1], "the message itself still matches");
        assert_eq!(found(tape, "chat_id=4242", 20), vec![1], "a substring of it still does");
    }

    #[test]
    fn each_distinct_text_once_the_newest() {
        let tape = vec![
            said(1, "kumquat", "2026-01-01T00:00:00Z"),
            said(2, "kumquat", "2026-01-03T00:00:00Z"),
            said(3, "kumquat", "2026-01-02T00:00:00Z"),
        ];
        assert_eq!(found(tape, "kumquat", 20), vec![2]);
    }

    #[test]
    fn offered_in_any_order_the_answer_is_the_same() {
        let mut entries: Vec<TapeMatch> = (0..60)
            .map(|i| TapeMatch {
                tape: format!("t{}", i % 3),
                entry: said(
                    i,
                    ["kumquat jam", "kumqat tree", "a kumquats list", "pears"][i as usize % 4],
                    &format!("2026-01-01T00:{:02}:00Z", i),
                ),
            })
            .collect();
        let query: TapeQuery = serde_json::from_value(json!({"tape": "", "query": "kumquat", "limit": 5})).unwrap();
        let ids = |v: Vec<TapeMatch>| v.into_iter().map(|m| (m.tape, m.entry.id)).collect::<Vec<_>>();
        let first = ids(search_across(entries.clone(), &query).unwrap());
        entries.reverse();
        assert_eq!(ids(search_across(entries.clone(), &query).unwrap()), first);
        entries.sort_by_key(|m| (m.entry.id * 7919) % 61);
        assert_eq!(ids(search_across(entries, &query).unwrap()), first);
    }
}
