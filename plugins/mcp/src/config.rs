//! One server's entry in `mcp.json`, read whole as bub-mcp hands it to
//! fastmcp: a stdio server (`command`, `args`, `env`, `cwd`) or a remote
//! one (`url`, `headers`, `auth`, `transport: "http" | "streamable-http" |
//! "sse"`, `sse_read_timeout`), each with `timeout` (milliseconds per
//! call), `description`, `icon` and `keep_alive`.
//!
//! Why strict: fastmcp keeps unknown keys and goes on, so a misspelt
//! `header` loads the server without its credentials and the user meets a
//! refusal far from the cause. Here an entry with a key bub-rs does not
//! act on is left out with that key named; the file's other servers work.
//! `auth: "oauth"` (a browser sign-in fastmcp runs) is refused the same
//! way, saying what to put instead.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use serde_json::{json, Map, Value};

/// How a server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// A child process speaking on its stdin and stdout.
    Stdio,
    /// Streamable HTTP (MCP 2025-03-26 and later).
    Http,
    /// HTTP with server-sent events (MCP 2024-11-05), for older servers.
    Sse,
}

/// A server's entry, understood.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServerConfig {
    pub command: Option<String>,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    pub url: Option<String>,
    pub transport: Transport,
    /// Sent with every HTTP request (`headers`, then `auth` as a bearer token).
    pub headers: Vec<(String, String)>,
    /// Each tool call's limit (`timeout`, milliseconds).
    pub call_timeout: Option<Duration>,
    /// How long an SSE stream may stay silent (`sse_read_timeout`, seconds).
    pub sse_read_timeout: Option<Duration>,
    pub description: Option<String>,
}

/// The keys a stdio entry may have.
const STDIO_KEYS: &[&str] =
    &["command", "args", "env", "cwd", "transport", "type", "timeout", "keep_alive", "description", "icon"];
/// The keys a remote entry may have.
const REMOTE_KEYS: &[&str] = &[
    "url",
    "transport",
    "type",
    "headers",
    "auth",
    "timeout",
    "sse_read_timeout",
    "keep_alive",
    "description",
    "icon",
];

fn string(entry: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match entry.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("`{key}` must be a string")),
    }
}

fn seconds(v: &Value, key: &str, unit: f64) -> Result<Option<Duration>, String> {
    match v {
        Value::Null => Ok(None),
        v => v
            .as_f64()
            .filter(|n| *n > 0.0)
            .and_then(|n| bub_kit::time::seconds(n / unit))
            .map(Some)
            .ok_or_else(|| format!("`{key}` must be a positive number")),
    }
}

