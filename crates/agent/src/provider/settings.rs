//! Model settings (semantics §A6.1): `BUB_*` environment variables over the
//! top-level keys of `$BUB_HOME/config.json`.
//!
//! | setting | environment | config.json | default |
//! |---|---|---|---|
//! | model | `BUB_MODEL` | `model` | none: the offline `echo` model |
//! | fallbacks | `BUB_FALLBACK_MODELS` (JSON list) | `fallback_models` | none |
//! | API key | `BUB_API_KEY` (string or JSON object provider → key), `BUB_<P>_API_KEY`, `<P>_API_KEY` | `api_key` | none |
//! | API base | `BUB_API_BASE`, `BUB_<P>_API_BASE` | `api_base` | the provider's |
//! | custom providers | `BUB_PROVIDERS` (JSON: name → `{type, api_key?, api_base?}`) | `providers` | none |
//! | max steps | `BUB_MAX_STEPS` (> 0) | `max_steps` | unbounded |
//! | max tokens | `BUB_MAX_TOKENS` | `max_tokens` | 16384 |
//! | call deadline (the whole call, streaming included; 0 = none) | `BUB_MODEL_TIMEOUT_SECONDS` | `model_timeout_seconds` | 900 |
//! | model output per call, bytes read from the provider | `BUB_MODEL_MAX_OUTPUT_BYTES` | `model_max_output_bytes` | 64 MiB |
//! | one server-sent event, bytes | `BUB_MODEL_MAX_EVENT_BYTES` | `model_max_event_bytes` | 8 MiB |
//! | what a builtin tool reads or keeps, bytes (`fs.read`'s answer, a file `fs.edit` rewrites, a `web.fetch` body, a shell's output) | `BUB_TOOL_MAX_BYTES` | `tool_max_bytes` | 16 MiB |
//! | tool calls of one step run at once | `BUB_MAX_TOOL_CONCURRENCY` | `max_tool_concurrency` | 16 (Bub: unbounded) |
//! | client args | `BUB_CLIENT_ARGS` (JSON: api_format, headers, extra_body, timeout, max_retries, retry_delay, max_retry_delay) | `client_args` | {} |
//! | completion args | `BUB_COMPLETION_ARGS` (JSON: temperature, top_p, reasoning_effort, tool_choice, extra_body, …) | `completion_args` | {} |
//! | command prefix | `BUB_COMMAND_PREFIX` (non-empty, no whitespace) | `command_prefix` | `,` |
//! | command channels | `BUB_COMMAND_CHANNELS` (comma-separated, or `*`) | `command_channels` (list) | `cli` |
//! | confinement | `BUB_CONFINE_WORKSPACE` (`true`/`1`) | `confine_workspace` | off (see `builtin::confine`) |
//! | channels whose turns search every session | `BUB_SEARCH_OPEN_CHANNELS` (comma-separated, `*`, or empty for none) | `search_open_channels` (list) | `cli` (see [`crate::sessions`]) |
//! | people: sessions that are one person's | `BUB_PEOPLE` (JSON: name → list of session patterns) | `people` | none: each session is its own |
//! | context budget, tokens (0 = fold only when the provider refuses) | `BUB_CONTEXT_BUDGET_TOKENS` | `context_budget_tokens` | ¾ of the model's `context_window` (a custom provider's, or `client_args`'), else 64,000 |
//!
//! Command mode runs tools and shell lines with no model in between, so it
//! is on only for the channels named in `command_channels`: by default the
//! local terminal (`cli`: `bub run`, `bub chat`). A message from any other
//! channel (HTTP, a chat bot, …) that starts with the prefix is answered
//! with how to switch it on, and runs nothing; `,help` and `,quit` work
//! everywhere. Deliberate difference from Bub, which runs commands from
//! every channel.
//!
//! Deliberate difference: Bub reads `~/.bub/config.yml`; bub-rs reads the
//! JSON config `bub onboard` writes, in the host's home. Without a model
//! Bub defaults to `openrouter:openrouter/free` (a network call); bub-rs
//! defaults to the offline `echo` model, so that a fresh install works.

use std::{path::Path, time::Duration};

use bub_runtime::settings::Environment;
use serde_json::{Map, Value};

use super::{ModelClient, ProviderError};

