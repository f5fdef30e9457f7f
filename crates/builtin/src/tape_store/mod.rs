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

mod parsed;
mod windows;

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

use parsed::{lines, parse_line, Parsed, Stored};
use tokio::sync::Mutex;
use windows::{first_whole_line, read_exact_from, tail_start, tail_windows, IdOnly, TAIL_WINDOW};

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

/// How many bytes before the parsed offset are compared on the next read.
const GUARD: u64 = 64;
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

    /// The same store keeping at most `bytes` of tape text parsed (a tape
    /// longer than that is not kept at all).
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

    /// Keeps a tape's parsed entries, within the bound; a tape longer
    /// than the whole bound is not kept. Keeping it (as the tape read last
    /// once was, whatever its length) made a session open for months hold
    /// its whole tape in memory: 10,000 turns grew the gateway by 100 MB.
    /// What the agent reads of a long tape each step is a read from an id,
    /// which parses only the lines after it.
    fn keep(&self, path: PathBuf, parsed: Parsed) {
        let bytes = parsed.offset;
        if bytes > self.cache_bytes {
            let stale = bub_abi::sync::lock(&self.parsed).remove(&path);
            drop((stale, parsed));
            return;
        }
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
mod tests;
