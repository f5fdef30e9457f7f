//! The builtin tape store: one append-only JSONL file per tape under
//! `$BUB_HOME/tapes`.
//!
//! Durability is the point: `append` returns only after the line is written
//! and `fsync`ed, so an entry the agent saw stored survives a crash. A crash
//! mid-write leaves at most a torn last line; reading skips it (with a
//! warning) and the next append starts on a fresh line, so a torn tail is
//! never fatal and never glues two entries together.
//!
//! Several processes write the same tapes (a gateway and `bub run`s): each
//! append takes an exclusive `flock` on the tape file, reads the last id
//! from the file's tail under it, and writes its line, so ids are unique
//! and increasing across processes and lines never interleave.
//!
//! Within a process each tape has its own lock, and the write and its sync
//! run on tokio's blocking pool: a gateway's sessions sync their tapes in
//! parallel instead of one after another on the runtime's workers.
//!
//! Reads are incremental: the agent reads its tape on every step, and
//! parsing the whole file each time made a session's cost grow with the
//! square of its length. A store remembers what it parsed of each tape (by
//! the file's identity, the offset parsed to and the bytes just before it)
//! and parses only the lines appended since; a file that was replaced,
//! truncated or rewritten under that offset is read again in full.

use std::{
    collections::HashMap,
    io::Write,
    path::{Path, PathBuf},
    sync::Arc,
};

use bub_abi::{
    resources::{Fut, TapeEntries, TapeStore},
    types::{TapeEntry, TapeQuery},
    BoxError, Value,
};
use bub_kit::lru::Lru;
use bub_kit::tape::EntryView;
use tokio::sync::Mutex;

/// Tapes as JSONL files in one folder.
#[derive(Clone)]
pub struct FileTapeStore {
    dir: PathBuf,
    // One lock per tape, serializing this process's appends and resets of
    // it (the file lock does it across processes; ids are read from the
    // file under it). Waiting here is asynchronous; on the flock it would
    // hold a thread.
    writing: Arc<std::sync::Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>>,
    // What was parsed of each tape read (see the module docs), weighed by
    // the bytes of tape text parsed: least recently read dropped first past
    // `PARSED_TAPES` tapes or `cache_bytes`.
    parsed: Arc<std::sync::Mutex<Lru<PathBuf, Parsed>>>,
    // Bytes of tape text kept parsed (see `with_cache_bytes`).
    cache_bytes: u64,
}

/// The entries parsed from a tape file, and how to tell that the file is
/// still the one they came from, with lines only added after `offset`.
struct Parsed {
    dev: u64,
    ino: u64,
    /// Bytes parsed: up to and including the last newline read.
    offset: u64,
    /// Where parsing started: 0 for a whole tape (the only kind kept),
    /// else the line after a read's `after_id` (see [`tail_start`]).
    base: u64,
    /// The bytes just before `offset` (at most [`GUARD`]).
    guard: Vec<u8>,
    /// Lines read so far (for the line numbers of warnings).
    lines: usize,
    entries: Vec<Stored>,
}

/// One entry read from a tape: the host value `fetch_all` hands out, and
/// what selecting it reads.
struct Stored {
    id: u64,
    // The kind is read from `value` (no copy of its own: an allocation
    // per line of a long tape's first read).
    value: Value,
}

