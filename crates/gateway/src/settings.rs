//! The gateway's settings (Bub's `ChannelSettings`, env prefix `BUB_`).

use std::time::Duration;

use bub_runtime::settings::Environment;

/// How `bub gateway` picks and schedules channels.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewaySettings {
    /// Channel names, `all`, or `!name` exclusions (`BUB_ENABLED_CHANNELS`,
    /// comma-separated; default `all`).
    pub enabled_channels: Vec<String>,
    /// Quiet time before a debounced batch runs (`BUB_DEBOUNCE_SECONDS`, 1).
    pub debounce: Duration,
    /// Longest wait for a batch started by an inactive message
    /// (`BUB_MAX_WAIT_SECONDS`, 10).
    pub max_wait: Duration,
    /// How long after an active message inactive ones still count
    /// (`BUB_ACTIVE_TIME_WINDOW`, 60).
    pub active_time_window: Duration,
    /// Stream model events to channels as they come (`BUB_STREAM_OUTPUT`,
    /// false). A message may also ask for it with `"stream_output": true`.
    pub stream_output: bool,
    /// On SIGINT/SIGTERM, how long running turns may take to finish before
    /// they are cancelled (`BUB_SHUTDOWN_GRACE_SECONDS`, 30; bub-rs only).
    pub shutdown_grace: Duration,
    /// Turns running at once across the gateway
    /// (`BUB_MAX_CONCURRENT_TURNS`, 32; bub-rs only). More wait, in the
    /// order they were admitted.
    pub max_turns: usize,
    /// Turns of one session running at once (`BUB_MAX_SESSION_TURNS`, 4;
    /// bub-rs only). Bub runs every `process` admission at once; a
    /// session's further messages wait their turn, in order.
    pub max_session_turns: usize,
    /// Messages taken and waiting for their turn, in all
    /// (`BUB_MAX_QUEUED_MESSAGES`, 10,000; bub-rs only). Past it the
    /// handler refuses messages, as while stopping, so nothing grows
    /// without end (a plugin handing messages over from inside its turns).
    pub max_queued: usize,
    /// The same per session (`BUB_MAX_SESSION_QUEUE`, 100; bub-rs only).
    pub max_session_queue: usize,
    /// How deep messages handed over from inside turns may nest: a turn's
    /// message handed over from inside a turn is one deeper than that
    /// turn's (`BUB_MAX_INBOUND_DEPTH`, 8; bub-rs only). Deeper ones are
    /// refused, so a plugin whose every turn starts turns comes to an end.
    pub max_inbound_depth: u64,
}

impl Default for GatewaySettings {
    fn default() -> Self {
        GatewaySettings {
            enabled_channels: vec!["all".into()],
            debounce: Duration::from_secs(1),
            max_wait: Duration::from_secs(10),
            active_time_window: Duration::from_secs(60),
            stream_output: false,
            shutdown_grace: Duration::from_secs(30),
            max_turns: 32,
            max_session_turns: 4,
            max_queued: 10_000,
            max_session_queue: 100,
            max_inbound_depth: 8,
        }
    }
}

impl GatewaySettings {
    /// From the `BUB_*` variables of `env` (the host's resolved
    /// environment, `RuntimeSettings::environment`); unset or unreadable
    /// ones keep the defaults (an unreadable one is warned about).
    pub fn from_environment(env: &Environment) -> Self {
        Self::from_sources(&serde_json::Map::new(), env)
    }

    /// From `config` (`$BUB_HOME/config.json`: `enabled_channels`, a
    /// comma-separated string or a list, and `stream_output`, what `bub
    /// onboard` writes) under the `BUB_*` variables of `env`, which win, as
    /// in Bub's settings.
    pub fn from_sources(config: &serde_json::Map<String, serde_json::Value>, env: &Environment) -> Self {
        use serde_json::Value;
        let mut d = GatewaySettings::default();
        match config.get("enabled_channels") {
            Some(Value::String(s)) if !s.trim().is_empty() => {
                d.enabled_channels = s.split(',').map(|c| c.trim().to_owned()).filter(|c| !c.is_empty()).collect()
            }
            Some(Value::Array(list)) => {
                d.enabled_channels = list.iter().filter_map(Value::as_str).map(str::to_owned).collect()
            }
            _ => {}
        }
        if let Some(Value::Bool(b)) = config.get("stream_output") {
            d.stream_output = *b;
        }
        Self::over(d, env)
    }

    fn over(d: GatewaySettings, env: &Environment) -> Self {
        let seconds = |name| seconds(env, name);
        GatewaySettings {
            enabled_channels: env
                .get("BUB_ENABLED_CHANNELS")
                .map(|v| v.split(',').map(str::to_owned).collect())
                .unwrap_or(d.enabled_channels),
            debounce: seconds("BUB_DEBOUNCE_SECONDS").unwrap_or(d.debounce),
            max_wait: seconds("BUB_MAX_WAIT_SECONDS").unwrap_or(d.max_wait),
            active_time_window: seconds("BUB_ACTIVE_TIME_WINDOW").unwrap_or(d.active_time_window),
            stream_output: flag(env, "BUB_STREAM_OUTPUT").unwrap_or(d.stream_output),
            shutdown_grace: seconds("BUB_SHUTDOWN_GRACE_SECONDS").unwrap_or(d.shutdown_grace),
            max_turns: count(env, "BUB_MAX_CONCURRENT_TURNS").unwrap_or(d.max_turns),
            max_session_turns: count(env, "BUB_MAX_SESSION_TURNS").unwrap_or(d.max_session_turns),
            max_queued: count(env, "BUB_MAX_QUEUED_MESSAGES").unwrap_or(d.max_queued),
            max_session_queue: count(env, "BUB_MAX_SESSION_QUEUE").unwrap_or(d.max_session_queue),
            max_inbound_depth: count(env, "BUB_MAX_INBOUND_DEPTH").map_or(d.max_inbound_depth, |n| n as u64),
        }
    }
}

fn seconds(env: &Environment, name: &str) -> Option<Duration> {
    let text = env.get(name)?;
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s >= 0.0 => bub_kit::time::seconds(s),
        _ => {
            tracing::warn!(target: "bub::gateway", "{name}={text:?} is not a number of seconds; using the default");
            None
        }
    }
}

fn count(env: &Environment, name: &str) -> Option<usize> {
    let text = env.get(name)?;
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Some(n),
        _ => {
            tracing::warn!(target: "bub::gateway", "{name}={text:?} is not a whole number of at least 1; using the default");
            None
        }
    }
}

fn flag(env: &Environment, name: &str) -> Option<bool> {
    let text = env.get(name)?;
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => {
            tracing::warn!(target: "bub::gateway", "{name}={text:?} is not true or false; using the default");
            None
        }
    }
}
