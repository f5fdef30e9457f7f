//! ChatGPT plan access through Codex's Responses endpoint (`codex:<model>`),
//! as Republic's `codex` provider does it, so a user who logged in with
//! `bub login codex` (or the Codex CLI itself) runs turns without an API key.
//!
//! The credentials are the Codex CLI's own file store,
//! `$CODEX_HOME/auth.json` (`~/.codex/auth.json`): read before every
//! request, so a login or a refresh by another process applies at once.
//! An access token that expires within a minute is refreshed with its
//! refresh token at OpenAI's token endpoint (the Codex CLI's public OAuth
//! client), and the new tokens are written back atomically, owner-only,
//! keeping every other field of the file. Refreshes are serialized in the
//! process: a refresh token is single-use, and a gateway's concurrent turns
//! must not spend it twice.
//!
//! `CODEX_REFRESH_TOKEN_URL_OVERRIDE` points the refresh elsewhere — the
//! Codex CLI's own variable for the same thing, so one setting moves both.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use serde_json::{json, Map, Value};

use super::ProviderError;

/// Where Codex's Responses endpoint lives.
pub const DEFAULT_BASE: &str = "https://chatgpt.com/backend-api/codex";
/// OpenAI's token endpoint, where Codex logins are refreshed.
pub const TOKEN_URL: &str = "https://auth.openai.com/oauth/token";
/// The Codex CLI's public OAuth client (no secret: `token_endpoint_auth_method=none`).
pub const CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";
/// The variable that moves the token endpoint (the Codex CLI's own).
pub const TOKEN_URL_OVERRIDE: &str = "CODEX_REFRESH_TOKEN_URL_OVERRIDE";
/// What a request's body needs for Codex: the instructions it requires.
pub const DEFAULT_INSTRUCTIONS: &str = "You are Codex.";
/// A token this close to its expiry is refreshed first (authlib's leeway).
const LEEWAY_SECONDS: i64 = 60;

/// Where a Codex login is kept and refreshed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodexAuth {
    /// `$CODEX_HOME/auth.json`.
    pub file: PathBuf,
    /// The token endpoint.
    pub token_url: String,
}

/// What a request carries: the bearer token and the ChatGPT account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// `Authorization: Bearer …`.
    pub access_token: String,
    /// `ChatGPT-Account-Id`.
    pub account_id: String,
}

/// `$CODEX_HOME` as `var` says it, else `~/.codex`.
pub fn codex_home(var: impl Fn(&str) -> Option<String>) -> PathBuf {
    match var("CODEX_HOME").filter(|h| !h.is_empty()) {
        Some(home) => expand_home(&home, &var),
        None => expand_home("~/.codex", &var),
    }
}

fn expand_home(path: &str, var: &impl Fn(&str) -> Option<String>) -> PathBuf {
    match path.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => {
            PathBuf::from(var("HOME").unwrap_or_default()).join(rest.trim_start_matches('/'))
        }
        _ => PathBuf::from(path),
    }
}

fn auth_error(text: &str) -> ProviderError {
    ProviderError::Auth(text.to_owned())
}

impl CodexAuth {
    /// The login under `$CODEX_HOME` (`~/.codex`), refreshed at
    /// [`TOKEN_URL`] unless [`TOKEN_URL_OVERRIDE`] says otherwise.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> CodexAuth {
        CodexAuth {
            file: codex_home(&var).join("auth.json"),
            token_url: var(TOKEN_URL_OVERRIDE).filter(|u| !u.is_empty()).unwrap_or_else(|| TOKEN_URL.to_owned()),
        }
    }

    /// The credentials for one request: read from the file now, refreshed
    /// first when the token expires within a minute.
    pub async fn credentials(&self) -> Result<Credentials, ProviderError> {
        let (data, token) = read_credentials(&self.file)?;
        if !token.expired() {
            return Ok(token.credentials(&data));
        }
        // One refresh at a time in this process; the file is read again
        // inside, so a refresh that just happened is used, not repeated.
        static REFRESHING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let _one = REFRESHING.lock().await;
        let (mut data, token) = read_credentials(&self.file)?;
        if !token.expired() {
            return Ok(token.credentials(&data));
        }
        let fresh = self.refresh(&token).await?;
        let stored = data["tokens"].as_object_mut().expect("checked by read_credentials");
        for key in ["access_token", "refresh_token", "id_token"] {
            if let Some(v) = fresh.fields.get(key) {
                stored.insert(key.into(), v.clone());
            }
        }
        match fresh.expires_at {
            Some(at) => stored.insert("expires_at".into(), json!(python_isoformat(at, false))),
            None => stored.remove("expires_at"),
        };
        data["last_refresh"] = json!(python_isoformat(jiff::Timestamp::now().as_microsecond(), true));
        save_credentials(&self.file, &data).map_err(|e| {
            auth_error(&format!("Cannot save the refreshed Codex token to {}: {e}", self.file.display()))
        })?;
        Ok(fresh.credentials(&data))
    }

    /// Trades the refresh token for new tokens (an OAuth refresh grant by
    /// the public client, as authlib sends it).
    async fn refresh(&self, token: &Token) -> Result<Token, ProviderError> {
        let refresh_token = token
            .fields
            .get("refresh_token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| auth_error("Codex token has expired and has no refresh token"))?;
        let failed = || auth_error("Cannot refresh the Codex token");
        let body = form(&[("grant_type", "refresh_token"), ("refresh_token", refresh_token), ("client_id", CLIENT_ID)]);
        let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().map_err(|_| failed())?;
        let resp = client
            .post(&self.token_url)
            .header("content-type", "application/x-www-form-urlencoded;charset=UTF-8")
            .header("accept", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|_| failed())?;
        if resp.status().is_server_error() {
            return Err(failed());
        }
        // An answer of a few tokens; a hostile endpoint's endless body is cut.
        let bytes = resp.bytes().await.map_err(|_| failed())?;
        if bytes.len() > 1 << 20 {
            return Err(failed());
        }
        let Ok(Value::Object(mut answer)) = serde_json::from_slice::<Value>(&bytes) else { return Err(failed()) };
        if answer.contains_key("error") {
            return Err(failed());
        }
        if answer.get("access_token").and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(auth_error("Codex refresh returned no access token"));
        }
        answer.entry("refresh_token").or_insert_with(|| json!(refresh_token));
        if let Some(id) = token.fields.get("id_token") {
            answer.entry("id_token").or_insert_with(|| id.clone());
        }
        // authlib: an answer's `expires_in` counts from now.
        let now = jiff::Timestamp::now().as_second();
        if !answer.contains_key("expires_at") {
            if let Some(n) = answer.get("expires_in").and_then(number) {
                answer.insert("expires_at".into(), json!(now + n));
            }
        }
        let expires_at = expires_at(&answer);
        Ok(Token { fields: answer, expires_at })
    }
}

