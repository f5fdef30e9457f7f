//! What a store keeps of a tape it parsed: the entries, each with its
//! line's text and where it ends, and how to tell the file is still the
//! one they came from.

use std::path::Path;

use bub_abi::{types::TapeEntry, BoxError, Value};
use bub_kit::tape::EntryView;

/// The entries parsed from a tape file, and how to tell that the file is
/// still the one they came from, with lines only added after `offset`.
pub(super) struct Parsed {
    pub(super) dev: u64,
    pub(super) ino: u64,
    /// Bytes parsed: up to and including the last newline read.
    pub(super) offset: u64,
    /// Where parsing started: 0 for a whole tape (the only kind kept),
    /// else the line after a read's `after_id` (see [`tail_start`]).
    pub(super) base: u64,
    /// The bytes just before `offset` (at most [`GUARD`]).
    pub(super) guard: Vec<u8>,
    /// Lines read so far (for the line numbers of warnings).
    pub(super) lines: usize,
    pub(super) entries: Vec<Stored>,
}

/// One entry read from a tape: the host value `fetch_all` hands out, and
/// what selecting it reads.
pub(super) struct Stored {
    pub(super) id: u64,
    // The kind is read from `value` (no copy of its own: an allocation
    // per line of a long tape's first read).
    pub(super) value: Value,
}

impl Stored {
    /// From a line with the keys the store writes (`id`, `kind`,
    /// `payload`, `meta`, `date`, of those types): parsed straight into a
    /// host value, its payload and meta kept as text until read (the agent
    /// passes most payloads on as they are), by [`Stored::written`], or by
    /// [`Stored::canonical`] when a key is repeated. Any other readable
    /// line is read as a `TapeEntry` and built from it, so every answer has
    /// that shape.
    pub(super) fn parse(line: &[u8]) -> Result<Stored, String> {
        if let Ok(text) = std::str::from_utf8(line) {
            let shallow = || Value::from_json_shallow(text).ok().and_then(Stored::canonical);
            if let Some(stored) = Stored::written(text).or_else(shallow) {
                return Ok(stored);
            }
        }
        let entry: TapeEntry = serde_json::from_slice(line).map_err(|e| e.to_string())?;
        Stored::from_entry(&entry).map_err(|e| e.to_string())
    }

    /// A line with exactly the five keys, each of its type (in any order):
    /// scanned into its fields and built from them, with no map of keys
    /// built and searched on the way (about a third of a line's parse).
    pub(super) fn written(text: &str) -> Option<Stored> {
        Stored::compact(text).or_else(|| Stored::scanned(text))
    }

    /// [`Stored::written`] for a line as the store writes it (compact, the
    /// keys in their order): split and checked by a scan that costs a
    /// third of serde_json's (`Value::from_compact_fields`). Anything else
    /// is left to [`Stored::scanned`], which answers alike.
    pub(super) fn compact(text: &str) -> Option<Stored> {
        let mut id = None;
        let value = Value::from_compact_fields(&LINE_KEYS, text, |f| {
            let typed =
                f[1].starts_with('"') && f[2].starts_with('{') && f[3].starts_with('{') && f[4].starts_with('"');
            id = f[0].parse::<u64>().ok().filter(|_| typed);
            id.is_some()
        })?;
        Some(Stored { id: id?, value })
    }

    /// [`Stored::written`] through serde_json's scan.
    pub(super) fn scanned(text: &str) -> Option<Stored> {
        use serde_json::value::RawValue;
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Line<'a> {
            #[serde(borrow)]
            id: &'a RawValue,
            #[serde(borrow)]
            kind: &'a RawValue,
            #[serde(borrow)]
            payload: &'a RawValue,
            #[serde(borrow)]
            meta: &'a RawValue,
            #[serde(borrow)]
            date: &'a RawValue,
        }
        let l: Line<'_> = serde_json::from_str(text).ok()?;
        let starts = |raw: &RawValue, c: char| raw.get().starts_with(c);
        let typed = starts(l.kind, '"') && starts(l.payload, '{') && starts(l.meta, '{') && starts(l.date, '"');
        let id = l.id.get().parse::<u64>().ok().filter(|_| typed)?;
        let values = [l.id, l.kind, l.payload, l.meta, l.date];
        Some(Stored { id, value: Value::from_json_fields(&LINE_KEYS, &values).ok()? })
    }

    /// A line already parsed into a map with exactly the five keys, in the
    /// order the store writes them, each of its type: what is left for it
    /// after [`Stored::written`] is a line with a repeated key, read as
    /// Python's json reads it (the last one).
    pub(super) fn canonical(value: Value) -> Option<Stored> {
        let v = value.as_ref();
        if !v.is_object() || v.len() != LINE_KEYS.len() || !v.entries().map(|(k, _)| k).eq(LINE_KEYS) {
            return None;
        }
        let id = v.get("id")?.as_u64()?;
        let typed = v.get("kind")?.as_str().is_some()
            && v.get("payload")?.is_object()
            && v.get("meta")?.is_object()
            && v.get("date")?.as_str().is_some();
        typed.then(|| Stored { id, value: value.clone() })
    }

    pub(super) fn from_entry(entry: &TapeEntry) -> Result<Stored, bub_abi::HookError> {
        Ok(Stored { id: entry.id, value: Value::from_serialize(entry)? })
    }

    pub(super) fn entry(&self) -> Result<TapeEntry, BoxError> {
        Ok(self.value.deserialize()?)
    }
}

impl EntryView for Stored {
    fn id(&self) -> u64 {
        self.id
    }
    fn kind(&self) -> &str {
        self.value.as_ref().get("kind").and_then(|k| k.as_str()).unwrap_or_default()
    }
    fn anchor_name(&self) -> Option<&str> {
        self.value.as_ref().get("payload")?.get("name")?.as_str()
    }
    fn date(&self) -> &str {
        self.value.as_ref().get("date").and_then(|d| d.as_str()).unwrap_or_default()
    }
}

/// The keys of a line the store writes, in the order it writes them.
pub(super) const LINE_KEYS: [&str; 5] = ["id", "kind", "payload", "meta", "date"];

/// The lines of `text` (split at each newline, as `split` would), found
/// with a SIMD search rather than a byte-at-a-time loop.
pub(super) fn lines(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    memchr::memchr_iter(b'\n', text).map(Some).chain(std::iter::once(None)).map(move |end| {
        let end = end.unwrap_or(text.len());
        let line = &text[start..end];
        start = end + 1;
        line
    })
}

/// Parses one tape line into `out`; a blank line is nothing, an
/// unreadable one is skipped with a warning naming it: line `number` of
/// those from byte `base` on.
pub(super) fn parse_line(out: &mut Vec<Stored>, line: &[u8], (number, base): (usize, u64), path: &Path) {
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    match Stored::parse(line) {
        Ok(entry) => out.push(entry),
        Err(e) => {
            let line = match base {
                0 => format!("line {number}"),
                _ => format!("line {number} after byte {base}"),
            };
            tracing::warn!(target: "bub::tape", "skipping unreadable {line} of {} (a torn write?): {e}", path.display())
        }
    }
}
