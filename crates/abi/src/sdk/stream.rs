//! Model streams: what `run_model_stream` returns.
//!
//! A stream crosses the boundary as an [`Object`] of kind `stream` with
//! methods `next` (the next [`StreamEvent`] as JSON, or `null` at the end),
//! `next_many` (every event available now, at least one; `[]` at the end)
//! and `close`. On the plugin side it is a channel: produce events from a
//! task, and stop when sending fails — the host closed or dropped the stream.

use std::sync::Arc;

use tokio::sync::{mpsc, Mutex};

use crate::{resources::Fut, types::StreamEvent, HookError, Object};

/// The producing end of a model stream.
#[derive(Clone)]
pub struct EventSender {
    tx: mpsc::Sender<Result<StreamEvent, HookError>>,
}

impl EventSender {
    /// Sends one event; `Err` means the host closed the stream: stop producing.
    pub async fn send(&self, event: StreamEvent) -> Result<(), StreamClosed> {
        self.tx.send(Ok(event)).await.map_err(|_| StreamClosed)
    }

    /// Ends the stream with `error`: the host's next read fails with it, so
    /// the turn fails (Bub's exception raised from the stream), unlike an
    /// `error` event, which is reported and the turn goes on.
    pub async fn fail(&self, error: HookError) -> Result<(), StreamClosed> {
        self.tx.send(Err(error)).await.map_err(|_| StreamClosed)
    }

    /// Waits until the host closes or drops the stream.
    pub async fn closed(&self) {
        self.tx.closed().await
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
        let state = RxState { rx: Some(rx), error: None };
        (EventSender { tx }, crate::resources::stream_object(Receiver { rx: Arc::new(Mutex::new(state)) }))
    }

    /// A stream of events known in advance.
    pub fn from_events(events: Vec<StreamEvent>) -> Object {
        let (tx, object) = Self::channel(events.len());
        for e in events {
            // Cannot fail: the channel has room for every event.
            let _ = tx.tx.try_send(Ok(e));
        }
        object
    }
}

struct Receiver {
    rx: Arc<Mutex<RxState>>,
}

struct RxState {
    rx: Option<mpsc::Receiver<Result<StreamEvent, HookError>>>,
    // An error read behind events: handed out by the next call, so the
    // events before it arrive first.
    error: Option<HookError>,
}

impl crate::resources::StreamMethods for Receiver {
    fn next(&self) -> impl Fut<Option<StreamEvent>> {
        let rx = self.rx.clone();
        async move {
            let mut guard = rx.lock().await;
            if let Some(e) = guard.error.take() {
                return Err(e.into());
            }
            let Some(rx) = guard.rx.as_mut() else { return Ok(None) };
            rx.recv().await.transpose().map_err(Into::into)
        }
    }

    /// Every event available now (waiting for the first): one call instead
    /// of one per event. `[]` at the end.
    fn next_many(&self) -> impl Fut<Vec<StreamEvent>> {
        let rx = self.rx.clone();
        async move {
            let mut guard = rx.lock().await;
            if let Some(e) = guard.error.take() {
                return Err(e.into());
            }
            let state = &mut *guard;
            let Some(rx) = state.rx.as_mut() else { return Ok(Vec::new()) };
            let mut events = Vec::new();
            if let Some(first) = rx.recv().await {
                events.push(first?);
                while let Ok(more) = rx.try_recv() {
                    match more {
                        Ok(e) => events.push(e),
                        Err(e) => {
                            state.error = Some(e);
                            break;
                        }
                    }
                }
            }
            Ok(events)
        }
    }

    fn close(&self) -> impl Fut<()> {
        let rx = self.rx.clone();
        async move {
            rx.lock().await.rx.take();
            Ok(())
        }
    }
}
