//! The builtin's workspace tools, offered through `provide_tools` so that a
//! plugin overrides any of them by priority (spec §3.7): `bash`,
//! `bash.output`, `bash.kill` (background shells of the `running()` scope),
//! `fs.read`, `fs.write`, `fs.edit` (paths relative to the workspace) and
//! `web.fetch`. Results and messages follow Bub's texts.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use bub_abi::{
    resources::{Fut, Tool},
    types::ToolSpec,
    BoxError, Object,
};
use serde_json::{json, Map, Value};

use super::shells::OpenScopes;

/// What every workspace tool knows.
#[derive(Clone)]
pub struct Workspace {
    /// The host's workspace.
    pub root: PathBuf,
    /// The shell scopes (for `bash`).
    pub scopes: Arc<OpenScopes>,
    /// Confined to the workspace (`super::confine`).
    pub confined: bool,
}

/// `path` against the workspace `root`; `confined`, an error if it leads
/// out (the builtin's file tools and code mode's attachments).
pub fn resolve_in(root: &Path, confined: bool, path: &str) -> Result<PathBuf, BoxError> {
    if confined {
        return super::environment::LocalEnvironment::new(root)
            .resolve(path)
            .map_err(|e| format!("{e} (confine_workspace is on)").into());
    }
    let p = Path::new(path);
    Ok(if p.is_absolute() { p.to_path_buf() } else { root.join(p) })
}

impl Workspace {
    /// `path` against the workspace; confined, an error if it leads out.
    fn resolve(&self, path: &str) -> Result<PathBuf, BoxError> {
        resolve_in(&self.root, self.confined, path)
    }

    /// The tools, as objects.
    pub fn objects(&self) -> Vec<Object> {
        [Kind::Bash, Kind::BashOutput, Kind::BashKill, Kind::FsRead, Kind::FsWrite, Kind::FsEdit, Kind::WebFetch]
            .into_iter()
            .map(|kind| Object::tool(WorkspaceTool { kind, ws: self.clone() }))
            .collect()
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Bash,
    BashOutput,
    BashKill,
    FsRead,
    FsWrite,
    FsEdit,
    WebFetch,
}

struct WorkspaceTool {
    kind: Kind,
    ws: Workspace,
}

fn spec(name: &str, description: &str, properties: Value, required: &[&str]) -> ToolSpec {
    let parameters = json!({"type": "object", "properties": properties, "required": required});
    ToolSpec {
        name: name.into(),
        description: description.into(),
        parameters: parameters.as_object().cloned().unwrap_or_default(),
        exposure: "direct".into(),
        context: false,
    }
}

fn s(args: &Map<String, Value>, k: &str) -> Option<String> {
    args.get(k).and_then(Value::as_str).map(str::to_owned)
}

fn n(args: &Map<String, Value>, k: &str) -> Option<f64> {
    args.get(k).and_then(|v| v.as_f64().or_else(|| v.as_str().and_then(|t| t.parse().ok())))
}

fn b(args: &Map<String, Value>, k: &str) -> bool {
    args.get(k).is_some_and(|v| v.as_bool().unwrap_or_else(|| v.as_str() == Some("true")))
}

fn required(args: &Map<String, Value>, k: &str) -> Result<String, BoxError> {
    s(args, k).ok_or_else(|| format!("`{k}` is required").into())
}

impl Tool for WorkspaceTool {
    fn spec(&self) -> ToolSpec {
        match self.kind {
            // With its call's context: a shell belongs to the session that
            // started it (`,quit` stops them).
            Kind::Bash => ToolSpec {
                context: true,
                ..spec(
                    "bash",
                    "Run a shell command in the workspace. Long runs continue in the background.",
                    json!({"command": {"type": "string"}, "cwd": {"type": "string"},
                           "timeout_seconds": {"type": "number", "default": 30}, "background": {"type": "boolean", "default": false}}),
                    &["command"],
                )
            },
            Kind::BashOutput => spec(
                "bash.output",
                "Read the output of a background shell.",
                json!({"shell_id": {"type": "string"}, "offset": {"type": "integer", "default": 0}, "limit": {"type": "integer"}}),
                &["shell_id"],
            ),
            Kind::BashKill => spec(
                "bash.kill",
                "Terminate a background shell.",
                json!({"shell_id": {"type": "string"}}),
                &["shell_id"],
            ),
            Kind::FsRead => spec(
                "fs.read",
                "Read a text file (lines from offset, at most limit).",
                json!({"path": {"type": "string"}, "offset": {"type": "integer", "default": 0}, "limit": {"type": "integer"}}),
                &["path"],
            ),
            Kind::FsWrite => spec(
                "fs.write",
                "Write a text file (parents are created).",
                json!({"path": {"type": "string"}, "content": {"type": "string"}}),
                &["path", "content"],
            ),
            Kind::FsEdit => spec(
                "fs.edit",
                "Replace every occurrence of old with new in a file, from line start.",
                json!({"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"},
                       "start": {"type": "integer", "default": 0}}),
                &["path", "old", "new"],
            ),
            // `auto`, as Bub's: in code mode it is called from code.
            Kind::WebFetch => ToolSpec {
                exposure: "auto".into(),
                ..spec(
                    "web.fetch",
                    "Fetch a URL (GET) and return the body text.",
                    json!({"url": {"type": "string"}, "headers": {"type": "object"}, "timeout": {"type": "number"}}),
                    &["url"],
                )
            },
        }
    }