/// The login in `file` as a request would use it (not refreshed): what
/// `bub login codex` reports after the Codex CLI wrote it.
pub fn read_login(file: &Path) -> Result<Credentials, ProviderError> {
    let (data, token) = read_credentials(file)?;
    Ok(token.credentials(&data))
}

/// The tokens of a login, with their expiry (seconds since the epoch).
struct Token {
    fields: Map<String, Value>,
    expires_at: Option<i64>,
}

impl Token {
    fn expired(&self) -> bool {
        self.expires_at.is_some_and(|at| at - LEEWAY_SECONDS < jiff::Timestamp::now().as_second())
    }

    fn credentials(&self, data: &Value) -> Credentials {
        Credentials {
            access_token: self.fields["access_token"].as_str().unwrap_or_default().to_owned(),
            account_id: data["tokens"]["account_id"].as_str().unwrap_or_default().to_owned(),
        }
    }
}

/// The file and its tokens, in Republic's words when unusable.
fn read_credentials(path: &Path) -> Result<(Value, Token), ProviderError> {
    let unreadable = || auth_error("Cannot read Codex credentials; run codex login with file storage");
    // A login file is a few KB; anything far bigger is not one.
    let text = bub_runtime::files::read_settings_file(path).map_err(|_| unreadable())?;
    let data: Value = serde_json::from_str(&text).map_err(|_| unreadable())?;
    let Some(stored) = data.get("tokens").and_then(Value::as_object) else {
        return Err(auth_error("Codex credentials must contain a ChatGPT login"));
    };
    let present = |k: &str| stored.get(k).and_then(Value::as_str).is_some_and(|s| !s.is_empty());
    if !present("access_token") || !present("account_id") {
        return Err(auth_error("Codex credentials are missing an access token or account ID"));
    }
    let fields: Map<String, Value> = ["access_token", "refresh_token", "id_token"]
        .into_iter()
        .filter_map(|k| stored.get(k).map(|v| (k.to_owned(), v.clone())))
        .collect();
    let expires_at = expires_at(stored);
    Ok((data, Token { fields, expires_at }))
}

fn number(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
}

/// A token's expiry: its `expires_at` (seconds, or an ISO 8601 date), else
/// the access token's JWT `exp` claim (read, never verified: the server
/// verifies the token).
fn expires_at(stored: &Map<String, Value>) -> Option<i64> {
    match stored.get("expires_at") {
        Some(v @ Value::Number(_)) => return number(v),
        Some(Value::String(s)) => {
            if let Some(at) = parse_iso(s) {
                return Some(at);
            }
        }
        _ => {}
    }
    let token = stored.get("access_token")?.as_str()?;
    let payload = token.split('.').nth(1)?;
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: Value = serde_json::from_slice(&bytes).ok()?;
    claims.get("exp").and_then(number)
}

/// An ISO 8601 date as Python's `datetime.fromisoformat` reads one (a date
/// without an offset is taken as UTC).
fn parse_iso(text: &str) -> Option<i64> {
    if let Ok(ts) = text.parse::<jiff::Timestamp>() {
        return Some(ts.as_second());
    }
    let civil: jiff::civil::DateTime = text.parse().ok()?;
    Some(civil.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp().as_second())
}

