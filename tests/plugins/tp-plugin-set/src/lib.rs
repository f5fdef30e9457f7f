//! A plugin set for the tests: config `{"members": [{"name": "…",
//! "answer": "…", "hooks": {"resolve_session": "tryfirst", "build_prompt":
//! "normal"}}]}` gives one member per entry, answering `answer` from the
//! hooks it names (with those markers). The library itself implements no
//! hook of its own: only its members answer.

use bub_abi::{
    hooks::HookId,
    sdk::set::{Member, PluginSet},
    BoxError, HookMarker, Plugin, PluginContext,
};
use serde_json::{Map, Value};

pub struct Set {
    // None for the library's own registration; a member's answer otherwise.
    answer: Option<String>,
    config: Map<String, Value>,
}

#[bub_abi::plugin]
impl Plugin for Set {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        Ok(Set { answer: None, config: ctx.config.clone() })
    }

    fn resolve_session(&self) -> Option<String> {
        self.answer.clone()
    }

    fn build_prompt(&self) -> Option<Value> {
        self.answer.as_ref().map(|a| Value::String(format!("prompt from {a}")))
    }
}

impl PluginSet for Set {
    fn members(&self) -> Result<Vec<Member<Self>>, BoxError> {
        let Some(Value::Array(entries)) = self.config.get("members") else { return Ok(Vec::new()) };
        let mut members = Vec::new();
        for entry in entries {
            let name = entry["name"].as_str().ok_or("a member needs a name")?.to_owned();
            let mut hooks = Vec::new();
            for (hook, marker) in entry["hooks"].as_object().into_iter().flatten() {
                let id = HookId::from_name(hook).ok_or_else(|| format!("no hook {hook}"))?;
                let marker = match marker.as_str() {
                    Some("tryfirst") => HookMarker::TryFirst,
                    Some("trylast") => HookMarker::TryLast,
                    _ => HookMarker::Normal,
                };
                hooks.push((id, marker));
            }
            members.push(Member {
                name,
                version: "9.9.9".into(),
                description: "a member of tp-plugin-set".into(),
                plugin: Set { answer: entry["answer"].as_str().map(str::to_owned), config: Map::new() },
                hooks,
            });
        }
        Ok(members)
    }
}

bub_abi::export_plugin!(Set, set);