    fn call_in(&self, args: Map<String, Value>, context: bub_abi::types::ToolCallContext) -> impl Fut<Value> {
        let (kind, ws) = (self.kind, self.ws.clone());
        async move {
            match kind {
                Kind::Bash => Ok(Value::String(bash(&ws, &args, context.session_id.as_deref()).await?)),
                _ => WorkspaceTool { kind, ws }.call(args).await,
            }
        }
    }

    fn call(&self, args: Map<String, Value>) -> impl Fut<Value> {
        let (kind, ws) = (self.kind, self.ws.clone());
        async move {
            let text = match kind {
                Kind::Bash => bash(&ws, &args, None).await?,
                Kind::BashOutput => bash_output(&ws, &args)?,
                Kind::BashKill => {
                    let id = required(&args, "shell_id")?;
                    let scope = ws.scopes.current().ok_or("shell runtime is closed")?;
                    scope.kill(&id).await?;
                    let (_, status) = scope.output(&id)?;
                    scope.forget(&id);
                    format!("id: {id}\nstatus: {}\nexit_code: {}", status_name(status), exit_code(status))
                }
                Kind::FsRead => {
                    let path = ws.resolve(&required(&args, "path")?)?;
                    let text = tokio::fs::read_to_string(&path)
                        .await
                        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                    let offset = n(&args, "offset").unwrap_or(0.0) as usize;
                    let lines = text.lines().skip(offset);
                    match n(&args, "limit") {
                        Some(l) => lines.take(l as usize).collect::<Vec<_>>().join("\n"),
                        None => lines.collect::<Vec<_>>().join("\n"),
                    }
                }
                Kind::FsWrite => {
                    let raw = required(&args, "path")?;
                    let path = ws.resolve(&raw)?;
                    if let Some(parent) = path.parent() {
                        tokio::fs::create_dir_all(parent).await?;
                    }
                    tokio::fs::write(&path, s(&args, "content").unwrap_or_default())
                        .await
                        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                    // The resolved absolute path, as Bub (`Path.resolve()`).
                    format!("wrote: {}", resolved(&path).display())
                }
                Kind::FsEdit => {
                    let raw = required(&args, "path")?;
                    let path = ws.resolve(&raw)?;
                    let (old, new) = (required(&args, "old")?, s(&args, "new").unwrap_or_default());
                    let start = n(&args, "start").unwrap_or(0.0) as usize;
                    let text = tokio::fs::read_to_string(&path)
                        .await
                        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                    let split = text.split_inclusive('\n').take(start).map(str::len).sum::<usize>();
                    let (head, tail) = text.split_at(split);
                    if !tail.contains(&old) {
                        return Err(format!("'{old}' not found in {raw} from line {start}").into());
                    }
                    tokio::fs::write(&path, format!("{head}{}", tail.replace(&old, &new))).await?;
                    format!("edited: {}", resolved(&path).display())
                }
                Kind::WebFetch => web_fetch(&args).await?,
            };
            Ok(Value::String(text))
        }
    }
}

