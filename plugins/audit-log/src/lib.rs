//! `audit-log`: appends one JSON line per model call, tool call and error.
//!
//! Hooks (all trylast, so they record what the other plugins decided):
//! `after_llm_call`, `after_tool_call`, `on_error`. Writes are async
//! (`tokio::fs`), serialized so lines never interleave. Config: `path`, the
//! JSONL file (default `<home>/audit.jsonl`, the host's home as
//! `PluginContext::home` tells it: `bub --home`, `$BUB_HOME`, `~/.bub`).

use std::{path::PathBuf, time::SystemTime};

use bub_abi::{
    types::{Envelope, ErrorInfo, LlmCallRequest, LlmCallResult, ToolCall, ToolCallResult},
    BoxError, Plugin, PluginContext,
};
use serde_json::{json, Value};
use tokio::{io::AsyncWriteExt, sync::Mutex};

/// The plugin.
pub struct AuditLog {
    path: PathBuf,
    write: Mutex<()>,
}

impl AuditLog {
    async fn append(&self, mut record: Value) -> std::io::Result<()> {
        record["time"] = json!(humantime::format_rfc3339_millis(SystemTime::now()).to_string());
        let mut line = record.to_string();
        line.push('\n');
        let _one_writer = self.write.lock().await;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            bub_kit::files::create_private_dir(dir)?;
        }
        // Tool arguments and results are secrets: the log is owner-only.
        let mut file = tokio::fs::File::from_std(bub_kit::files::open_private_append(&self.path)?);
        file.write_all(line.as_bytes()).await?;
        file.flush().await
    }
}

#[bub_abi::plugin]
impl Plugin for AuditLog {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        let path = match ctx.config.get("path").and_then(Value::as_str) {
            Some(p) => PathBuf::from(p),
            None => ctx.home.join("audit.jsonl"),
        };
        Ok(AuditLog { path, write: Mutex::new(()) })
    }

    #[trylast]
    async fn after_llm_call(&self, request: LlmCallRequest, result: LlmCallResult) -> Result<(), std::io::Error> {
        self.append(json!({
            "event": "llm_call", "run_id": request.run_id, "model": request.model,
            "ok": result.error.is_none(), "error": result.error, "duration_ms": result.duration_ms,
            "tool_calls": result.tool_calls.len(),
        }))
        .await
    }

    /// Observes only: `None` leaves the tool's result as it is.
    #[trylast]
    async fn after_tool_call(&self, call: ToolCall, result: ToolCallResult) -> Result<Option<Value>, std::io::Error> {
        self.append(json!({
            "event": "tool_call", "run_id": call.run_id, "tool": call.tool, "arguments": call.arguments,
            "ok": result.error.is_none(), "error": result.error, "duration_ms": result.duration_ms,
        }))
        .await?;
        Ok(None)
    }

    #[trylast]
    async fn on_error(&self, stage: String, error: ErrorInfo, message: Option<Envelope>) -> Result<(), std::io::Error> {
        let session = message.as_ref().and_then(|m| m.get("session_id")).cloned();
        self.append(json!({"event": "error", "stage": stage, "kind": error.kind, "message": error.message, "session_id": session}))
            .await
    }
}

bub_abi::export_plugin!(AuditLog);

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use bub_abi::{
        types::{ErrorInfo, LlmCallRequest, LlmCallResult, ToolCall, ToolCallResult},
        TurnState,
    };
    use bub_runtime::testing::PluginTest;
    use serde_json::{json, Value};

    bub_abi::static_plugin!(super::AuditLog, fn module, name = "audit-log", version = "0", description = "test");

    /// One line per model call, tool call and error, in order, with the
    /// fields the module docs name; the file is the owner's only (tool
    /// arguments may be secrets), and the tool's result is left alone.
    #[tokio::test]
    async fn one_owner_only_line_per_event() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/audit.jsonl");
        let config = json!({"path": path}).as_object().unwrap().clone();
        let test = PluginTest::with_config("audit-log", module(), config);
        assert!(test.loaded(), "{:?}", test.record());
        let rt = test.runtime();
        let state = TurnState::new();

        let request: LlmCallRequest = serde_json::from_value(json!({"run_id": "r1", "model": "openai:m"})).unwrap();
        let result: LlmCallResult = serde_json::from_value(json!({"run_id": "r1", "duration_ms": 12})).unwrap();
        rt.after_llm_call(&request, &result, &state).await;
        let call = ToolCall {
            run_id: "r1".into(),
            tool: "bash".into(),
            arguments: bub_abi::Value::from_json(r#"{"cmd": "ls"}"#).unwrap(),
            ..Default::default()
        };
        let done: ToolCallResult =
            serde_json::from_value(json!({"run_id": "r1", "tool": "bash", "result": "a.txt", "duration_ms": 3}))
                .unwrap();
        let after = rt.after_tool_call(&call, done, &state).await;
        assert_eq!(after.result, Some(json!("a.txt")), "observes only");
        let error = ErrorInfo { kind: "provider".into(), message: "down".into(), details: None };
        rt.notify_error("turn", &error, Some(&json!({"session_id": "cli:1"}))).await;

        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!((lines[0]["event"].as_str(), lines[0]["model"].as_str()), (Some("llm_call"), Some("openai:m")));
        assert_eq!(lines[0]["ok"], json!(true));
        assert_eq!(lines[1]["event"], "tool_call");
        assert_eq!(lines[1]["arguments"], json!({"cmd": "ls"}));
        assert_eq!(
            lines[2],
            json!({"event": "error", "stage": "turn", "kind": "provider", "message": "down",
            "session_id": "cli:1", "time": lines[2]["time"]})
        );
        assert!(lines.iter().all(|l| l["time"].as_str().is_some_and(|t| t.ends_with('Z'))));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