/// The settings the agent reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSettings {
    /// The configured model spec (`provider:model`).
    pub model: Option<String>,
    /// Tried in order when the configured model fails to open a stream.
    pub fallback_models: Vec<String>,
    /// A key for every provider, or per provider.
    pub api_key: Option<Value>,
    /// A base for every provider, or per provider.
    pub api_base: Option<Value>,
    /// Custom providers: name → `{type, api_key?, api_base?}`.
    pub providers: Map<String, Value>,
    /// Steps per run (None: unbounded).
    pub max_steps: Option<u32>,
    /// Output tokens per call.
    pub max_tokens: u64,
    /// Bound on a whole call (`BUB_MODEL_TIMEOUT_SECONDS`, 900; 0 = none).
    pub model_timeout: Option<Duration>,
    /// What one call may read from the provider
    /// (`BUB_MODEL_MAX_OUTPUT_BYTES`, `BUB_MODEL_MAX_EVENT_BYTES`).
    pub stream_limits: bub_sse::Limits,
    /// Provider options.
    pub client_args: Map<String, Value>,
    /// Chat options.
    pub completion_args: Map<String, Value>,
    /// The command prefix (`,`).
    pub command_prefix: String,
    /// The channels whose messages may run commands (`*`: every channel).
    pub command_channels: Vec<String>,
    /// Whether the builtin's tools are confined to the workspace
    /// (`builtin::confine`).
    pub confine_workspace: bool,
    /// Whose sessions a turn may search (`search_open_channels`, `people`;
    /// see [`crate::sessions`]).
    pub search: crate::sessions::SearchScope,
    /// Deadline of one tool call (`BUB_TOOL_TIMEOUT_SECONDS`, 600; 0 = none).
    pub tool_timeout: Option<Duration>,
    /// What a builtin tool reads or keeps (`BUB_TOOL_MAX_BYTES`, 16 MiB):
    /// Bub read a 2 GB file or a 1 GiB page whole, and the process aborted.
    pub tool_max_bytes: usize,
    /// Tool calls of one step run at once (`BUB_MAX_TOOL_CONCURRENCY`, 16).
    /// Deliberate difference: Bub starts all of a response's calls at once,
    /// so a model asking for 1,000 calls opened 1,000 files and processes.
    pub max_tool_concurrency: Option<usize>,
    /// Tool results of at least 4 × this many characters are spilled to a
    /// sidecar tape (`BUB_SPILL_THRESHOLD`, 4096 "tokens"; 0 = never).
    pub spill_threshold: usize,
    /// The context budget in tokens, when set (`BUB_CONTEXT_BUDGET_TOKENS`);
    /// else [`ModelSettings::context_budget`] derives it from the model's
    /// window. `Some(0)`: fold only when the provider refuses.
    pub context_budget_tokens: Option<u64>,
    // The environment, for `<P>_API_KEY` lookups at client time.
    env: Environment,
    // HTTP clients, made once per settings value (one agent).
    clients: super::http::Clients,
}

impl Default for ModelSettings {
    fn default() -> Self {
        ModelSettings {
            model: None,
            fallback_models: Vec::new(),
            api_key: None,
            api_base: None,
            providers: Map::new(),
            max_steps: None,
            max_tokens: 16384,
            model_timeout: Some(DEFAULT_MODEL_TIMEOUT),
            stream_limits: bub_sse::Limits::default(),
            client_args: Map::new(),
            completion_args: Map::new(),
            command_prefix: ",".into(),
            command_channels: vec!["cli".into()],
            confine_workspace: false,
            search: Default::default(),
            tool_timeout: bub_runtime::settings::seconds(600.0),
            max_tool_concurrency: Some(DEFAULT_TOOL_CONCURRENCY),
            tool_max_bytes: DEFAULT_TOOL_MAX_BYTES,
            spill_threshold: 4096,
            context_budget_tokens: None,
            env: Environment::default(),
            clients: Default::default(),
        }
    }
}

/// What a builtin tool reads or keeps unless `BUB_TOOL_MAX_BYTES` says
/// otherwise: 16 MiB.
pub const DEFAULT_TOOL_MAX_BYTES: usize = 16 << 20;

/// The context budget when neither the settings nor the model's options
/// say one: half of a 128K window, the common size, so a session never
/// sends more than that per step.
pub const DEFAULT_CONTEXT_BUDGET: u64 = 64_000;

