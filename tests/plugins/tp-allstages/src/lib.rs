//! `hook_bench.py`'s `AllStagesPlugin`: every `process_inbound` stage
//! implemented trivially, in memory, with the builtin's sync/async split
//! (sync `resolve_session` and `render_outbound`, the rest `async`). Each
//! stage counts its calls, reported through `onboard_config` (untimed).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bub_abi::{
    types::{Envelope, Outbound, Prompt, StateMap},
    BoxError, Plugin, PluginContext,
};
use serde_json::{json, Value};

const STAGES: [&str; 7] = [
    "resolve_session",
    "load_state",
    "build_prompt",
    "run_model",
    "save_state",
    "render_outbound",
    "dispatch_outbound",
];

pub struct AllStages {
    counts: [AtomicU64; 7],
}

impl AllStages {
    fn bump(&self, stage: usize) {
        let c = &self.counts[stage];
        c.store(c.load(Relaxed) + 1, Relaxed);
    }
}

fn field(message: &Envelope, key: &str) -> Value {
    message.get(key).cloned().unwrap_or(Value::Null)
}

#[bub_abi::plugin]
impl Plugin for AllStages {
    fn new(_ctx: &PluginContext) -> Result<Self, BoxError> {
        Ok(AllStages { counts: Default::default() })
    }

    fn resolve_session(&self, message: Envelope) -> Option<String> {
        self.bump(0);
        let s = |k| field(&message, k).as_str().unwrap_or_default().to_owned();
        Some(format!("{}:{}", s("channel"), s("chat_id")))
    }

    async fn load_state(&self, session_id: String) -> Option<StateMap> {
        self.bump(1);
        let mut m = StateMap::new();
        m.insert("session_id".into(), Value::String(session_id));
        Some(m)
    }

    async fn build_prompt(&self, message: Envelope) -> Option<Prompt> {
        self.bump(2);
        Some(json!([field(&message, "content")]))
    }

    async fn run_model(&self) -> Option<String> {
        self.bump(3);
        Some("pong".into())
    }

    async fn save_state(&self) {
        self.bump(4);
    }

    fn render_outbound(&self, message: Envelope, session_id: String, model_output: String) -> Option<Outbound> {
        self.bump(5);
        Some(json!([{"session_id": session_id, "channel": field(&message, "channel"),
                     "chat_id": field(&message, "chat_id"), "content": model_output}]))
    }

    async fn dispatch_outbound(&self) -> Option<bool> {
        self.bump(6);
        Some(true)
    }

    fn onboard_config(&self) -> Option<StateMap> {
        Some(STAGES.iter().zip(&self.counts).map(|(s, c)| (s.to_string(), json!(c.load(Relaxed)))).collect())
    }
}

bub_abi::export_plugin!(AllStages);
