//! `mcp`: the tools of MCP servers as Bub agent tools.
//!
//! Servers are listed in `$BUB_HOME/mcp.json`, in the format most MCP
//! clients share:
//!
//! ```json
//! {"mcpServers": {
//!   "files": {"command": "mcp-server-files", "args": ["/srv"], "env": {"LOG": "warn"}},
//!   "search": {"url": "https://example.com/mcp"}
//! }}
//! ```
//!
//! A `command` is a stdio server (started as a child process, stopped with
//! the scope); a `url` a remote one: streamable HTTP, or the older HTTP with
//! server-sent events (`transport: "sse"`, or a URL path ending in `/sse`,
//! as fastmcp infers it; see [`sse`]). Each entry is read whole as bub-mcp
//! hands it to fastmcp — `headers`, `auth` (a bearer token), `cwd`,
//! `timeout`, `sse_read_timeout`, … — and an entry with a key bub-rs does
//! not act on is left out, naming the key ([`config`]). A stdio server gets only a
//! safe set of bub's environment (`HOME`, `LOGNAME`, `PATH`, `SHELL`,
//! `TERM`, `USER`, as the official TypeScript and Python SDKs pass, plus
//! `LANG`, `LC_ALL`, `TMPDIR`) and what its `env` names: never bub's API
//! keys. Each `running()` scope (a
//! `bub run`, a `bub chat` session, a gateway's life) connects to every
//! server at once when it opens (`provide_lifespan`); a server that cannot
//! be reached within `connect_timeout_seconds` (config, 30) is reported and
//! left out, the others work. Their tools are offered as
//! `mcp.<server>_<tool>` (the model sees `mcp_<server>_<tool>`), with the
//! server's description and argument schema; a result's text parts are the
//! tool's output, an error result fails the call with its text.
//!
//! Bounds: a stdio server's message over `max_message_bytes` (config,
//! 16 MiB) fails the call it answers at once, saying so (rmcp alone drops
//! it and the call waits for its deadline); a streamable-HTTP server's
//! answer (a JSON body or one SSE event) over it closes the connection
//! (rmcp's own limits, set to ours) and fails the call naming the setting;
//! a server runs in its own
//! process group, killed whole when it is left out (no answer in time) or
//! its scope closes, so a server started through `npx` or a shell leaves
//! nothing behind; a tool whose name is not 1–64 of `A–Z a–z 0–9 _ - .` is
//! left out with a warning (names reach the model, logs and terminals).
//!
//! `bub mcp list [--tools]`, `bub mcp add NAME --command "prog args…"` or
//! `--url URL`, `bub mcp remove NAME` edit the file (under a lock).
//!
//! Built on `rmcp`, the official Rust MCP SDK. TLS for `https://` servers
//! is rustls with the ring provider.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use bub_abi::{
    resources::{Command, Fut, Lifespan, Tool},
    types::{CommandArg, CommandSpec, ErrorInfo, ToolSpec},
    BoxError, Object, Plugin, PluginContext,
};
use rmcp::{
    model::CallToolRequestParams,
    service::{RoleClient, RunningService},
    transport::StreamableHttpClientTransport,
    ServiceExt,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

mod config;
mod output;
mod sse;
mod tasks;

use config::{ServerConfig, Transport};

/// The plugin.
pub struct Mcp {
    home: PathBuf,
    workspace: PathBuf,
    limits: Limits,
    connected: Arc<Mutex<Vec<Arc<Server>>>>,
}

/// What a connection may take.
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// To start a session and list the tools (`connect_timeout_seconds`).
    timeout: Duration,
    /// One message from a stdio server (`max_message_bytes`).
    max_message: usize,
}

/// A stdio server's process group, killed whole when dropped.
struct ServerProcess {
    child: tokio::process::Child,
    group: Option<rustix::process::Pid>,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(group) = self.group {
            // Gone already (ESRCH) is fine.
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
    }
}

