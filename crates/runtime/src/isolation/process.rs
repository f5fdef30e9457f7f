//! Starting an isolated plugin's process, reading how it ended, and the
//! status file `bub plugins list` shows.

use std::{
    ffi::OsString,
    os::unix::{net::UnixStream, process::CommandExt, process::ExitStatusExt},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
};

use serde::{Deserialize, Serialize};

/// Starts `program __plugin-runner` with `stream` as its standard input,
/// only the variables `env`, in a process group of its own (a Ctrl-C at
/// the terminal is the host's to handle; the child ends when the host's
/// end of the socket closes).
pub(crate) fn spawn(program: &Path, stream: UnixStream, env: &[(OsString, OsString)]) -> std::io::Result<Child> {
    let fd: std::os::fd::OwnedFd = stream.into();
    Command::new(program)
        .arg(super::RUNNER_ARG)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        // bub's allocator (mimalloc) reserves 1 GiB of address space up
        // front; without that reservation the memory limit (RLIMIT_AS)
        // measures what the plugin uses (32 MB at rest instead of 1 GB).
        .env("MIMALLOC_ARENA_RESERVE", "0")
        .stdin(Stdio::from(fd))
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()
}

/// How a process ended, in words: `killed by SIGSEGV (a segmentation
/// fault)`, `exited with status 3`.
pub(crate) fn describe(status: ExitStatus) -> String {
    if let Some(signal) = status.signal() {
        let (name, what) = match signal {
            4 => ("SIGILL", " (an illegal instruction)"),
            6 => ("SIGABRT", " (an abort: a failed assertion, a Rust abort or a stack overflow)"),
            7 => ("SIGBUS", " (a bus error)"),
            8 => ("SIGFPE", " (an arithmetic fault)"),
            9 => ("SIGKILL", " (killed: out of memory, or by bub or a user)"),
            11 => ("SIGSEGV", " (a segmentation fault)"),
            15 => ("SIGTERM", ""),
            24 => ("SIGXCPU", " (over its CPU limit, isolated.cpu_seconds)"),
            25 => ("SIGXFSZ", " (over a file size limit)"),
            _ => ("", ""),
        };
        if name.is_empty() {
            return format!("killed by signal {signal}");
        }
        return format!("killed by {name}{what}");
    }
    match status.code() {
        Some(0) => "exited".into(),
        Some(code) => format!("exited with status {code}"),
        None => "ended".into(),
    }
}

/// What the host last knew of an isolated plugin's process, kept in
/// `$BUB_HOME/isolated/<name>.json` for `bub plugins list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// The host process running it.
    pub host_pid: u32,
    /// Its process, while it runs.
    #[serde(default)]
    pub pid: Option<u32>,
    /// When it was last started (RFC 3339).
    #[serde(default)]
    pub started_at: Option<String>,
    /// How many times it was started again after its process ended.
    #[serde(default)]
    pub restarts: u32,
    /// The last time its process ended while in use: when, how, and the
    /// hooks that were running.
    #[serde(default)]
    pub last_crash: Option<String>,
    /// Set when it crashed too often and was left stopped.
    #[serde(default)]
    pub stopped: Option<String>,
}

impl Status {
    /// The status file of plugin `name` under `home`.
    pub fn path(home: &Path, name: &str) -> PathBuf {
        home.join("isolated").join(format!("{name}.json"))
    }

    /// Reads plugin `name`'s status, if one was written.
    pub fn read(home: &Path, name: &str) -> Option<Status> {
        let text = crate::files::read_settings_file(&Status::path(home, name)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Writes it (owner-only, atomically); a failure is logged.
    pub(crate) fn write(&self, home: &Path, name: &str) {
        let path = Status::path(home, name);
        let result = path.parent().map(bub_kit::files::create_private_dir).unwrap_or(Ok(())).and_then(|()| {
            crate::files::write_atomically(&path, &(serde_json::to_string_pretty(self).unwrap_or_default() + "\n"))
        });
        if let Err(e) = result {
            tracing::debug!(target: "bub::isolation", "cannot write {}: {e}", path.display());
        }
    }

    /// One line for `bub plugins list`, if there is anything to say.
    pub fn summary(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(why) = &self.stopped {
            parts.push(format!("stopped: {why}"));
        }
        if self.restarts > 0 {
            parts.push(format!("restarted {} time{}", self.restarts, if self.restarts == 1 { "" } else { "s" }));
        }
        if let Some(crash) = &self.last_crash {
            parts.push(format!("last crash: {crash}"));
        }
        (!parts.is_empty()).then(|| format!("{} (host pid {})", parts.join("; "), self.host_pid))
    }
}
