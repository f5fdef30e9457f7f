//! Isolated plugins: an installed plugin, unchanged, run in a child `bub`
//! process of its own, so that a crash, an abort, a stack overflow or a
//! hang in it fails only the calls in flight and names it.
//!
//! In-process native plugins are what make bub-rs fast, and also what
//! makes one bad plugin fatal. Isolation is opt-in, per plugin
//! (`bub plugins install --isolated`, `bub plugins config NAME
//! isolated=true`): native speed for what the user trusts, containment for
//! what they do not. The same `cdylib` serves both ways, through the same
//! ABI:
//!
//! - the host starts `bub __plugin-runner` ([`child`]) with a socket as its
//!   standard input, an environment of its own ([`Isolation::env`]) and
//!   resource limits, and tells it which library to load; the child checks
//!   and loads it exactly as the host would, and answers its registrations
//!   (a plugin set's members too);
//! - the host registers each with one slot per hook it implements; a slot
//!   ([`supervisor`]) sends the call's arguments (host values as JSON, the
//!   turn state and host objects lent by id) and answers the reply, or a
//!   pending future of it;
//! - objects cross both ways ([`codec`]): what the plugin returns (a tape
//!   store, channels, tools, a model stream) becomes a host object whose
//!   methods are requests to the child; what the host lends (the message
//!   handler, the CLI app, the turn state) becomes one in the child;
//! - the child's process ending fails the calls in flight with the reason
//!   (`killed by SIGSEGV`), and the plugin is started again on its next
//!   call, after a backoff, at most [`Isolation::max_restarts`] times in ten
//!   minutes; `bub plugins list` shows the last crash (a status file
//!   under `$BUB_HOME/isolated/`).
//!
//! What it costs is measured in BENCHMARKS.md (an isolated call beside an
//! in-process one).

pub(crate) mod child;
pub(crate) mod codec;
pub(crate) mod peer;
mod process;
mod state;
pub(crate) mod supervisor;
pub(crate) mod wire;

use serde::{Deserialize, Serialize};

pub use child::main as child_main;
pub use process::Status;

/// The first argument that makes `bub` an isolated plugin's runner.
pub const RUNNER_ARG: &str = "__plugin-runner";

/// How an installed plugin is isolated (its manifest's `isolation`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Isolation {
    /// Whether the plugin runs in a process of its own.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Address-space limit of its process in MiB (`RLIMIT_AS`); 0 = none.
    /// Default [`DEFAULT_MEMORY_MB`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// CPU seconds its process may use over its life (`RLIMIT_CPU`,
    /// SIGXCPU past it); 0 = none (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<u64>,
    /// Open files of its process (`RLIMIT_NOFILE`); 0 = inherit (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_files: Option<u64>,
    /// Restarts allowed in ten minutes before it is left stopped until bub
    /// restarts. Default [`DEFAULT_MAX_RESTARTS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<u32>,
    /// Environment variables its process gets besides the basics (`PATH`,
    /// `HOME`, the locale, `TMPDIR`, the log filters): none of the host's
    /// keys and tokens unless named here. Its configuration (manifest,
    /// `config.json`, `BUB_<NAME>__*`) reaches it whatever this says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Largest message it may send, MiB. Default [`DEFAULT_MAX_MESSAGE_MB`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_message_mb: Option<u64>,
    /// Seconds its process may go without answering a ping (its runtime
    /// wedged, or the process stopped) before it is killed and restarted.
    /// Default [`DEFAULT_PING_TIMEOUT_SECONDS`]; 0 = never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ping_timeout_seconds: Option<u64>,
}

fn yes() -> bool {
    true
}

impl Default for Isolation {
    fn default() -> Self {
        Isolation {
            enabled: true,
            memory_mb: None,
            cpu_seconds: None,
            open_files: None,
            max_restarts: None,
            env: Vec::new(),
            max_message_mb: None,
            ping_timeout_seconds: None,
        }
    }
}

/// Default address-space limit of an isolated plugin (MiB).
pub const DEFAULT_MEMORY_MB: u64 = 4096;
/// Default restarts allowed in ten minutes.
pub const DEFAULT_MAX_RESTARTS: u32 = 5;
/// Default cap on one message from an isolated plugin (MiB).
pub const DEFAULT_MAX_MESSAGE_MB: u64 = 128;
/// Default seconds without an answer to a ping before the process is killed.
pub const DEFAULT_PING_TIMEOUT_SECONDS: u64 = 30;

/// The variables every isolated plugin's process gets (when the host has them).
pub const BASE_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "RUST_LOG",
    "RUST_BACKTRACE",
    "BUB_LOG",
    "NO_COLOR",
];

impl Isolation {
    /// Sets one key from `bub plugins config NAME isolated.KEY=VALUE`.
    pub fn set(&mut self, key: &str, value: &serde_json::Value) -> Result<(), String> {
        let number = || {
            value.as_u64().or_else(|| value.as_str().and_then(|s| s.parse().ok())).ok_or_else(|| {
                format!(
                    "isolated.{key} takes a whole number of {}, not {value}",
                    if key == "memory_mb" || key == "max_message_mb" { "MiB" } else { "units" }
                )
            })
        };
        match key {
            "memory_mb" => self.memory_mb = Some(number()?),
            "cpu_seconds" => self.cpu_seconds = Some(number()?),
            "open_files" => self.open_files = Some(number()?),
            "max_restarts" => self.max_restarts = Some(number()? as u32),
            "max_message_mb" => self.max_message_mb = Some(number()?),
            "ping_timeout_seconds" => self.ping_timeout_seconds = Some(number()?),
            "env" => {
                self.env = match value {
                    serde_json::Value::Array(items) => items
                        .iter()
                        .map(|i| i.as_str().map(str::to_owned).ok_or("env takes names"))
                        .collect::<Result<_, _>>()?,
                    serde_json::Value::String(s) => {
                        s.split(',').map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()).collect()
                    }
                    _ => {
                        return Err(
                            "isolated.env takes a list of variable names (env=OPENAI_API_KEY,HTTPS_PROXY)".into()
                        )
                    }
                }
            }
            other => {
                return Err(format!(
                "isolated.{other} is not an isolation setting (memory_mb, cpu_seconds, open_files, max_restarts, env, \
                     max_message_mb, ping_timeout_seconds)"
            ))
            }
        }
        Ok(())
    }

    /// The limits its process applies to itself before loading the plugin.
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            memory_mb: self.memory_mb.unwrap_or(DEFAULT_MEMORY_MB),
            cpu_seconds: self.cpu_seconds.unwrap_or(0),
            open_files: self.open_files.unwrap_or(0),
            max_message_bytes: (self.max_message_mb.unwrap_or(DEFAULT_MAX_MESSAGE_MB).max(1) << 20) as usize,
        }
    }
}

/// Resource limits of an isolated plugin's process (0 = none).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Limits {
    pub memory_mb: u64,
    pub cpu_seconds: u64,
    pub open_files: u64,
    pub max_message_bytes: usize,
}
