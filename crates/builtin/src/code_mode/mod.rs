//! Code mode, as Bub 0.6 defines it: the model writes Python that calls the
//! session's tools, through one `run_code` tool.
//!
//! `,code_mode enable=true` records a `code_mode_switch` event; from the
//! next turn the model is offered only the `direct` tools (`run_code` among
//! them) and every `auto` and `code` tool is callable only from code, as
//! `await tools.<name>(...)`. The code runs in `python3` (the interpreter
//! already on the machine, not one of ours) started in the workspace, in its
//! own process group — killed with everything it started when the code
//! ends or times out — and confined to the workspace like the builtin's
//! shells when `confine_workspace` is on. [`runner.py`](runner.py) speaks
//! Bub's JSON-lines protocol with this module; each `tools.<name>` call
//! comes back here and goes through `before_tool_call` / `after_tool_call`
//! like the model's own calls, with `code_mode` set, so a policy plugin
//! sees and can deny it. `attach_image/audio/video` (code-only tools) add
//! media to the `run_code` result. The code's `republic` module (media
//! values, messages, and models whose calls the host makes with its own
//! credentials) is served by [`republic`].

mod republic;
mod stub;

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use bub_agent::{
    tools::{self, AgentTool, Exposure, ToolContext},
    AgentError, PromptContext, Section,
};
use bub_framework::Framework;
use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

/// The child process's program.
const RUNNER: &str = include_str!("runner.py");
/// Bub's `DEFAULT_RUN_CODE_TIMEOUT_SECONDS`.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 120;
/// How long a stopped runner may take to go.
const STOP_GRACE: Duration = Duration::from_secs(3);

const RUN_CODE_DESCRIPTION: &str = "Run Python code in the environment and return everything it prints.

Tools are async functions available as `tools.<name>(...)`: await them with keyword arguments
(top-level `await` is allowed). See the tool stub referenced in the system prompt for their
signatures and result types. The `republic` module provides media loaders and models. Media passed
to `tools.attach_image/audio/video`, as an object, path or URL, is attached to the result. The code is stopped after timeout_seconds.";

/// `run_code`, the media tools and the `code_mode` command, in Bub's order.
pub fn tools() -> Vec<AgentTool> {
    let schema = |props: Value, required: &[&str]| json!({"type": "object", "properties": props, "required": required});
    let mut out = vec![AgentTool::native(
        tools::RUN_CODE,
        RUN_CODE_DESCRIPTION,
        schema(
            json!({"code": {"type": "string"}, "timeout_seconds": {"type": "integer", "default": DEFAULT_TIMEOUT_SECONDS}}),
            &["code"],
        ),
        Exposure::Direct,
        run_code,
    )];
    for kind in ["image", "audio", "video"] {
        let (verb, what, class) = match kind {
            "image" => ("see", "an image", "Image"),
            "audio" => ("hear", "audio", "Audio"),
            _ => ("watch", "a video", "Video"),
        };
        let description = format!(
            "Attach {what} to the result of this `run_code` call, so you can {verb} it.\n\n`{kind}` is a \
             `republic.{class}`, a file path in the environment, an http(s) URL, or a data URL."
        );
        out.push(
            AgentTool::native(
                &format!("attach_{kind}"),
                &description,
                schema(json!({ kind: media_schema(class) }), &[kind]),
                Exposure::Code,
                move |args, cx| attach(kind, args, cx),
            )
            .returning("str"),
        );
    }
    out.push(AgentTool::native(
        "code_mode",
        "Enable or disable code mode for THIS session. Invoke as the `,code_mode enable=true` command.\n\nIn code \
         mode the model calls `direct` tools directly and every other tool from Python through `run_code`. Takes \
         effect on the NEXT turn and persists across restarts.",
        schema(json!({"enable": {"type": "boolean"}}), &["enable"]),
        Exposure::Command,
        set_code_mode,
    ));
    out
}

