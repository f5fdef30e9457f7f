//! What a [`TapeQuery`] selects, for tape store authors: Bub's semantics in
//! one place (the builtin file store, the agent's in-memory tapes and the
//! SQL store plugins all answer `fetch_all` with it).
//!
//! A store may push the cheap parts down (fetch only the entries after the
//! anchor) and hand the rest to [`select`] with the anchor fields cleared.

use bub_abi::types::{TapeEntry, TapeQuery};
use serde_json::{Map, Value};

/// Why a query cannot be answered (Bub raises these as `BubError`s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryError {
    /// `between_anchors` names an anchor the tape lacks (Bub's `NOT_FOUND`).
    AnchorNotFound(String),
    /// A `between_dates` bound is neither an ISO date nor an ISO datetime.
    InvalidDate(String),
    /// The `between_dates` start is after its end.
    DatesReversed,
}

impl std::fmt::Display for QueryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueryError::AnchorNotFound(name) => write!(f, "Anchor '{name}' was not found."),
            QueryError::InvalidDate(value) => write!(f, "Invalid ISO date or datetime: '{value}'."),
            QueryError::DatesReversed => f.write_str("Start date must be earlier than or equal to end date."),
        }
    }
}

impl std::error::Error for QueryError {}

impl From<QueryError> for bub_abi::HookError {
    fn from(e: QueryError) -> Self {
        bub_abi::HookError::plugin(e.to_string())
    }
}

/// What selection reads of an entry: a [`TapeEntry`], or a store's own
/// record of one (the builtin store keeps its entries as host values and
/// selects among them without reading them back into `TapeEntry`s).
pub trait EntryView {
    /// The entry's id.
    fn id(&self) -> u64;
    /// Its kind (`message`, `anchor`, …).
    fn kind(&self) -> &str;
    /// An anchor's name (`payload.name`); None when it has none.
    fn anchor_name(&self) -> Option<&str>;
    /// Its date, as stored.
    fn date(&self) -> &str;
}

impl<T: EntryView + ?Sized> EntryView for &T {
    fn id(&self) -> u64 {
        (**self).id()
    }
    fn kind(&self) -> &str {
        (**self).kind()
    }
    fn anchor_name(&self) -> Option<&str> {
        (**self).anchor_name()
    }
    fn date(&self) -> &str {
        (**self).date()
    }
}

impl EntryView for TapeEntry {
    fn id(&self) -> u64 {
        self.id
    }
    fn kind(&self) -> &str {
        &self.kind
    }
    fn anchor_name(&self) -> Option<&str> {
        self.payload.get("name").and_then(|v| v.as_str())
    }
    fn date(&self) -> &str {
        &self.date
    }
}

/// Whether `e` is an anchor that `query`'s `last_anchor` (any anchor) or
/// `after_anchor` (one of that name) selects the entries after; the last
/// such anchor starts the selection. One predicate for every place that
/// cuts a tape there: stores, the agent's fork and its kept context.
pub fn starts_after<E: EntryView + ?Sized>(e: &E, query: &TapeQuery) -> bool {
    e.kind() == "anchor"
        && (query.last_anchor || query.after_anchor.as_deref().is_some_and(|n| e.anchor_name() == Some(n)))
}

/// [`try_select`], with an unanswerable query selecting nothing.
pub fn select(entries: Vec<TapeEntry>, query: &TapeQuery) -> Vec<TapeEntry> {
    try_select(entries, query).unwrap_or_default()
}

/// The entries of one tape, in order, that `query` selects, as Bub's
/// builtin store answers: between two anchors, or after the last anchor (of
/// a name; from the start when there is none); dated within
/// `between_dates`; of the given kinds. A text query then answers its best
/// matches ([`crate::search`]: exact before fuzzy, then by score, then
/// newest), one entry per distinct text, 20 by default; without one, the
/// first `limit` entries.
pub fn try_select(entries: Vec<TapeEntry>, query: &TapeQuery) -> Result<Vec<TapeEntry>, QueryError> {
    let kept = matching(&entries, query)?;
    let mut next = kept.iter().copied().peekable();
    let out = entries.into_iter().enumerate().filter_map(|(i, e)| {
        (next.peek() == Some(&i)).then(|| {
            next.next();
            e
        })
    });
    if let Some(q) = &query.query {
        return Ok(crate::search::search_tape(out.collect(), q, query.limit.unwrap_or(20)));
    }
    // The first `limit` entries (Bub's `sliced[:limit]`).
    Ok(out.take(query.limit.unwrap_or(usize::MAX)).collect())
}

/// The positions in `entries` that `query` selects, in order, as
/// [`try_select`] selects them; None for a text query (`query.query`),
/// which reads payloads: answer it with [`try_select`].
pub fn select_positions<E: EntryView>(entries: &[E], query: &TapeQuery) -> Result<Option<Vec<usize>>, QueryError> {
    if query.query.is_some() {
        return Ok(None);
    }
    let mut kept = matching(entries, query)?;
    kept.truncate(query.limit.unwrap_or(usize::MAX));
    Ok(Some(kept))
}