/// Whether a server's tool name is one bub-rs offers: 1–64 of
/// `A–Z a–z 0–9 _ - .` (the MCP spec's advice), nothing that could move a
/// terminal's cursor or forge a log line.
fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

/// `mcp.json`: each server's entry kept as written (read whole by
/// [`ServerConfig::parse`] when it is used, so one bad entry leaves out
/// that server only, and `bub mcp add` rewrites the others unchanged).
#[derive(Debug, Default, Serialize, Deserialize)]
struct McpFile {
    #[serde(rename = "mcpServers", default)]
    servers: BTreeMap<String, Value>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

fn file_of(home: &Path) -> PathBuf {
    home.join("mcp.json")
}

fn read_file(home: &Path) -> Result<McpFile, String> {
    let path = file_of(home);
    // Its commands run as the user: trusted like config.json (owner, no
    // group/other write, a regular file, capped).
    match bub_kit::files::read_trusted(&path, 4 << 20) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| format!("{} is not valid ({e}); expected {{\"mcpServers\": {{…}}}}", path.display())),
        Err(bub_kit::files::TrustError::Missing) => Ok(McpFile::default()),
        Err(e @ bub_kit::files::TrustError::Refused(_)) => Err(format!("refusing mcp.json: {e}")),
        Err(e) => Err(format!("{} {e}", path.display())),
    }
}

/// A connected server and its tools.
struct Server {
    name: String,
    client: tokio::sync::Mutex<Option<RunningService<RoleClient, ()>>>,
    peer: rmcp::Peer<RoleClient>,
    tools: Vec<rmcp::model::Tool>,
    /// A stdio server's process, stopped after its session closes.
    child: tokio::sync::Mutex<Option<ServerProcess>>,
    /// For an HTTP server: the cap on one answer (rmcp closes the
    /// transport on a bigger one, without saying why).
    http_cap: Option<usize>,
    /// Each tool call's limit (the entry's `timeout`).
    call_timeout: Option<Duration>,
    /// An SSE server's stream reader, stopped with the server.
    _sse_reader: Option<sse::ReaderGuard>,
}

/// How long a stdio server may take to exit once its input is closed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// The variables of bub's environment a stdio server inherits: what a
/// program needs to run, none of bub's secrets (`BUB_API_KEY`,
/// `OPENAI_API_KEY`, database URLs, …).
const SAFE_VARIABLES: [&str; 9] = ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR"];

fn safe_environment() -> impl Iterator<Item = (String, String)> {
    SAFE_VARIABLES.iter().filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_owned(), v)))
}

