//! Spilling oversized tool results (semantics §A4.9, Bub's `spill` sidecar).
//!
//! A model-facing tool result of at least 4 × `BUB_SPILL_THRESHOLD`
//! characters (default 4096 "tokens": 16,384 characters) is written to the
//! sidecar tape `<tape>__sidecar__spill` in UTF-8-safe 16 KiB chunks, and the
//! model gets a reference with a 600-character preview; `spill.read` pages
//! the chunks back. Only when `spill_read` is among the step's tools, never
//! for commands or for `spill_read`'s own results. The handler sits on the
//! bus after the plugins' `after_tool_call` hooks (where Bub's builtin
//! `trylast` implementation runs).

use bub_kit::python::python_json;
use serde_json::{json, Map, Value};

use bub_agent::{
    events::{handler, Event, EventBus, Filter},
    tape::{context_false, entry, sidecar_tape_name, RunTape},
    tools::error_dict,
    AgentError,
};

/// The sidecar's name.
pub const SIDECAR: &str = "spill";
/// Bytes per chunk.
pub const CHUNK_BYTES: usize = 16_384;
/// Chunks one `spill.read` returns at most.
pub const MAX_READ_CHUNKS: usize = 4;
const PREVIEW_CHARS: usize = 600;

/// `1234567` → `1,234,567` (Python's `{:,}`).
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn preview(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= PREVIEW_CHARS {
        return text.to_owned();
    }
    let head = PREVIEW_CHARS / 2;
    let tail = PREVIEW_CHARS - head;
    let omitted = chars.len() - PREVIEW_CHARS;
    let h: String = chars[..head].iter().collect();
    let t: String = chars[chars.len() - tail..].iter().collect();
    format!("{h}\n...[{} chars omitted]...\n{t}", thousands(omitted))
}

fn utf8_chunks(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    while start < bytes.len() {
        let mut end = (start + CHUNK_BYTES).min(bytes.len());
        while end < bytes.len() && !text.is_char_boundary(end) {
            end -= 1;
        }
        out.push(&text[start..end]);
        start = end;
    }
    out
}

/// 32 hex digits, like Bub's `uuid4().hex`.
fn handle() -> String {
    format!("{:016x}{:016x}", bub_kit::random::u64(), bub_kit::random::u64())
}

/// Writes `text` to the spill tape when it is at least 4 × `limit`
/// characters (`limit` in "tokens": `ModelSettings::spill_threshold`, 0 =
/// never); what the model sees.
pub async fn spill(tape: &RunTape, text: &str, tool: &str, run_id: &str, limit: usize) -> Result<String, AgentError> {
    if limit == 0 || tool == "spill.read" || tool == "spill_read" || text.chars().count() < limit * 4 {
        return Ok(text.to_owned());
    }
    let handle = handle();
    let bytes = text.len();
    let side = sidecar_tape_name(tape.name(), SIDECAR);
    let written: Result<usize, AgentError> = async {
        let chunks = utf8_chunks(text);
        for (i, chunk) in chunks.iter().enumerate() {
            tape.record_to(&side, entry("anchor", json!({"name": format!("spill/{handle}/chunk/{i}")}), Map::new()))
                .await?;
            let mut meta = Map::new();
            meta.insert("spill_handle".into(), json!(handle));
            meta.insert("spill_chunk".into(), json!(i));
            tape.record_to(&side, entry("tool_result", json!({"results": [chunk]}), meta)).await?;
        }
        tape.record_to(&side, entry("anchor", json!({"name": format!("spill/{handle}/manifest")}), Map::new())).await?;
        let mut meta = Map::new();
        meta.insert("spill_handle".into(), json!(handle));
        meta.insert("run_id".into(), json!(run_id));
        let data = json!({"handle": handle, "chunks": chunks.len(), "bytes": bytes, "chars": text.chars().count(),
            "lines": text.matches('\n').count() + 1, "tool": tool});
        tape.record_to(&side, entry("event", json!({"name": "spill.manifest", "data": data}), meta)).await?;
        Ok(chunks.len())
    }
    .await;
    let mut meta = context_false();
    meta.insert("run_id".into(), json!(run_id));
    match written {
        Ok(chunks) => {
            let data = json!({"status": "ok", "handle": handle, "bytes": bytes, "chunks": chunks, "tool": tool});
            if let Err(e) = tape.record_event("spill.write", data, meta).await {
                tracing::warn!(target: "bub::spill", "spill write event failed run_id={run_id} error={e}");
            }
            Ok(format!(
                "[tool output spilled: {} bytes in {} chunks; handle: {handle}]\n[read with: spill_read(handle='{handle}', cursor=0, count=1, from_end=False)]\n{}",
                thousands(bytes),
                thousands(chunks),
                preview(text)
            ))
        }
        Err(e) => {
            tracing::warn!(target: "bub::spill", "tool result spill failed tool={tool} error={e}");
            let data =
                json!({"status": "error", "handle": handle, "bytes": bytes, "tool": tool, "error": e.to_string()});
            let _ = tape.record_event("spill.write", data, meta).await;
            Ok(format!("[tool output truncated: {} bytes; spill storage failed]\n{}", thousands(bytes), preview(text)))
        }
    }
}

