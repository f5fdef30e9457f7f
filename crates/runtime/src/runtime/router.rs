//! The channel router: the channels a running gateway (or `bub chat`)
//! bound, where a turn's stream events and outbounds go.
//!
//! In Bub the builtin's `dispatch_outbound` forwards to the bound channel
//! manager. Here the builtin cannot see the host's channel manager (it is a
//! plugin like any other, behind the ABI), so the split is: the builtin
//! delivers to the channels it provides itself (`cli`), and the runtime
//! delivers to bound channels of every other plugin right after the
//! `dispatch_outbound` broadcast, for turns and for `on_error` outbounds
//! alike. The router lives in the runtime so both paths share it.

use std::sync::Mutex;

use bub_abi::types::Envelope;

use super::Runtime;
use bub_kit::envelope::target_channel;

use crate::resources::Channel;

/// The bound channels of one runtime (and its clones).
#[derive(Default)]
pub(crate) struct BoundChannels(Mutex<Vec<Channel>>);

impl BoundChannels {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Channel>> {
        bub_abi::sync::lock(&self.0)
    }
}

impl Runtime {
    /// Binds `channels` as the router (replacing earlier bindings); an empty
    /// list unbinds.
    pub fn bind_channels(&self, channels: Vec<Channel>) {
        *self.router.lock() = channels;
    }

    /// The bound channel a message goes to (`output_channel`, else `channel`).
    pub fn bound_channel(&self, message: &Envelope) -> Option<Channel> {
        let router = self.router.lock();
        if router.is_empty() {
            return None;
        }
        let name = target_channel(message)?;
        router.iter().find(|c| c.name() == name).cloned()
    }

    /// Every `dispatch_outbound` implementation, then the bound channel the
    /// message names when a plugin other than the builtin provides it.
    /// A channel's failure to send is logged, not raised: the turn is done.
    pub async fn deliver_outbound(
        &self,
        message: &Envelope,
    ) -> Result<Vec<super::Answered<bool>>, crate::error::HookFailure> {
        let answers = self.dispatch_outbound(message).await?;
        // A silent outbound is kept, not sent.
        let silent = bub_kit::envelope::is_silent(message);
        if let Some(channel) = self.bound_channel(message).filter(|c| !silent && c.resource().plugin() != "builtin") {
            if let Err(e) = channel.send(&for_channel(message, channel.name())).await {
                tracing::warn!(target: "bub::gateway", "{e}");
            }
        }
        Ok(answers)
    }
}

/// The message a channel is sent, as Bub's `ChannelManager.dispatch_output`
/// rebuilds it: `channel` is the channel it goes to (the outbound's
/// `output_channel`), with the outbound's session, chat, content, context
/// and kind.
fn for_channel(message: &Envelope, channel: &str) -> Envelope {
    use bub_kit::envelope::{content_of, field_of, py_str};
    use serde_json::{json, Value};
    let text = |k: &str, default: &str| field_of(message, k).map(py_str).unwrap_or_else(|| default.to_owned());
    json!({
        "session_id": text("session_id", &format!("{channel}:default")),
        "channel": channel,
        "chat_id": text("chat_id", "default"),
        "content": content_of(message),
        "context": field_of(message, "context").cloned().unwrap_or_else(|| Value::Object(Default::default())),
        "kind": text("kind", "normal"),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// A channel is sent the outbound rebuilt for it, with
    /// `channel` = the output channel (Bub's `dispatch_output`).
    #[test]
    fn an_outbound_is_rebuilt_for_its_output_channel() {
        let outbound = json!({"session_id": "s", "channel": "http", "output_channel": "telegram", "chat_id": "42",
                               "content": "hi", "kind": "command", "media": []});
        let sent = super::for_channel(&outbound, "telegram");
        assert_eq!(
            sent,
            json!({"session_id": "s", "channel": "telegram", "chat_id": "42", "content": "hi", "context": {}, "kind": "command"})
        );
    }
}
