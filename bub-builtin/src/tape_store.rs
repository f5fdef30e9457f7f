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

use std::{
    collections::HashMap,
    io::{BufRead, Write},
    path::{Path, PathBuf},
    sync::Arc,
};

use bub_abi::{
    resources::{Fut, TapeStore},
    types::{TapeEntry, TapeQuery},
    BoxError,
};
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
}

impl FileTapeStore {
    /// A store in `dir` (created on first append).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileTapeStore { dir: dir.into(), writing: Default::default() }
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
    async fn append_entries(&self, path: PathBuf, mut entries: Vec<TapeEntry>) -> Result<Vec<TapeEntry>, BoxError> {
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
    /// skipped with a warning.
    pub fn read(&self, tape: &str) -> Result<Vec<TapeEntry>, BoxError> {
        let path = self.path(tape)?;
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(format!("cannot read tape {}: {e}", path.display()).into()),
        };
        let mut out = Vec::new();
        for (n, line) in std::io::BufReader::new(file).split(b'\n').enumerate() {
            let line = line.map_err(|e| format!("cannot read tape {}: {e}", path.display()))?;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<TapeEntry>(&line) {
                Ok(entry) => out.push(entry),
                Err(e) => tracing::warn!(
                    target: "bub::tape",
                    "skipping unreadable line {} of {} (a torn write?): {e}",
                    n + 1,
                    path.display()
                ),
            }
        }
        Ok(out)
    }

    /// Appends `entries` under the tape file's exclusive lock, in one write
    /// and one sync: ids follow the file's last id, read under that lock.
    fn append_locked(&self, path: &Path, entries: &mut [TapeEntry]) -> Result<(), BoxError> {
        use std::io::{Read, Seek, SeekFrom};
        // Conversations are secrets: tapes are owner-only (0700 / 0600).
        bub_abi::files::create_private_dir(&self.dir)?;
        let mut file = bub_abi::files::open_private_append(path)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
        let len = file.metadata()?.len();
        // The last complete line holding an id, from the tail (a whole read
        // only when the tail holds none).
        let tail_start = len.saturating_sub(64 * 1024);
        file.seek(SeekFrom::Start(tail_start))?;
        let mut tail = Vec::new();
        file.read_to_end(&mut tail)?;
        let last_id = |bytes: &[u8]| {
            bytes.split(|b| *b == b'\n').rev().find_map(|l| serde_json::from_slice::<IdOnly>(l).ok()).map(|e| e.id)
        };
        let last = match last_id(&tail) {
            Some(id) => id,
            None if tail_start > 0 => self.read(&path_tape(path))?.iter().map(|e| e.id).max().unwrap_or(0),
            None => 0,
        };
        let mut buf = Vec::new();
        // A torn last line (no newline) must not swallow this entry.
        if tail.last().is_some_and(|b| *b != b'\n') {
            buf.push(b'\n');
        }
        for (i, entry) in entries.iter_mut().enumerate() {
            entry.id = last + 1 + i as u64;
            serde_json::to_writer(&mut buf, &*entry)?;
            buf.push(b'\n');
        }
        file.write_all(&buf)?;
        file.sync_data()?;
        Ok(())
    }
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
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("cannot reset tape {}: {e}", path.display()).into()),
            }
            Ok(())
        }
    }

    fn fetch_all(&self, query: TapeQuery) -> impl Fut<Vec<TapeEntry>> {
        let this = self.clone();
        async move { Ok(bub_abi::tape::try_select(this.read(&query.tape)?, &query)?) }
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
            let now = bub_abi::tape::now();
            for e in entries.iter_mut().filter(|e| e.date.is_empty()) {
                e.date = now.clone();
            }
            this.append_entries(path, entries).await
        }
    }
}