/// Tool calls of one step that run at once unless `BUB_MAX_TOOL_CONCURRENCY`
/// says otherwise.
pub const DEFAULT_TOOL_CONCURRENCY: usize = 16;

/// The default deadline of one model call, streaming included: a stream
/// that trickles a byte at a time never trips the read timeout, and would
/// hold its turn (and a gateway slot) forever.
pub const DEFAULT_MODEL_TIMEOUT: Duration = Duration::from_secs(900);

/// Endpoint, credentials and client options of one provider.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderConfig {
    /// The registered provider type (`openai`, `anthropic`, `ollama`, `echo`, …).
    pub kind: String,
    /// Base URL, no trailing `/`.
    pub base_url: String,
    /// The key, if any.
    pub api_key: Option<String>,
    /// `chat`, `responses` or `messages`, if forced.
    pub api_format: Option<String>,
    /// Extra headers.
    pub headers: Map<String, Value>,
    /// Deep-merged into every body (under the call's own `extra_body`).
    pub extra_body: Map<String, Value>,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// First backoff.
    pub retry_delay: Duration,
    /// Backoff cap.
    pub max_retry_delay: Duration,
    /// HTTP timeout of one request.
    pub http_timeout: Duration,
    /// Bound on a whole call (`model_timeout_seconds`).
    pub call_timeout: Option<Duration>,
    /// What one call may read from the provider.
    pub stream_limits: bub_sse::Limits,
    /// The HTTP clients (shared by the clients of one settings value).
    pub clients: super::http::Clients,
    /// Where a `codex` provider's login is kept (`$CODEX_HOME/auth.json`).
    pub codex: Option<super::codex::CodexAuth>,
}

fn json_setting(text: &str, name: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("{name} is not valid JSON ({e}): {text:?}"))
}

fn seconds(v: &Value) -> Option<Duration> {
    v.as_f64().and_then(bub_kit::time::seconds)
}

/// A provider's default base URL.
pub fn default_base(kind: &str) -> &'static str {
    match kind {
        "openrouter" => "https://openrouter.ai/api/v1",
        "anthropic" => "https://api.anthropic.com/v1",
        "deepseek" => "https://api.deepseek.com/v1",
        "ollama" => "http://localhost:11434/v1",
        "together" => "https://api.together.xyz/v1",
        "mistral" => "https://api.mistral.ai/v1",
        "moonshot" => "https://api.moonshot.ai/v1",
        "vllm" => "http://localhost:8000/v1",
        "llamacpp" | "llama.cpp" => "http://localhost:8080/v1",
        "codex" => super::codex::DEFAULT_BASE,
        "typesafe" => "https://api.typesafe.ai/v1",
        "magpie" => "http://127.0.0.1:3425/v1",
        _ => "https://api.openai.com/v1",
    }
}

