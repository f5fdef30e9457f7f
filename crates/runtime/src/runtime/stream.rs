//! Model streams on the host side: Bub's `AsyncStreamEvents`.

use bub_abi::{
    resources::{clients::StreamClient, MethodError},
    types::{Envelope, ErrorInfo, StreamEvent},
    HookError, HookId, Object,
};
use serde_json::Value;

use super::{CallArgs, Runtime};
use crate::{error::HookFailure, resources::Channel};

/// A stream of model events from a plugin.
pub struct ModelStream {
    object: Object,
    plugin: String,
    closed: bool,
    // Events fetched by `next_many` and not handed out yet.
    buffer: std::collections::VecDeque<StreamEvent>,
    // Streams of SDKs before `next_many` answer one event per call.
    batched: bool,
}

impl ModelStream {
    /// Wraps a `stream` object answered by `plugin`.
    pub fn new(object: Object, plugin: &str) -> Self {
        ModelStream { object, plugin: plugin.to_owned(), closed: false, buffer: Default::default(), batched: true }
    }

    /// The next event; `None` at the end (or after `close`).
    pub async fn next(&mut self) -> Result<Option<StreamEvent>, HookFailure> {
        if let Some(event) = self.buffer.pop_front() {
            return Ok(Some(event));
        }
        if self.closed {
            return Ok(None);
        }
        let fail = |e: MethodError| HookFailure::new(&self.plugin, HookId::RunModelStream, e.error);
        let client = StreamClient(&self.object);
        if self.batched {
            match client.next_many().await {
                Ok(events) => {
                    if events.is_empty() {
                        self.closed = true;
                    }
                    self.buffer.extend(events);
                    return Ok(self.buffer.pop_front());
                }
                // A hand-written stream without `next_many`.
                Err(e) if e.error.kind == bub_abi::ErrorKind::UNSUPPORTED => self.batched = false,
                Err(e) => return Err(fail(e)),
            }
        }
        match client.next().await.map_err(fail)? {
            None => {
                self.closed = true;
                Ok(None)
            }
            event => Ok(event),
        }
    }

    /// Closes the stream (idempotent); the plugin stops producing.
    pub async fn close(&mut self) {
        if !self.closed {
            self.closed = true;
            let _ = StreamClient(&self.object).close().await;
        }
    }

    /// Consumes the stream: the concatenated `text` deltas, and every `error`
    /// event (Bub reports each through `on_error` and carries on).
    pub async fn collect_text(self) -> Result<(String, Vec<ErrorInfo>), HookFailure> {
        self.collect_text_to(None).await
    }

    /// [`collect_text`](Self::collect_text), showing each event first to
    /// `channel` (rendering the stream answering `message` live); a channel
    /// failing to show an event is logged, and the turn goes on.
    pub async fn collect_text_to(
        self,
        channel: Option<(&Channel, &Envelope)>,
    ) -> Result<(String, Vec<ErrorInfo>), HookFailure> {
        self.collect_events_to(channel, None).await
    }

    /// [`collect_text_to`](Self::collect_text_to), also keeping every event
    /// in `events`.
    pub async fn collect_events_to(
        mut self,
        channel: Option<(&Channel, &Envelope)>,
        mut events: Option<&mut Vec<StreamEvent>>,
    ) -> Result<(String, Vec<ErrorInfo>), HookFailure> {
        let mut text = String::new();
        let mut errors = Vec::new();
        while let Some(event) = self.next().await? {
            if let Some(events) = events.as_deref_mut() {
                events.push(event.clone());
            }
            if let Some((channel, message)) = channel {
                if let Err(e) = channel.stream_event(message, &event).await {
                    tracing::warn!(target: "bub::framework", "{e}");
                }
            }
            match event.kind.as_str() {
                "text" => match &event.data["delta"] {
                    Value::String(s) => text.push_str(s),
                    Value::Null => {}
                    other => text.push_str(&other.to_string()),
                },
                "error" => errors.push(ErrorInfo {
                    kind: event.data["kind"].as_str().unwrap_or("unknown").to_owned(),
                    message: event.data["message"].as_str().unwrap_or_default().to_owned(),
                    details: event.data.get("details").cloned(),
                }),
                _ => {}
            }
        }
        Ok((text, errors))
    }
}

impl Runtime {
    /// `call_first("run_model_stream")`: the first plugin's stream, or None.
    /// Anything but a stream object is Bub's `TypeError`.
    pub async fn run_model_stream(&self, args: &CallArgs) -> Result<Option<ModelStream>, HookFailure> {
        let Some(reply) = self.call_first(HookId::RunModelStream, args).await? else { return Ok(None) };
        match reply.object().filter(|o| o.kind() == "stream") {
            Some(object) => Ok(Some(ModelStream::new(object, &reply.plugin))),
            None => Err(HookFailure::new(
                &reply.plugin,
                HookId::RunModelStream,
                HookError::new(bub_abi::ErrorKind::TYPE, "hook.run_model_stream must return AsyncStreamEvents or None"),
            )),
        }
    }
}
