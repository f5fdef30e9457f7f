//! What a [`TapeQuery`] selects, for tape store authors: Bub's semantics in
//! one place (the builtin file store, the agent's in-memory tapes and the
//! SQL store plugins all answer `fetch_all` with it).
//!
//! A store may push the cheap parts down (fetch only the entries after the
//! anchor) and hand the rest to [`select`] with the anchor fields cleared.

use crate::types::{TapeEntry, TapeQuery};

/// The entries of one tape, in order, that `query` selects: after the last
/// anchor (or the last anchor of a name), of the given kinds; a text query
/// searches case-insensitively and answers newest first, one entry per
/// distinct payload, 20 by default; otherwise the first `limit` entries.
pub fn select(entries: Vec<TapeEntry>, query: &TapeQuery) -> Vec<TapeEntry> {
    let is_anchor = |e: &TapeEntry, name: Option<&str>| {
        e.kind == "anchor" && name.is_none_or(|n| e.payload.get("name").and_then(|v| v.as_str()) == Some(n))
    };
    let start = if query.last_anchor {
        entries.iter().rposition(|e| is_anchor(e, None)).map_or(0, |i| i + 1)
    } else if let Some(name) = &query.after_anchor {
        entries.iter().rposition(|e| is_anchor(e, Some(name))).map_or(0, |i| i + 1)
    } else {
        0
    };
    let mut out: Vec<TapeEntry> =
        entries.into_iter().skip(start).filter(|e| query.kinds.is_empty() || query.kinds.contains(&e.kind)).collect();
    if let Some(q) = &query.query {
        // Bub's text search: case-insensitive over kind, date, payload and
        // meta; newest first; one entry per distinct payload; 20 by default.
        let needle = q.to_lowercase();
        let mut seen = std::collections::HashSet::new();
        out = out
            .into_iter()
            .rev()
            .filter(|e| {
                serde_json::json!([e.kind, e.date, e.payload, e.meta]).to_string().to_lowercase().contains(&needle)
            })
            .filter(|e| seen.insert(serde_json::Value::Object(e.payload.clone()).to_string()))
            .take(query.limit.unwrap_or(20))
            .collect();
        return out;
    }
    // The first `limit` entries (Bub's `sliced[:limit]`).
    if let Some(limit) = query.limit {
        out.truncate(limit);
    }
    out
}

/// Now, as a tape entry's `date` (RFC 3339 UTC with microseconds): what a
/// store writes when the entry comes without one.
pub fn now() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}