async fn connect(name: &str, config: &ServerConfig, limits: Limits) -> Result<Server, String> {
    let task_only = tasks::TaskOnly::default();
    let mut child = None;
    let mut sse_reader = None;
    let service = match (config.transport, &config.command, &config.url) {
        (Transport::Stdio, Some(command), None) => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(&config.args).env_clear().envs(safe_environment()).envs(&config.env).kill_on_drop(true);
            if let Some(dir) = &config.cwd {
                cmd.current_dir(dir);
            }
            cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
            // Its own group: what it starts is killed with it.
            cmd.process_group(0);
            let mut process = cmd.spawn().map_err(|e| format!("cannot start `{command}`: {e}"))?;
            let group = process.id().and_then(|pid| rustix::process::Pid::from_raw(pid as i32));
            let (Some(stdout), Some(stdin)) = (process.stdout.take(), process.stdin.take()) else {
                return Err(format!("`{command}` started without pipes"));
            };
            child = Some(ServerProcess { child: process, group });
            let stdout = output::ServerOutput::new(stdout, limits.max_message, task_only.clone(), name);
            // Our reader already holds lines to `max_message`; rmcp's own
            // cap must not be lower.
            let transport = rmcp::transport::async_rw::AsyncRwTransport::new_client(stdout, stdin)
                .with_max_line_length(limits.max_message.saturating_add(1));
            ().serve(transport).await.map_err(|e| format!("`{command}` did not start an MCP session: {e}"))?
        }
        (Transport::Http, None, Some(url)) => {
            // rmcp's own limits (16 MiB per SSE event and per JSON body by
            // default) set to ours, so both transports cap the same.
            let mut headers = std::collections::HashMap::new();
            for (k, v) in &config.headers {
                let name =
                    reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("header {k}: {e}"))?;
                let value = reqwest::header::HeaderValue::from_str(v).map_err(|e| format!("header {k}: {e}"))?;
                headers.insert(name, value);
            }
            let http =
                rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .max_sse_event_size(limits.max_message)
                    .max_json_response_size(limits.max_message)
                    .custom_headers(headers);
            let transport = StreamableHttpClientTransport::from_config(http);
            ().serve(transport).await.map_err(|e| format!("{url} did not start an MCP session: {}", http_error(&e)))?
        }
        (Transport::Sse, None, Some(url)) => {
            let session = sse::open(url, &config.headers, limits.max_message, config.sse_read_timeout).await?;
            sse_reader = Some(session.reader);
            ().serve((session.outgoing, session.incoming))
                .await
                .map_err(|e| format!("{url} did not start an MCP session: {e}"))?
        }
        _ => return Err("needs either `command` (a stdio server) or `url` (a remote one), not both".into()),
    };
    let mut tools = service.list_all_tools().await.map_err(|e| format!("cannot list its tools: {e}"))?;
    let task_only = task_only.take();
    tools.retain(|tool| {
        if !valid_tool_name(&tool.name) {
            tracing::warn!(
                "mcp: server '{name}', a tool named {:?} is left out: a tool name is 1 to 64 of A-Z a-z 0-9 _ - .",
                tool.name.chars().take(80).collect::<String>()
            );
            return false;
        }
        let keep = !task_only.contains(tool.name.as_ref());
        if !keep {
            tracing::warn!(
                "mcp: server '{name}', tool '{}' is left out: it runs only as an MCP task \
                 (execution.taskSupport \"required\"), which bub-rs does not support",
                tool.name
            );
        }
        keep
    });
    let peer = service.peer().clone();
    Ok(Server {
        name: name.to_owned(),
        client: tokio::sync::Mutex::new(Some(service)),
        peer,
        tools,
        child: tokio::sync::Mutex::new(child),
        http_cap: config.url.as_ref().map(|_| limits.max_message),
        call_timeout: config.call_timeout,
        _sse_reader: sse_reader,
    })
}

/// rmcp's error, with what to check when the server refused the
/// credentials.
fn http_error(e: &impl std::fmt::Display) -> String {
    let text = e.to_string();
    if ["401", "403", "Unauthorized", "Auth"].iter().any(|needle| text.contains(needle)) {
        format!("{text} (check the entry's `auth` token or `headers`)")
    } else {
        text
    }
}

