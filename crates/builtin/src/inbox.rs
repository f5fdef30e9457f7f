//! The builtin steering inbox: in memory, FIFO per turn key.
//!
//! The key is `state["_runtime_thread_id"]` if truthy, else
//! `state["session_id"]` if truthy, else `"default"` (semantics §H4.7). One inbox
//! per `running()` scope: messages never outlive the scope that took them.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
};

use bub_abi::{
    resources::{Fut, SteeringInbox},
    types::{Envelope, StateMap},
};
use serde_json::Value;

/// An in-memory steering inbox.
#[derive(Default, Clone)]
pub struct MemoryInbox {
    queues: Arc<Mutex<HashMap<String, VecDeque<Envelope>>>>,
}

fn key(state: &StateMap) -> String {
    for k in ["_runtime_thread_id", "session_id"] {
        match state.get(k) {
            Some(Value::String(s)) if !s.is_empty() => return s.clone(),
            Some(v) if bub_kit::envelope::truthy(v) => return bub_kit::envelope::py_str(v),
            _ => {}
        }
    }
    "default".into()
}

impl MemoryInbox {
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<String, VecDeque<Envelope>>) -> R) -> R {
        f(&mut bub_abi::sync::lock(&self.queues))
    }
}

impl SteeringInbox for MemoryInbox {
    fn enqueue_message(&self, message: Envelope, state: StateMap) -> impl Fut<()> {
        self.with(|q| q.entry(key(&state)).or_default().push_back(message));
        async { Ok(()) }
    }

    fn drain_messages(&self, state: StateMap) -> impl Fut<Vec<Envelope>> {
        let drained = self.with(|q| q.remove(&key(&state)).map(Vec::from).unwrap_or_default());
        async move { Ok(drained) }
    }

    fn message_count(&self, state: StateMap) -> impl Fut<usize> {
        let n = self.with(|q| q.get(&key(&state)).map_or(0, VecDeque::len));
        async move { Ok(n) }
    }
}
