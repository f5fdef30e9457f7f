//! The live objects a plugin tool's context carries (ABI 2.2; Bub's
//! `ToolContext.tape` and `.state`): the run's tape and the turn state, as
//! objects the tool calls by method name. A tool reaches them with
//! `ToolCallContext::live_tape()` / `live_state()` inside `call_in`.

use std::sync::Arc;

use bub_abi::{
    sdk::object::{ObjectFuture, ObjectImpl},
    HookError, Object, TurnState,
};
use serde_json::{json, Map, Value};

use super::tape::{entry, RunTape};

/// The run's tape.
pub struct LiveTape(pub Arc<RunTape>);

/// The turn state.
pub struct LiveState(pub TurnState);

fn text(args: &Value, key: &str) -> Result<String, HookError> {
    args.get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| HookError::plugin(format!("`{key}` (a string) is required")))
}

fn meta(args: &Value) -> Map<String, Value> {
    args.get("meta").and_then(Value::as_object).cloned().unwrap_or_default()
}

fn failed(e: impl std::fmt::Display) -> HookError {
    HookError::plugin(e.to_string())
}

impl ObjectImpl for LiveTape {
    fn kind(&self) -> &str {
        "tape"
    }

    fn name(&self) -> String {
        self.0.name().to_owned()
    }

    fn invoke(&self, method: &str, args: Value) -> ObjectFuture {
        let tape = self.0.clone();
        let method = method.to_owned();
        Box::pin(async move {
            let stored = |e: bub_abi::types::TapeEntry| serde_json::to_value(e).map_err(failed);
            match method.as_str() {
                "append" => {
                    let payload = args.get("payload").cloned().unwrap_or_else(|| json!({}));
                    stored(tape.append(&text(&args, "kind")?, payload, meta(&args)).await.map_err(failed)?)
                }
                "event" => {
                    let data = args.get("data").cloned().unwrap_or(Value::Null);
                    stored(tape.event(&text(&args, "name")?, data, meta(&args)).await.map_err(failed)?)
                }
                "handoff" => {
                    tape.handoff(&text(&args, "name")?, args.get("state").cloned()).await.map_err(failed)?;
                    Ok(Value::Null)
                }
                "anchors" => {
                    let entries = tape.entries().await.map_err(failed)?;
                    let names: Vec<Value> = entries
                        .into_iter()
                        .filter(|e| e.kind == "anchor")
                        .filter_map(|e| e.payload.get("name").cloned())
                        .collect();
                    Ok(Value::Array(names))
                }
                "entries" => serde_json::to_value(tape.entries().await.map_err(failed)?).map_err(failed),
                "append_to" => {
                    let payload = args.get("payload").cloned().unwrap_or_else(|| json!({}));
                    let e = entry(&text(&args, "kind")?, payload, meta(&args));
                    stored(tape.append_to(&text(&args, "tape")?, e).await.map_err(failed)?)
                }
                other => Err(HookError::new(
                    bub_abi::ErrorKind::UNSUPPORTED,
                    format!(
                        "a tape has no method `{other}` (it has: append, event, handoff, anchors, entries, append_to)"
                    ),
                )),
            }
        })
    }
}

impl ObjectImpl for LiveState {
    fn kind(&self) -> &str {
        "state"
    }

    fn invoke(&self, method: &str, args: Value) -> ObjectFuture {
        let state = self.0.clone();
        let method = method.to_owned();
        Box::pin(async move {
            match method.as_str() {
                "get" => Ok(state.get_value(&text(&args, "key")?).unwrap_or(Value::Null)),
                "set" => {
                    state.set(&text(&args, "key")?, args.get("value").unwrap_or(&Value::Null))?;
                    Ok(Value::Null)
                }
                "remove" => Ok(Value::Bool(state.remove(&text(&args, "key")?))),
                "keys" => Ok(json!(state.keys())),
                other => Err(HookError::new(
                    bub_abi::ErrorKind::UNSUPPORTED,
                    format!("a state has no method `{other}` (it has: get, set, remove, keys)"),
                )),
            }
        })
    }
}

/// The live objects of a tool call's context.
pub fn objects(tape: &Arc<RunTape>, state: &TurnState) -> [(&'static str, Object); 2] {
    [("live_tape", Object::new(LiveTape(tape.clone()))), ("live_state", Object::new(LiveState(state.clone())))]
}