/// Every position `query` selects, before its text search and its limit.
fn matching<E: EntryView>(entries: &[E], query: &TapeQuery) -> Result<Vec<usize>, QueryError> {
    let after: Vec<usize> = match query.after_id {
        Some(after) => (0..entries.len()).filter(|&i| entries[i].id() > after).collect(),
        None => (0..entries.len()).collect(),
    };
    let at = |k: usize| &entries[after[k]];
    let anchor = |e: &E, name: &str| e.kind() == "anchor" && e.anchor_name() == Some(name);
    let (start, end) = if let Some((first, last)) = &query.between_anchors {
        let from = (0..after.len())
            .rposition(|k| anchor(at(k), first))
            .ok_or_else(|| QueryError::AnchorNotFound(first.clone()))?;
        let to = (from + 1..after.len())
            .find(|&k| anchor(at(k), last))
            .ok_or_else(|| QueryError::AnchorNotFound(last.clone()))?;
        (from + 1, to)
    } else if query.last_anchor || query.after_anchor.is_some() {
        ((0..after.len()).rposition(|k| starts_after(at(k), query)).map_or(0, |k| k + 1), after.len())
    } else {
        (0, after.len())
    };
    let dates = date_bounds(query)?;
    let in_dates = |e: &E| within(e.date(), dates);
    Ok(after[start..end]
        .iter()
        .copied()
        .filter(|&i| {
            let e = &entries[i];
            (query.kinds.is_empty() || query.kinds.iter().any(|k| k == e.kind())) && in_dates(e)
        })
        .collect())
}

/// The text a query searches: the payload as block YAML with sorted keys,
/// as Bub's `get_entry_text` (`yaml.safe_dump`) writes it. [inferred]
/// Strings are written plain, where PyYAML would quote some and fold long
/// ones; the words, which the fuzzy match compares, are the same.
pub fn entry_text(payload: &Map<String, Value>) -> String {
    let mut out = String::new();
    yaml_map(payload, 0, false, &mut out);
    out
}

/// A mapping at `indent`; `inline` when its first key follows a `- `.
fn yaml_map(map: &Map<String, Value>, indent: usize, inline: bool, out: &mut String) {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for (i, key) in keys.into_iter().enumerate() {
        if i > 0 || !inline {
            out.push_str(&" ".repeat(indent));
        }
        out.push_str(key);
        out.push(':');
        yaml_nested(&map[key], indent, indent + 2, out);
    }
}

/// A value after `key:` or `-`: inline when scalar or empty, else below.
fn yaml_nested(value: &Value, list_indent: usize, map_indent: usize, out: &mut String) {
    match value {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            yaml_map(m, map_indent, false, out);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            for item in items {
                out.push_str(&" ".repeat(list_indent));
                out.push('-');
                match item {
                    Value::Object(m) if !m.is_empty() => {
                        out.push(' ');
                        yaml_map(m, list_indent + 2, true, out);
                    }
                    _ => yaml_nested(item, list_indent + 2, list_indent + 2, out),
                }
            }
        }
        scalar => {
            out.push(' ');
            match scalar {
                Value::Null => out.push_str("null"),
                Value::String(s) => out.push_str(s),
                Value::Object(_) => out.push_str("{}"),
                Value::Array(_) => out.push_str("[]"),
                other => out.push_str(&other.to_string()),
            }
            out.push('\n');
        }
    }
}

/// `query.between_dates` as instants: the start's first and the end's last
/// microsecond; None when unset.
pub(crate) fn date_bounds(query: &TapeQuery) -> Result<Option<(jiff::Timestamp, jiff::Timestamp)>, QueryError> {
    let Some((from, to)) = &query.between_dates else { return Ok(None) };
    let (from, to) = (boundary(from, false)?, boundary(to, true)?);
    if from > to {
        return Err(QueryError::DatesReversed);
    }
    Ok(Some((from, to)))
}

/// Whether an entry dated `date` is within `bounds` (always, without any).
pub(crate) fn within(date: &str, bounds: Option<(jiff::Timestamp, jiff::Timestamp)>) -> bool {
    bounds.is_none_or(|(from, to)| boundary(date, false).is_ok_and(|at| from <= at && at <= to))
}

/// An entry's date as an instant; None when it cannot be read.
pub(crate) fn instant(date: &str) -> Option<jiff::Timestamp> {
    boundary(date, false).ok()
}

