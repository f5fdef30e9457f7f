//! Admission (semantics §H6.5): what happens to a message given what its
//! session is doing.

use bub_abi::types::{AdmitAction, AdmitDecision, Delivery, Envelope, StateMap, TurnSnapshot};
use serde_json::Value;

use super::{status, Core, Inbound};
use bub_kit::envelope::field_of;

use bub_framework::{Framework, TurnResult};

impl Core {
    /// Resolves the session, asks `admit_message` (plugins, then the
    /// message's channel) and runs, queues, steers or drops the message.
    pub(super) async fn admit_and_schedule(&mut self, mut inbound: Inbound) {
        let session_id = match self.framework.resolve_session(&inbound.message).await {
            Ok(id) => id,
            Err(bub_framework::FrameworkError::Hook(failure)) if failure.held_up() => {
                // Held up, not failed (a Python plugin behind another that
                // blocks their shared loop; an isolated plugin whose
                // process was ended under the call, to start again): the
                // message waits and is admitted again, instead of being
                // dropped. Its backlog place stays taken meanwhile, and a
                // stop saves it.
                let wait = std::time::Duration::from_secs(1 << inbound.put_off.min(5));
                inbound.put_off += 1;
                tracing::warn!(
                    target: "bub::gateway",
                    "channel.manager {failure}; the message waits and is admitted again in {} s",
                    wait.as_secs()
                );
                self.put_off.push((tokio::time::Instant::now() + wait, inbound));
                return;
            }
            Err(e) => {
                tracing::error!(target: "bub::gateway", "channel.manager resolve_session failed: {e}");
                self.framework.runtime().notify_error("resolve_session", &e.info(), Some(&inbound.message)).await;
                return inbound.settle(Delivery {
                    status: "dropped".into(),
                    error: Some(format!("resolve_session failed: {e}")),
                    ..Default::default()
                });
            }
        };
        if let Value::Object(m) = &mut inbound.message {
            m.insert("session_id".into(), Value::String(session_id.clone()));
        }
        let mut state = admission_state(&inbound.message, &session_id);
        let snapshot = self.snapshot(&session_id, &state).await;
        let decision = match self.decide(&session_id, &inbound.message, &snapshot).await {
            Ok(decision) => decision,
            Err(e) => {
                tracing::error!(target: "bub::gateway", "channel.manager admission hook failed: {e}");
                self.framework.runtime().notify_error("admit_message", &e.info(), Some(&inbound.message)).await;
                None
            }
        };
        let running = snapshot.is_running;
        let Some(AdmitDecision { action, reason }) = decision else {
            return self.schedule(session_id, inbound);
        };
        let reason_text = reason.clone().unwrap_or_default();
        match action {
            AdmitAction::Process => self.schedule(session_id, inbound),
            AdmitAction::Drop => {
                tracing::info!(target: "bub::gateway", "channel.manager admission drop session_id={session_id} reason={reason_text}");
                inbound.settle(Delivery { error: reason, ..status("dropped", &session_id) });
            }
            AdmitAction::FollowUp => self.follow_up(session_id, inbound, running, &reason_text),
            AdmitAction::Steer => {
                let steered = running
                    && match self
                        .framework
                        .steer_message(inbound.message.clone(), &session_id, &mut state, reason.as_deref())
                        .await
                    {
                        Ok(steered) => steered,
                        Err(e) => {
                            tracing::warn!(target: "bub::gateway", "steering into session {session_id} failed ({e}); queued instead");
                            false
                        }
                    };
                if steered {
                    inbound.settle(status("steered", &session_id));
                } else {
                    self.follow_up(session_id, inbound, running, &reason_text);
                }
            }
        }
    }

    /// Queued behind the running turn; run now when none runs.
    fn follow_up(&mut self, session_id: String, inbound: Inbound, running: bool, reason: &str) {
        if !running {
            return self.schedule(session_id, inbound);
        }
        let session = self.session(&session_id);
        session.pending.push_back(inbound);
        tracing::info!(
            target: "bub::gateway",
            "channel.manager admission follow_up session_id={session_id} pending_count={} reason={reason}",
            session.pending.len()
        );
    }

    async fn snapshot(&self, session_id: &str, state: &StateMap) -> TurnSnapshot {
        // A message waiting for a place under the turn caps is as good as
        // running: what follows it must follow it.
        let (running, pending) =
            self.sessions.get(session_id).map_or((0, 0), |s| (s.running + s.waiting, s.pending.len()));
        let steering_count = match self.framework.get_steering_inbox() {
            Some(inbox) => inbox.message_count(state).await.unwrap_or_else(|e| {
                tracing::warn!(target: "bub::gateway", "{e}");
                0
            }),
            None => 0,
        };
        TurnSnapshot {
            session_id: session_id.to_owned(),
            is_running: running > 0,
            running_count: running as u32,
            pending_count: pending as u32,
            steering_count: steering_count as u32,
        }
    }

    /// Plugins' `admit_message` first; none decided → the channel's own
    /// (Bub's builtin delegates to the channel, and it answers last).
    async fn decide(
        &self,
        session_id: &str,
        message: &Envelope,
        snapshot: &TurnSnapshot,
    ) -> Result<Option<AdmitDecision>, bub_framework::FrameworkError> {
        if let Some(decision) = self.framework.admit_message(session_id, message, snapshot).await? {
            return Ok(Some(decision));
        }
        let channel = field_of(message, "channel").map(bub_kit::envelope::py_str).unwrap_or_default();
        match self.channels.get(&channel) {
            Some(entry) => Ok(entry.channel.admit_message(session_id, message, snapshot).await?),
            None => Ok(None),
        }
    }
}

/// `{session_id, _runtime_thread_id?}`: what admission and steering see.
fn admission_state(message: &Envelope, session_id: &str) -> StateMap {
    let mut state = StateMap::new();
    state.insert("session_id".into(), Value::String(session_id.to_owned()));
    if let Some(Value::Object(context)) = field_of(message, "context") {
        if let Some(thread) = context.get("thread_id").filter(|v| bub_kit::envelope::truthy(v)) {
            state.insert("_runtime_thread_id".into(), thread.clone());
        }
    }
    state
}

/// After a turn that succeeded: the steering messages it did not consume.
pub(super) async fn drain_steering(framework: &Framework, turn: &TurnResult) -> Vec<Envelope> {
    let Some(inbox) = framework.get_steering_inbox() else { return Vec::new() };
    match inbox.drain_messages(&turn.state).await {
        Ok(messages) => messages,
        Err(e) => {
            tracing::warn!(target: "bub::gateway", "{e}");
            Vec::new()
        }
    }
}
