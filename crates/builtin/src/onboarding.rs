//! Bub's interactive onboarding (`bub/builtin/onboarding.py`), the builtin's
//! `onboard_config`: the model provider, its URL and key, a connection
//! check that lists the provider's models (`GET <base>/models`, no tokens
//! spent), the model, the gateway's channels and stream output — written as
//! the keys the agent and the gateway read (`model`, `api_base`, `api_key`,
//! `client_args.api_format`, `enabled_channels`, `stream_output`).
//!
//! Answers come one per line from standard input, so it runs without a
//! terminal (`printf 'openai-compatible\nhttp://…/v1\nsk-…\n…' | bub
//! onboard`); an empty line takes the default shown in brackets. Standard
//! input at its end answers every remaining question with its default, and
//! a session that answered nothing changes nothing (and checks no
//! connection). [inferred] Bub's fuzzy menus are numbered lists here (a
//! number or a name is an answer), and a failed check goes on to a manual
//! model ID instead of Bub's edit/retry menu.

use std::io::{BufRead, Write};

use serde_json::{json, Map, Value};

/// Bub's `PROVIDERS`, in its order.
const PROVIDERS: [(&str, &str); 11] = [
    ("openrouter", "OpenRouter (hosted model gateway)"),
    ("openai", "OpenAI (official API)"),
    ("openai-compatible", "OpenAI-compatible (custom URL / local server)"),
    ("anthropic", "Anthropic (Claude API)"),
    ("google", "Google Gemini (native API)"),
    ("azure-openai", "Azure OpenAI (Azure endpoint)"),
    ("ollama", "Ollama (local server)"),
    ("mistral", "Mistral AI"),
    ("deepseek", "DeepSeek"),
    ("magpie", "Magpie (local model gateway)"),
    ("custom", "Other provider"),
];
const OPENAI_BASE: &str = "https://api.openai.com/v1";
const CONNECTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Where the questions go and the answers come from.
pub trait Answers {
    /// The answer to `question` (`None` once the answers have run out).
    fn ask(&mut self, question: &str, default: &str) -> Option<String>;
    /// Tells the user something.
    fn say(&mut self, line: &str);
}

/// Questions on standard error, answers from standard input.
pub struct Stdio;

impl Answers for Stdio {
    fn ask(&mut self, question: &str, default: &str) -> Option<String> {
        let mut err = std::io::stderr();
        let _ = if default.is_empty() { write!(err, "{question}: ") } else { write!(err, "{question} [{default}]: ") };
        let _ = err.flush();
        let mut line = String::new();
        match std::io::stdin().lock().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim().to_owned()),
        }
    }

    fn say(&mut self, line: &str) {
        eprintln!("{line}");
    }
}

/// Asks until answered; the default for an empty answer or none.
struct Session<'a> {
    io: &'a mut dyn Answers,
    answered: bool,
    ended: bool,
}

impl Session<'_> {
    fn ask(&mut self, question: &str, default: &str) -> String {
        if self.ended {
            return default.to_owned();
        }
        match self.io.ask(question, default) {
            None => {
                self.ended = true;
                default.to_owned()
            }
            Some(a) if a.is_empty() => default.to_owned(),
            Some(a) => {
                self.answered = true;
                a
            }
        }
    }

    /// One of `choices` (by number or name).
    fn choose(&mut self, question: &str, choices: &[(String, String)], default: &str) -> String {
        if !self.ended {
            for (i, (_, label)) in choices.iter().enumerate() {
                self.io.say(&format!("  {}. {label}", i + 1));
            }
        }
        loop {
            let answer = self.ask(question, default);
            if let Ok(n) = answer.parse::<usize>() {
                if let Some((name, _)) = choices.get(n.wrapping_sub(1)) {
                    return name.clone();
                }
            }
            if let Some((name, _)) = choices.iter().find(|(n, l)| *n == answer || *l == answer) {
                return name.clone();
            }
            if self.ended {
                return default.to_owned();
            }
            self.io.say(&format!("Choose 1–{} or a name from the list.", choices.len()));
        }
    }

    fn url(&mut self, default: &str, required: bool) -> String {
        self.io.say("Enter the API base URL, including /v1 if required; omit /chat/completions or /models.");
        loop {
            let value = self.ask("API base URL", default).trim_end_matches('/').to_owned();
            if (value.is_empty() && !required) || valid_url(&value) || self.ended {
                return value;
            }
            self.io.say("Enter an http:// or https:// API base URL, without credentials, query or fragment.");
        }
    }
}

/// Bub's `_ask_base` check.
fn valid_url(value: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(value) else { return false };
    matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some_and(|h| !h.is_empty())
        && url.port() != Some(0)
        && url.username().is_empty()
        && url.password().is_none()
        && url.query().is_none()
        && url.fragment().is_none()
        && !value.chars().any(char::is_whitespace)
}