/// Whether `name` may be an HTTP header name (an RFC 9110 token).
fn header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether `value` may be sent as a header value (no line breaks, no
/// control characters but tab).
fn header_value(value: &str) -> bool {
    value.bytes().all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

impl ServerConfig {
    /// Reads one entry; the error names the key at fault and what to do.
    pub fn parse(entry: &Value) -> Result<ServerConfig, String> {
        let Value::Object(entry) = entry else { return Err("an entry must be an object".into()) };
        let url = string(entry, "url")?;
        let command = string(entry, "command")?;
        let declared = match (string(entry, "transport")?, string(entry, "type")?) {
            (Some(t), Some(u)) if t != u => {
                return Err(format!("`transport` ({t:?}) and `type` ({u:?}) disagree: keep one"))
            }
            (t, u) => t.or(u),
        };
        let transport = match (declared.as_deref(), &command, &url) {
            (_, Some(_), Some(_)) => {
                return Err("has both `command` (a stdio server) and `url` (a remote one): keep one".into())
            }
            (None | Some("stdio"), Some(_), None) => Transport::Stdio,
            (Some(t), Some(_), None) => {
                return Err(format!("`transport` {t:?} needs a `url`; a `command` runs over stdio"))
            }
            (Some("http" | "streamable-http" | "streamable_http"), None, Some(_)) => Transport::Http,
            (Some("sse"), None, Some(_)) => Transport::Sse,
            // As fastmcp infers it: a path ending in /sse is the older transport.
            (None, None, Some(u)) if sse_path(u) => Transport::Sse,
            (None, None, Some(_)) => Transport::Http,
            (Some(t), None, Some(_)) => {
                return Err(format!("`transport` {t:?} is not one of \"http\", \"streamable-http\", \"sse\""))
            }
            (_, None, None) => return Err("needs either `command` (a stdio server) or `url` (a remote one)".into()),
        };
        let allowed = if transport == Transport::Stdio { STDIO_KEYS } else { REMOTE_KEYS };
        for key in entry.keys() {
            if allowed.contains(&key.as_str()) {
                continue;
            }
            return Err(match key.as_str() {
                "tools" | "include_tags" | "exclude_tags" => format!(
                    "`{key}` (fastmcp's tool transforms) is not supported by bub-rs: remove it, and the server's \
                     tools are offered as they are"
                ),
                _ => format!(
                    "the key `{key}` is not one bub-rs acts on (a {} server takes {}): remove it or fix its spelling",
                    if transport == Transport::Stdio { "stdio" } else { "remote" },
                    allowed.join(", ")
                ),
            });
        }
        let mut config = ServerConfig {
            command,
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: string(entry, "cwd")?.map(PathBuf::from),
            url: url.clone(),
            transport,
            headers: Vec::new(),
            call_timeout: seconds(entry.get("timeout").unwrap_or(&Value::Null), "timeout", 1000.0)?,
            sse_read_timeout: seconds(entry.get("sse_read_timeout").unwrap_or(&Value::Null), "sse_read_timeout", 1.0)?,
            description: string(entry, "description")?,
        };
        string(entry, "icon")?;
        if !matches!(entry.get("keep_alive"), None | Some(Value::Null | Value::Bool(_))) {
            return Err("`keep_alive` must be true or false".into());
        }
        match entry.get("args") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for item in items {
                    // fastmcp's args are strings; a number is written as one.
                    config.args.push(match item {
                        Value::String(s) => s.clone(),
                        Value::Number(n) => n.to_string(),
                        _ => return Err("`args` must be a list of strings".into()),
                    });
                }
            }
            Some(_) => return Err("`args` must be a list of strings".into()),
        }
        match entry.get("env") {
            None | Some(Value::Null) => {}
            Some(Value::Object(vars)) => {
                for (k, v) in vars {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        Value::Number(_) | Value::Bool(_) => v.to_string(),
                        _ => return Err(format!("`env.{k}` must be a string")),
                    };
                    config.env.insert(k.clone(), v);
                }
            }
            Some(_) => return Err("`env` must be an object of variables".into()),
        }
        match entry.get("headers") {
            None | Some(Value::Null) => {}
            Some(Value::Object(headers)) => {
                for (name, value) in headers {
                    let Some(value) = value.as_str() else { return Err(format!("`headers.{name}` must be a string")) };
                    if !header_name(name) || !header_value(value) {
                        return Err(format!(
                            "`headers.{name}` is not a valid HTTP header (a name of letters, digits and -, a value on one line)"
                        ));
                    }
                    config.headers.push((name.clone(), value.to_owned()));
                }
            }
            Some(_) => return Err("`headers` must be an object of header names and values".into()),
        }
        match string(entry, "auth").map_err(|_| "`auth` must be a string: a bearer token".to_owned())? {
            None => {}
            Some(auth) if auth.eq_ignore_ascii_case("oauth") => {
                return Err("`auth: \"oauth\"` asks for a browser sign-in, which bub-rs does not run: put the \
                            server's access token in `auth` (sent as a bearer token) or an `Authorization` header"
                    .into())
            }
            Some(token) => {
                if token.is_empty() || !header_value(&token) {
                    return Err("`auth` must be a bearer token on one line".into());
                }
                if config.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("authorization")) {
                    return Err("both `auth` and an `Authorization` header: keep one".into());
                }
                config.headers.push(("Authorization".into(), format!("Bearer {token}")));
            }
        }
        Ok(config)
    }

    /// What `bub mcp list` shows for the server (never a credential).
    pub fn target(&self) -> String {
        match (&self.command, &self.url, self.transport) {
            (Some(c), _, _) => format!("stdio: {c} {}", self.args.join(" ")).trim_end().to_owned(),
            (_, Some(u), Transport::Sse) => format!("sse: {u}"),
            (_, Some(u), _) => format!("http: {u}"),
            _ => "invalid".into(),
        }
    }
}