/// `path` with links and `..` resolved (it exists: it was just written).
fn resolved(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

fn status_name(status: Option<Option<i32>>) -> &'static str {
    match status {
        None => "running",
        Some(Some(_)) => "exited",
        Some(None) => "killed",
    }
}

fn exit_code(status: Option<Option<i32>>) -> String {
    status.flatten().map_or("null".into(), |c| c.to_string())
}

async fn bash(ws: &Workspace, args: &Map<String, Value>, session: Option<&str>) -> Result<String, BoxError> {
    let command = required(args, "command")?;
    let scope = ws.scopes.current().ok_or("shell runtime is closed (no running() scope is open)")?;
    let cwd = match s(args, "cwd") {
        Some(c) => ws.resolve(&c)?,
        None => ws.root.clone(),
    };
    let id = scope.start(&command, &cwd, ws.confined.then_some(ws.root.as_path()), session)?;
    if b(args, "background") {
        return Ok(format!(
            "Shell started, shell_id: {id}\nRetrieve the output with bash_output or terminate it with bash_kill."
        ));
    }
    let timeout = n(args, "timeout_seconds").unwrap_or(30.0);
    // A model's `1e300` or `inf` is "very long", not a panic (issue 16.8).
    let deadline = Instant::now() + bub_abi::time::seconds_or_zero(timeout);
    // A cancelled turn drops this future: its foreground shell goes too.
    let mut guard = Foreground { scope: scope.clone(), id: id.clone(), armed: true };
    loop {
        let (output, status) = scope.output(&id)?;
        if let Some(code) = status {
            guard.armed = false;
            // The command is done; what it left running in its group is not.
            scope.end_group(&id);
            let out = output.trim();
            let out = if out.is_empty() { "(no output)" } else { out };
            return match code {
                Some(0) => Ok(out.to_owned()),
                other => Err(format!(
                    "command exited with code {}\noutput:\n{out}",
                    other.map_or("signal".into(), |c| c.to_string())
                )
                .into()),
            };
        }
        if Instant::now() >= deadline {
            guard.armed = false;
            return Ok(format!(
                "command timed out after {} seconds; continuing in background\nshell_id: {id}",
                timeout
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Kills a foreground shell when its `bash` call is dropped mid-run.
struct Foreground {
    scope: Arc<super::shells::ShellScope>,
    id: String,
    armed: bool,
}

impl Drop for Foreground {
    fn drop(&mut self) {
        if self.armed {
            self.scope.kill_detached(&self.id);
        }
    }
}

fn bash_output(ws: &Workspace, args: &Map<String, Value>) -> Result<String, BoxError> {
    let id = required(args, "shell_id")?;
    let scope = ws.scopes.current().ok_or("shell runtime is closed")?;
    let (output, status) = scope.output(&id)?;
    let offset = (n(args, "offset").unwrap_or(0.0) as usize).min(output.len());
    let mut end = n(args, "limit").map_or(output.len(), |l| (offset + l as usize).min(output.len()));
    while !output.is_char_boundary(end) {
        end -= 1;
    }
    let mut start = offset;
    while !output.is_char_boundary(start) {
        start -= 1;
    }
    let slice = &output[start..end];
    Ok(format!(
        "id: {id}\nstatus: {}\nexit_code: {}\nnext_offset: {end}\noutput:\n{}",
        status_name(status),
        exit_code(status),
        if slice.is_empty() { "(no output)" } else { slice }
    ))
}

async fn web_fetch(args: &Map<String, Value>) -> Result<String, BoxError> {
    let url = required(args, "url")?;
    let timeout = n(args, "timeout").unwrap_or(10.0);
    let timeout = bub_abi::time::seconds_or_zero(timeout).max(Duration::from_millis(100));
    let client = reqwest::Client::builder().timeout(timeout).build()?;
    let mut req = client.get(&url).header("accept", "text/markdown");
    for (k, v) in args.get("headers").and_then(Value::as_object).into_iter().flatten() {
        req = req.header(k, v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()));
    }
    let resp = req.send().await.map_err(|e| format!("GET {url}: {e}"))?;
    let status = resp.status();
    let body = resp.text().await.map_err(|e| format!("GET {url}: {e}"))?;
    if !status.is_success() {
        return Err(format!("GET {url}: HTTP {status}: {}", body.chars().take(500).collect::<String>()).into());
    }
    Ok(body)
}
