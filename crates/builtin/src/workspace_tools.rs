//! The builtin's workspace tools, offered through `provide_tools` so that a
//! plugin overrides any of them by priority (semantics §A3.7): `bash`,
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
    /// What a tool reads or keeps at most (`BUB_TOOL_MAX_BYTES`).
    pub max_bytes: usize,
}

/// The error for going past [`Workspace::max_bytes`].
fn too_large(what: &str, max: usize) -> BoxError {
    format!(
        "{what} is larger than {max} bytes, the most a tool reads (BUB_TOOL_MAX_BYTES, tool_max_bytes in config.json)"
    )
    .into()
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
                    let offset = n(&args, "offset").unwrap_or(0.0) as usize;
                    let limit = n(&args, "limit").map(|l| l as usize);
                    let max = ws.max_bytes;
                    tokio::task::spawn_blocking(move || read_lines(&path, offset, limit, max))
                        .await
                        .map_err(|e| format!("fs.read failed: {e}"))??
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
                    let max = ws.max_bytes;
                    let (file, size) = {
                        let path = path.clone();
                        tokio::task::spawn_blocking(move || open_regular(&path))
                            .await
                            .map_err(|e| format!("fs.edit failed: {e}"))??
                    };
                    if size > max as u64 {
                        return Err(too_large(&format!("{} ({size} bytes)", path.display()), max));
                    }
                    let mut text = String::new();
                    tokio::io::AsyncReadExt::read_to_string(&mut tokio::fs::File::from_std(file), &mut text)
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
                Kind::WebFetch => web_fetch(&args, ws.max_bytes).await?,
            };
            Ok(Value::String(text))
        }
    }
}

/// Opens `path` for reading if it is a regular file (without waiting on a
/// FIFO's writer: opened non-blocking, then checked on the descriptor);
/// the file and its size.
fn open_regular(path: &Path) -> Result<(std::fs::File, u64), BoxError> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let cannot = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() {
            "a FIFO (named pipe)"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "a device"
        };
        return Err(format!("cannot read {}: it is {what}, not a regular file", path.display()).into());
    }
    Ok((file, meta.len()))
}

/// Lines `offset..offset + limit` of the file at `path` (without their line
/// ends, joined with `\n`, as Bub's `fs.read`), read as a stream: a line
/// skipped is never kept, and an answer past `max` bytes is refused, so a
/// 2 GB file costs one buffer, and its first lines can still be read.
fn read_lines(path: &Path, offset: usize, limit: Option<usize>, max: usize) -> Result<String, BoxError> {
    use std::io::BufRead;
    let (file, _) = open_regular(path)?;
    let mut reader = std::io::BufReader::with_capacity(64 << 10, file);
    let (mut out, mut line, mut index) = (Vec::new(), Vec::new(), 0usize);
    let wanted = |i: usize| i >= offset && limit.is_none_or(|l| i - offset < l);
    loop {
        let buf = reader.fill_buf().map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if buf.is_empty() {
            break;
        }
        let (chunk, ended) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if wanted(index) {
            line.extend_from_slice(chunk);
            if out.len() + line.len() > max {
                let read = format!("lines {offset}.. of {}", path.display());
                return Err(too_large(&read, max));
            }
        }
        let used = ended.unwrap_or(chunk.len());
        reader.consume(used);
        if ended.is_some() {
            if wanted(index) {
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                push_line(&mut out, &mut line, index > offset);
            }
            index += 1;
            if limit.is_some_and(|l| index >= offset.saturating_add(l)) {
                return utf8(out, path);
            }
        }
    }
    // The last line, if the file does not end with one (`str::lines` keeps
    // its `\r`).
    if wanted(index) && !line.is_empty() {
        push_line(&mut out, &mut line, index > offset);
    }
    utf8(out, path)
}

/// Moves a finished `line` into `out`, after a `\n` unless it is the first.
fn push_line(out: &mut Vec<u8>, line: &mut Vec<u8>, after_another: bool) {
    if after_another {
        out.push(b'\n');
    }
    out.append(line);
}

