//! [`RuntimeSettings`]: the runtime's knobs, resolved once.
//!
//! The `bub` binary reads them from the environment
//! ([`RuntimeSettings::from_env`]) and hands them to the host builder;
//! everything below takes them from there. This module is the only place
//! in the crate that reads environment variables (a clippy
//! `disallowed-methods` rule holds the rest to it), so an embedder or a
//! test sets a deadline on its host instead of on the process.

use std::{ffi::OsString, path::PathBuf, sync::Arc, time::Duration};

/// The default deadline of an async hook (`BUB_HOOK_TIMEOUT_SECONDS`).
pub const HOOK_TIMEOUT_SECONDS: f64 = 300.0;
/// The default deadline of a resource's enter / exit / start / stop
/// (`BUB_LIFESPAN_TIMEOUT_SECONDS`).
pub const LIFESPAN_TIMEOUT_SECONDS: f64 = 60.0;
/// The default cap on a hook's value answer (`BUB_MAX_RESULT_BYTES`).
pub const MAX_RESULT_BYTES: usize = 64 << 20;

/// The runtime's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeSettings {
    /// Deadline of an async hook other than the model hooks; None = none.
    pub hook_timeout: Option<Duration>,
    /// Deadline of a resource's scope methods; None = none.
    pub lifespan_timeout: Option<Duration>,
    /// Cap on a hook's value answer in bytes; 0 = none.
    pub max_result_bytes: usize,
    /// The `BUB_<PLUGIN>__<KEY>` variables: plugin configuration from the
    /// environment, applied over `config.json` and the manifest.
    pub plugin_env: Vec<(OsString, OsString)>,
    /// The variables these settings were resolved from: the layers above
    /// (the agent's model settings, the gateway's timings) read theirs here,
    /// never from the process. Empty unless given ([`from_env`](Self::from_env),
    /// [`from_vars`](Self::from_vars)).
    pub environment: Environment,
    /// The program an isolated plugin runs in (`<it> __plugin-runner`):
    /// `None` = this executable, which is `bub` for the binary; an
    /// embedder or a test sets the path of a `bub` binary.
    pub plugin_runner: Option<std::path::PathBuf>,
}

impl Default for RuntimeSettings {
    /// The documented defaults; no plugin configuration from outside.
    fn default() -> Self {
        RuntimeSettings {
            hook_timeout: seconds(HOOK_TIMEOUT_SECONDS),
            lifespan_timeout: seconds(LIFESPAN_TIMEOUT_SECONDS),
            max_result_bytes: MAX_RESULT_BYTES,
            plugin_env: Vec::new(),
            environment: Environment::default(),
            plugin_runner: None,
        }
    }
}

/// A snapshot of environment variables (the UTF-8 ones), cheap to clone.
/// Its `Debug` shows the names only: values may be keys.
#[derive(Clone, Default, PartialEq)]
pub struct Environment(Arc<[(String, String)]>);

impl Environment {
    /// From `(name, value)` pairs.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(vars: impl IntoIterator<Item = (K, V)>) -> Self {
        Environment(vars.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }

    /// The value of `name`; None when unset or empty (as Bub's settings
    /// treat an empty variable).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty())
    }

    /// Every variable, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// `name` read as a whole number of megabytes, in bytes; `default`
    /// when unset, and (with a warning naming it) when not such a number.
    pub fn megabytes(&self, name: &str, default: u64) -> u64 {
        let Some(text) = self.get(name) else { return default };
        match text.trim().parse::<u64>() {
            Ok(mb) => mb.saturating_mul(1 << 20),
            Err(_) => {
                let mb = default >> 20;
                tracing::warn!(target: "bub::settings", "{name}={text:?} is not a whole number of megabytes; using {mb}");
                default
            }
        }
    }
}

impl std::fmt::Debug for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|(k, _)| k)).finish()
    }
}

impl RuntimeSettings {
    /// From the process environment (what `bub` does at start).
    #[allow(clippy::disallowed_methods)]
    pub fn from_env() -> Self {
        Self::from_vars(std::env::vars_os())
    }

    /// From these variables (`from_env` without the process).
    pub fn from_vars(vars: impl IntoIterator<Item = (OsString, OsString)>) -> Self {
        let mut out = RuntimeSettings::default();
        let mut environment = Vec::new();
        for (key, value) in vars {
            let (Some(k), Some(v)) = (key.to_str(), value.to_str()) else { continue };
            environment.push((k.to_owned(), v.to_owned()));
            match k {
                "BUB_HOOK_TIMEOUT_SECONDS" => out.hook_timeout = parse_seconds(v, HOOK_TIMEOUT_SECONDS),
                "BUB_LIFESPAN_TIMEOUT_SECONDS" => out.lifespan_timeout = parse_seconds(v, LIFESPAN_TIMEOUT_SECONDS),
                "BUB_MAX_RESULT_BYTES" => out.max_result_bytes = v.trim().parse().unwrap_or(MAX_RESULT_BYTES),
                _ if k.starts_with("BUB_") && k.contains("__") => out.plugin_env.push((key, value)),
                _ => {}
            }
        }
        out.environment = Environment::from_pairs(environment);
        out
    }
}