/// Connects to every configured server at once; the ones that fail are
/// reported and left out.
async fn connect_all(home: &Path, workspace: &Path, limits: Limits) -> Vec<Arc<Server>> {
    let timeout = limits.timeout;
    let mut entries: Vec<(String, Value)> = match read_file(home) {
        Ok(f) => f.servers.into_iter().collect(),
        Err(e) => {
            tracing::warn!("mcp: {e}; no MCP tools from it this time");
            Vec::new()
        }
    };
    // The Agent Plugins packages' servers, after mcp.json's (a name
    // mcp.json already has stays mcp.json's).
    let user_home = std::env::var_os("HOME").map(PathBuf::from);
    let catalog = bub_kit::agent_plugins::discover(workspace, user_home.as_deref(), &home.join("agent-plugins"));
    for line in &catalog.diagnostics {
        tracing::warn!("mcp: agent plugin {line}");
    }
    for (name, entry) in catalog.mcp_servers() {
        if !entries.iter().any(|(n, _)| *n == name) {
            entries.push((name, entry));
        }
    }
    // Spawned, so slow servers connect concurrently.
    let servers: Vec<_> = entries
        .into_iter()
        .filter_map(|(name, entry)| match ServerConfig::parse(&entry) {
            Ok(config) => Some((name, config)),
            Err(e) => {
                tracing::warn!("mcp: server '{name}' is left out: {e}");
                None
            }
        })
        .map(|(name, config)| {
            tokio::spawn(async move {
                match tokio::time::timeout(timeout, connect(&name, &config, limits)).await {
                    Ok(Ok(server)) => {
                        tracing::info!("mcp: server '{name}' offers {} tool(s)", server.tools.len());
                        Some(Arc::new(server))
                    }
                    Ok(Err(e)) => {
                        tracing::warn!("mcp: server '{name}' is left out: {e}");
                        None
                    }
                    Err(_) => {
                        tracing::warn!(
                            "mcp: server '{name}' is left out: no answer within {}s (config connect_timeout_seconds)",
                            timeout.as_secs_f64()
                        );
                        None
                    }
                }
            })
        })
        .collect();
    let mut out = Vec::new();
    for s in servers {
        if let Ok(Some(server)) = s.await {
            out.push(server);
        }
    }
    out
}

#[bub_abi::plugin]
impl Plugin for Mcp {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        // TLS for https servers: ring (already in the tree), not aws-lc.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let timeout = match ctx.config.get("connect_timeout_seconds") {
            None => 30.0,
            Some(v) => v
                .as_f64()
                .or_else(|| v.as_str()?.parse().ok())
                .filter(|s| *s > 0.0)
                .ok_or("mcp: connect_timeout_seconds must be a positive number")?,
        };
        let max_message = match ctx.config.get("max_message_bytes") {
            None => 16 << 20,
            Some(v) => v
                .as_f64()
                .or_else(|| v.as_str()?.parse().ok())
                .filter(|n| *n >= 1024.0)
                .ok_or("mcp: max_message_bytes must be a number of bytes, at least 1024")?
                .min(1e12) as usize,
        };
        let timeout = bub_kit::time::seconds(timeout).unwrap_or(bub_kit::time::MAX);
        Ok(Mcp {
            home: ctx.home.clone(),
            workspace: ctx.workspace.clone(),
            limits: Limits { timeout, max_message },
            connected: Default::default(),
        })
    }

    /// Connects to the servers when a scope opens; disconnects when it closes.
    fn provide_lifespan(&self) -> Option<Object> {
        Some(Object::lifespan(Connections {
            home: self.home.clone(),
            workspace: self.workspace.clone(),
            limits: self.limits,
            connected: self.connected.clone(),
        }))
    }

    /// The connected servers' tools.
    fn provide_tools(&self) -> Option<Vec<Object>> {
        let servers = bub_abi::sync::lock(&self.connected).clone();
        Some(
            servers
                .iter()
                .flat_map(|server| {
                    server.tools.iter().map(|tool| Object::tool(McpTool { server: server.clone(), tool: tool.clone() }))
                })
                .collect(),
        )
    }

    /// `bub mcp list|add|remove`.
    fn register_cli_commands(&self) -> Option<Vec<Object>> {
        Some(vec![Object::cli_command(McpCommand { home: self.home.clone(), limits: self.limits })])
    }
}

bub_abi::export_plugin!(Mcp);

struct Connections {
    home: PathBuf,
    workspace: PathBuf,
    limits: Limits,
    connected: Arc<Mutex<Vec<Arc<Server>>>>,
}

impl Lifespan for Connections {
    fn enter(&self) -> impl Fut<()> {
        let (home, limits, connected) = (self.home.clone(), self.limits, self.connected.clone());
        let workspace = self.workspace.clone();
        async move {
            let servers = connect_all(&home, &workspace, limits).await;
            bub_abi::sync::lock(&connected).extend(servers);
            Ok(())
        }
    }