fn utf8(bytes: Vec<u8>, path: &Path) -> Result<String, BoxError> {
    String::from_utf8(bytes)
        .map_err(|_| format!("cannot read {}: stream did not contain valid UTF-8", path.display()).into())
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
    let id = scope.start(&command, &cwd, ws.confined.then_some(ws.root.as_path()), session, ws.max_bytes)?;
    if b(args, "background") {
        return Ok(format!(
            "Shell started, shell_id: {id}\nRetrieve the output with bash_output or terminate it with bash_kill."
        ));
    }
    let timeout = n(args, "timeout_seconds").unwrap_or(30.0);
    // A model's `1e300` or `inf` is "very long", not a panic.
    let deadline = Instant::now() + bub_kit::time::seconds_or_zero(timeout);
    // A cancelled turn drops this future: its foreground shell goes too.
    let mut guard = Foreground { scope: scope.clone(), id: id.clone(), armed: true };
    loop {
        // The status alone while it runs: copying the output every 10 ms
        // made a long run's polling cost grow with what it printed.
        if scope.status(&id)?.is_none() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
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

async fn web_fetch(args: &Map<String, Value>, max: usize) -> Result<String, BoxError> {
    let url = required(args, "url")?;
    let timeout = n(args, "timeout").unwrap_or(10.0);
    let timeout = bub_kit::time::seconds_or_zero(timeout).max(Duration::from_millis(100));
    let client = reqwest::Client::builder().timeout(timeout).build()?;
    let mut req = client.get(&url).header("accept", "text/markdown");
    for (k, v) in args.get("headers").and_then(Value::as_object).into_iter().flatten() {
        req = req.header(k, v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()));
    }
    let mut resp = req.send().await.map_err(|e| format!("GET {url}: {e}"))?;
    let status = resp.status();
    if resp.content_length().is_some_and(|n| n > max as u64) {
        return Err(too_large(&format!("GET {url}: the body ({} bytes)", resp.content_length().unwrap_or(0)), max));
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| format!("GET {url}: {e}"))? {
        if bytes.len() + chunk.len() > max {
            return Err(too_large(&format!("GET {url}: the body"), max));
        }
        bytes.extend_from_slice(&chunk);
    }
    let body = String::from_utf8_lossy(&bytes).into_owned();
    if !status.is_success() {
        return Err(format!("GET {url}: HTTP {status}: {}", body.chars().take(500).collect::<String>()).into());
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fs.read` as it was: the whole file, then `str::lines`.
    fn whole(text: &str, offset: usize, limit: Option<usize>) -> String {
        let lines = text.lines().skip(offset);
        match limit {
            Some(l) => lines.take(l).collect::<Vec<_>>().join("\n"),
            None => lines.collect::<Vec<_>>().join("\n"),
        }
    }

    /// The streamed read answers what reading the whole file did.
    #[test]
    fn streamed_fs_read_answers_as_the_whole_file_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        for text in ["", "a", "a\n", "a\r\nb\r\n", "x\n\ny\r", "\n\n", "é\nü\r\n\r\nlast"] {
            std::fs::write(&path, text).unwrap();
            for offset in 0..5 {
                for limit in [None, Some(0), Some(1), Some(2), Some(9)] {
                    let got = read_lines(&path, offset, limit, 1 << 20).unwrap();
                    assert_eq!(got, whole(text, offset, limit), "{text:?} offset {offset} limit {limit:?}");
                }
            }
        }
    }

    /// A 3 GB file costs one buffer. Its first lines can be read;
    /// an answer past the limit is refused, naming the setting; a FIFO or a
    /// folder is refused at once (no wait for a writer).
    #[test]
    fn huge_files_fifos_and_folders_are_bounded_or_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge");
        std::fs::write(&path, "head\nsecond\n").unwrap();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(3 << 30).unwrap();
        assert_eq!(read_lines(&path, 0, Some(2), 1 << 20).unwrap(), "head\nsecond");
        let err = read_lines(&path, 0, None, 1 << 20).unwrap_err().to_string();
        assert!(err.contains("larger than 1048576 bytes") && err.contains("BUB_TOOL_MAX_BYTES"), "{err}");

        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let err = read_lines(&fifo, 0, None, 1 << 20).unwrap_err().to_string();
        assert!(err.contains("a FIFO (named pipe), not a regular file"), "{err}");
        let err = read_lines(dir.path(), 0, None, 1 << 20).unwrap_err().to_string();
        assert!(err.contains("a directory"), "{err}");
    }

    /// A body past the limit is refused whether or not the server
    /// announced its length.
    #[test]
    fn web_fetch_refuses_a_body_past_the_limit() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for (i, stream) in listener.incoming().enumerate() {
                let Ok(mut stream) = stream else { continue };
                let _ = stream.read(&mut [0u8; 4096]);
                let head = if i == 0 {
                    "HTTP/1.1 200 OK\r\ncontent-length: 1000000000\r\n\r\n"
                } else {
                    "HTTP/1.1 200 OK\r\n\r\n" // no length: read to the end
                };
                let _ = stream.write_all(head.as_bytes());
                let chunk = [b'x'; 65536];
                while stream.write_all(&chunk).is_ok() {}
            }
        });
        let rt = tokio::runtime::Runtime::new().unwrap();
        let args: Map<String, Value> = serde_json::from_value(json!({"url": url})).unwrap();
        for _ in 0..2 {
            let err = rt.block_on(web_fetch(&args, 1 << 20)).unwrap_err().to_string();
            assert!(err.contains("larger than 1048576 bytes") && err.contains("BUB_TOOL_MAX_BYTES"), "{err}");
        }
    }
}