/// A positive, finite number of seconds as a duration; 0, negative or
/// infinite means none.
pub fn seconds(value: f64) -> Option<Duration> {
    Some(value).filter(|v| *v > 0.0 && v.is_finite()).and_then(bub_kit::time::seconds)
}

/// A setting's text as [`seconds`], `default` when it is not a number
/// (one parser for every "seconds" setting).
pub fn parse_seconds(text: &str, default: f64) -> Option<Duration> {
    seconds(text.trim().parse::<f64>().unwrap_or(default))
}

/// `$BUB_HOME`, or `~/.bub`: where Bub lives when nobody says.
#[allow(clippy::disallowed_methods)]
pub fn env_home() -> PathBuf {
    if let Some(h) = std::env::var_os("BUB_HOME").filter(|h| !h.is_empty()) {
        return crate::places::absolute(PathBuf::from(h));
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/"));
    home.join(".bub")
}

/// `$BUB_HOOK_WARN_SECONDS` (10; 0 = never): when the process's watchdog
/// logs a plugin call still running. Process-wide by nature: the one
/// watchdog thread watches every host's calls.
#[allow(clippy::disallowed_methods)]
pub fn env_hook_warn() -> Option<Duration> {
    parse_seconds(&std::env::var("BUB_HOOK_WARN_SECONDS").unwrap_or_default(), 10.0)
}

/// `$BUB_PLUGIN_PATH`: more plugin roots, `:`-separated.
#[allow(clippy::disallowed_methods)]
pub fn env_plugin_path() -> Option<String> {
    std::env::var("BUB_PLUGIN_PATH").ok()
}

/// The cargo that builds a plugin crate folder (`$CARGO`, else `cargo`).
#[allow(clippy::disallowed_methods)]
pub fn cargo() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// `$BUB_INSTALL_TIMEOUT_SECONDS` (300): how long one command fetching a
/// plugin's source (`git clone`, `cargo metadata`) may run.
#[allow(clippy::disallowed_methods)]
pub fn env_install_timeout() -> Duration {
    parse_seconds(&std::env::var("BUB_INSTALL_TIMEOUT_SECONDS").unwrap_or_default(), 300.0)
        .unwrap_or(Duration::from_secs(300))
}

/// `CARGO_TARGET_DIR`, when set: fetched plugins build there instead of
/// Bub's own build cache.
#[allow(clippy::disallowed_methods)]
pub fn cargo_target_dir() -> Option<std::path::PathBuf> {
    std::env::var_os("CARGO_TARGET_DIR").filter(|v| !v.is_empty()).map(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_vars_reads_the_knobs_and_plugin_config() {
        let vars = [
            ("BUB_HOOK_TIMEOUT_SECONDS", "0.5"),
            ("BUB_LIFESPAN_TIMEOUT_SECONDS", "0"),
            ("BUB_MAX_RESULT_BYTES", "1000"),
            ("BUB_HTTP_CHANNEL__TOKEN", "t"),
            ("PATH", "/bin"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let s = RuntimeSettings::from_vars(vars);
        assert_eq!(s.hook_timeout, Some(Duration::from_millis(500)));
        assert_eq!(s.lifespan_timeout, None, "0 = no deadline");
        assert_eq!(s.max_result_bytes, 1000);
        assert_eq!(s.plugin_env, [(OsString::from("BUB_HTTP_CHANNEL__TOKEN"), OsString::from("t"))]);
        assert_eq!(s.environment.get("PATH"), Some("/bin"));
        assert!(!format!("{:?}", s.environment).contains("\"t\""), "values are not printed");
        assert_eq!(RuntimeSettings::from_vars([]), RuntimeSettings::default());
        assert_eq!(parse_seconds("junk", 2.0), Some(Duration::from_secs(2)));
        assert_eq!(parse_seconds("inf", 2.0), None);
    }

    /// The cache sizes (`BUB_TAPE_CACHE_MB`, `BUB_CONTEXT_CACHE_MB`): a
    /// whole number of megabytes; anything else keeps the default.
    #[test]
    fn megabytes_are_whole_numbers_or_the_default() {
        let env = Environment::from_pairs([("A", "3"), ("B", " 0 "), ("C", "1.5"), ("D", "")]);
        assert_eq!(env.megabytes("A", 7), 3 << 20);
        assert_eq!(env.megabytes("B", 7), 0);
        assert_eq!(env.megabytes("C", 7), 7);
        assert_eq!(env.megabytes("D", 7), 7);
        assert_eq!(env.megabytes("unset", 7), 7);
    }
}