    fn exit(&self, _error: Option<ErrorInfo>) -> impl Fut<()> {
        let servers = std::mem::take(&mut *bub_abi::sync::lock(&self.connected));
        async move {
            for server in servers {
                if let Some(client) = server.client.lock().await.take() {
                    if let Err(e) = client.cancel().await {
                        tracing::debug!("mcp: closing '{}': {e}", server.name);
                    }
                }
                // Its input is closed now: a stdio server exits on its own,
                // or is killed after a grace period; either way, what it
                // left running in its group goes with it (on drop).
                if let Some(mut process) = server.child.lock().await.take() {
                    let _ = tokio::time::timeout(EXIT_GRACE, process.child.wait()).await;
                }
            }
            Ok(())
        }
    }
}

/// One MCP content block as the agent's content: text as a string, an image
/// or audio as a media part, an embedded resource as its text (or a line
/// naming it), a resource link as a line naming it.
fn content_part(part: &Value) -> Option<Value> {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(match part.get("type").and_then(Value::as_str)? {
        "text" => Value::String(s(part, "text")?),
        kind @ ("image" | "audio") => json!({
            "type": kind,
            "media_type": s(part, "mimeType").unwrap_or_else(|| "application/octet-stream".into()),
            "data": s(part, "data").unwrap_or_default(),
        }),
        "resource" => {
            let r = part.get("resource")?;
            let uri = s(r, "uri").unwrap_or_default();
            match s(r, "text") {
                Some(text) => Value::String(format!("[resource {uri}]\n{text}")),
                None => Value::String(format!(
                    "[resource {uri}: {}, {} bytes, not shown]",
                    s(r, "mimeType").unwrap_or_else(|| "binary".into()),
                    s(r, "blob").map_or(0, |b| b.len() / 4 * 3)
                )),
            }
        }
        "resource_link" => Value::String(format!(
            "[resource link: {} {}]",
            s(part, "name").unwrap_or_default(),
            s(part, "uri").unwrap_or_default()
        )),
        _ => return None,
    })
}

/// A server's input schema as providers accept it: an object schema (a
/// schema without `"type": "object"` is rejected by OpenAI and Anthropic).
fn object_schema(schema: &Map<String, Value>) -> Map<String, Value> {
    let mut schema = schema.clone();
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        schema.insert("type".into(), Value::String("object".into()));
        schema.entry("properties").or_insert_with(|| Value::Object(Map::new()));
    }
    schema
}

struct McpTool {
    server: Arc<Server>,
    tool: rmcp::model::Tool,
}

impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: format!("mcp.{}_{}", self.server.name, self.tool.name),
            description: self.tool.description.as_deref().unwrap_or_default().to_owned(),
            parameters: object_schema(&self.tool.input_schema),
            exposure: "auto".into(),
            context: false,
        }
    }

    fn call(&self, arguments: Map<String, Value>) -> impl Fut<Value> {
        let (peer, name) = (self.server.peer.clone(), self.tool.name.to_string());
        let server = self.server.name.clone();
        let http_cap = self.server.http_cap;
        let call_timeout = self.server.call_timeout;
        async move {
            let params = CallToolRequestParams::new(name.clone()).with_arguments(arguments);
            let call = peer.call_tool(params);
            let answered = match call_timeout {
                Some(limit) => tokio::time::timeout(limit, call).await.map_err(|_| {
                    format!(
                        "MCP server '{server}', tool {name}: no answer within {} ms (the entry's `timeout`)",
                        limit.as_millis()
                    )
                })?,
                None => call.await,
            };
            let result = answered.map_err(|e| {
                // A tool an HTTP server runs only as a task (its list was not
                // read through TaskScan) fails so: say why.
                let hint = match &e {
                    rmcp::ServiceError::McpError(d) if d.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND => {
                        "; the server may run this tool only as an MCP task, which bub-rs does not support"
                    }
                    rmcp::ServiceError::TransportClosed => match http_cap {
                        Some(cap) => {
                            return format!(
                                "MCP server '{server}', tool {name}: the connection closed; an answer larger than \
                                 {cap} bytes closes it (the mcp plugin's max_message_bytes setting)"
                            )
                        }
                        None => "",
                    },
                    _ => "",
                };
                format!("MCP server '{server}', tool {name}: {e}{hint}")
            })?;
            let result = serde_json::to_value(&result)?;
            let parts: Vec<Value> =
                result["content"].as_array().into_iter().flatten().filter_map(content_part).collect();
            let media = parts.iter().any(|p| !p.is_string());
            let text: Vec<&str> = parts.iter().filter_map(Value::as_str).collect();
            let output = if media {
                // Images and audio reach the model as media parts.
                json!({"type": "tool_content", "content": parts})
            } else if text.is_empty() {
                result.get("structuredContent").cloned().unwrap_or(Value::String(String::new()))
            } else {
                Value::String(text.join("\n"))
            };
            if result["isError"] == json!(true) {
                return Err(format!("MCP server '{server}', tool {name} failed: {}", text.join("\n")).into());
            }
            Ok(output)
        }
    }
}

