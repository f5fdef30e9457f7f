//! Each channel's messages on a worker of its own.
//!
//! Taking a message may wait on Discord: its attachments are fetched, a
//! guild channel's thread name is looked up, and a 429 can ask for a
//! minute. Taken one at a time off the Gateway, one channel's slow
//! download held every other channel's messages (a hanging attachment
//! delayed another channel's message by 150 s, a rate-limited lookup a
//! DM by 180 s). So the Gateway loop only queues a message on its
//! channel's lane; each lane's worker takes its channel's messages in
//! Discord's order, the lanes side by side. A lane's queue is bounded
//! (the Gateway loop then waits, as it did before); a worker idle for
//! [`IDLE`] ends, so strangers' channels leave nothing behind.

use std::{collections::HashMap, sync::Arc, time::Duration};

use serde_json::Value;
use tokio::sync::mpsc;

use crate::Shared;

/// Messages queued on one lane at most.
const QUEUE: usize = 1024;

/// A worker with nothing to do for this long ends.
const IDLE: Duration = Duration::from_secs(60);

/// The lanes, by channel id.
#[derive(Default)]
pub(crate) struct Lanes(std::sync::Mutex<HashMap<String, mpsc::Sender<Value>>>);

impl Lanes {
    /// Queues `message` on its channel's lane (started if need be).
    pub(crate) async fn dispatch(&self, shared: &Arc<Shared>, mut message: Value) {
        let channel = message["channel_id"].as_str().unwrap_or_default().to_owned();
        loop {
            let sender = {
                let mut lanes = bub_abi::sync::lock(&self.0);
                lanes
                    .entry(channel.clone())
                    .or_insert_with(|| {
                        let (tx, rx) = mpsc::channel(QUEUE);
                        tokio::spawn(work(shared.clone(), channel.clone(), tx.clone(), rx));
                        tx
                    })
                    .clone()
            };
            match sender.send(message).await {
                Ok(()) => return,
                // The worker ended as this was sent: a new one takes it.
                Err(mpsc::error::SendError(back)) => {
                    message = back;
                    let mut lanes = bub_abi::sync::lock(&self.0);
                    if lanes.get(&channel).is_some_and(|s| s.same_channel(&sender)) {
                        lanes.remove(&channel);
                    }
                }
            }
        }
    }
}

/// A lane's worker: its channel's messages, one at a time.
async fn work(shared: Arc<Shared>, channel: String, me: mpsc::Sender<Value>, mut queue: mpsc::Receiver<Value>) {
    loop {
        match tokio::time::timeout(IDLE, queue.recv()).await {
            Ok(Some(message)) => {
                crate::take(&shared, &message).await;
            }
            Ok(None) => return,
            Err(_) => {
                // Idle: leave, unless a message came as the wait ended.
                let mut lanes = bub_abi::sync::lock(&shared.lanes.0);
                if queue.is_empty() {
                    if lanes.get(&channel).is_some_and(|s| s.same_channel(&me)) {
                        lanes.remove(&channel);
                    }
                    return;
                }
            }
        }
    }
}
