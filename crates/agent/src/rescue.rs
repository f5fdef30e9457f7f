//! Entries a tape store would not take, kept on disk until it does.
//!
//! A run's entries reach the store when it ends, after its answer has
//! gone out. A store that fails then (out of descriptors under a flood,
//! a database gone for longer than the retries) would make the turn's
//! conversation vanish though the user saw the reply. So the run's
//! entries are written to `<dir>/<tape>.<stamp>.jsonl` (owner-only), and
//! the next run on that tape hands them to the store before it reads the
//! tape: the conversation is whole again, in order, and nothing runs
//! twice. A rescued file that the store still refuses stays for the next
//! run.

use std::path::{Path, PathBuf};

use bub_abi::types::TapeEntry;

use super::{tape::Store, AgentError};

/// Waits between a failing store's tries before the entries are rescued
/// (about 11 s in all: long enough for a flood's connections to be cut
/// and descriptors to come back).
pub const STORE_RETRIES: [std::time::Duration; 4] = [
    std::time::Duration::from_millis(250),
    std::time::Duration::from_secs(1),
    std::time::Duration::from_secs(3),
    std::time::Duration::from_secs(7),
];

/// A folder of rescued entries.
#[derive(Debug, Clone)]
pub struct Rescue {
    dir: PathBuf,
}

/// `tape` as a file name: unreserved characters kept, the rest `%XX`.
fn file_stem(tape: &str) -> String {
    let mut out = String::with_capacity(tape.len());
    for b in tape.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Rescue {
    /// Rescued entries under `dir` (`$BUB_HOME/rescued`).
    pub fn new(dir: impl Into<PathBuf>) -> Rescue {
        Rescue { dir: dir.into() }
    }

    /// Where they are kept.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `entries` of `tape` to a new file; its path.
    pub fn keep(&self, tape: &str, entries: &[TapeEntry]) -> std::io::Result<PathBuf> {
        let mut text = String::new();
        for e in entries {
            text.push_str(&serde_json::to_string(e).map_err(std::io::Error::other)?);
            text.push('\n');
        }
        let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%S%6fZ");
        let path = self.dir.join(format!("{}.{stamp}-{:08x}.jsonl", file_stem(tape), bub_kit::random::u64() as u32));
        bub_kit::files::create_private_dir(&self.dir)?;
        bub_kit::files::write_private(&path, text.as_bytes())?;
        Ok(path)
    }

    /// The rescued files of `tape`, oldest first.
    fn files_of(&self, tape: &str) -> Vec<PathBuf> {
        let prefix = format!("{}.", file_stem(tape));
        let Ok(dir) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut files: Vec<PathBuf> = dir
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".jsonl"))
            })
            .collect();
        files.sort();
        files
    }

    /// Hands `tape`'s rescued entries (and its sidecars': `sidecars` are
    /// their tapes) to `store`, oldest first, each file removed once
    /// stored; how many entries went. A file the store still refuses
    /// stays, and the ones after it wait with it (order is kept).
    pub async fn restore(&self, store: &Store, tapes: &[String]) -> Result<usize, AgentError> {
        // One look at the folder on the common path: it does not exist.
        if !self.dir.is_dir() {
            return Ok(0);
        }
        let mut restored = 0;
        for tape in tapes {
            for path in self.files_of(tape) {
                let text = bub_kit::files::read_trusted(&path, 1 << 30)
                    .map_err(|e| AgentError::store(format!("reading rescued entries {}: {e}", path.display())))?;
                let entries: Vec<TapeEntry> = String::from_utf8_lossy(&text)
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .collect();
                let n = entries.len();
                store.append_many_counted(tape, entries, &[]).await.map_err(|(e, _)| e)?;
                if let Err(e) = std::fs::remove_file(&path) {
                    tracing::error!(
                        target: "bub::tape",
                        "rescued entries of tape {tape} are on the store again, but {} could not be removed: {e}; \
                         remove it, or they are stored twice",
                        path.display()
                    );
                }
                tracing::warn!(target: "bub::tape", "{n} rescued entries of tape {tape} are on the store again ({})", path.display());
                restored += n;
            }
        }
        Ok(restored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map};

    #[tokio::test]
    async fn rescued_entries_go_back_in_order_once() {
        let dir = tempfile::tempdir().unwrap();
        let rescue = Rescue::new(dir.path().join("rescued"));
        let say = |t: &str| super::super::tape::entry("message", json!({"content": t}), Map::new());
        rescue.keep("w__a", &[say("one"), say("two")]).unwrap();
        rescue.keep("w__a", &[say("three")]).unwrap();
        rescue.keep("w__a/odd", &[say("elsewhere")]).unwrap();
        let store = Store::memory();
        assert_eq!(rescue.restore(&store, &["w__a".into()]).await.unwrap(), 3);
        let all =
            store.fetch_all(&bub_abi::types::TapeQuery { tape: "w__a".into(), ..Default::default() }).await.unwrap();
        let texts: Vec<&str> = all.iter().map(|e| e.payload["content"].as_str().unwrap()).collect();
        assert_eq!(texts, ["one", "two", "three"]);
        assert_eq!(rescue.restore(&store, &["w__a".into()]).await.unwrap(), 0, "once");
        assert_eq!(rescue.restore(&store, &["w__a/odd".into()]).await.unwrap(), 1, "a name that is no file name");
    }
}
