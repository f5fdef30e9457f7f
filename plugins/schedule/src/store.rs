//! Where the jobs are kept, so that a gateway with many of them costs
//! nothing while they wait and little when they fire.
//!
//! - `jobs.json`: the jobs, a JSON list, changed under `jobs.lock` (tools
//!   in `bub run` and the gateway's channel may change it at once) and
//!   replaced atomically.
//! - `jobs.done`: one line per one-time job that ran, appended (the ids
//!   of a tick's jobs in one write and one sync), so firing thousands of
//!   jobs does not rewrite the list once per job (6,000 due jobs wrote
//!   2.9 GiB that way). The next change of the list drops the done jobs
//!   from it and empties the log.
//!
//! Reading is cached by the two files' identity (device, inode, size,
//! modification time): a tick that finds neither changed parses nothing
//! (20,000 idle jobs cost 2.9 s of CPU a minute when the list was read at
//! every tick). Both files lead to turns being run, so they are read as
//! `config.json` is: a private regular file of the user, under a cap.

use std::{
    collections::HashSet,
    io::Write,
    os::unix::fs::MetadataExt,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The latest time a job may be set for (9999-12-31, RFC 3339's last year).
pub const LATEST: f64 = 253_402_300_799.0;

/// The largest `jobs.json` (or `jobs.done`) read.
const MAX_FILE: u64 = 16 << 20;

/// One job.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Job {
    pub id: String,
    pub session_id: String,
    pub message: String,
    /// Seconds since the epoch of the next run.
    pub next_run: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_id: Option<String>,
    /// The IANA zone its cron expression is read in (UTC when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    /// A heartbeat: its answer may be the silent marker.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub heartbeat: bool,
    pub created: String,
}

impl Job {
    /// A job whose times are real numbers in range (a `null` or `NaN`
    /// `next_run` would never fire and used to stop every other job).
    pub fn checked(self) -> Result<Job, String> {
        if !(self.next_run.is_finite() && (0.0..=LATEST).contains(&self.next_run)) {
            return Err(format!("next_run {} is not a time", self.next_run));
        }
        if self.every_seconds.is_some_and(|e| !(e.is_finite() && (1.0..=LATEST).contains(&e))) {
            return Err("every_seconds must be at least one second".into());
        }
        Ok(self)
    }

    /// Whether it runs once (no `every`, no `cron`).
    pub fn once(&self) -> bool {
        self.cron.is_none() && self.every_seconds.is_none()
    }
}

/// What identifies a file's content cheaply: device, inode, size and
/// modification time (None: the file is missing).
type Stamp = Option<(u64, u64, u64, i64, i64)>;

fn stamp(path: &std::path::Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// The jobs as last read, and the files' stamps they were read at.
struct Cached {
    stamps: (Stamp, Stamp),
    jobs: Arc<Vec<Job>>,
}

/// What the files hold: the valid jobs that have not run out, the entries
/// that are not valid jobs, and the ids of the one-time jobs that ran.
struct Read {
    jobs: Vec<Job>,
    broken: Vec<Value>,
    done: HashSet<String>,
}

/// `<data dir>/jobs.json` and `jobs.done`.
pub struct Jobs {
    dir: PathBuf,
    // Broken entries already logged (once each, not every tick).
    warned: Mutex<HashSet<String>>,
    cached: Mutex<Option<Cached>>,
}

impl Jobs {
    /// The jobs of the plugin's data folder `dir`.
    pub fn new(dir: PathBuf) -> Jobs {
        Jobs { dir, warned: Default::default(), cached: Default::default() }
    }

    fn file(&self) -> PathBuf {
        self.dir.join("jobs.json")
    }

    fn done_file(&self) -> PathBuf {
        self.dir.join("jobs.done")
    }

    /// Holds the lock over both files until the guard drops.
    fn lock(&self) -> Result<std::fs::File, String> {
        bub_kit::files::create_private_dir(&self.dir)
            .map_err(|e| format!("cannot create {}: {e}", self.dir.display()))?;
        let lock_path = self.dir.join("jobs.lock");
        let lock = bub_kit::files::open_private_append(&lock_path)
            .map_err(|e| format!("cannot open {}: {e}", lock_path.display()))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| format!("cannot lock the jobs: {e}"))?;
        Ok(lock)
    }

    /// Runs `change` on the jobs under the lock and saves what it leaves
    /// (with the entries that are not valid jobs, kept as they were); the
    /// done log is folded in whenever the list is written.
    pub fn change<T>(&self, change: impl FnOnce(&mut Vec<Job>) -> Result<T, String>) -> Result<T, String> {
        let _lock = self.lock()?;
        let Read { mut jobs, broken, done } = self.read()?;
        let before = jobs.clone();
        let out = change(&mut jobs)?;
        // The done log is folded in when the list is written anyway, or
        // once it has grown.
        let compact = !done.is_empty() && (jobs != before || done.len() >= 256);
        if jobs != before || compact {
            let mut all: Vec<Value> = jobs.iter().map(|j| serde_json::to_value(j).unwrap_or_default()).collect();
            all.extend(broken);
            let text = serde_json::to_vec_pretty(&all).map_err(|e| e.to_string())?;
            bub_kit::files::write_private(&self.file(), &text)
                .map_err(|e| format!("cannot save {}: {e}", self.file().display()))?;
            if !done.is_empty() {
                // The list no longer has them: the log has nothing to say.
                let _ = bub_kit::files::write_private(&self.done_file(), b"");
            }
        }
        Ok(out)
    }

    /// Appends `ids` (one-time jobs that ran) to the done log: one write
    /// and one sync for all of them.
    pub fn mark_done(&self, ids: &[String]) -> Result<(), String> {
        if ids.is_empty() {
            return Ok(());
        }
        let _lock = self.lock()?;
        let mut text = String::new();
        for id in ids {
            text.push_str(id);
            text.push('\n');
        }
        let path = self.done_file();
        let mut file =
            bub_kit::files::open_private_append(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_data())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    /// The jobs now: re-read only when a file changed since the last read.
    pub fn snapshot(&self) -> Result<Arc<Vec<Job>>, String> {
        let stamps = (stamp(&self.file()), stamp(&self.done_file()));
        if let Some(cached) = bub_abi::sync::lock(&self.cached).as_ref().filter(|c| c.stamps == stamps) {
            return Ok(cached.jobs.clone());
        }
        let jobs = {
            let _lock = self.lock()?;
            Arc::new(self.read()?.jobs)
        };
        *bub_abi::sync::lock(&self.cached) = Some(Cached { stamps, jobs: jobs.clone() });
        Ok(jobs)
    }

    /// The valid jobs that have not run out, the entries that are not
    /// valid jobs (logged, kept in the file, never fired: one bad entry
    /// does not stop every other job), and the done ids.
    fn read(&self) -> Result<Read, String> {
        let done: HashSet<String> = match bub_kit::files::read_trusted(&self.done_file(), MAX_FILE) {
            Ok(bytes) => String::from_utf8_lossy(&bytes)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect(),
            Err(bub_kit::files::TrustError::Missing) => HashSet::new(),
            Err(e) => return Err(format!("refusing {}: {e}", self.done_file().display())),
        };
        let path = self.file();
        let bytes = match bub_kit::files::read_trusted(&path, MAX_FILE) {
            Ok(bytes) => bytes,
            Err(bub_kit::files::TrustError::Missing) => return Ok(Read { jobs: Vec::new(), broken: Vec::new(), done }),
            Err(e @ bub_kit::files::TrustError::Refused(_)) => return Err(format!("refusing the jobs: {e}")),
            Err(e) => return Err(format!("{} {e}", path.display())),
        };
        let entries: Vec<Value> = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{} is not a JSON list of jobs ({e}); fix or remove it", path.display()))?;
        let (mut jobs, mut broken) = (Vec::new(), Vec::new());
        for entry in entries {
            match serde_json::from_value::<Job>(entry.clone()).map_err(|e| e.to_string()).and_then(Job::checked) {
                Ok(job) if done.contains(&job.id) => {}
                Ok(job) => jobs.push(job),
                Err(e) => {
                    let id = entry.get("id").and_then(Value::as_str).unwrap_or("?").to_owned();
                    if bub_abi::sync::lock(&self.warned).insert(id.clone()) {
                        tracing::warn!("schedule: skipping job {id} in {}: {e}; fix or remove it", path.display());
                    }
                    broken.push(entry);
                }
            }
        }
        Ok(Read { jobs, broken, done })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, next_run: f64) -> Job {
        serde_json::from_value(serde_json::json!({
            "id": id, "message": "m", "session_id": "s", "next_run": next_run, "created": "x"
        }))
        .expect("a minimal job")
    }

    #[test]
    fn jobs_with_impossible_times_are_refused() {
        let t0 = 1_796_083_200.0;
        assert!(job("j", t0).checked().is_ok());
        assert!(Job { every_seconds: Some(60.0), ..job("j", t0) }.checked().is_ok());
        assert!(Job { next_run: f64::NAN, ..job("j", t0) }.checked().is_err());
        assert!(job("j", LATEST + 1.0).checked().is_err());
        assert!(Job { every_seconds: Some(0.5), ..job("j", t0) }.checked().is_err(), "under one second");
    }

    #[test]
    fn done_jobs_leave_the_list_by_an_append_and_snapshots_read_only_changes() {
        let dir = std::env::temp_dir().join(format!("schedule-store-{}", bub_kit::random::u64()));
        let jobs = Jobs::new(dir.clone());
        jobs.change(|all| {
            all.extend((0..3).map(|i| job(&format!("j{i}"), 1.0)));
            Ok(())
        })
        .unwrap();
        let first = jobs.snapshot().unwrap();
        assert_eq!(first.len(), 3);
        assert!(Arc::ptr_eq(&first, &jobs.snapshot().unwrap()), "nothing changed: nothing read");
        let list_before = std::fs::read(dir.join("jobs.json")).unwrap();
        jobs.mark_done(&["j0".into(), "j2".into()]).unwrap();
        assert_eq!(std::fs::read(dir.join("jobs.json")).unwrap(), list_before, "the list is not rewritten");
        let ids: Vec<String> = jobs.snapshot().unwrap().iter().map(|j| j.id.clone()).collect();
        assert_eq!(ids, ["j1"]);
        // The next change folds the log in and empties it.
        jobs.change(|all| {
            all.push(job("j3", 2.0));
            Ok(())
        })
        .unwrap();
        assert_eq!(std::fs::read(dir.join("jobs.done")).unwrap(), b"");
        let on_disk: Vec<Value> = serde_json::from_slice(&std::fs::read(dir.join("jobs.json")).unwrap()).unwrap();
        assert_eq!(on_disk.len(), 2, "j1 and j3");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
