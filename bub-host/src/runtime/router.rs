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
use crate::{framework::envelope::target_channel, resources::Channel};

/// The bound channels of one runtime (and its clones).
#[derive(Default)]
pub(crate) struct Router(Mutex<Vec<Channel>>);

impl Router {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Channel>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
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
        if let Some(channel) = self.bound_channel(message).filter(|c| c.resource().plugin() != "builtin") {
            if let Err(e) = channel.send(message).await {
                tracing::warn!(target: "bub::gateway", "{e}");
            }
        }
        Ok(answers)
    }
}