/// A time as Python's `datetime.fromtimestamp(t, UTC).isoformat()`:
/// `2026-12-06T13:25:00+00:00`, with microseconds when `micros` says so
/// and there are any.
fn python_isoformat(at: i64, micros: bool) -> String {
    let ts = if micros {
        jiff::Timestamp::from_microsecond(at).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
    } else {
        jiff::Timestamp::from_second(at).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
    };
    let fraction = ts.subsec_microsecond();
    let base = ts.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    if fraction == 0 {
        format!("{base}+00:00")
    } else {
        format!("{base}.{fraction:06}+00:00")
    }
}

/// `application/x-www-form-urlencoded`, as authlib writes it.
fn form(pairs: &[(&str, &str)]) -> String {
    let encode = |s: &str| {
        let mut out = String::new();
        for b in s.bytes() {
            match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(b as char),
                b' ' => out.push('+'),
                _ => out.push_str(&format!("%{b:02X}")),
            }
        }
        out
    };
    pairs.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect::<Vec<_>>().join("&")
}

/// Writes the login file as Python's `json.dump(indent=2)` and a newline,
/// through an owner-only temporary file in the same folder, renamed over it.
fn save_credentials(path: &Path, data: &Value) -> std::io::Result<()> {
    let mut text = serde_json::to_string_pretty(data).map_err(std::io::Error::other)?;
    text.push('\n');
    bub_kit::files::write_private(path, text.as_bytes())
}

/// Codex's changes to a Responses body, as Republic makes them: always
/// streamed, never stored, `instructions` given, encrypted reasoning
/// returned; an output limit is refused (Bub sends none to Codex).
pub fn adjust_body(body: &mut Map<String, Value>) -> Result<(), ProviderError> {
    if body.contains_key("max_output_tokens") {
        return Err(ProviderError::Config("Codex does not support max_tokens".into()));
    }
    body.insert("stream".into(), json!(true));
    body.insert("store".into(), json!(false));
    body.entry("instructions").or_insert_with(|| json!(DEFAULT_INSTRUCTIONS));
    let mut include: Vec<Value> = body.get("include").and_then(Value::as_array).cloned().unwrap_or_default();
    if !include.iter().any(|v| v == "reasoning.encrypted_content") {
        include.push(json!("reasoning.encrypted_content"));
    }
    body.insert("include".into(), Value::Array(include));
    Ok(())
}

/// The headers Republic's Codex provider sends besides the credentials.
pub const HEADERS: [(&str, &str); 2] = [("OpenAI-Beta", "responses=experimental"), ("originator", "republic")];

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: Value) -> String {
        use base64::Engine as _;
        let part = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        format!("{}.{}.sig", part(&json!({"alg": "none"})), part(&claims))
    }

    /// Expiry comes from `expires_at` (a number or an ISO date), else the
    /// access token's `exp` claim; none means the token never counts as expired.
    #[test]
    fn expiry_is_read_as_republic_reads_it() {
        let stored = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(expires_at(&stored(json!({"expires_at": 1700000000}))), Some(1_700_000_000));
        assert_eq!(expires_at(&stored(json!({"expires_at": "2023-11-14T22:13:20+00:00"}))), Some(1_700_000_000));
        assert_eq!(expires_at(&stored(json!({"expires_at": "2023-11-14T22:13:20"}))), Some(1_700_000_000));
        let token = jwt(json!({"exp": 1_800_000_000}));
        assert_eq!(expires_at(&stored(json!({"access_token": token}))), Some(1_800_000_000));
        assert_eq!(expires_at(&stored(json!({"access_token": "opaque"}))), None);
    }

    #[test]
    fn dates_are_written_as_python_isoformat_writes_them() {
        assert_eq!(python_isoformat(1_700_000_000, false), "2023-11-14T22:13:20+00:00");
        assert_eq!(python_isoformat(1_700_000_000_123_456, true), "2023-11-14T22:13:20.123456+00:00");
        assert_eq!(python_isoformat(1_700_000_000_000_000, true), "2023-11-14T22:13:20+00:00");
    }

    #[test]
    fn the_refresh_form_is_urlencoded() {
        assert_eq!(form(&[("a", "x y/+"), ("b", "é")]), "a=x+y%2F%2B&b=%C3%A9");
    }

    #[test]
    fn codex_bodies_stream_unstored_with_instructions() {
        let mut body = json!({"model": "m", "include": ["x"]}).as_object().unwrap().clone();
        adjust_body(&mut body).unwrap();
        assert_eq!(
            Value::Object(body),
            json!({"model": "m", "include": ["x", "reasoning.encrypted_content"], "stream": true, "store": false,
                   "instructions": "You are Codex."})
        );
        let mut limited = json!({"max_output_tokens": 5}).as_object().unwrap().clone();
        assert!(adjust_body(&mut limited).unwrap_err().to_string().contains("Codex does not support max_tokens"));
    }
}
