//! The no-op plugin of the agent benchmark (`scripts/agent-bench.sh`): the
//! four interception hooks, each answering None (a plain `def` returning
//! None in the Python twin), counting its calls.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bub_abi::{
    types::{BeforeLlmCall, StateMap, ToolCall, ToolCallDecision},
    BoxError, Plugin, PluginContext,
};
use serde_json::{json, Value};

pub struct AgentNoop {
    calls: AtomicU64,
}

impl AgentNoop {
    fn bump(&self) {
        self.calls.store(self.calls.load(Relaxed) + 1, Relaxed);
    }
}

#[bub_abi::plugin]
impl Plugin for AgentNoop {
    fn new(_ctx: &PluginContext) -> Result<Self, BoxError> {
        Ok(AgentNoop { calls: AtomicU64::new(0) })
    }

    fn before_llm_call(&self) -> Option<BeforeLlmCall> {
        self.bump();
        None
    }

    fn after_llm_call(&self) {
        self.bump();
    }

    fn before_tool_call(&self, _call: ToolCall) -> Option<ToolCallDecision> {
        self.bump();
        None
    }

    fn after_tool_call(&self) -> Option<Value> {
        self.bump();
        None
    }

    /// The call count (read once, after timing).
    fn onboard_config(&self) -> Option<StateMap> {
        let mut m = StateMap::new();
        m.insert("calls".into(), json!(self.calls.load(Relaxed)));
        Some(m)
    }
}

bub_abi::export_plugin!(AgentNoop);