/// The model IDs of `GET <base>/models`, or what went wrong (never the
/// response body or the key: they may hold secrets).
fn discover(provider: &str, base: &str, key: &str) -> Result<Vec<String>, String> {
    let (provider, base, key) = (provider.to_owned(), base.to_owned(), key.to_owned());
    // A thread of its own: the hook may be called from inside a runtime.
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        rt.block_on(async move {
            let client = reqwest::Client::builder().timeout(CONNECTION_TIMEOUT).build().map_err(|e| e.to_string())?;
            let mut request = client.get(format!("{}/models", base.trim_end_matches('/')));
            if provider == "anthropic" {
                request = request.header("x-api-key", &key).header("anthropic-version", "2023-06-01");
            } else if !key.is_empty() {
                request = request.bearer_auth(&key);
            }
            let response = request.send().await.map_err(|e| {
                if e.is_timeout() {
                    format!(
                        "Connection timed out after {} seconds. Check the URL and network.",
                        CONNECTION_TIMEOUT.as_secs()
                    )
                } else {
                    "Could not fetch models. Check the URL, API key and network, or enter a model ID manually.".into()
                }
            })?;
            match response.status().as_u16() {
                401 | 403 => {
                    return Err(format!(
                        "Authentication rejected (HTTP {}). Check the API key and its permissions.",
                        response.status().as_u16()
                    ))
                }
                404 => {
                    return Err(
                        "Models endpoint not found (HTTP 404). Check the base URL, or enter a model ID manually."
                            .into(),
                    )
                }
                s if !(200..300).contains(&s) => {
                    return Err(
                        "Could not fetch models. Check the URL, API key and network, or enter a model ID manually."
                            .into(),
                    )
                }
                _ => {}
            }
            // A model list is kilobytes; an endless answer is refused at 8 MiB.
            let mut response = response;
            let mut body = bub_kit::channel::CappedBody::new(8 << 20);
            while let Some(chunk) = response.chunk().await.map_err(|_| "The models endpoint answered no model list.")? {
                body.push(&chunk)
                    .map_err(|_| "The models endpoint's answer is larger than 8 MiB; enter a model ID manually.")?;
            }
            let body: Value = serde_json::from_slice(&body.into_bytes())
                .map_err(|_| "The models endpoint answered no model list.")?;
            let mut ids: Vec<String> = body["data"]
                .as_array()
                .or_else(|| body["models"].as_array())
                .into_iter()
                .flatten()
                .filter_map(|m| m["id"].as_str().or_else(|| m["name"].as_str()))
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect();
            ids.sort();
            ids.dedup();
            Ok(ids)
        })
    })
    .join()
    .unwrap_or_else(|_| Err("the connection check failed".into()))
}

fn text(config: &Map<String, Value>, key: &str) -> String {
    config.get(key).and_then(Value::as_str).unwrap_or_default().to_owned()
}