struct McpCommand {
    home: PathBuf,
    limits: Limits,
}

/// Changes `mcp.json` under `mcp.json.lock`, replacing it atomically.
fn change_file(home: &Path, change: impl FnOnce(&mut McpFile) -> Result<String, String>) -> Result<String, String> {
    bub_kit::files::create_private_dir(home).map_err(|e| format!("cannot create {}: {e}", home.display()))?;
    let lock_path = home.join("mcp.json.lock");
    let lock = bub_kit::files::open_private_append(&lock_path)
        .map_err(|e| format!("cannot open {}: {e}", lock_path.display()))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| format!("cannot lock mcp.json: {e}"))?;
    let mut file = read_file(home)?;
    let said = change(&mut file)?;
    let path = file_of(home);
    let text = serde_json::to_string_pretty(&file).map_err(|e| e.to_string())? + "\n";
    bub_kit::files::write_private(&path, text.as_bytes())
        .map_err(|e| format!("cannot save {}: {e}", path.display()))?;
    Ok(said)
}

fn arg(args: &Map<String, Value>, key: &str) -> Option<String> {
    args.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned)
}

impl Command for McpCommand {
    fn spec(&self) -> CommandSpec {
        let a = |name: &str, help: &str, option: bool, flag: bool| CommandArg {
            name: name.into(),
            help: help.into(),
            option,
            flag,
            ..Default::default()
        };
        CommandSpec {
            name: "mcp".into(),
            about: "List, add and remove the MCP servers whose tools Bub offers ($BUB_HOME/mcp.json)".into(),
            args: vec![
                CommandArg { required: true, ..a("action", "list, add or remove", false, false) },
                a("name", "the server's name (add, remove)", false, false),
                a("command", "add: a stdio server's command line (\"prog arg …\")", true, false),
                a("url", "add: a remote server's URL (streamable HTTP, or SSE with --transport sse)", true, false),
                a(
                    "transport",
                    "add: http (streamable HTTP, the default) or sse (the older HTTP with SSE)",
                    true,
                    false,
                ),
                a(
                    "headers",
                    "add: headers sent to a remote server, a JSON object ({\"X-Api-Key\": \"…\"})",
                    true,
                    false,
                ),
                a("auth", "add: a bearer token for a remote server", true, false),
                a("tools", "list: connect and show each server's tools", true, true),
            ],
            ..Default::default()
        }
    }

