//! From tape entries to model messages (spec §4.5): Bub's default context
//! selector, after the last anchor (the anchor itself left out) unless the
//! tape context names another anchor or none.

use bub_abi::types::{TapeContextSpec, TapeEntry, TapeQuery};
use serde_json::{json, Value};

use super::{tape::RunTape, AgentError};

/// The query a tape context makes.
pub fn query(tape: &str, spec: &TapeContextSpec) -> TapeQuery {
    let mut q = TapeQuery { tape: tape.to_owned(), ..Default::default() };
    match spec.anchor.as_deref() {
        Some(TapeContextSpec::LAST_ANCHOR) => q.last_anchor = true,
        Some(name) => q.after_anchor = Some(name.to_owned()),
        None => {}
    }
    q
}

/// The context messages of the run's tape.
pub async fn messages(tape: &RunTape, spec: &TapeContextSpec) -> Result<Vec<Value>, AgentError> {
    let entries = tape.fetch(&query(tape.name(), spec)).await?;
    Ok(select(&entries))
}

fn upgrade_call(c: &Value) -> Value {
    // Chat-completions-style `{function: {name, arguments}}` (legacy payloads).
    if let Some(f) = c.get("function") {
        return json!({"id": c.get("id").cloned().unwrap_or_default(), "name": f["name"], "arguments": f["arguments"]});
    }
    c.clone()
}

/// Bub's default selector: `message` → itself, `tool_call` → an assistant
/// message with the calls, `tool_result` → one tool message per (call,
/// result), `anchor` → `[Anchor created: <name>]: <state>`; entries with
/// `meta.context == false` and everything else are left out.
pub fn select(entries: &[TapeEntry]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut last_calls: Vec<Value> = Vec::new();
    for e in entries {
        if e.meta.get("context") == Some(&Value::Bool(false)) {
            continue;
        }
        match e.kind.as_str() {
            "message" => {
                let mut m = Value::Object(e.payload.clone());
                if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
                    m["tool_calls"] = Value::Array(calls.iter().map(upgrade_call).collect());
                }
                out.push(m);
            }
            "tool_call" => {
                last_calls = e.payload.get("calls").and_then(Value::as_array).cloned().unwrap_or_default();
                last_calls = last_calls.iter().map(upgrade_call).collect();
                let mut m = json!({
                    "role": "assistant",
                    "content": e.payload.get("content").cloned().unwrap_or(json!("")),
                    "tool_calls": last_calls,
                });
                for k in ["reasoning", "provider_data"] {
                    if let Some(v) = e.payload.get(k) {
                        m[k] = v.clone();
                    }
                }
                out.push(m);
            }
            "tool_result" => {
                let results = e.payload.get("results").and_then(Value::as_array).cloned().unwrap_or_default();
                for (call, result) in last_calls.iter().zip(results) {
                    out.push(json!({
                        "role": "tool",
                        "tool_call_id": call.get("id").cloned().unwrap_or_default(),
                        "name": call.get("name").cloned().unwrap_or_default(),
                        "content": tool_message_content(&result),
                    }));
                }
            }
            "anchor" => {
                let name = e.payload.get("name").and_then(Value::as_str).unwrap_or("");
                let state = e.payload.get("state").cloned().unwrap_or(json!({}));
                out.push(json!({"role": "assistant", "content": format!("[Anchor created: {name}]: {state}")}));
            }
            _ => {}
        }
    }
    out
}

/// A tool result as tool-message content: text as is, a content result as
/// its parts, anything else as JSON text.
pub fn tool_message_content(result: &Value) -> Value {
    match result {
        Value::String(s) => Value::String(s.clone()),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("tool_content") => {
            o.get("content").cloned().unwrap_or(json!([]))
        }
        other => Value::String(super::tools::python_json(other)),
    }
}