/// The parameter schema Bub's media tools have (pydantic's for
/// `republic.Image | str`): the stub declares it as `republic.Image | str`.
fn media_schema(class: &str) -> Value {
    let optional = |title: &str, of: Value| json!({"anyOf": [of, {"type": "null"}], "default": null, "title": title});
    json!({
        "$defs": {class: {
            "properties": {
                "media_type": {"title": "Media Type", "type": "string"},
                "data": optional("Data", json!({"format": "binary", "type": "string"})),
                "url": optional("Url", json!({"type": "string"})),
            },
            "required": ["media_type"],
            "title": class,
            "type": "object",
        }},
        "anyOf": [{"$ref": format!("#/$defs/{class}")}, {"type": "string"}],
    })
}

async fn set_code_mode(args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    let enable = match args.get("enable") {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) if matches!(s.to_lowercase().as_str(), "true" | "1" | "yes" | "on") => true,
        Some(Value::String(s)) if matches!(s.to_lowercase().as_str(), "false" | "0" | "no" | "off") => false,
        other => return Err(AgentError::value(format!("enable must be true or false, not {other:?}"))),
    };
    crate::own_tools::set_session_setting(&cx, "code_mode", json!(enable)).await?;
    Ok(json!(format!(
        "Session code mode {} (applies from the next turn).",
        if enable { "enabled" } else { "disabled" }
    )))
}

/// The tools code may call this turn (none outside code mode).
fn code_tools(cx: &ToolContext) -> Option<Vec<AgentTool>> {
    tools::code_tools(&cx.tools, &cx.state, tools::allowed_in(&cx.state)).map(|ts| ts.into_iter().cloned().collect())
}

/// Bub's `_code_mode_prompt`: the `<code_mode>` section pointing at the
/// stub file, written under the home (its name follows its content, so an
/// unchanged tool set keeps its path).
pub fn section(tools: Arc<Vec<AgentTool>>) -> Section {
    Arc::new(move |pcx: PromptContext| {
        let tools = tools.clone();
        Box::pin(async move {
            let allowed = tools::allowed_in(&pcx.state);
            let Some(code) = tools::code_tools(&tools, &pcx.state, allowed) else { return Ok(None) };
            let Some(framework) = Framework::of(&pcx.state) else { return Ok(None) };
            let session = pcx.state.get_value("session_id").and_then(|v| v.as_str().map(str::to_owned));
            let dir = stub_dir(framework.home(), framework.workspace(), session.as_deref().unwrap_or_default());
            let path = stub::write(&stub::render(&code), &dir).map_err(|e| AgentError::value(e.to_string()))?;
            Ok(Some(prompt(&path)))
        })
    })
}

/// `<home>/codemode/<sha256(workspace \0 session)[:16]>`, as Bub.
fn stub_dir(home: &std::path::Path, workspace: &std::path::Path, session: &str) -> PathBuf {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{}\0{session}", workspace.display()).as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    home.join("codemode").join(&hex[..16])
}

/// Bub's `render_code_mode_prompt` for a stub file.
fn prompt(stub: &std::path::Path) -> String {
    let t = tools::RUN_CODE;
    format!(
        "<code_mode>\nMore tools are available as async Python functions `tools.<name>(...)` inside `{t}`. Their \
         signatures, result types and documentation are in the stub file: {}\nRead the stub before calling a tool \
         you have not used yet. Always `await` tool calls (top-level `await` is allowed) and pass keyword \
         arguments; they return structured values and raise on failure. `{t}` returns only what the code prints, \
         so print the results you need, and combine several tool calls in one run when possible. To look at an \
         image, audio or video, pass its path, URL or `republic` media object to `tools.attach_image(image=...)`, \
         `tools.attach_audio(audio=...)` or `tools.attach_video(video=...)`: it is attached to the `{t}` result.\n\
         The code can also use the `republic` module (see the end of the stub) to call models with \
         `republic.get_model()`, `republic.get_embedding_model(spec)` and `republic.get_decision_model(spec)`; \
         `get_model()` without a spec is the default model of this session.\n</code_mode>",
        stub.display()
    )
}