impl Stored {
    /// From a line with the keys the store writes (`id`, `kind`,
    /// `payload`, `meta`, `date`, of those types): parsed straight into a
    /// host value, its payload and meta kept as text until read (the agent
    /// passes most payloads on as they are), by [`Stored::written`], or by
    /// [`Stored::canonical`] when a key is repeated. Any other readable
    /// line is read as a `TapeEntry` and built from it, so every answer has
    /// that shape.
    fn parse(line: &[u8]) -> Result<Stored, String> {
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
    fn written(text: &str) -> Option<Stored> {
        Stored::compact(text).or_else(|| Stored::scanned(text))
    }

    /// [`Stored::written`] for a line as the store writes it (compact, the
    /// keys in their order): split and checked by a scan that costs a
    /// third of serde_json's (`Value::from_compact_fields`). Anything else
    /// is left to [`Stored::scanned`], which answers alike.
    fn compact(text: &str) -> Option<Stored> {
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
    fn scanned(text: &str) -> Option<Stored> {
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
    fn canonical(value: Value) -> Option<Stored> {
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

    fn from_entry(entry: &TapeEntry) -> Result<Stored, bub_abi::HookError> {
        Ok(Stored { id: entry.id, value: Value::from_serialize(entry)? })
    }

    fn entry(&self) -> Result<TapeEntry, BoxError> {
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
const LINE_KEYS: [&str; 5] = ["id", "kind", "payload", "meta", "date"];

/// How many bytes before the parsed offset are compared on the next read.
const GUARD: u64 = 64;
/// How far from a tape's end the store looks for a line (see
/// [`tail_windows`]): a read from an id, when the tape is not kept parsed,
/// for the lines since the agent's last step or turn; an append for the
/// last id. Further back, parsing the whole tape (and keeping it) is as
/// cheap.
const TAIL_WINDOW: u64 = 64 * 1024;
/// The first window [`tail_windows`] reads, four times larger each time
/// the line is not in it, up to [`TAIL_WINDOW`]: the line sought is nearly
/// always among the last few (one turn's entries), and reading and
/// copying 64 KiB each time showed in the profiles of long sessions.
const TAIL_FIRST_WINDOW: u64 = 4 * 1024;
/// The first window a prefix read reads (see [`FileTapeStore::read_from`]),
/// four times larger each time its answer is not in it.
const PREFIX_FIRST_WINDOW: u64 = 16 * 1024;
/// From how many bytes to parse a read goes to the blocking pool.
const BLOCKING_READ: u64 = 64 * 1024;
/// How many tapes' parsed entries a store keeps (a gateway serves many
/// sessions; past this the least recently read are dropped).
const PARSED_TAPES: usize = 128;

/// How many bytes of tape text a store keeps parsed unless told otherwise
/// ([`FileTapeStore::with_cache_bytes`]; the builtin reads
/// `BUB_TAPE_CACHE_MB`). Parsed entries take about 4× their text (1,000
/// entries of 260 bytes took 1.09 MB), so without a byte bound 128 long
/// sessions could hold gigabytes. A tape dropped is parsed again in full
/// on its next read.
pub const DEFAULT_CACHE_BYTES: u64 = 16 << 20;

impl FileTapeStore {
    /// A store in `dir` (created on first append).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileTapeStore {
            dir: dir.into(),
            writing: Default::default(),
            parsed: Default::default(),
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }

    /// The same store keeping at most `bytes` of tape text parsed (the
    /// tape read last is kept whatever its length).
    pub fn with_cache_bytes(mut self, bytes: u64) -> Self {
        self.cache_bytes = bytes;
        self
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The lock of the tape at `path`.
    fn tape_lock(&self, path: &Path) -> Arc<Mutex<()>> {
        let mut locks = bub_abi::sync::lock(&self.writing);
        if locks.len() >= 256 {
            // Forget the locks nobody holds or waits for.
            locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        }
        locks.entry(path.to_owned()).or_default().clone()
    }

    /// Appends `entries` under the tape's locks, the write and sync on the
    /// blocking pool when a tokio runtime is current (inline otherwise).
    async fn append_entries<E: Appendable>(&self, path: PathBuf, mut entries: Vec<E>) -> Result<Vec<E>, BoxError> {
        let lock = self.tape_lock(&path);
        let _writing = lock.lock().await;
        let failed = |e: &dyn std::fmt::Display| format!("cannot append to tape {}: {e}", path.display());
        let this = self.clone();
        let write = {
            let path = path.clone();
            move || this.append_locked(&path, &mut entries).map(|()| entries)
        };
        let written = match tokio::runtime::Handle::try_current() {
            Ok(rt) => rt.spawn_blocking(write).await.map_err(|e| failed(&e))?,
            Err(_) => write(),
        };
        written.map_err(|e| failed(&e).into())
    }

    fn path(&self, tape: &str) -> Result<PathBuf, BoxError> {
        let valid = !tape.is_empty()
            && tape != "."
            && tape != ".."
            && !tape.contains(['/', '\\', '\0'])
            && !tape.starts_with('.');
        if !valid {
            return Err(format!("invalid tape name {tape:?}: use letters, digits, `_`, `-` and `.` (no `/`)").into());
        }
        Ok(self.dir.join(format!("{tape}.jsonl")))
    }

    /// Every readable entry of `tape`, in order; a torn or corrupt line is
    /// skipped with a warning. Parses only what was appended since the last
    /// read of the same file.
    pub fn read(&self, tape: &str) -> Result<Vec<TapeEntry>, BoxError> {
        whole(self.read_from(
            tape,
            None,
            None,
            false,
            |_| 0,
            |_| true,
            usize::MAX,
            |entries| entries.iter().map(|e| e.entry()).collect(),
        ))?
    }

    /// What `query` selects, as host values when it can be selected by the
    /// fields kept beside them (any query but a text search).
    ///
    /// Only the entries it can select are looked at: those after its
    /// `after_id` and its anchor (the anchor itself kept, so that selection
    /// still finds it), of its kinds. The agent reads what was appended
    /// since its last step, or what follows the last anchor, so a step
    /// costs the same on a long tape as on a short one.
    fn select(&self, query: &TapeQuery) -> Result<TapeEntries, BoxError> {
        whole(self.select_within(query, None))
    }

    /// [`select`](Self::select), parsing at most `budget` bytes of the
    /// tape: `None` when it would take more (nothing is lost: what was
    /// kept stays kept). A runtime worker reads within a budget, and only
    /// what exceeds it goes to the blocking pool: deciding by the bytes
    /// not yet parsed sent every read from an id of a long tape not kept
    /// there, although it parses a few lines, and the handoff cost more
    /// than the read.
    fn select_within(&self, query: &TapeQuery, budget: Option<u64>) -> Result<Option<TapeEntries>, BoxError> {
        let after_anchor = query.last_anchor || query.after_anchor.is_some();
        let by_anchor = after_anchor || query.between_anchors.is_some();
        let start = |parsed: &[Stored]| {
            let after = query.after_id.map_or(0, |a| parsed.iter().rposition(|e| e.id <= a).map_or(0, |i| i + 1));
            // Only a query that starts after an anchor looks for one: any
            // other (the agent's "is there an anchor yet?") would walk the
            // whole tape for nothing, every turn.
            let anchor = if after_anchor {
                parsed[after..].iter().rposition(|e| bub_kit::tape::starts_after(e, query))
            } else {
                None
            };
            after + anchor.unwrap_or(0)
        };
        // Anchors stay when selection looks for them.
        let keep = |e: &Stored| {
            query.kinds.is_empty() || (by_anchor && e.kind() == "anchor") || query.kinds.iter().any(|k| k == e.kind())
        };
        // Without anchors, dates or a text search to select by, the answer
        // is the first `limit` candidates: the rest are never looked at
        // (`limit: 1` answers from the tape's first entries, however long).
        let plain = !by_anchor && query.between_dates.is_none() && query.query.is_none();
        let take = query.limit.filter(|_| plain).unwrap_or(usize::MAX);
        // Such an answer from the tape's start needs only the lines up to
        // its last entry parsed.
        let prefix = plain && query.after_id.is_none() && take != usize::MAX;
        self.read_from(&query.tape, query.after_id, budget, prefix, start, keep, take, |candidates| {
            match bub_kit::tape::select_positions(&candidates, query)? {
                Some(positions) => {
                    Ok(TapeEntries::Values(positions.into_iter().map(|i| candidates[i].value.clone()).collect()))
                }
                None => {
                    let entries = candidates.iter().map(|e| e.entry()).collect::<Result<Vec<_>, _>>()?;
                    Ok(TapeEntries::Entries(bub_kit::tape::try_select(entries, query)?))
                }
            }
        })?
        .transpose()
    }

    /// `finish` of the readable entries `keep` keeps, from the index
    /// `start` picks in what was parsed (plus a torn last line that happens
    /// to parse): it borrows them, nothing is copied.
    ///
    /// A tape not kept parsed is parsed whole and kept, unless the read is
    /// from an id (`after_id`: what the agent asks for between steps and
    /// turns, its context already folded): then only the lines after the
    /// last one with that id or less are parsed, and nothing is kept. A
    /// gateway whose long sessions outgrow the cache would otherwise parse
    /// a whole tape for every message, to answer with its last few lines.
    /// With `prefix` (the answer is the first `take` entries `keep` keeps,
    /// from the tape's start), lines are read in growing windows and parsed
    /// only until there are that many: the agent's "is there an anchor
    /// yet?" is answered by a long tape's first line, and what was parsed
    /// is kept and continued later.
    /// With a `budget`, a read that would parse more bytes than that
    /// answers `None` instead, leaving what is kept as it was.
    #[allow(clippy::too_many_arguments)]
    fn read_from<R>(
        &self,
        tape: &str,
        after_id: Option<u64>,
        budget: Option<u64>,
        prefix: bool,
        start: impl FnOnce(&[Stored]) -> usize,
        keep: impl Fn(&Stored) -> bool,
        take: usize,
        finish: impl FnOnce(Vec<&Stored>) -> R,
    ) -> Result<Option<R>, BoxError> {
        use std::os::unix::fs::{FileExt, MetadataExt};
        let path = self.path(tape)?;
        let failed = |e: &dyn std::fmt::Display| format!("cannot read tape {}: {e}", path.display());
        let file = match bub_kit::files::open_nofollow(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                bub_abi::sync::lock(&self.parsed).remove(&path);
                return Ok(Some(finish(Vec::new())));
            }
            Err(e) => return Err(failed(&e).into()),
        };
        let meta = file.metadata().map_err(|e| failed(&e))?;
        let (dev, ino, len) = (meta.dev(), meta.ino(), meta.len());
        let cached = bub_abi::sync::lock(&self.parsed).remove(&path);
        // Still the file parsed before, grown or not: its bytes before the
        // parsed offset are the ones seen then.
        let still = |p: &Parsed| {
            if p.dev != dev || p.ino != ino || p.offset > len {
                return false;
            }
            let mut seen = vec![0; p.guard.len()];
            file.read_exact_at(&mut seen, p.offset - p.guard.len() as u64).is_ok() && seen == p.guard
        };
        let cached = cached.filter(|p| still(p));
        // A read from an id with more than a window of the tape left to
        // parse: the lines after that id alone, what is kept left as it is.
        let unparsed = len - cached.as_ref().map_or(0, |p| p.offset);
        let base = match after_id {
            Some(id) if unparsed > TAIL_WINDOW => tail_start(&file, len, id).map_err(|e| failed(&e))?,
            _ => 0,
        };
        let fresh = |base| Parsed { dev, ino, offset: base, base, guard: Vec::new(), lines: 0, entries: Vec::new() };
        let mut parsed = match cached {
            Some(kept) if base > 0 => {
                self.keep(path.clone(), kept);
                fresh(base)
            }
            Some(kept) => kept,
            None => fresh(base),
        };
        let mut torn = Vec::new();
        // Entries `keep` keeps among those parsed, when `prefix` counts them.
        let mut found = if prefix { parsed.entries.iter().filter(|e| keep(e)).take(take).count() } else { 0 };
        let mut answered = prefix && found >= take;
        if budget.is_some_and(|b| len - parsed.offset > b) && !answered {
            // Put back as it was taken out (a tail read's was kept again
            // above; a tape never read has nothing to put back).
            if parsed.base == 0 && parsed.offset > 0 {
                self.keep(path, parsed);
            }
            return Ok(None);
        }
        if len > parsed.offset && !answered {
            // A prefix read reads in growing windows, its answer being
            // nearly always in the tape's first lines: reading the whole
            // rest first held a 100 MB tape in memory to find line 1.
            // Any other read parses the rest, so reads it at once.
            let mut window = if prefix { PREFIX_FIRST_WINDOW } else { u64::MAX };
            loop {
                let end = len.min(parsed.offset.saturating_add(window));
                let tail = read_exact_from(&file, parsed.offset, end - parsed.offset).map_err(|e| failed(&e))?;
                // Complete lines are consumed; a torn last line (no newline
                // yet) is read, but again next time too, when an append may
                // have completed it.
                let complete = memchr::memrchr(b'\n', &tail).map_or(0, |i| i + 1);
                let mut consumed = 0;
                if complete > 0 {
                    for line in lines(&tail[..complete - 1]) {
                        consumed += line.len() + 1;
                        parsed.lines += 1;
                        let before = parsed.entries.len();
                        parse_line(&mut parsed.entries, line, (parsed.lines, parsed.base), &path);
                        if prefix && parsed.entries.get(before).is_some_and(&keep) {
                            found += 1;
                            if found >= take {
                                answered = true;
                                break;
                            }
                        }
                    }
                    let mut guard = std::mem::take(&mut parsed.guard);
                    guard.extend_from_slice(&tail[consumed.saturating_sub(GUARD as usize)..consumed]);
                    parsed.guard = guard.split_off(guard.len().saturating_sub(GUARD as usize));
                    parsed.offset += consumed as u64;
                }
                if end == len {
                    if consumed == complete {
                        parse_line(&mut torn, &tail[complete..], (parsed.lines + 1, parsed.base), &path);
                    }
                    break;
                }
                if answered {
                    break;
                }
                // Not there yet, or a line longer than the window.
                window = window.saturating_mul(4);
            }
        }
        let from = start(&parsed.entries).min(parsed.entries.len());
        // Filtered before they are looked at: a query for events or anchors
        // sees those alone.
        let out = finish(parsed.entries[from..].iter().filter(|e| keep(e)).chain(&torn).take(take).collect());
        if parsed.base == 0 {
            self.keep(path, parsed);
        }
        Ok(Some(out))
    }

    fn keep(&self, path: PathBuf, parsed: Parsed) {
        let bytes = parsed.offset;
        Lru::keep_in(&self.parsed, path, parsed, bytes, PARSED_TAPES, self.cache_bytes);
    }

    /// Appends `entries` under the tape file's exclusive lock, with one
    /// sync: ids follow the file's last id, read under that lock.
    fn append_locked<E: Appendable>(&self, path: &Path, entries: &mut [E]) -> Result<(), BoxError> {
        // Conversations are secrets: tapes are owner-only (0700 / 0600).
        bub_kit::files::create_private_dir(&self.dir)?;
        let mut file = bub_kit::files::open_private_append(path)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
        let len = file.metadata()?.len();
        // The last line holding an id (a torn last one included), from the
        // tail's windows, then the whole tape only when those hold none.
        let last_id = |bytes: &[u8]| {
            bytes.split(|b| *b == b'\n').rev().find_map(|l| serde_json::from_slice::<IdOnly>(l).ok()).map(|e| e.id)
        };
        let mut tail = Vec::new();
        let mut last = None;
        for window in tail_windows(&file, len) {
            let from;
            (from, tail) = window?;
            last = last_id(&tail[first_whole_line(&tail, from)..]);
            if last.is_some() {
                break;
            }
        }
        let last = match last {
            Some(id) => id,
            None if len > TAIL_WINDOW => self.read(&path_tape(path))?.iter().map(|e| e.id).max().unwrap_or(0),
            None => 0,
        };
        // Written through a 1 MiB buffer, not built whole first (a run with
        // a 60 MB prompt made a 240 MB buffer): the lock keeps other
        // writers out meanwhile, and a crash mid-write leaves a torn last
        // line, which readers skip and the next append starts after.
        let mut out = std::io::BufWriter::with_capacity(1 << 20, &mut file);
        // A torn last line (no newline) must not swallow this entry.
        if tail.last().is_some_and(|b| *b != b'\n') {
            out.write_all(b"\n")?;
        }
        for (i, entry) in entries.iter_mut().enumerate() {
            entry.set_id(last + 1 + i as u64)?;
            serde_json::to_writer(&mut out, &*entry)?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
        drop(out);
        file.sync_data()?;
        Ok(())
    }
}

/// The answer of a read without a budget, which is never put off.
fn whole<R>(read: Result<Option<R>, BoxError>) -> Result<R, BoxError> {
    read?.ok_or_else(|| "a tape read without a budget was put off (a bug in the tape store)".into())
}

/// An entry the store writes: a `TapeEntry`, or a host value in its
/// shape (what the host sends; written and answered back uncopied).
trait Appendable: serde::Serialize + Send + 'static {
    /// Gives the entry the id the store assigned.
    fn set_id(&mut self, id: u64) -> Result<(), BoxError>;
}

impl Appendable for TapeEntry {
    fn set_id(&mut self, id: u64) -> Result<(), BoxError> {
        self.id = id;
        Ok(())
    }
}

impl Appendable for Value {
    fn set_id(&mut self, id: u64) -> Result<(), BoxError> {
        *self = self.as_ref().with("id", id);
        Ok(())
    }
}

/// `entry` in `TapeEntry`'s shape (`id, kind, payload, meta, date`, in
/// that order; a missing date is `now`), sharing its parts: a value that
/// is not an entry is refused as reading it into a `TapeEntry` refuses it.
fn entry_value(entry: &Value, now: &str) -> Result<Value, BoxError> {
    let v = entry.as_ref();
    let part = |key: &str| v.get(key).filter(|p| !p.is_null());
    let canonical = v.is_object()
        && part("id").is_none_or(|id| id.as_u64().is_some())
        && part("kind").is_some_and(|k| k.as_str().is_some())
        && part("payload").is_none_or(|p| p.is_object())
        && part("meta").is_none_or(|m| m.is_object())
        && part("date").is_none_or(|d| d.as_str().is_some());
    if !canonical {
        // The same error a `TapeEntry` argument would have given.
        let entry: TapeEntry = entry.deserialize()?;
        return Ok(Value::from_serialize(&entry)?);
    }
    let mut out = Value::object();
    out.insert("id", part("id").and_then(|id| id.as_u64()).unwrap_or(0));
    if let Some(kind) = part("kind") {
        out.insert_ref("kind", kind);
    }
    for key in ["payload", "meta"] {
        match part(key) {
            Some(p) => out.insert_ref(key, p),
            None => out.insert(key, Value::object()),
        };
    }
    match part("date").filter(|d| d.as_str() != Some("")) {
        Some(date) => out.insert_ref("date", date),
        None => out.insert("date", now),
    };
    Ok(out)
}

/// `len` bytes of `file` from `offset`, read into a buffer that is not
/// zeroed first (a long tape's first read wrote its whole length of
/// zeroes, then the file over them).
fn read_exact_from(file: &std::fs::File, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek};
    let mut file = file;
    file.seek(std::io::SeekFrom::Start(offset))?;
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(len).read_to_end(&mut bytes)?;
    #[cfg(test)]
    tests::READ.with(|read| read.set(read.get() + bytes.len() as u64));
    if (bytes.len() as u64) < len {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the file got shorter while it was read"));
    }
    Ok(bytes)
}

/// The lines of `text` (split at each newline, as `split` would), found
/// with a SIMD search rather than a byte-at-a-time loop.
fn lines(text: &[u8]) -> impl Iterator<Item = &[u8]> {
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
fn parse_line(out: &mut Vec<Stored>, line: &[u8], (number, base): (usize, u64), path: &Path) {
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

/// Where the first whole line of `window` (a file's bytes from offset
/// `from` on) starts: a window that does not start the file may begin
/// inside a line, so only what follows its first newline counts (nothing,
/// when it holds none).
fn first_whole_line(window: &[u8], from: u64) -> usize {
    match from {
        0 => 0,
        _ => memchr::memchr(b'\n', window).map_or(window.len(), |i| i + 1),
    }
}

/// Where the lines after `after_id` start in `file` (of `len` bytes): just
/// past the last complete line that reads as an entry with that id or
/// less, found from the end within the last [`TAIL_WINDOW`] bytes; 0 (a
/// whole read) when none does there. A whole read starts its answer at the
/// same place (`select` starts after the last entry with such an id), so
/// both answer the same entries, whatever the ids' order.
fn tail_start(file: &std::fs::File, len: u64, after_id: u64) -> std::io::Result<u64> {
    for window in tail_windows(file, len) {
        let (from, bytes) = window?;
        // Complete lines only.
        let complete = memchr::memrchr(b'\n', &bytes).map_or(0, |i| i + 1);
        let first = first_whole_line(&bytes, from);
        let mut end = complete;
        while end > first {
            let start = memchr::memrchr(b'\n', &bytes[first..end - 1]).map_or(first, |i| first + i + 1);
            if Stored::parse(&bytes[start..end - 1]).is_ok_and(|e| e.id <= after_id) {
                return Ok(from + end as u64);
            }
            end = start;
        }
    }
    Ok(0)
}

/// The bytes of a file of `len` bytes from offset `from` to its end, for
/// growing windows: its last [`TAIL_FIRST_WINDOW`] bytes, four times as
/// many each time up to [`TAIL_WINDOW`], none after one that starts the
/// file. A reader looking for the last line that matches, from the end,
/// stops at the first window holding one: a smaller window holds the same
/// whole lines as the end of a larger one, in the same order, so it finds
/// what reading the largest at once would.
fn tail_windows(file: &std::fs::File, len: u64) -> impl Iterator<Item = std::io::Result<(u64, Vec<u8>)>> + '_ {
    let mut next = Some(TAIL_FIRST_WINDOW.min(TAIL_WINDOW));
    std::iter::from_fn(move || {
        let window = next?;
        let from = len.saturating_sub(window);
        next = (from > 0 && window < TAIL_WINDOW).then(|| (window * 4).min(TAIL_WINDOW));
        Some(read_exact_from(file, from, len - from).map(|bytes| (from, bytes)))
    })
}

#[derive(serde::Deserialize)]
struct IdOnly {
    id: u64,
}

/// The tape name of `<dir>/<tape>.jsonl`.
fn path_tape(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().trim_end_matches(".jsonl").to_owned()).unwrap_or_default()
}

impl TapeStore for FileTapeStore {
    fn list_tapes(&self) -> impl Fut<Vec<String>> {
        let dir = self.dir.clone();
        async move {
            let mut names = Vec::new();
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(names),
                Err(e) => return Err(format!("cannot list tapes in {}: {e}", dir.display()).into()),
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if let Some(tape) = name.strip_suffix(".jsonl") {
                    names.push(tape.to_owned());
                }
            }
            names.sort();
            Ok(names)
        }
    }

    fn reset(&self, tape: String) -> impl Fut<()> {
        let this = self.clone();
        async move {
            let path = this.path(&tape)?;
            let lock = this.tape_lock(&path);
            let _writing = lock.lock().await;
            bub_abi::sync::lock(&this.parsed).remove(&path);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("cannot reset tape {}: {e}", path.display()).into()),
            }
            Ok(())
        }
    }

    fn fetch_all(&self, query: TapeQuery) -> impl Fut<Vec<TapeEntry>> {
        let answer = self.fetch_all_answer(query);
        async move {
            match answer.await? {
                TapeEntries::Entries(entries) => Ok(entries),
                TapeEntries::Values(values) => Ok(values.iter().map(Value::deserialize).collect::<Result<_, _>>()?),
            }
        }
    }

    fn fetch_all_answer(&self, query: TapeQuery) -> impl Fut<TapeEntries> {
        let this = self.clone();
        async move {
            // A long stretch to parse (a tape's first read, a big append by
            // another process) is parsed on the blocking pool, not on a
            // runtime worker that other sessions' turns are waiting for;
            // what takes less is read where it is asked for.
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => match this.select_within(&query, Some(BLOCKING_READ))? {
                    Some(answer) => Ok(answer),
                    None => rt
                        .spawn_blocking(move || this.select(&query))
                        .await
                        .map_err(|e| format!("reading a tape: {e}"))?,
                },
                Err(_) => this.select(&query),
            }
        }
    }