fn sse_path(url: &str) -> bool {
    let path = url.split_once("://").map_or(url, |(_, rest)| rest.split_once('/').map_or("", |(_, p)| p));
    let path = format!("/{}", path.split(['?', '#']).next().unwrap_or(""));
    path.ends_with("/sse") || path.contains("/sse/")
}

/// The entry `bub mcp add` writes for a remote server.
pub(crate) fn remote_entry(
    url: &str,
    transport: Option<&str>,
    headers: Option<&Map<String, Value>>,
    auth: Option<&str>,
) -> Value {
    let mut entry = Map::new();
    entry.insert("url".into(), json!(url));
    if let Some(t) = transport {
        entry.insert("transport".into(), json!(t));
    }
    if let Some(h) = headers.filter(|h| !h.is_empty()) {
        entry.insert("headers".into(), Value::Object(h.clone()));
    }
    if let Some(a) = auth {
        entry.insert("auth".into(), json!(a));
    }
    Value::Object(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<ServerConfig, String> {
        ServerConfig::parse(&v)
    }

    #[test]
    fn fastmcp_entries_are_read_whole() {
        let c = parse(json!({"url": "https://x/mcp", "headers": {"X-Api-Key": "k"}, "auth": "t0k",
                             "timeout": 1500, "description": "d", "icon": "i"}))
        .unwrap();
        assert_eq!(c.transport, Transport::Http);
        assert_eq!(c.headers, [("X-Api-Key".into(), "k".into()), ("Authorization".into(), "Bearer t0k".into())]);
        assert_eq!(c.call_timeout, Some(Duration::from_millis(1500)));
        assert_eq!(parse(json!({"url": "http://h:1/sse"})).unwrap().transport, Transport::Sse);
        assert_eq!(parse(json!({"url": "http://h:1/sse?x=1"})).unwrap().transport, Transport::Sse);
        assert_eq!(parse(json!({"url": "http://h:1/mcp", "transport": "sse"})).unwrap().transport, Transport::Sse);
        assert_eq!(parse(json!({"url": "http://h:1/ssexyz"})).unwrap().transport, Transport::Http);
        let s = parse(json!({"command": "srv", "args": ["a", 1], "env": {"A": "b"}, "cwd": "/tmp", "type": "stdio",
                             "keep_alive": true}))
        .unwrap();
        assert_eq!((s.transport, s.args.clone()), (Transport::Stdio, vec!["a".to_owned(), "1".to_owned()]));
    }

    /// An unknown key, a header where a stdio server has none, or OAuth
    /// leaves the entry out, the error naming the key.
    #[test]
    fn what_bub_rs_would_not_act_on_is_refused_by_name() {
        let err = |v: Value| parse(v).unwrap_err();
        assert!(err(json!({"url": "https://x", "header": {"a": "b"}})).contains("`header`"));
        assert!(err(json!({"command": "x", "headers": {"a": "b"}})).contains("`headers`"));
        assert!(err(json!({"url": "https://x", "auth": "oauth"})).contains("browser sign-in"));
        assert!(err(json!({"url": "https://x", "tools": {}})).contains("tool transforms"));
        assert!(err(json!({"url": "https://x", "headers": {"Bad Name": "v"}})).contains("not a valid HTTP header"));
        assert!(err(json!({"url": "https://x", "headers": {"X": "a\r\nb"}})).contains("not a valid HTTP header"));
        assert!(err(json!({"url": "https://x", "transport": "websocket"})).contains("websocket"));
        assert!(err(json!({"command": "x", "transport": "sse"})).contains("needs a `url`"));
        assert!(err(json!({"url": "https://x", "auth": "a", "headers": {"authorization": "b"}})).contains("keep one"));
    }
}