/// Python's `_parse_datetime_boundary`: an ISO date is its first (or, for
/// an end, last) microsecond in UTC; a datetime without an offset is UTC.
fn boundary(value: &str, is_end: bool) -> Result<jiff::Timestamp, QueryError> {
    let invalid = || QueryError::InvalidDate(value.to_owned());
    let day = |d: jiff::civil::Date| {
        let time = if is_end { jiff::civil::Time::MAX } else { jiff::civil::Time::MIN };
        d.to_datetime(time).to_zoned(jiff::tz::TimeZone::UTC).map(|z| z.timestamp()).map_err(|_| invalid())
    };
    if !value.contains(['T', 't', ' ']) {
        if let Ok(d) = value.parse::<jiff::civil::Date>() {
            return day(d);
        }
    }
    if let Ok(ts) = value.parse::<jiff::Timestamp>() {
        return Ok(ts);
    }
    if let Ok(dt) = value.parse::<jiff::civil::DateTime>() {
        return dt.to_zoned(jiff::tz::TimeZone::UTC).map(|z| z.timestamp()).map_err(|_| invalid());
    }
    value.parse::<jiff::civil::Date>().map_err(|_| invalid()).and_then(day)
}

/// Now, as a tape entry's `date` (RFC 3339 UTC with microseconds): what a
/// store writes when the entry comes without one.
pub fn now() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(id: u64, kind: &str, payload: Value, date: &str) -> TapeEntry {
        TapeEntry {
            id,
            kind: kind.into(),
            payload: payload.as_object().unwrap().clone(),
            date: date.into(),
            ..Default::default()
        }
    }

    fn tape() -> Vec<TapeEntry> {
        vec![
            entry(1, "message", json!({"content": "deploy to kubernetes"}), "2026-11-01T10:00:00+00:00"),
            entry(2, "anchor", json!({"name": "a"}), "2026-11-02T10:00:00Z"),
            entry(3, "message", json!({"content": "release notes"}), "2026-11-03T10:00:00.5Z"),
            entry(4, "anchor", json!({"name": "b"}), "2026-11-04T10:00:00Z"),
            entry(5, "message", json!({"content": "release notes"}), "2026-11-05T10:00:00Z"),
            entry(6, "anchor", json!({"name": "a"}), "2026-11-06T10:00:00Z"),
        ]
    }

    fn ids(q: Value) -> Result<Vec<u64>, QueryError> {
        let q: TapeQuery = serde_json::from_value(q).unwrap();
        try_select(tape(), &q).map(|es| es.into_iter().map(|e| e.id).collect())
    }

    #[test]
    fn between_anchors_is_last_start_then_next_end() {
        // The start is the last anchor of the first name, the end the next
        // anchor of the second name after it: no "b" follows the last "a".
        assert_eq!(ids(json!({"tape": "t", "between_anchors": ["b", "a"]})), Ok(vec![5]));
        assert_eq!(
            ids(json!({"tape": "t", "between_anchors": ["a", "b"]})),
            Err(QueryError::AnchorNotFound("b".into()))
        );
        assert_eq!(
            ids(json!({"tape": "t", "between_anchors": ["x", "b"]})),
            Err(QueryError::AnchorNotFound("x".into()))
        );
    }

    #[test]
    fn between_dates_takes_days_and_datetimes() {
        assert_eq!(ids(json!({"tape": "t", "between_dates": ["2026-11-03", "2026-11-05"]})), Ok(vec![3, 4, 5]));
        assert_eq!(
            ids(json!({"tape": "t", "between_dates": ["2026-11-03T10:00:01", "2026-11-05T10:00:00+00:00"]})),
            Ok(vec![4, 5])
        );
        assert_eq!(
            ids(json!({"tape": "t", "between_dates": ["2026-11-05", "2026-11-03"]})),
            Err(QueryError::DatesReversed)
        );
        assert_eq!(
            ids(json!({"tape": "t", "between_dates": ["", "2026-11-03"]})),
            Err(QueryError::InvalidDate("".into()))
        );
    }

    #[test]
    fn text_search_keeps_a_distinct_text_once_and_finds_typos() {
        // Entry 5 hides its duplicate 3; a typo still finds entry 1.
        assert_eq!(ids(json!({"tape": "t", "query": "RELEASE", "kinds": ["message"]})), Ok(vec![5]));
        assert_eq!(ids(json!({"tape": "t", "query": "kubernets"})), Ok(vec![1]));
        assert_eq!(ids(json!({"tape": "t", "query": "  "})), Ok(vec![]));
    }

    #[test]
    fn entry_text_is_pyyaml_block_style() {
        // What Python's yaml.safe_dump writes for the same payload.
        let payload = json!({"role": "user", "content": "hi there",
            "meta": {"b": 1, "a": [1, {"x": "y"}], "e": {}, "l": []}, "n": null, "t": true});
        assert_eq!(
            entry_text(payload.as_object().unwrap()),
            "content: hi there\nmeta:\n  a:\n  - 1\n  - x: y\n  b: 1\n  e: {}\n  l: []\nn: null\nrole: user\nt: true\n"
        );
    }
}