    fn append(&self, tape: String, entry: TapeEntry) -> impl Fut<TapeEntry> {
        let this = self.clone();
        async move {
            let mut stored = this.append_many(tape, vec![entry]).await?;
            stored.pop().ok_or_else(|| "the entry was not stored".into())
        }
    }

    /// One write and one sync for the lot (a merged run), under the lock.
    fn append_many(&self, tape: String, mut entries: Vec<TapeEntry>) -> impl Fut<Vec<TapeEntry>> {
        let this = self.clone();
        async move {
            let path = this.path(&tape)?;
            if entries.is_empty() {
                return Ok(entries);
            }
            let now = bub_kit::tape::now();
            for e in entries.iter_mut().filter(|e| e.date.is_empty()) {
                e.date = now.clone();
            }
            this.append_entries(path, entries).await
        }
    }

    /// As `append_many`, on the host's values as they came: each is put
    /// into `TapeEntry`'s shape by sharing its parts, written, and answered
    /// back with its id, never read into a `TapeEntry` (a run with a 60 MB
    /// prompt held it twice more that way).
    fn append_many_values(&self, tape: String, entries: Vec<Value>) -> impl Fut<TapeEntries> {
        let this = self.clone();
        async move {
            let path = this.path(&tape)?;
            if entries.is_empty() {
                return Ok(TapeEntries::Values(entries));
            }
            let now = bub_kit::tape::now();
            let entries = entries.iter().map(|e| entry_value(e, &now)).collect::<Result<Vec<_>, _>>()?;
            Ok(TapeEntries::Values(this.append_entries(path, entries).await?))
        }
    }
}