/// What one `run_code` call has collected: the media its code attached.
#[derive(Default)]
struct CodeRun {
    media: Vec<Value>,
}

tokio::task_local! {
    // The run the code's `attach_*` calls belong to (Bub's contextvar):
    // the calls are served inside the `run_code` call's own task.
    static ACTIVE: Arc<Mutex<CodeRun>>;
}

fn tool_error(message: String, details: Value) -> AgentError {
    AgentError::bub("tool", message, Some(details))
}

async fn run_code(args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    let code = args.get("code").and_then(Value::as_str).unwrap_or_default().to_owned();
    let timeout = args
        .get("timeout_seconds")
        .and_then(|v| v.as_u64().or_else(|| v.as_str().and_then(|s| s.parse().ok())))
        .unwrap_or(DEFAULT_TIMEOUT_SECONDS);
    let Some(code_tools) = code_tools(&cx) else {
        return Err(AgentError::bub("invalid_input", "Code mode is not enabled for this run.", None));
    };
    let by_name: std::collections::HashMap<String, AgentTool> =
        code_tools.into_iter().map(|t| (stub::identifier(&t.name), t)).collect();
    let framework = Framework::of(&cx.state).ok_or_else(|| AgentError::value("run_code needs a running framework"))?;
    let workspace = framework.workspace().to_path_buf();
    let confine = framework.model_settings().is_ok_and(|s| s.confine_workspace);

    let mut command = tokio::process::Command::new("python3");
    command
        .args(["-u", "-c", RUNNER])
        .current_dir(&workspace)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let spawned =
        if confine { crate::confine::spawn(command, &workspace) } else { command.spawn().map_err(Into::into) };
    let mut child = spawned.map_err(|e| AgentError::value(format!("run_code: cannot start python3: {e}")))?;
    let pid = child.id();
    let run = Arc::new(Mutex::new(CodeRun::default()));
    let output = Arc::new(Mutex::new(String::new()));
    let session_model =
        cx.state.get_value("model").and_then(|v| v.as_str().filter(|m| !m.is_empty()).map(str::to_owned));
    let session = Session {
        stdin: tokio::sync::Mutex::new(child.stdin.take().expect("piped")),
        cx: &cx,
        tools: &by_name,
        output: output.clone(),
        republic: republic::Republic::new(framework.model_settings(), session_model),
    };
    let mut stderr = child.stderr.take().expect("piped");
    let stderr_text = async move {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf).await;
        String::from_utf8_lossy(&buf).into_owned()
    };
    let stdout = tokio::io::BufReader::new(child.stdout.take().expect("piped"));
    let served =
        ACTIVE.scope(run.clone(), tokio::time::timeout(Duration::from_secs(timeout), session.run(&code, stdout)));
    let outcome = served.await;
    // The runner and whatever the code started go, whatever happened.
    if let Some(pid) = pid {
        crate::environment::signal_group(pid, rustix::process::Signal::KILL);
    }
    let _ = tokio::time::timeout(STOP_GRACE, child.wait()).await;
    let printed = bub_abi::sync::lock(&output).clone();
    let finished = match outcome {
        Err(_) => {
            return Err(tool_error(format!("Code timed out after {timeout} seconds"), json!({"output": printed})));
        }
        Ok(Err(SessionError::Io(e))) => return Err(AgentError::value(format!("run_code: the runner's pipes: {e}"))),
        Ok(Err(SessionError::Eof)) => {
            let stderr = tokio::time::timeout(STOP_GRACE, stderr_text).await.unwrap_or_default();
            let code = child.try_wait().ok().flatten().and_then(|s| s.code());
            let code = code.map_or_else(|| "None".to_owned(), |c| c.to_string());
            // Bub keeps what the code printed before the runner died.
            return Err(tool_error(
                format!("Code runner exited unexpectedly with code {code}"),
                json!({"output": printed, "stderr": stderr}),
            ));
        }
        Ok(Ok(message)) => message,
    };
    if finished.get("type").and_then(Value::as_str) == Some("failed") {
        let error = finished.get("error").and_then(Value::as_str).unwrap_or_default();
        let traceback = finished.get("traceback").and_then(Value::as_str).unwrap_or_default();
        return Err(tool_error(format!("Code raised {error}"), json!({"output": printed, "traceback": traceback})));
    }
    let media = std::mem::take(&mut bub_abi::sync::lock(&run).media);
    if media.is_empty() {
        return Ok(Value::String(printed));
    }
    // Republic's part dicts, as Bub stores them on the tape.
    let mut content = Vec::new();
    if !printed.is_empty() {
        content.push(json!({"type": "text", "text": printed}));
    }
    content.extend(media);
    Ok(json!({"type": "tool_content", "content": content}))
}

