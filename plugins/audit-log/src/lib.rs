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
            bub_abi::files::create_private_dir(dir)?;
        }
        // Tool arguments and results are secrets: the log is owner-only.
        let mut file = tokio::fs::File::from_std(bub_abi::files::open_private_append(&self.path)?);
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