#[cfg(test)]
mod tests {
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
        let written = r#"{"id":3,"kind":"message","payload":{"role":"user","content":"é \u00e9"},"meta":{"run_id":"r"},"date":"d"}"#;
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
                (
                    s.id,
                    s.value.to_json(),
                    s.value.as_ref().get("payload").and_then(|p| p.lazy_json().map(str::to_owned)),
                )
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
            let mut variants: Vec<String> =
                (0..=line.len()).filter_map(|end| line.get(..end).map(str::to_owned)).collect();
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
    /// by bytes of tape text, the least recently read dropped first, and
    /// the tape just read is kept however long it is.
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
        // A tape longer than the bound alone stays.
        store.keep("f".into(), parsed(500));
        assert_eq!(names(&store), ["f"]);
        assert_eq!(bytes(&store), 500);
        // Kept again under the same name: counted once.
        store.keep("f".into(), parsed(40));
        assert_eq!(bytes(&store), 40);
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
        let offset =
            |s: &FileTapeStore| bub_abi::sync::lock(&s.parsed).get(&dir.path().join("t.jsonl")).map(|p| p.offset);
        let whole = FileTapeStore::new(dir.path());
        whole.read("t").unwrap();
        let store = FileTapeStore::new(dir.path());
        let torn = text.len() - 30;
        for (limit, parsed_to) in [(1, text.find("{\"id\":701,").unwrap()), (2, torn), (9, torn)] {
            let q: TapeQuery =
                serde_json::from_value(serde_json::json!({"tape": "t", "kinds": ["anchor"], "limit": limit})).unwrap();
            assert_eq!(answered(store.select(&q).unwrap()), answered(whole.select(&q).unwrap()), "{q:?}");
            let parsed_to = parsed_to as u64;
            assert_eq!(
                offset(&store),
                Some(parsed_to),
                "limit {limit}: parsed to the line after the last one answered"
            );
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
            format!(
                "{{\"id\":{id},\"kind\":\"anchor\",\"payload\":{{\"name\":\"a{id}\"}},\"meta\":{{}},\"date\":\"d\"}}\n"
            )
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
}
