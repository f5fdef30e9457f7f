//! The no-op extra plugin of `hook_bench.py`'s `process_inbound` cases:
//! `async load_state` and sync `render_outbound`, both answering None, each
//! counting its calls (reported through `onboard_config`, untimed). It has
//! no `new`: `#[bub_abi::plugin]` builds a `Default` type, so
//! every test loading it proves the generated constructor through the loader.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bub_abi::{
    types::{Outbound, StateMap},
    Plugin,
};
use serde_json::json;

#[derive(Default)]
pub struct Noop {
    load_calls: AtomicU64,
    render_calls: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.store(counter.load(Relaxed) + 1, Relaxed);
}

#[bub_abi::plugin]
impl Plugin for Noop {
    async fn load_state(&self) -> Option<StateMap> {
        bump(&self.load_calls);
        None
    }

    fn render_outbound(&self) -> Option<Outbound> {
        bump(&self.render_calls);
        None
    }

    fn onboard_config(&self) -> Option<StateMap> {
        let mut m = StateMap::new();
        m.insert("load".into(), json!(self.load_calls.load(Relaxed)));
        m.insert("render".into(), json!(self.render_calls.load(Relaxed)));
        Some(m)
    }
}

// Declares a replacement (ABI 2.1) of a plugin name no other test uses;
// the install tests prove the declaration is recorded and honoured.
bub_abi::export_plugin!(Noop, replaces = ["replaced-by-noop"]);