    fn run(&self, args: Map<String, Value>) -> impl Fut<Value> {
        let (home, limits) = (self.home.clone(), self.limits);
        async move {
            let action = arg(&args, "action").unwrap_or_default();
            let name = arg(&args, "name");
            let text = match action.as_str() {
                "list" => list(&home, limits, args.get("tools") == Some(&json!(true))).await?,
                "add" => {
                    let name = name.ok_or("bub mcp add NAME --command \"prog args\" | --url URL")?;
                    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                        return Err(format!("{name:?}: a server name uses letters, digits, '-' and '_'").into());
                    }
                    let remote_only = ["transport", "headers", "auth"];
                    let entry = match (arg(&args, "command"), arg(&args, "url")) {
                        (Some(line), None) => {
                            if let Some(key) = remote_only.iter().find(|k| arg(&args, k).is_some()) {
                                return Err(format!("--{key} is for a remote server (--url)").into());
                            }
                            let mut words =
                                shlex::split(&line).ok_or_else(|| format!("cannot split {line:?} into words"))?;
                            if words.is_empty() {
                                return Err("--command is empty".into());
                            }
                            let command = words.remove(0);
                            json!({"command": command, "args": words})
                        }
                        (None, Some(url)) => {
                            let headers = match arg(&args, "headers") {
                                None => None,
                                Some(text) => match serde_json::from_str::<Value>(&text) {
                                    Ok(Value::Object(h)) => Some(h),
                                    _ => return Err(format!("--headers must be a JSON object, got {text:?}").into()),
                                },
                            };
                            let transport = arg(&args, "transport");
                            let auth = arg(&args, "auth");
                            config::remote_entry(&url, transport.as_deref(), headers.as_ref(), auth.as_deref())
                        }
                        _ => {
                            return Err(
                                "give either --command \"prog args\" (stdio) or --url URL (streamable HTTP)".into()
                            )
                        }
                    };
                    // Refused now, as the gateway would leave it out later.
                    ServerConfig::parse(&entry).map_err(|e| format!("not added: {e}"))?;
                    change_file(&home, |file| {
                        let verb =
                            if file.servers.insert(name.clone(), entry).is_some() { "replaced" } else { "added" };
                        Ok(format!("{verb} MCP server '{name}' in {}", file_of(&home).display()))
                    })?
                }
                "remove" => {
                    let name = name.ok_or("bub mcp remove NAME")?;
                    change_file(&home, |file| match file.servers.remove(&name) {
                        Some(_) => Ok(format!("removed MCP server '{name}'")),
                        None => Err(format!("no MCP server '{name}' (see `bub mcp list`)")),
                    })?
                }
                other => return Err(format!("unknown action {other:?}: use list, add or remove").into()),
            };
            Ok(Value::String(text))
        }
    }
}

async fn list(home: &Path, limits: Limits, tools: bool) -> Result<String, BoxError> {
    let file = read_file(home)?;
    if file.servers.is_empty() {
        return Ok(format!("no MCP servers in {} (add one with `bub mcp add`)", file_of(home).display()));
    }
    let mut out = Vec::new();
    for (name, entry) in &file.servers {
        let config = match ServerConfig::parse(entry) {
            Ok(config) => config,
            Err(e) => {
                out.push(format!("{name}  left out: {e}"));
                continue;
            }
        };
        out.push(format!("{name}  {}", config.target()));
        if tools {
            match tokio::time::timeout(limits.timeout, connect(name, &config, limits)).await {
                Ok(Ok(server)) => {
                    for tool in &server.tools {
                        // A description is the server's text: no control
                        // characters reach the terminal.
                        let description: String = tool
                            .description
                            .as_deref()
                            .unwrap_or("")
                            .chars()
                            .map(|c| if c.is_control() { ' ' } else { c })
                            .collect();
                        out.push(format!("  mcp.{name}_{}  {description}", tool.name));
                    }
                    if let Some(client) = server.client.lock().await.take() {
                        let _ = client.cancel().await;
                    }
                }
                Ok(Err(e)) => out.push(format!("  unreachable: {e}")),
                Err(_) => out.push("  unreachable: no answer in time".into()),
            }
        }
    }
    Ok(out.join("\n"))
}