enum SessionError {
    Io(std::io::Error),
    Eof,
}

/// One runner process: the code out, its tool calls served, its output in.
struct Session<'a> {
    stdin: tokio::sync::Mutex<tokio::process::ChildStdin>,
    cx: &'a ToolContext,
    tools: &'a std::collections::HashMap<String, AgentTool>,
    output: Arc<Mutex<String>>,
    /// The code's `republic` calls (its open streams end with the session).
    republic: republic::Republic,
}

impl Session<'_> {
    async fn send(&self, message: Value) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(&message).expect("JSON values serialize");
        line.push(b'\n');
        let mut stdin = self.stdin.lock().await;
        stdin.write_all(&line).await?;
        stdin.flush().await
    }

    /// Until the runner reports `done` or `failed` (that message).
    async fn run(
        &self,
        code: &str,
        stdout: tokio::io::BufReader<tokio::process::ChildStdout>,
    ) -> Result<Value, SessionError> {
        let filename = format!("<run_code-{:08x}>", bub_kit::random::u64() as u32);
        let names: Vec<&String> = self.tools.keys().collect();
        self.send(json!({"type": "run", "code": code, "filename": filename, "tools": names}))
            .await
            .map_err(SessionError::Io)?;
        let mut lines = stdout.lines();
        let mut calls = futures_util::stream::FuturesUnordered::new();
        loop {
            use futures_util::StreamExt;
            tokio::select! {
                line = lines.next_line() => {
                    let Some(line) = line.map_err(SessionError::Io)? else { return Err(SessionError::Eof) };
                    let message: Option<Value> =
                        serde_json::from_str(&line).ok().filter(|m: &Value| m.get("type").is_some_and(Value::is_string));
                    let Some(message) = message else {
                        // Text the code wrote around the protocol (to sys.__stdout__).
                        let mut out = bub_abi::sync::lock(&self.output);
                        out.push_str(&line);
                        out.push('\n');
                        continue;
                    };
                    match message["type"].as_str().unwrap_or_default() {
                        "output" => {
                            let data = message.get("data").and_then(Value::as_str).unwrap_or_default();
                            bub_abi::sync::lock(&self.output).push_str(data);
                        }
                        "call" => calls.push(self.serve(message)),
                        "done" | "failed" => return Ok(message),
                        _ => {}
                    }
                }
                Some(()) = calls.next(), if !calls.is_empty() => {}
            }
        }
    }

    /// One `tools.<name>(...)` call, through the tool hooks.
    async fn serve(&self, message: Value) {
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        let name = message.get("name").and_then(Value::as_str).unwrap_or_default();
        let outcome = match (self.tools.get(name), message.get("arguments")) {
            (None, Some(Value::Object(arguments))) if name.starts_with(republic::CALL_PREFIX) => {
                self.republic.call(name, arguments.clone()).await
            }
            (Some(tool), Some(Value::Object(arguments))) => self.cx.call_from_code(tool, arguments.clone()).await,
            (None, Some(Value::Object(_))) => Err(format!("unknown tool: tools.{name}")),
            _ => Err(format!("malformed tool call: {name:?}")),
        };
        let reply = match outcome {
            Ok(value) => json!({"type": "result", "id": id, "value": value}),
            Err(e) => json!({"type": "error", "id": id, "message": e}),
        };
        // A runner that already exited is reported by `run`.
        let _ = self.send(reply).await;
    }
}

