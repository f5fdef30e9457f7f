//! `bub chat [PROMPT]`: a conversation through the `cli` channel, with one
//! `running()` scope open for the whole session.
//!
//! The host is the channel's message handler: each message the channel
//! reads becomes a streamed turn; the channel waits for it to finish before
//! prompting again. Ctrl-C during a turn cancels the turn (the scope and the
//! session go on); Ctrl-D at the prompt ends the session.

use anyhow::{bail, Result};
use bub_abi::{
    resources::{Fut, MessageHandler},
    types::Delivery,
    HookError, Object,
};
use serde_json::{json, Value};
use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc,
};
use tokio::sync::{mpsc, oneshot};

use super::Context;
use bub_host::kit::envelope::complete_channel_message;

#[derive(Debug, clap::Args)]
pub struct ChatArgs {
    /// A first message, sent before the prompt appears.
    initial_prompt: Option<String>,
    /// The chat id of the conversation.
    #[arg(long, default_value = "local")]
    chat_id: String,
    /// The session (default: "cli_session", Bub's chat session; `bub run`
    /// uses "<channel>:<chat_id>").
    #[arg(long)]
    session_id: Option<String>,
}

enum Event {
    Message(Value, oneshot::Sender<()>),
    Close,
}

/// The message handler handed to `provide_channels`: `handle {message}`
/// returns when the turn is over; `close {}` ends the chat.
///
/// A message handed over while a turn runs (a plugin's tool forwarding a
/// message, say) is queued behind that turn and `handle` returns at once:
/// waiting for its turn from inside the running one would wait forever.
struct Handler(mpsc::UnboundedSender<Event>, Arc<AtomicBool>);

impl MessageHandler for Handler {
    fn handle(&self, message: Value) -> impl Fut<()> {
        let (tx, busy) = (self.0.clone(), self.1.load(Ordering::SeqCst));
        async move {
            let (done, finished) = oneshot::channel();
            tx.send(Event::Message(message, done)).map_err(|_| HookError::plugin("the chat has ended"))?;
            if busy {
                tracing::debug!(target: "bub::chat", "a message handed over during a turn runs after it");
            } else {
                let _ = finished.await;
            }
            Ok(())
        }
    }

    fn submit(&self, message: Value) -> impl Fut<Delivery> {
        let busy = self.1.load(Ordering::SeqCst);
        let handled = self.handle(message);
        async move {
            handled.await?;
            Ok(match busy {
                true => Delivery {
                    status: "queued".into(),
                    error: Some("a turn is running; this message runs after it".into()),
                    ..Default::default()
                },
                false => Delivery { status: "processed".into(), ..Default::default() },
            })
        }
    }

    fn close(&self) -> impl Fut<()> {
        let _ = self.0.send(Event::Close);
        async { Ok(()) }
    }
}

pub fn run(ctx: &Context, args: &ChatArgs) -> Result<()> {
    let framework = ctx.framework();
    // Bub's cli channel: its own session, and the session as every
    // message's `thread_id` (the steering key).
    let session = args.session_id.clone().unwrap_or_else(|| "cli_session".into());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        // Ctrl-C: from now on SIGINT cancels the running turn instead of
        // killing bub. At the prompt the line editor sees Ctrl-C itself.
        let interrupted = super::interrupt::watch(false)?;

        let scope = tokio::select! {
            scope = framework.running() => scope?,
            _ = interrupted.notified() => bail!("interrupted while opening the session (a plugin's resource did not start)"),
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let busy = Arc::new(AtomicBool::new(false));
        let handler = Object::message_handler(Handler(tx.clone(), busy.clone()));
        let body = async {
            let channels = framework.get_channels(&handler)?;
            let Some(cli) = channels.into_iter().find(|c| c.name() == "cli") else {
                bail!("CLI channel not found. Please check your hook implementations.");
            };
            cli.start().await?;
            framework.bind_channels(vec![cli.clone()]);
            if let Some(prompt) = &args.initial_prompt {
                let (done, _) = oneshot::channel();
                let _ = tx.send(Event::Message(json!({"channel": "cli", "content": prompt}), done));
            }
            while let Some(event) = rx.recv().await {
                let Event::Message(mut message, done) = event else { break };
                if let Value::Object(m) = &mut message {
                    m.entry("chat_id").or_insert_with(|| json!(args.chat_id));
                    m.entry("session_id").or_insert_with(|| json!(session));
                    if let Value::Object(context) = m.entry("context").or_insert_with(|| json!({})) {
                        context.entry("thread_id").or_insert_with(|| json!(session));
                    }
                    complete_channel_message(m);
                }
                let cancelled = interrupted.notified();
                busy.store(true, Ordering::SeqCst);
                tokio::select! {
                    // A failed turn was already reported (on_error → the channel).
                    r = framework.process_inbound(&mut message, true) => if let Err(e) = r {
                        tracing::debug!(target: "bub::chat", "turn failed: {e}");
                    },
                    // The next turn waits for the cancelled one's record;
                    // Ctrl-C again stops waiting.
                    _ = cancelled => tokio::select! {
                        _ = super::interrupt::turn_cancelled() => {}
                        _ = interrupted.notified() => {}
                    },
                }
                busy.store(false, Ordering::SeqCst);
                let _ = done.send(());
            }
            framework.bind_channels(Vec::new());
            cli.stop().await?;
            Ok(())
        };
        let result: Result<()> = body.await;
        let error = result.as_ref().err().map(|e| bub_abi::types::ErrorInfo {
            kind: "error".into(),
            message: format!("{e:#}"),
            details: None,
        });
        // A resource that hangs on exit must not trap the user: Ctrl-C
        // abandons the rest of the cleanup.
        let exit = tokio::select! {
            exit = scope.exit(error.as_ref()) => exit,
            _ = interrupted.notified() => {
                bail!("interrupted while closing the session; some resources may not have been released")
            }
        };
        result?;
        exit?;
        Ok(())
    })
}
