//! The gateway's journal of accepted messages: nothing a channel handed
//! over is lost, even when the gateway is killed (`kill -9`, `docker stop`
//! after its 10 s, a third signal, an abort in a plugin).
//!
//! Each gateway writes `$BUB_HOME/gateway/journal-<pid>.jsonl`, holding an
//! exclusive `flock` on it while it runs: one line per accepted message
//! (`{"a": id, "m": message}`) and one per message whose fate is settled
//! (`{"d": [ids]}`: its turn ran, it was dropped, ignored or steered). The
//! lines are written without `fsync`: the page cache outlives a killed
//! process, and a power cut is what the tape's own sync covers. A clean
//! stop saves what did not run to `unprocessed.jsonl` and removes the
//! journal. At start, a journal whose lock can be taken belongs to a
//! gateway that died: its accepted-but-unsettled messages go to
//! `unprocessed.jsonl` (with a warning) and the journal goes.

use std::{
    collections::BTreeMap,
    io::Write,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
};

use bub_abi::types::Envelope;
use serde_json::{json, Value};

/// One gateway's journal.
pub(crate) struct Journal {
    path: PathBuf,
    file: Mutex<std::fs::File>,
    next: AtomicU64,
}

impl Journal {
    /// Opens this process's journal under `<home>/gateway`, after saving
    /// what dead gateways' journals left to `unprocessed.jsonl`.
    pub fn open(home: &Path) -> std::io::Result<Journal> {
        let dir = home.join("gateway");
        bub_kit::files::create_private_dir(&dir)?;
        recover(&dir, home);
        let path = dir.join(format!("journal-{}.jsonl", std::process::id()));
        let file = bub_kit::files::create_private(&path)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)?;
        Ok(Journal { path, file: Mutex::new(file), next: AtomicU64::new(1) })
    }

    fn write(&self, line: &Value) {
        let mut text = line.to_string();
        text.push('\n');
        let mut file = bub_abi::sync::lock(&self.file);
        if let Err(e) = file.write_all(text.as_bytes()) {
            tracing::warn!(target: "bub::gateway", "cannot write the journal {}: {e}", self.path.display());
        }
    }

    /// Records an accepted message; its journal id.
    pub fn accepted(&self, message: &Envelope) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.write(&json!({"a": id, "m": message}));
        id
    }

    /// Records that the messages `ids` need nothing more.
    pub fn settled(&self, ids: &[u64]) {
        if !ids.is_empty() {
            self.write(&json!({ "d": ids }));
        }
    }

    /// A clean stop: what did not run is saved elsewhere; the journal goes.
    pub fn close(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The messages of `text` (a journal) accepted and never settled, in order.
fn unsettled(text: &str) -> Vec<Envelope> {
    let mut open = BTreeMap::new();
    for line in text.lines() {
        let Ok(value) = serde_json::from_str::<Value>(line) else { continue };
        if let (Some(id), Some(message)) = (value.get("a").and_then(Value::as_u64), value.get("m")) {
            open.insert(id, message.clone());
        } else if let Some(ids) = value.get("d").and_then(Value::as_array) {
            for id in ids.iter().filter_map(Value::as_u64) {
                open.remove(&id);
            }
        }
    }
    open.into_values().collect()
}

/// The process ids of the gateways of `home` that run now: those holding
/// their journal's lock (`bub gateway --status`).
pub fn running_gateways(home: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(home.join("gateway")) else { return Vec::new() };
    let mut pids: Vec<u32> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix("journal-")?.strip_suffix(".jsonl")?.parse().ok()?;
            let file = std::fs::File::open(entry.path()).ok()?;
            // A lock we can take is no live gateway's (we let it go at once).
            let free = rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared).is_ok();
            (!free).then_some(pid)
        })
        .collect();
    pids.sort();
    pids
}

/// Saves what dead gateways' journals in `dir` left, and removes them.
fn recover(dir: &Path, home: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("journal-") && name.ends_with(".jsonl")) {
            continue;
        }
        let path = entry.path();
        let Ok(file) = std::fs::File::open(&path) else { continue };
        // Held: a live gateway's. Taken: its gateway is gone.
        if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            continue;
        }
        let text = match bub_kit::files::read_trusted(&path, 1 << 30) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => {
                tracing::warn!(target: "bub::gateway", "cannot recover {}: {e}", path.display());
                continue;
            }
        };
        let lost = unsettled(&text);
        if !lost.is_empty() {
            let count = lost.len();
            match super::save_unprocessed(home, lost) {
                Some(saved) => tracing::warn!(
                    target: "bub::gateway",
                    "a gateway that stopped without finishing ({name}) had accepted {count} message(s) that did not \
                     get their turn; saved in {}",
                    saved.display()
                ),
                // Kept: the next start tries again.
                None => continue,
            }
        }
        let _ = std::fs::remove_file(&path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsettled_messages_are_those_accepted_and_never_settled() {
        let text = [
            r#"{"a":1,"m":{"content":"one"}}"#,
            r#"{"a":2,"m":{"content":"two"}}"#,
            r#"{"d":[1]}"#,
            r#"{"a":3,"m":{"content":"three"}}"#,
            r#"{"a":4,"m":{"cont"#,
        ]
        .join("\n");
        let open = unsettled(&text);
        assert_eq!(open, vec![json!({"content": "two"}), json!({"content": "three"})]);
    }
}