/// `attach_<kind>`: a URL as it is; a path read from the workspace.
async fn attach(kind: &'static str, args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    let invalid = |e: String| AgentError::bub("invalid_input", format!("Cannot load the {kind}: {e}"), None);
    let given = args.get(kind).cloned().unwrap_or_default();
    if given.is_object() {
        // A `republic` media object the code made: attached as it is; one
        // of another kind is refused as pydantic refuses `Image | str`.
        let part = republic::media_part(&given).filter(|p| p["type"] == kind).ok_or_else(|| {
            AgentError::bub("invalid_input", format!("Tool 'attach_{kind}' argument validation failed."), None)
        })?;
        return attached(kind, part);
    }
    let source = given.as_str().unwrap_or_default().to_owned();
    // As Republic loads media: a data URL becomes its data, a remote one
    // keeps its URL with the media type its path shows.
    let part = if let Some(rest) = source.strip_prefix("data:") {
        let (header, payload) = rest.split_once(',').unwrap_or((rest, ""));
        let mime = header.strip_suffix(";base64").unwrap_or(header);
        use base64::Engine;
        if base64::engine::general_purpose::STANDARD.decode(payload).is_err() {
            return Err(invalid(format!("Invalid base64 {kind} data URL")));
        }
        json!({"type": kind, "media_type": mime, "data": payload})
    } else if ["http://", "https://", "gs://"].iter().any(|p| source.starts_with(p)) {
        let path = source.split(['?', '#']).next().unwrap_or_default();
        let path = path.split_once("://").map_or(path, |(_, rest)| rest.split_once('/').map_or("", |(_, p)| p));
        let mime = media_type(path).ok_or_else(|| {
            invalid(format!(
                "Cannot guess the media type of {}; pass media_type explicitly",
                bub_kit::python::repr_str(&source)
            ))
        })?;
        json!({"type": kind, "media_type": mime, "url": source})
    } else {
        let mime = media_type(&source)
            .ok_or_else(|| invalid(format!("cannot guess the media type of {}", bub_kit::python::repr_str(&source))))?;
        let framework =
            Framework::of(&cx.state).ok_or_else(|| AgentError::value("attach needs a running framework"))?;
        let confined = framework.model_settings().is_ok_and(|s| s.confine_workspace);
        let path = crate::workspace_tools::resolve_in(framework.workspace(), confined, &source)
            .map_err(|e| invalid(e.to_string()))?;
        let bytes = tokio::fs::read(&path).await.map_err(|e| invalid(bub_kit::python::os_error(&e, &path)))?;
        use base64::Engine;
        json!({"type": kind, "media_type": mime, "data": base64::engine::general_purpose::STANDARD.encode(bytes)})
    };
    attached(kind, part)
}

/// Adds `part` to the running `run_code` call's result.
fn attached(kind: &str, part: Value) -> Result<Value, AgentError> {
    let attached = ACTIVE.try_with(|run| bub_abi::sync::lock(run).media.push(part));
    if attached.is_err() {
        return Err(AgentError::bub(
            "invalid_input",
            format!("tools.attach_{kind} can only be called from {}.", tools::RUN_CODE),
            None,
        ));
    }
    Ok(json!(format!("The {kind} is attached to the {} result.", tools::RUN_CODE)))
}

/// Python's `mimetypes.guess_type` for the media types models take.
fn media_type(path: &str) -> Option<&'static str> {
    let ext = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "bmp" => "image/bmp",
        "svg" => "image/svg+xml",
        "mp3" => "audio/mpeg",
        "wav" => "audio/x-wav",
        "ogg" | "oga" => "audio/ogg",
        "m4a" => "audio/mp4",
        "flac" => "audio/flac",
        "mp4" => "video/mp4",
        "webm" => "video/webm",
        "mov" => "video/quicktime",
        "mpeg" | "mpg" => "video/mpeg",
        _ => return None,
    })
}