/// Subscribes the spill handler on `ToolCallFinished`, spilling results of
/// at least 4 × `limit` characters (`ModelSettings::spill_threshold`).
pub fn subscribe(bus: &mut EventBus, limit: usize) {
    bus.on(
        Filter::Kind("ToolCallFinished"),
        handler(move |event, cx| {
            Box::pin(async move {
                let Event::ToolCallFinished { call, result } = event else { return Ok(()) };
                // Bub spills neither commands' results nor code's calls'.
                if call.run_id == "run_command" || call.code_mode {
                    return Ok(());
                }
                let offered: Vec<String> = cx.state.get("_runtime_tool_names").ok().flatten().unwrap_or_default();
                if !offered.iter().any(|n| n == "spill_read") {
                    return Ok(());
                }
                let value = match (&result.result, &result.error) {
                    (Some(v), _) => v.clone(),
                    (None, Some(e)) => error_dict(e),
                    (None, None) => return Ok(()),
                };
                if let Some(blocks) =
                    value.get("content").and_then(Value::as_array).filter(|_| value["type"] == "tool_content")
                {
                    let text: String =
                        blocks.iter().filter(|b| b["type"] == "text").filter_map(|b| b["text"].as_str()).collect();
                    let bounded = spill(&cx.tape, &text, &call.tool, &call.run_id, limit).await?;
                    if bounded != text {
                        let mut content = vec![json!({"type": "text", "text": bounded})];
                        content.extend(blocks.iter().filter(|b| b["type"] != "text").cloned());
                        let mut v = value.clone();
                        v["content"] = Value::Array(content);
                        result.result = Some(v);
                    }
                    return Ok(());
                }
                let rendered = match &value {
                    Value::String(s) => s.clone(),
                    other => python_json(other),
                };
                let bounded = spill(&cx.tape, &rendered, &call.tool, &call.run_id, limit).await?;
                if value.is_string() || bounded != rendered {
                    result.result = Some(Value::String(bounded));
                }
                Ok(())
            })
        }),
    );
}

/// `spill.read`: pages a spilled result back.
pub async fn read(tape: &RunTape, handle: &str, cursor: i64, count: i64, from_end: bool) -> Result<String, AgentError> {
    if cursor < 0 {
        return Ok("`cursor` must be >= 0.".into());
    }
    if count < 1 {
        return Ok("`count` must be >= 1.".into());
    }
    let (cursor, count) = (cursor as usize, (count as usize).min(MAX_READ_CHUNKS));
    let side = sidecar_tape_name(tape.name(), SIDECAR);
    let q = bub_abi::types::TapeQuery {
        tape: side.clone(),
        after_anchor: Some(format!("spill/{handle}/manifest")),
        kinds: vec!["event".into()],
        limit: Some(1),
        ..Default::default()
    };
    let manifest = tape.fetch(&q).await?.into_iter().next().filter(|e| e.payload["data"]["handle"] == handle);
    let Some(manifest) = manifest else { return Ok(format!("[no spilled tool result for handle '{handle}']")) };
    let data = &manifest.payload["data"];
    let (chunks, bytes) = (data["chunks"].as_u64().unwrap_or(0) as usize, data["bytes"].as_u64().unwrap_or(0) as usize);
    let (start, stop, next, complete) = if from_end {
        let stop = chunks.saturating_sub(cursor);
        let start = stop.saturating_sub(count);
        (start, stop, cursor + (stop - start), start == 0)
    } else {
        let start = cursor.min(chunks);
        let stop = (start + count).min(chunks);
        (start, stop, stop, stop == chunks)
    };
    let mut content = String::new();
    if start < stop {
        let q = bub_abi::types::TapeQuery {
            tape: side,
            after_anchor: Some(format!("spill/{handle}/chunk/{start}")),
            kinds: vec!["tool_result".into()],
            limit: Some(stop - start),
            ..Default::default()
        };
        let entries = tape.fetch(&q).await?;
        if entries.len() != stop - start {
            return Ok(format!("[incomplete spilled tool result: missing chunks for handle '{handle}']"));
        }
        for (i, e) in entries.iter().enumerate() {
            let ok = e.meta.get("spill_handle") == Some(&json!(handle))
                && e.meta.get("spill_chunk") == Some(&json!(start + i));
            match (ok, e.payload["results"][0].as_str()) {
                (true, Some(chunk)) => content.push_str(chunk),
                _ => {
                    return Ok(format!(
                        "[incomplete spilled tool result: invalid chunk {} for handle '{handle}']",
                        start + i
                    ))
                }
            }
        }
    }
    let shown = if stop > start { format!("{start}-{}", stop - 1) } else { "none".into() };
    Ok(format!(
        "[spilled tool result: {} bytes, {} chunks]\nchunks: {shown}\nnext_cursor: {next}\ncomplete: {complete}\ncontent:\n{content}",
        thousands(bytes),
        thousands(chunks)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_previews_and_chunks() {
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(999), "999");
        let long = "é".repeat(10_000);
        let chunks = utf8_chunks(&long);
        assert!(chunks.iter().all(|c| c.len() <= CHUNK_BYTES));
        assert_eq!(chunks.concat(), long);
        assert!(preview(&long).contains("...[9,400 chars omitted]..."));
    }
}
