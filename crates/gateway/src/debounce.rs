//! Debounce for channels that ask for it (Bub's `BufferedMessageHandler`):
//! per session, messages are batched until the session has been quiet for
//! `debounce`; commands pass at once; inactive messages (a group chat's
//! chatter) count only within `active_time_window` of an active one, and
//! wait at most `max_wait`. A batch is the last message with every content
//! joined by `\n`, the media concatenated, and every message's
//! `idempotency_keys` (see `bub_framework::repeats`).
//!
//! One task per debounced session. When the gateway stops it drops the
//! sender: the task forwards what it holds at once, so a message the
//! channel handed over is never lost to a timer.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::{
    sync::mpsc::{UnboundedReceiver, UnboundedSender},
    time::Instant,
};

use super::Inbound;
use bub_kit::envelope::{content_of, field_of, truthy};

/// The timings (from [`GatewaySettings`](super::GatewaySettings)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timings {
    pub debounce: Duration,
    pub max_wait: Duration,
    pub active_time_window: Duration,
}

/// Runs one session's buffer until `input` closes.
pub(crate) async fn run(timings: Timings, mut input: UnboundedReceiver<Inbound>, output: UnboundedSender<Inbound>) {
    let mut pending: Vec<Inbound> = Vec::new();
    let mut last_active: Option<Instant> = None;
    let mut deadline: Option<Instant> = None;
    loop {
        let timer = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            message = input.recv() => {
                let Some(message) = message else { break };
                let now = Instant::now();
                if field_of(&message.message, "kind").and_then(Value::as_str) == Some("command") {
                    let _ = output.send(message);
                    continue;
                }
                let active = field_of(&message.message, "is_active").is_some_and(truthy);
                if !active && last_active.is_none_or(|t| now - t > timings.active_time_window) {
                    last_active = None;
                    tracing::info!(target: "bub::gateway", "session.message received ignored session_id={}", message.session_hint());
                    message.settle_ignored("an inactive message outside the active time window");
                    continue;
                }
                pending.push(message);
                if active {
                    last_active = Some(now);
                    deadline = Some(now + timings.debounce);
                } else if deadline.is_none() {
                    deadline = Some(now + timings.max_wait);
                }
            }
            _ = timer => {
                deadline = None;
                if let Some(batch) = batch(std::mem::take(&mut pending)) {
                    let _ = output.send(batch);
                }
            }
        }
    }
    if let Some(batch) = batch(pending) {
        let _ = output.send(batch);
    }
}

/// Bub's `ChannelMessage.from_batch`; every waiter follows the batch.
fn batch(messages: Vec<Inbound>) -> Option<Inbound> {
    let mut messages = messages.into_iter();
    let first = messages.next()?;
    let mut contents = vec![content_of(&first.message)];
    let mut media = media_of(&first.message);
    let mut waiters = first.waiters;
    let mut marks = first.marks;
    let mut tickets = first.tickets;
    let mut keys = bub_framework::repeats::keys_of(&first.message);
    let mut last = first.message;
    for m in messages {
        contents.push(content_of(&m.message));
        keys.extend(bub_framework::repeats::keys_of(&m.message));
        media.extend(media_of(&m.message));
        waiters.extend(m.waiters);
        marks.extend(m.marks);
        tickets.extend(m.tickets);
        last = m.message;
    }
    if let Value::Object(map) = &mut last {
        map.insert("content".into(), Value::String(contents.join("\n")));
        // Every message of the batch ran in it: a repeat of any is known.
        if !keys.is_empty() {
            let mut seen = std::collections::HashSet::new();
            keys.retain(|k| seen.insert(k.clone()));
            map.insert(bub_framework::repeats::KEYS_FIELD.into(), json!(keys));
        }
        if !media.is_empty() || map.contains_key("media") {
            map.insert("media".into(), Value::Array(media));
        }
    }
    Some(Inbound { message: last, waiters, marks, tickets, put_off: 0 })
}

fn media_of(message: &Value) -> Vec<Value> {
    match field_of(message, "media") {
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    }
}
