//! Model streams: what `run_model_stream` returns.
//!
//! A stream crosses the boundary as an [`Object`] of kind `stream` with
//! methods `next` (the next [`StreamEvent`] as JSON, or `null` at the end),
//! `next_many` (every event available now, at least one; `[]` at the end)
//! and `close`. On the plugin side it is a channel: produce events from a
//! task, and stop when sending fails — the host closed or dropped the stream.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, Mutex};

use crate::{
    abi::HookError,
    sdk::object::{ObjectFuture, ObjectImpl},
    types::StreamEvent,
    Object,
};

/// The producing end of a model stream.
#[derive(Clone)]
pub struct EventSender {
    tx: mpsc::Sender<StreamEvent>,
}

impl EventSender {
    /// Sends one event; `Err` means the host closed the stream: stop producing.
    pub async fn send(&self, event: StreamEvent) -> Result<(), StreamClosed> {
        self.tx.send(event).await.map_err(|_| StreamClosed)
    }

    /// Sends a `text` delta.
    pub async fn text(&self, delta: impl Into<String>) -> Result<(), StreamClosed> {
        self.send(StreamEvent { kind: "text".into(), data: serde_json::json!({ "delta": delta.into() }) }).await
    }
}

/// The host closed the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamClosed;

impl std::fmt::Display for StreamClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the stream was closed by the host")
    }
}

impl std::error::Error for StreamClosed {}

/// Builds model streams.
pub struct ModelStream;

impl ModelStream {
    /// A stream fed through the returned sender (buffering `capacity` events).
    pub fn channel(capacity: usize) -> (EventSender, Object) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (EventSender { tx }, Object::new(Receiver { rx: Arc::new(Mutex::new(Some(rx))) }))
    }

    /// A stream of events known in advance.
    pub fn from_events(events: Vec<StreamEvent>) -> Object {
        let (tx, object) = Self::channel(events.len());
        for e in events {
            // Cannot fail: the channel has room for every event.
            let _ = tx.tx.try_send(e);
        }
        object
    }
}

struct Receiver {
    rx: Arc<Mutex<Option<mpsc::Receiver<StreamEvent>>>>,
}

impl ObjectImpl for Receiver {
    fn kind(&self) -> &str {
        "stream"
    }

    fn invoke(&self, method: &str, _args: Value) -> ObjectFuture {
        let rx = self.rx.clone();
        match method {
            "next" => Box::pin(async move {
                let mut guard = rx.lock().await;
                let Some(rx) = guard.as_mut() else { return Ok(Value::Null) };
                match rx.recv().await {
                    Some(event) => serde_json::to_value(event)
                        .map_err(|e| HookError::new(crate::abi::ErrorKind::TYPE, e.to_string())),
                    None => Ok(Value::Null),
                }
            }),
            // Every event available now (waiting for the first): one call
            // instead of one per event. `[]` at the end.
            "next_many" => Box::pin(async move {
                let mut guard = rx.lock().await;
                let Some(rx) = guard.as_mut() else { return Ok(Value::Array(Vec::new())) };
                let mut events = Vec::new();
                if let Some(first) = rx.recv().await {
                    events.push(first);
                    while let Ok(more) = rx.try_recv() {
                        events.push(more);
                    }
                }
                serde_json::to_value(events).map_err(|e| HookError::new(crate::abi::ErrorKind::TYPE, e.to_string()))
            }),
            "close" => Box::pin(async move {
                rx.lock().await.take();
                Ok(Value::Null)
            }),
            other => crate::resources::unsupported("stream", other, &["next", "next_many", "close"]),
        }
    }
}