impl ModelSettings {
    /// From `env` (the host's resolved environment:
    /// `RuntimeSettings::environment`, or `Framework::model_settings`) and
    /// `<home>/config.json`, read now (an edit applies to the next turn).
    pub fn load(home: &Path, env: &Environment) -> Result<ModelSettings, String> {
        let file = match bub_runtime::files::read_settings_file(&bub_runtime::places::config_file(home)) {
            Ok(text) => match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(m)) => m,
                _ => Map::new(), // reported where plugins read it (host.rs)
            },
            Err(_) => Map::new(),
        };
        // A handle on the host's snapshot: the variables are not copied.
        ModelSettings::from_environment(env.clone(), &file)
    }

    /// From explicit sources: `env` wins over `file`.
    pub fn from_sources(env: Vec<(String, String)>, file: &Map<String, Value>) -> Result<ModelSettings, String> {
        ModelSettings::from_environment(Environment::from_pairs(env), file)
    }

    fn from_environment(env: Environment, file: &Map<String, Value>) -> Result<ModelSettings, String> {
        let var = |k: &str| env.get(k).map(str::to_owned);
        let mut s = ModelSettings {
            model: var("BUB_MODEL").or_else(|| file.get("model").and_then(Value::as_str).map(str::to_owned)),
            ..Default::default()
        };
        s.fallback_models = match var("BUB_FALLBACK_MODELS") {
            Some(t) => serde_json::from_value(json_setting(&t, "BUB_FALLBACK_MODELS")?)
                .map_err(|_| "BUB_FALLBACK_MODELS must be a JSON list of model specs".to_owned())?,
            None => {
                file.get("fallback_models").and_then(|v| serde_json::from_value(v.clone()).ok()).unwrap_or_default()
            }
        };
        let str_or_json = |t: String| {
            if t.trim_start().starts_with('{') {
                json_setting(&t, "setting")
            } else {
                Ok(Value::String(t))
            }
        };
        s.api_key = match var("BUB_API_KEY") {
            Some(t) => Some(str_or_json(t)?),
            None => file.get("api_key").cloned(),
        };
        s.api_base = match var("BUB_API_BASE") {
            Some(t) => Some(str_or_json(t)?),
            None => file.get("api_base").cloned(),
        };
        // Per-provider variables fill what the settings left open.
        for (suffix, slot) in [("_API_KEY", &mut s.api_key), ("_API_BASE", &mut s.api_base)] {
            let mut per = Map::new();
            for (k, v) in env.iter() {
                if let Some(p) = k.strip_prefix("BUB_").and_then(|k| k.strip_suffix(suffix)) {
                    if !p.is_empty() && !v.is_empty() {
                        per.insert(p.to_lowercase(), Value::String(v.to_owned()));
                    }
                }
            }
            match slot {
                None if !per.is_empty() => *slot = Some(Value::Object(per)),
                Some(Value::Object(m)) => {
                    for (k, v) in per {
                        m.entry(k).or_insert(v);
                    }
                }
                _ => {}
            }
        }
        s.providers = match var("BUB_PROVIDERS") {
            Some(t) => match json_setting(&t, "BUB_PROVIDERS")? {
                Value::Object(m) => m,
                _ => return Err("BUB_PROVIDERS must be a JSON object: name → {type, api_key?, api_base?}".into()),
            },
            None => file.get("providers").and_then(Value::as_object).cloned().unwrap_or_default(),
        };
        let number = |name: &str, key: &str| -> Result<Option<f64>, String> {
            match var(name) {
                Some(t) => t.trim().parse::<f64>().map(Some).map_err(|_| format!("{name} must be a number, got {t:?}")),
                None => Ok(file.get(key).and_then(Value::as_f64)),
            }
        };
        if let Some(n) = number("BUB_MAX_STEPS", "max_steps")? {
            if n < 1.0 || n.fract() != 0.0 {
                return Err(format!("BUB_MAX_STEPS must be a whole number greater than 0, got {n}"));
            }
            s.max_steps = Some(n as u32);
        }
        if let Some(n) = number("BUB_MAX_TOKENS", "max_tokens")? {
            if n < 1.0 {
                return Err(format!("BUB_MAX_TOKENS must be greater than 0, got {n}"));
            }
            s.max_tokens = n as u64;
        }
        if let Some(n) = number("BUB_MODEL_TIMEOUT_SECONDS", "model_timeout_seconds")? {
            s.model_timeout = (n > 0.0).then(|| bub_kit::time::seconds(n)).flatten();
        }
        let bytes = |env: &str, key: &str| -> Result<Option<u64>, String> {
            match number(env, key)? {
                Some(n) if n < 1024.0 || n.fract() != 0.0 => {
                    Err(format!("{env} must be a whole number of bytes, at least 1024, got {n}"))
                }
                Some(n) => Ok(Some(n.min(u64::MAX as f64) as u64)),
                None => Ok(None),
            }
        };
        if let Some(n) = bytes("BUB_MODEL_MAX_OUTPUT_BYTES", "model_max_output_bytes")? {
            s.stream_limits.max_stream_bytes = n;
        }
        if let Some(n) = bytes("BUB_MODEL_MAX_EVENT_BYTES", "model_max_event_bytes")? {
            s.stream_limits.max_event_bytes = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(n) = bytes("BUB_TOOL_MAX_BYTES", "tool_max_bytes")? {
            s.tool_max_bytes = usize::try_from(n).unwrap_or(usize::MAX);
        }
        for (name, key, slot) in [
            ("BUB_CLIENT_ARGS", "client_args", &mut s.client_args),
            ("BUB_COMPLETION_ARGS", "completion_args", &mut s.completion_args),
        ] {
            let v = match var(name) {
                Some(t) => json_setting(&t, name)?,
                None => file.get(key).cloned().unwrap_or(Value::Null),
            };
            *slot = match v {
                Value::Object(m) => m,
                Value::Null => Map::new(),
                _ => return Err(format!("{name} must be a JSON object")),
            };
        }
        if let Some(p) =
            var("BUB_COMMAND_PREFIX").or_else(|| file.get("command_prefix").and_then(Value::as_str).map(str::to_owned))
        {
            if p.is_empty() || p.chars().any(char::is_whitespace) {
                return Err(format!("BUB_COMMAND_PREFIX must be non-empty and without whitespace, got {p:?}"));
            }
            s.command_prefix = p;
        }
        match var("BUB_COMMAND_CHANNELS") {
            Some(list) => {
                s.command_channels = list.split(',').map(|c| c.trim().to_owned()).filter(|c| !c.is_empty()).collect()
            }
            None => match file.get("command_channels") {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    s.command_channels = items.iter().filter_map(Value::as_str).map(str::to_owned).collect()
                }
                Some(_) => return Err("command_channels in config.json must be a list of channel names".into()),
            },
        }
        s.confine_workspace = match var("BUB_CONFINE_WORKSPACE") {
            Some(v) => matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"),
            None => matches!(file.get("confine_workspace"), Some(Value::Bool(true))),
        };
        match var("BUB_SEARCH_OPEN_CHANNELS") {
            Some(list) => {
                s.search.open_channels =
                    list.split(',').map(|c| c.trim().to_owned()).filter(|c| !c.is_empty()).collect()
            }
            None => match file.get("search_open_channels") {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    s.search.open_channels = items.iter().filter_map(Value::as_str).map(str::to_owned).collect()
                }
                Some(_) => return Err("search_open_channels in config.json must be a list of channel names".into()),
            },
        }
        match var("BUB_PEOPLE") {
            Some(t) => {
                s.search.people =
                    crate::sessions::SearchScope::people_from(&json_setting(&t, "BUB_PEOPLE")?, "BUB_PEOPLE")?
            }
            None => {
                if let Some(people) = file.get("people").filter(|v| !v.is_null()) {
                    s.search.people = crate::sessions::SearchScope::people_from(people, "people in config.json")?;
                }
            }
        }
        if let Some(t) = var("BUB_TOOL_TIMEOUT_SECONDS") {
            s.tool_timeout = bub_runtime::settings::parse_seconds(&t, 600.0);
        }
        if let Some(n) = number("BUB_MAX_TOOL_CONCURRENCY", "max_tool_concurrency")? {
            if n < 1.0 || n.fract() != 0.0 {
                return Err(format!("BUB_MAX_TOOL_CONCURRENCY must be a whole number of at least 1, got {n}"));
            }
            s.max_tool_concurrency = Some(n.min(1e6) as usize);
        }
        if let Some(n) = number("BUB_CONTEXT_BUDGET_TOKENS", "context_budget_tokens")? {
            if n < 0.0 || n.fract() != 0.0 {
                return Err(format!(
                    "BUB_CONTEXT_BUDGET_TOKENS must be a whole number of tokens (0: fold only when the provider refuses), got {n}"
                ));
            }
            s.context_budget_tokens = Some(n.min(u64::MAX as f64) as u64);
        }
        if let Some(t) = var("BUB_SPILL_THRESHOLD") {
            s.spill_threshold = t.trim().parse().unwrap_or(4096);
        }
        if env.iter().any(|(k, v)| k == "BUB_COMMAND_PREFIX" && v.is_empty()) {
            return Err("BUB_COMMAND_PREFIX must be non-empty and without whitespace, got \"\"".into());
        }
        s.env = env;
        Ok(s)
    }

    /// The context budget for `spec` in tokens (semantics §A2.9): the
    /// setting, else ¾ of the model's window where its options say it (a
    /// custom provider's `context_window`, else `client_args`'), else
    /// [`DEFAULT_CONTEXT_BUDGET`]. ¾ leaves room for the answer and for
    /// the estimate's error. 0: fold only when the provider refuses.
    pub fn context_budget(&self, spec: &str) -> u64 {
        if let Some(n) = self.context_budget_tokens {
            return n;
        }
        match self.context_window(spec) {
            Some(w) => w / 4 * 3,
            None => DEFAULT_CONTEXT_BUDGET,
        }
    }

    /// The model's context window (prompt and answer together) as its
    /// options say it: a custom provider's `context_window`, else
    /// `client_args`'. None when unsaid (or 0).
    pub fn context_window(&self, spec: &str) -> Option<u64> {
        let provider = spec.split_once(':').map_or(spec, |(p, _)| p);
        let window = |m: Option<&Map<String, Value>>| m.and_then(|m| m.get("context_window")).and_then(Value::as_u64);
        let custom = self.providers.get(provider).and_then(Value::as_object);
        window(custom).or_else(|| window(Some(&self.client_args))).filter(|w| *w > 0)
    }

    /// Whether the budget for `spec` comes from what the user said (the
    /// setting, or the model's `context_window`) rather than the default
    /// guess: only then is a message other than a tool result shortened to
    /// fit it (a 200 KB paste to a model with a 200K window must reach it
    /// whole).
    pub fn knows_budget(&self, spec: &str) -> bool {
        self.context_budget_tokens.is_some() || self.context_window(spec).is_some()
    }

    /// The model a turn uses when nothing else names one.
    pub fn default_model(&self) -> String {
        self.model.clone().unwrap_or_else(|| "echo".into())
    }

    /// `spec` as a client: provider split at the first `:`, custom providers
    /// resolved, credentials looked up (custom provider → settings →
    /// `<P>_API_KEY` → provider default).
    pub fn client(&self, spec: &str) -> Result<ModelClient, ProviderError> {
        let (provider, model) = match spec.split_once(':') {
            Some((p, m)) => (p.to_owned(), m.to_owned()),
            None if spec == "echo" => ("echo".to_owned(), String::new()),
            None => {
                return Err(ProviderError::Config(format!(
                    "model {spec:?} has no provider: write it as provider:model (e.g. openai:gpt-4o-mini)"
                )))
            }
        };
        let custom = self.providers.get(&provider).and_then(Value::as_object);
        let provider = if custom.is_some() { provider } else { provider.to_lowercase() };
        let kind = custom
            .and_then(|c| c.get("type").and_then(Value::as_str))
            .map(str::to_lowercase)
            .unwrap_or_else(|| provider.clone());
        let prefix = provider.to_uppercase().replace('-', "_");
        let pick = |own: Option<&Value>, setting: &Option<Value>, env_name: String| -> Option<String> {
            own.and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| match setting {
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(Value::Object(m)) => m
                        .get(&provider.to_lowercase())
                        .or_else(|| m.get(&provider))
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    _ => None,
                })
                .or_else(|| self.env.get(&env_name).map(str::to_owned))
        };
        let api_key = pick(custom.and_then(|c| c.get("api_key")), &self.api_key, format!("{prefix}_API_KEY"));
        let base = pick(custom.and_then(|c| c.get("api_base")), &self.api_base, format!("{prefix}_API_BASE"))
            .unwrap_or_else(|| default_base(&kind).to_owned());
        let args = &self.client_args;
        let config = ProviderConfig {
            kind,
            base_url: base.trim_end_matches('/').to_owned(),
            api_key,
            api_format: args.get("api_format").and_then(Value::as_str).map(str::to_owned),
            headers: args.get("headers").and_then(Value::as_object).cloned().unwrap_or_default(),
            extra_body: args.get("extra_body").and_then(Value::as_object).cloned().unwrap_or_default(),
            max_retries: args.get("max_retries").and_then(Value::as_u64).unwrap_or(2) as u32,
            retry_delay: args.get("retry_delay").and_then(seconds).unwrap_or(Duration::from_millis(500)),
            max_retry_delay: args.get("max_retry_delay").and_then(seconds).unwrap_or(Duration::from_secs(60)),
            http_timeout: args.get("timeout").and_then(seconds).unwrap_or(Duration::from_secs(600)),
            call_timeout: self.model_timeout,
            stream_limits: self.stream_limits,
            clients: self.clients.clone(),
            codex: None,
        };
        let mut config = config;
        if config.kind == "codex" {
            let var = |k: &str| self.env.get(k).map(str::to_owned);
            config.codex = Some(super::codex::CodexAuth::from_env(var));
        }
        Ok(ModelClient { spec: spec.to_owned(), provider, model, config })
    }

    /// The candidates for a call to `spec`: it, then the fallbacks when it
    /// is the configured model (an explicit other model gets none).
    pub fn candidates(&self, spec: &str) -> Vec<String> {
        let mut out = vec![spec.to_owned()];
        if self.model.as_deref() == Some(spec) {
            out.extend(self.fallback_models.iter().cloned());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// Every model call is bounded by default; 0 lifts the
    /// deadline, and byte limits below 1 KiB are refused as mistakes.
    #[test]
    fn model_calls_are_bounded_by_default_and_the_limits_are_settings() {
        let s = ModelSettings::from_sources(env(&[]), &Map::new()).unwrap();
        let c = s.client("openai:m").unwrap().config;
        assert_eq!(c.call_timeout, Some(DEFAULT_MODEL_TIMEOUT));
        assert_eq!(c.stream_limits, bub_sse::Limits::default());
        let s = ModelSettings::from_sources(
            env(&[("BUB_MODEL_TIMEOUT_SECONDS", "0"), ("BUB_MODEL_MAX_OUTPUT_BYTES", "4096")]),
            &serde_json::json!({"model_max_event_bytes": 2048}).as_object().unwrap().clone(),
        )
        .unwrap();
        let c = s.client("openai:m").unwrap().config;
        assert_eq!(c.call_timeout, None);
        assert_eq!(c.stream_limits, bub_sse::Limits { max_event_bytes: 2048, max_stream_bytes: 4096 });
        let err = ModelSettings::from_sources(env(&[("BUB_MODEL_MAX_EVENT_BYTES", "10")]), &Map::new()).unwrap_err();
        assert!(err.contains("BUB_MODEL_MAX_EVENT_BYTES must be a whole number of bytes, at least 1024"), "{err}");
    }

    #[test]
    fn the_model_id_keeps_everything_after_the_first_colon_behaviour_215() {
        let s = ModelSettings::from_sources(env(&[]), &Map::new()).unwrap();
        let c = s.client("openai:model:variant").unwrap();
        assert_eq!((c.provider.as_str(), c.model.as_str()), ("openai", "model:variant"));
    }

    #[test]
    fn per_provider_keys_and_global_keys_behaviour_229_230() {
        let s = ModelSettings::from_sources(env(&[("BUB_OPENAI_API_KEY", "sk-bub")]), &Map::new()).unwrap();
        assert_eq!(s.api_key, Some(serde_json::json!({"openai": "sk-bub"})));
        let s = ModelSettings::from_sources(
            env(&[("BUB_API_KEY", "sk-global"), ("BUB_OPENAI_API_BASE", "http://x/v1/")]),
            &Map::new(),
        )
        .unwrap();
        assert_eq!(s.api_key, Some(Value::String("sk-global".into())));
        assert_eq!(s.client("openai:m").unwrap().config.base_url, "http://x/v1");
        let s = ModelSettings::from_sources(env(&[("OPENAI_API_KEY", "sk-env")]), &Map::new()).unwrap();
        assert_eq!(s.client("openai:m").unwrap().config.api_key.as_deref(), Some("sk-env"));
        let s = ModelSettings::from_sources(
            env(&[("OPENAI_API_KEY", "sk-env"), ("BUB_OPENAI_API_KEY", "sk-bub")]),
            &Map::new(),
        )
        .unwrap();
        assert_eq!(s.client("openai:m").unwrap().config.api_key.as_deref(), Some("sk-bub"));
    }

    #[test]
    fn invalid_settings_are_refused_behaviour_112_174() {
        for bad in [("BUB_MAX_STEPS", "0"), ("BUB_COMMAND_PREFIX", "! a"), ("BUB_COMMAND_PREFIX", "")] {
            assert!(ModelSettings::from_sources(env(&[bad]), &Map::new()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn fallbacks_only_for_the_configured_model_behaviour_228() {
        let s = ModelSettings::from_sources(
            env(&[("BUB_MODEL", "relay:a"), ("BUB_FALLBACK_MODELS", "[\"openai:gpt-5\"]")]),
            &Map::new(),
        )
        .unwrap();
        assert_eq!(s.candidates("relay:a"), vec!["relay:a", "openai:gpt-5"]);
        assert_eq!(s.candidates("openai:other"), vec!["openai:other"]);
    }
}