/// Bub's `collect_model_config` plus its channel and stream questions: the
/// fragment to merge into `current`.
pub fn collect(current: &Map<String, Value>, io: &mut dyn Answers) -> Map<String, Value> {
    let mut s = Session { io, answered: false, ended: false };
    let model = text(current, "model");
    let (current_provider, current_id) = match model.split_once(':') {
        Some((p, m)) => (p.to_lowercase(), m.to_owned()),
        None => ("openrouter".to_owned(), model.clone()),
    };
    let current_base = text(current, "api_base");
    let default_choice = if current_provider == "openai" && !current_base.is_empty() && current_base != OPENAI_BASE {
        "openai-compatible".to_owned()
    } else {
        current_provider.clone()
    };
    let mut choices: Vec<(String, String)> = PROVIDERS.iter().map(|(n, l)| (n.to_string(), l.to_string())).collect();
    if !choices.iter().any(|(n, _)| *n == default_choice) {
        choices.push((default_choice.clone(), default_choice.clone()));
    }
    let choice = s.choose("LLM provider", &choices, &default_choice);
    let provider = match choice.as_str() {
        "openai-compatible" => "openai".to_owned(),
        "custom" => s.ask("Custom provider", "").to_lowercase(),
        other => other.to_owned(),
    };
    // Scalar credentials belong to the current provider.
    let same = provider == current_provider;
    let mut base = if same { current_base.clone() } else { String::new() };
    let mut key = if same { text(current, "api_key") } else { String::new() };
    if choice == "openai" && !base.is_empty() && base != OPENAI_BASE {
        base = OPENAI_BASE.to_owned();
    }
    let default = bub_agent::provider::settings::default_base(&provider);
    let asks_base = matches!(choice.as_str(), "openai-compatible" | "custom")
        || matches!(provider.as_str(), "azure-openai" | "ollama" | "magpie")
        || (choice != "openai" && !base.is_empty() && base != default);
    s.io.say(&if base.is_empty() {
        format!("Default API endpoint: {default}")
    } else {
        format!("API endpoint: {base}")
    });
    if asks_base {
        let required = choice == "openai-compatible" || provider == "azure-openai";
        let previous = base.clone();
        base = s.url(&base, required);
        if base != previous {
            key.clear();
        }
    }
    s.io.say("Leave the API key blank to keep the current key or use environment credentials.");
    let question = if key.is_empty() { "API key (optional)" } else { "API key (Enter to keep current key)" };
    let answer = s.ask(question, "");
    if !answer.is_empty() {
        key = answer;
    }
    let mut models = Vec::new();
    if s.answered {
        s.io.say("Checking connection and fetching models...");
        let endpoint = if base.is_empty() { default.to_owned() } else { base.clone() };
        match discover(&provider, &endpoint, &key) {
            Ok(found) => {
                s.io.say(&format!("Models endpoint reachable: found {} models.", found.len()));
                models = found;
            }
            Err(why) => s.io.say(&why),
        }
    }
    let id_default = if same && (models.is_empty() || models.contains(&current_id)) {
        current_id.clone()
    } else {
        models.first().cloned().unwrap_or_default()
    };
    let id = if models.is_empty() {
        loop {
            let id = s.ask("LLM model", &id_default);
            if !id.is_empty() || s.ended {
                break id;
            }
            s.io.say("Please enter a value.");
        }
    } else {
        s.io.say("Choose a chat model with tool support. Model calls have not been tested.");
        let listed: Vec<(String, String)> = models.iter().map(|m| (m.clone(), m.clone())).collect();
        s.choose("LLM model", &listed, &id_default)
    };
    let channels_default = match current.get("enabled_channels") {
        Some(Value::String(c)) => c.clone(),
        Some(Value::Array(c)) => c.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","),
        _ => "all".to_owned(),
    };
    let channels = s.ask("Channels (comma-separated names, or all)", &channels_default);
    let stream_default = current.get("stream_output").is_some_and(bub_kit::envelope::truthy);
    let stream = s.ask("Stream output (y/n)", if stream_default { "y" } else { "n" });
    let stream = matches!(stream.to_lowercase().as_str(), "y" | "yes" | "true" | "1");

    let mut fragment = Map::new();
    if !s.answered {
        return fragment;
    }
    if !id.is_empty() {
        fragment.insert("model".into(), json!(format!("{provider}:{id}")));
    }
    for (name, value) in [("api_base", &base), ("api_key", &key)] {
        if !value.is_empty() || current.contains_key(name) {
            fragment.insert(name.into(), if value.is_empty() { Value::Null } else { json!(value) });
        }
    }
    if choice == "openai-compatible" {
        let mut args = current.get("client_args").and_then(Value::as_object).cloned().unwrap_or_default();
        args.insert("api_format".into(), json!("chat"));
        fragment.insert("client_args".into(), Value::Object(args));
    }
    fragment.insert("enabled_channels".into(), json!(channels));
    fragment.insert("stream_output".into(), json!(stream));
    fragment
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scripted(Vec<&'static str>, Vec<String>);

    impl Answers for Scripted {
        fn ask(&mut self, question: &str, _default: &str) -> Option<String> {
            self.1.push(question.to_owned());
            if self.0.is_empty() {
                None
            } else {
                Some(self.0.remove(0).to_owned())
            }
        }
        fn say(&mut self, _line: &str) {}
    }

    #[test]
    fn no_answers_change_nothing() {
        let mut io = Scripted(vec![], vec![]);
        assert!(collect(&Map::new(), &mut io).is_empty());
    }

    #[test]
    fn a_custom_url_is_validated_and_sets_the_chat_format() {
        // Port 9 (discard): the check fails at once and the model is typed.
        let mut io = Scripted(
            vec!["3", "ftp://x", "http://127.0.0.1:9/v1", "sk-1", "local-model", "telegram,!cli", "y"],
            vec![],
        );
        let fragment = collect(&Map::new(), &mut io);
        assert_eq!(
            Value::Object(fragment),
            json!({"model": "openai:local-model", "api_base": "http://127.0.0.1:9/v1", "api_key": "sk-1",
                   "client_args": {"api_format": "chat"}, "enabled_channels": "telegram,!cli", "stream_output": true})
        );
        assert_eq!(io.1.iter().filter(|q| q.as_str() == "API base URL").count(), 2, "the ftp URL was refused");
    }
}
