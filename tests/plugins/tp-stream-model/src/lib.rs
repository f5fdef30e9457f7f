//! A model plugin with `run_model_stream` only, as a provider plugin that
//! cannot answer any other way: its stream is the `events` of its config
//! (`[{"kind": "text", "data": {"delta": "…"}}, …]`), in order.

use bub_abi::{types::StreamEvent, BoxError, ModelStream, Object, Plugin, PluginContext};

pub struct StreamModel {
    events: Vec<StreamEvent>,
}

#[bub_abi::plugin]
impl Plugin for StreamModel {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        let events = ctx.config.get("events").cloned().unwrap_or_else(|| serde_json::json!([]));
        Ok(StreamModel { events: serde_json::from_value(events)? })
    }

    /// The configured events, as a stream.
    fn run_model_stream(&self) -> Option<Object> {
        Some(ModelStream::from_events(self.events.clone()))
    }
}

bub_abi::export_plugin!(StreamModel);
