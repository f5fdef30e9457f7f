//! The message handler the gateway hands to `provide_channels`: the door
//! channels push inbound messages through, from any thread or task.
//!
//! `handle` returns as soon as the message is queued (Bub's `on_receive`);
//! `submit` returns what became of it (its turn's outbounds, or why none).
//! Both refuse messages once the gateway stops, so a channel can answer
//! "try again later" instead of losing them.

use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc, Mutex,
};

use bub_abi::{
    resources::{Fut, MessageHandler},
    types::{Delivery, Envelope},
    HookError, Object,
};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::Inbound;
use bub_kit::envelope::{complete_channel_message, default_session_id};

/// The gateway's side of the handler.
pub(super) struct Handle {
    tx: mpsc::UnboundedSender<Inbound>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<Inbound>>>,
    open: Arc<AtomicBool>,
    journal: Journaled,
    backlog: Arc<super::backlog::Backlog>,
}

type Journaled = Arc<Mutex<Option<Arc<super::journal::Journal>>>>;

impl Handle {
    /// A handler whose messages wait in `backlog` until their turn.
    pub fn new(backlog: Arc<super::backlog::Backlog>) -> Handle {
        let (tx, rx) = mpsc::unbounded_channel();
        Handle {
            tx,
            rx: Mutex::new(Some(rx)),
            open: Arc::new(AtomicBool::new(true)),
            journal: Default::default(),
            backlog,
        }
    }

    /// The object channels receive.
    pub fn object(&self) -> Object {
        Object::message_handler(GatewayHandler {
            tx: self.tx.clone(),
            open: self.open.clone(),
            journal: self.journal.clone(),
            backlog: self.backlog.clone(),
        })
    }

    /// From now on accepted messages are journaled in `journal`.
    pub fn set_journal(&self, journal: Option<Arc<super::journal::Journal>>) {
        *bub_abi::sync::lock(&self.journal) = journal;
    }

    /// The queue's receiving end (once).
    pub fn take_receiver(&self) -> mpsc::UnboundedReceiver<Inbound> {
        let taken = bub_abi::sync::lock(&self.rx).take();
        taken.unwrap_or_else(|| mpsc::unbounded_channel().1)
    }

    /// From now on messages are refused.
    pub fn close_intake(&self) {
        self.open.store(false, Ordering::SeqCst);
    }
}

struct GatewayHandler {
    tx: mpsc::UnboundedSender<Inbound>,
    open: Arc<AtomicBool>,
    journal: Journaled,
    backlog: Arc<super::backlog::Backlog>,
}

impl GatewayHandler {
    fn enqueue(&self, message: Envelope, waiter: Option<oneshot::Sender<Delivery>>) -> Result<(), HookError> {
        if !self.open.load(Ordering::SeqCst) {
            // `closed`: the gateway stops (a channel answers "retry
            // elsewhere or later", HTTP 503); a full backlog is a plain
            // error naming its setting (HTTP 429).
            return Err(HookError::new(
                bub_abi::ErrorKind::CLOSED,
                "the gateway is stopping and takes no new messages; send it again later",
            ));
        }
        let message = complete(message)?;
        let session = message.get("session_id").and_then(Value::as_str).unwrap_or_default();
        let depth = message.get("_inbound_depth").and_then(Value::as_u64).unwrap_or(0);
        let ticket = self.backlog.admit(session, depth).map_err(HookError::plugin)?;
        let journal = bub_abi::sync::lock(&self.journal).clone();
        let marks = super::Marks::new(journal.as_ref(), &message);
        let inbound =
            Inbound { message, waiters: waiter.into_iter().collect(), marks, tickets: vec![ticket], put_off: 0 };
        self.tx.send(inbound).map_err(|_| {
            HookError::new(bub_abi::ErrorKind::CLOSED, "the gateway has stopped; the message was not taken")
        })
    }
}

impl MessageHandler for GatewayHandler {
    fn handle(&self, message: Envelope) -> impl Fut<()> {
        let queued = self.enqueue(message, None);
        async move { Ok(queued?) }
    }

    fn submit(&self, message: Envelope) -> impl Fut<Delivery> {
        let (tx, rx) = oneshot::channel();
        let queued = self.enqueue(message, Some(tx));
        async move {
            queued?;
            Ok(rx.await.unwrap_or_else(|_| Delivery {
                status: "cancelled".into(),
                error: Some("the gateway stopped before the message's turn ended".into()),
                ..Default::default()
            }))
        }
    }
}

/// A channel message with Bub's defaults (`ChannelMessage`): `chat_id`,
/// `kind`, `output_channel`, the context, and `session_id`
/// (`<channel>:<chat_id>`).
fn complete(message: Envelope) -> Result<Envelope, HookError> {
    let Value::Object(mut map) = message else {
        return Err(HookError::plugin("a channel message must be a JSON object with `channel` and `content`"));
    };
    if map.get("channel").and_then(Value::as_str).is_none_or(str::is_empty) {
        return Err(HookError::plugin("a channel message needs `channel`: the name of the channel it came from"));
    }
    complete_channel_message(&mut map);
    if map.get("session_id").is_none_or(|v| v.as_str().is_none_or(str::is_empty)) {
        let id = default_session_id(&Value::Object(map.clone()));
        map.insert("session_id".into(), Value::String(id));
    }
    Ok(Value::Object(map))
}
