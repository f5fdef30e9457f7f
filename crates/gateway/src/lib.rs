//! # bub-gateway — Bub's `ChannelManager` behind `bub gateway`
//!
//! A crate of its own over `bub-framework`: a long-running process with
//! channels, queues and a journal is a different thing from one turn, and
//! `bub run` or an embedder needs none of it.
//!
//! Channels come from `provide_channels`; the enabled ones (`select`) are
//! started inside one `running()` scope and bound as the channel router.
//! A channel hands inbound messages to the host's message handler from any
//! thread or task; each goes through:
//!
//! 1. **receive** — unknown channel → ignored with a warning; a channel that
//!    asks for debounce batches per session (`debounce`);
//! 2. **admission** (`admission`) — `resolve_session` (error →
//!    `on_error("resolve_session")`, dropped), the session's snapshot,
//!    `admit_message` (plugins first, then the channel's own; error →
//!    `on_error("admit_message")`, processed): process / drop / follow_up /
//!    steer;
//! 3. **turns** — each admitted message is a `process_inbound` task; when a
//!    session's last running turn ends, its next pending message runs
//!    (FIFO); after a turn that succeeded, steering messages it did not
//!    consume are promoted to the pending queue. Deliberate difference from
//!    Bub, which starts every admitted turn at once: at most
//!    [`GatewaySettings::max_turns`] run in the gateway and
//!    [`GatewaySettings::max_session_turns`] in one session; the rest wait
//!    in admission order (5,000 schedule jobs due at once made 1,049 model
//!    requests in a second and 1.6 GB).
//!
//! Stopping (the `shutdown` future, SIGINT/SIGTERM in `bub gateway`): the
//! handler refuses new messages, messages already handed over (queued,
//! pending, in debounce buffers) still run, running turns get
//! [`GatewaySettings::shutdown_grace`] to finish; then the rest is cancelled
//! and every message that did not get its turn is written to
//! `$BUB_HOME/gateway/unprocessed.jsonl` (and its submitter told
//! `cancelled`), so nothing a channel handed over is lost silently.
//!
//! Turns run on the caller's tokio runtime (`tokio::spawn`), so a blocking
//! sync hook holds one worker, not the whole gateway.

#![warn(missing_docs)]
// No unsafe code above the runtime: the loader and the ABI hold it all.
#![forbid(unsafe_code)]

mod admission;
mod backlog;
mod debounce;
mod handler;
mod journal;
mod select;
mod settings;

use std::{
    collections::{HashMap, VecDeque},
    path::PathBuf,
};

use bub_abi::types::{ChannelInfo, Delivery, Envelope, ErrorInfo};
use tokio::{
    sync::{mpsc, oneshot},
    task::JoinSet,
    time::Instant,
};

pub use self::{journal::running_gateways, select::select_channels, settings::GatewaySettings};
use bub_kit::envelope::field_of;
use bub_runtime::resources::Channel;

use bub_framework::{Framework, FrameworkError, TurnResult};

/// Why the gateway could not run.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Nothing to listen on.
    #[error("No channels are enabled. Configure at least one channel with 'bub onboard' or '--enable-channel'.{0}")]
    NoChannels(String),
    /// Every enabled channel failed to start.
    #[error("no channel started: {0}")]
    NothingStarted(String),
    /// A hook or the scope failed.
    #[error(transparent)]
    Framework(#[from] FrameworkError),
}

/// What a run of the gateway did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GatewayReport {
    /// The channels that started.
    pub started: Vec<String>,
    /// Turns that ran to the end (either way).
    pub turns: usize,
    /// Messages that did not get their turn (written to `unprocessed`).
    pub unprocessed: usize,
    /// Where they were written.
    pub unprocessed_file: Option<PathBuf>,
}

/// One message on its way through the gateway, with whoever waits for what
/// becomes of it (`MessageHandler::submit`; a debounced batch has several).
pub(crate) struct Inbound {
    pub message: Envelope,
    pub waiters: Vec<oneshot::Sender<Delivery>>,
    /// Its lines in the journal (a debounced batch has several).
    pub marks: Marks,
    /// Its places in the backlog, given back when its turn starts.
    pub tickets: Vec<backlog::Ticket>,
    /// How often its admission was put off (its `resolve_session` ran
    /// past its deadline).
    pub put_off: u32,
}

/// Where an inbound message is journaled, and as what.
#[derive(Default)]
pub(crate) struct Marks {
    ids: Vec<u64>,
    journal: Option<std::sync::Arc<journal::Journal>>,
}

impl Marks {
    /// `message`, journaled in `journal`.
    fn new(journal: Option<&std::sync::Arc<journal::Journal>>, message: &Envelope) -> Marks {
        match journal {
            Some(j) => Marks { ids: vec![j.accepted(message)], journal: Some(j.clone()) },
            None => Marks::default(),
        }
    }

    fn extend(&mut self, other: Marks) {
        self.ids.extend(other.ids);
        self.journal = self.journal.take().or(other.journal);
    }
}

impl Inbound {
    /// A message no one waits for (steering leftovers), journaled.
    fn queued(message: Envelope, journal: Option<&std::sync::Arc<journal::Journal>>) -> Inbound {
        let marks = Marks::new(journal, &message);
        Inbound { message, waiters: Vec::new(), marks, tickets: Vec::new(), put_off: 0 }
    }

    fn session_hint(&self) -> String {
        field_of(&self.message, "session_id").map(bub_kit::envelope::py_str).unwrap_or_default()
    }

    /// Tells every waiter.
    fn settle(self, delivery: Delivery) {
        // A cancelled message is saved to unprocessed.jsonl by the stop;
        // until then the journal keeps it.
        if delivery.status != "cancelled" {
            if let Some(journal) = &self.marks.journal {
                journal.settled(&self.marks.ids);
            }
        }
        let mut waiters = self.waiters;
        if let Some(last) = waiters.pop() {
            for w in waiters {
                let _ = w.send(delivery.clone());
            }
            let _ = last.send(delivery);
        }
    }

    fn settle_ignored(self, why: &str) {
        let session_id = Some(self.session_hint());
        self.settle(Delivery { status: "ignored".into(), session_id, error: Some(why.into()), ..Default::default() });
    }
}

/// A channel with what it said about itself.
#[derive(Clone)]
pub struct ChannelEntry {
    /// The channel.
    pub channel: Channel,
    /// Its role, enablement and debouncing.
    pub info: ChannelInfo,
}

/// Bub's `ChannelManager` over a framework.
pub struct Gateway {
    framework: Framework,
    settings: GatewaySettings,
    channels: Vec<ChannelEntry>,
    handler: handler::Handle,
}

impl Gateway {
    /// Collects the channels (`provide_channels`, handing them the
    /// gateway's message handler) and asks each for its [`ChannelInfo`].
    pub async fn new(framework: Framework, settings: GatewaySettings) -> Result<Gateway, GatewayError> {
        let handler = handler::Handle::new(backlog::Backlog::new(
            settings.max_queued,
            settings.max_session_queue,
            settings.max_inbound_depth,
        ));
        let mut channels = Vec::new();
        for channel in framework.get_channels(&handler.object())? {
            let info = channel.info().await.unwrap_or_else(|e| {
                tracing::warn!(target: "bub::gateway", "{e}; treating it as a plain channel");
                ChannelInfo::default()
            });
            channels.push(ChannelEntry { channel, info });
        }
        Ok(Gateway { framework, settings, channels, handler })
    }

    /// Every channel the plugins provide.
    pub fn channels(&self) -> &[ChannelEntry] {
        &self.channels
    }

    /// The channels the settings enable.
    pub fn enabled_channels(&self) -> Vec<ChannelEntry> {
        select_channels(&self.channels, &self.settings.enabled_channels)
    }

    /// Runs until `shutdown` completes, then stops as the module docs say;
    /// `hurry` completing after that ends the grace period at once (running
    /// turns are cancelled and saved with the rest).
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()>,
        hurry: impl std::future::Future<Output = ()>,
    ) -> Result<GatewayReport, GatewayError> {
        let enabled = self.enabled_channels();
        if enabled.is_empty() {
            let known: Vec<_> = self.channels.iter().map(|c| c.channel.name().to_owned()).collect();
            let hint =
                if known.is_empty() { String::new() } else { format!(" Channels available: {}.", known.join(", ")) };
            return Err(GatewayError::NoChannels(hint));
        }
        let scope = self.framework.running().await?;
        let result = self.listen(enabled, shutdown, hurry).await;
        let error =
            result.as_ref().err().map(|e| ErrorInfo { kind: "error".into(), message: e.to_string(), details: None });
        let exit = scope.exit(error.as_ref()).await;
        let report = result?;
        exit?;
        Ok(report)
    }

    async fn listen(
        self,
        enabled: Vec<ChannelEntry>,
        shutdown: impl std::future::Future<Output = ()>,
        hurry: impl std::future::Future<Output = ()>,
    ) -> Result<GatewayReport, GatewayError> {
        let mut report = GatewayReport::default();
        let mut started = Vec::new();
        let mut failures = Vec::new();
        // Before any channel starts, so every message it accepts is journaled.
        let journal = match journal::Journal::open(self.framework.home()) {
            Ok(j) => Some(std::sync::Arc::new(j)),
            Err(e) => {
                tracing::warn!(
                    target: "bub::gateway",
                    "cannot open the gateway's journal under {}/gateway: {e}; messages accepted when the gateway is \
                     killed will be lost",
                    self.framework.home().display()
                );
                None
            }
        };
        self.handler.set_journal(journal.clone());
        // Bound before starting: a channel may hand over a message at once.
        self.framework.bind_channels(enabled.iter().map(|c| c.channel.clone()).collect());
        for entry in &enabled {
            let deadline = self.framework.lifespan_timeout();
            match entry.channel.resource().within("start", deadline, entry.channel.start()).await {
                Ok(()) => {
                    tracing::info!(target: "bub::gateway", "channel '{}' started", entry.channel.name());
                    started.push(entry.clone());
                }
                Err(e) => {
                    tracing::error!(target: "bub::gateway", "channel '{}' failed to start: {e}; the others run", entry.channel.name());
                    failures.push(e.to_string());
                }
            }
        }
        if started.is_empty() {
            self.framework.bind_channels(Vec::new());
            return Err(GatewayError::NothingStarted(failures.join("; ")));
        }
        self.framework.bind_channels(started.iter().map(|c| c.channel.clone()).collect());
        report.started = started.iter().map(|c| c.channel.name().to_owned()).collect();
        tracing::info!(target: "bub::gateway", "channel.manager started listening");

        let home = self.framework.home().to_path_buf();
        let mut core = Core::new(self.framework.clone(), self.settings.clone(), started.clone());
        core.journal = journal.clone();
        let rx = self.handler.take_receiver();
        core.run(rx, &self.handler, shutdown, hurry).await;
        report.turns = core.turns_done;
        let leftovers = core.into_leftovers();
        let mut saved = true;
        if !leftovers.is_empty() {
            report.unprocessed = leftovers.len();
            report.unprocessed_file = save_unprocessed(&home, leftovers);
            saved = report.unprocessed_file.is_some();
        }
        // Once what did not run is saved, the journal has nothing left to keep.
        self.handler.set_journal(None);
        if let Some(journal) = journal.filter(|_| saved) {
            journal.close();
        }

        self.framework.bind_channels(Vec::new());
        for entry in &started {
            let deadline = self.framework.lifespan_timeout();
            if let Err(e) = entry.channel.resource().within("stop", deadline, entry.channel.stop()).await {
                tracing::warn!(target: "bub::gateway", "channel '{}' did not stop cleanly: {e}", entry.channel.name());
            }
        }
        tracing::info!(target: "bub::gateway", "channel.manager stopped");
        Ok(report)
    }
}

/// Per-session scheduling state (Bub's `SessionTurnController`).
#[derive(Default)]
struct Session {
    running: usize,
    pending: VecDeque<Inbound>,
    /// Admitted messages waiting in [`Core::waiting`] for a place.
    waiting: usize,
}

/// A turn in flight, kept by the loop so a cancelled turn's message is not
/// lost and its waiters are told.
struct Running {
    session_id: String,
    inbound: Inbound,
    abort: tokio::task::AbortHandle,
}

type TurnOutput = (Result<TurnResult, FrameworkError>, Vec<Envelope>);

/// The scheduler: owned by one task, so its maps need no locks.
struct Core {
    framework: Framework,
    settings: GatewaySettings,
    channels: HashMap<String, ChannelEntry>,
    sessions: HashMap<String, Session>,
    debouncers: HashMap<String, mpsc::UnboundedSender<Inbound>>,
    debounce_tasks: JoinSet<()>,
    ready_tx: mpsc::UnboundedSender<Inbound>,
    ready_rx: mpsc::UnboundedReceiver<Inbound>,
    turns: JoinSet<TurnOutput>,
    running: HashMap<tokio::task::Id, Running>,
    // Admitted messages waiting for a place under the turn caps
    // (`max_turns`, `max_session_turns`), in admission order.
    waiting: VecDeque<(String, Inbound)>,
    turns_done: usize,
    // Messages left when the grace period ran out.
    leftovers: Vec<Envelope>,
    journal: Option<std::sync::Arc<journal::Journal>>,
    // Messages whose admission was put off, and when to try again (their
    // session could not be resolved in time: a plugin held up).
    put_off: Vec<(Instant, Inbound)>,
}

impl Core {
    fn new(framework: Framework, settings: GatewaySettings, channels: Vec<ChannelEntry>) -> Core {
        let (ready_tx, ready_rx) = mpsc::unbounded_channel();
        Core {
            framework,
            settings,
            channels: channels.into_iter().map(|c| (c.channel.name().to_owned(), c)).collect(),
            sessions: HashMap::new(),
            debouncers: HashMap::new(),
            debounce_tasks: JoinSet::new(),
            ready_tx,
            ready_rx,
            turns: JoinSet::new(),
            running: HashMap::new(),
            waiting: VecDeque::new(),
            turns_done: 0,
            leftovers: Vec::new(),
            journal: None,
            put_off: Vec::new(),
        }
    }

    async fn run(
        &mut self,
        mut inbound: mpsc::UnboundedReceiver<Inbound>,
        handler: &handler::Handle,
        shutdown: impl std::future::Future<Output = ()>,
        hurry: impl std::future::Future<Output = ()>,
    ) {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut hurry = std::pin::pin!(hurry);
        let mut stopping: Option<Instant> = None;
        loop {
            if let Some(deadline) = stopping {
                if self.idle(&inbound) {
                    break;
                }
                if Instant::now() >= deadline {
                    self.cancel_everything(&mut inbound).await;
                    break;
                }
            }
            let grace = async {
                match stopping {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let next_try = self.put_off.iter().map(|(at, _)| *at).min();
            let retry = async {
                match next_try {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = retry => {
                    let now = Instant::now();
                    let (due, later): (Vec<_>, Vec<_>) =
                        std::mem::take(&mut self.put_off).into_iter().partition(|(at, _)| *at <= now);
                    self.put_off = later;
                    for (_, inbound) in due {
                        self.admit_and_schedule(inbound).await;
                    }
                }
                Some(message) = inbound.recv() => self.receive(message),
                Some(message) = self.ready_rx.recv() => self.admit_and_schedule(message).await,
                Some(done) = self.turns.join_next_with_id() => self.turn_done(done),
                Some(_) = self.debounce_tasks.join_next() => {}
                _ = &mut shutdown, if stopping.is_none() => {
                    handler.close_intake();
                    // Debounce buffers hand over what they hold at once.
                    self.debouncers.clear();
                    let grace = self.settings.shutdown_grace;
                    tracing::warn!(
                        target: "bub::gateway",
                        "stopping: no new messages; {} running turn(s) get {}s to finish",
                        self.running.len(),
                        grace.as_secs_f64()
                    );
                    stopping = Some(Instant::now() + grace);
                }
                _ = &mut hurry, if stopping.is_some() => {
                    tracing::warn!(target: "bub::gateway", "stopping now: running turns are cancelled and saved");
                    stopping = Some(Instant::now());
                }
                _ = grace => {}
            }
        }
    }

    /// Nothing queued, buffered, pending or running.
    fn idle(&self, inbound: &mpsc::UnboundedReceiver<Inbound>) -> bool {
        inbound.is_empty()
            && self.ready_rx.is_empty()
            && self.turns.is_empty()
            && self.debounce_tasks.is_empty()
            && self.waiting.is_empty()
            && self.put_off.is_empty()
            && self.sessions.values().all(|s| s.pending.is_empty())
    }

    /// Bub's `on_receive`: unknown channels are ignored; debounced channels
    /// buffer per session; others go straight to admission.
    fn receive(&mut self, inbound: Inbound) {
        let channel = field_of(&inbound.message, "channel").map(bub_kit::envelope::py_str).unwrap_or_default();
        let Some(entry) = self.channels.get(&channel) else {
            tracing::warn!(target: "bub::gateway", "Received message from unknown channel '{channel}', ignoring.");
            return inbound.settle_ignored(&format!("no started channel is named '{channel}'"));
        };
        if !entry.info.needs_debounce {
            let _ = self.ready_tx.send(inbound);
            return;
        }
        let session = inbound.session_hint();
        let sender = self.debouncers.entry(session).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let timings = debounce::Timings {
                debounce: self.settings.debounce,
                max_wait: self.settings.max_wait,
                active_time_window: self.settings.active_time_window,
            };
            self.debounce_tasks.spawn(debounce::run(timings, rx, self.ready_tx.clone()));
            tx
        });
        if let Err(mpsc::error::SendError(inbound)) = sender.send(inbound) {
            // The buffer task ended (it cannot, while we hold its sender);
            // never drop a message over it.
            let _ = self.ready_tx.send(inbound);
        }
    }

    fn session(&mut self, id: &str) -> &mut Session {
        self.sessions.entry(id.to_owned()).or_default()
    }

    fn drop_empty_session(&mut self, id: &str) {
        if self.sessions.get(id).is_some_and(|s| s.running == 0 && s.waiting == 0 && s.pending.is_empty()) {
            self.sessions.remove(id);
        }
    }

    /// Runs `inbound` now if the turn caps leave a place and none of its
    /// session's messages waits before it; otherwise it waits, in order.
    fn schedule(&mut self, session_id: String, inbound: Inbound) {
        let (all, max_turns, max_session) =
            (self.running.len(), self.settings.max_turns, self.settings.max_session_turns);
        let session = self.session(&session_id);
        if all >= max_turns || session.running >= max_session || session.waiting > 0 {
            session.waiting += 1;
            tracing::debug!(
                target: "bub::gateway",
                "channel.manager turn waits for a place session_id={session_id} running={all} \
                 (BUB_MAX_CONCURRENT_TURNS={max_turns}, BUB_MAX_SESSION_TURNS={max_session})"
            );
            self.waiting.push_back((session_id, inbound));
            return;
        }
        self.start(session_id, inbound);
    }

    /// Starts the waiting messages that now have a place, oldest first.
    fn start_waiting(&mut self) {
        let mut i = 0;
        while i < self.waiting.len() && self.running.len() < self.settings.max_turns {
            let room =
                self.sessions.get(&self.waiting[i].0).is_none_or(|s| s.running < self.settings.max_session_turns);
            if !room {
                i += 1;
                continue;
            }
            let Some((session_id, inbound)) = self.waiting.remove(i) else { break };
            let session = self.session(&session_id);
            session.waiting = session.waiting.saturating_sub(1);
            self.start(session_id, inbound);
        }
    }

    fn start(&mut self, session_id: String, mut inbound: Inbound) {
        // Running now: no longer waiting in the backlog.
        inbound.tickets.clear();
        let framework = self.framework.clone();
        let stream_output = self.settings.stream_output
            || field_of(&inbound.message, "stream_output").is_some_and(bub_kit::envelope::truthy);
        let mut message = inbound.message.clone();
        // The turn answers its waiters itself, the moment it ends: the
        // scheduler may be busy meanwhile (admitting messages whose
        // plugins are held up), and a reply must not wait for it. The
        // scheduler still settles the message's journal lines and queue.
        let waiters = std::mem::take(&mut inbound.waiters);
        let session = session_id.clone();
        let handle = self.turns.spawn(async move {
            use futures_util::FutureExt as _;
            let turn = async {
                let result = framework.process_inbound(&mut message, stream_output).await;
                let leftovers = match &result {
                    Ok(turn) => admission::drain_steering(&framework, turn).await,
                    Err(_) => Vec::new(),
                };
                (result, leftovers)
            };
            match std::panic::AssertUnwindSafe(turn).catch_unwind().await {
                Ok(mut output) => {
                    answer(waiters, delivery_of(&session, &mut output.0));
                    output
                }
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a panic".into());
                    answer(waiters, failed(&session, format!("the turn panicked: {what}")));
                    std::panic::resume_unwind(panic)
                }
            }
        });
        self.session(&session_id).running += 1;
        let running = Running { session_id, inbound, abort: handle.clone() };
        self.running.insert(handle.id(), running);
    }

    fn turn_done(&mut self, done: Result<(tokio::task::Id, TurnOutput), tokio::task::JoinError>) {
        let (id, outcome) = match done {
            Ok((id, output)) => (id, Ok(output)),
            Err(e) => (e.id(), Err(e)),
        };
        let Some(turn) = self.running.remove(&id) else { return };
        self.turns_done += 1;
        let session_id = turn.session_id.clone();
        // The waiters were answered by the turn (see `start`): what is
        // settled here is the journal's line and the session's queue.
        let delivery = match outcome {
            Ok((Ok(result), _)) if result.repeated => status("dropped", &session_id),
            Ok((Ok(result), leftovers)) => {
                if result.state.get("_runtime_quit").is_some_and(bub_kit::envelope::truthy) {
                    self.quit(&session_id, id);
                }
                if !leftovers.is_empty() {
                    tracing::info!(
                        target: "bub::gateway",
                        "channel.manager queued remaining steering session_id={session_id} steering_count={}",
                        leftovers.len()
                    );
                    let journal = self.journal.clone();
                    let session = self.session(&session_id);
                    session
                        .pending
                        .extend(leftovers.into_iter().map(|message| Inbound::queued(message, journal.as_ref())));
                }
                status("processed", &session_id)
            }
            Ok((Err(e), _)) => failed(&session_id, e.to_string()),
            Err(e) if e.is_cancelled() => status("cancelled", &session_id),
            Err(e) => {
                tracing::error!(target: "bub::gateway", "a turn of session {session_id} panicked: {e}");
                failed(&session_id, format!("the turn panicked: {e}"))
            }
        };
        turn.inbound.settle(delivery);
        if let Some(session) = self.sessions.get_mut(&session_id) {
            session.running = session.running.saturating_sub(1);
            if session.running == 0 && session.waiting == 0 {
                if let Some(next) = session.pending.pop_front() {
                    self.schedule(session_id.clone(), next);
                }
            }
        }
        self.start_waiting();
        self.drop_empty_session(&session_id);
    }

    /// `,quit` (Bub's `ChannelManager.quit`): the session's queue is
    /// cleared and its other running turns are cancelled.
    fn quit(&mut self, session_id: &str, except: tokio::task::Id) {
        let mut cancelled = 0;
        for (id, turn) in &self.running {
            if *id != except && turn.session_id == session_id {
                turn.abort.abort();
                cancelled += 1;
            }
        }
        let (waiting, others): (VecDeque<_>, VecDeque<_>) =
            std::mem::take(&mut self.waiting).into_iter().partition(|(id, _)| id == session_id);
        self.waiting = others;
        if let Some(session) = self.sessions.get_mut(session_id) {
            session.waiting = 0;
            let queued = std::mem::take(&mut session.pending).into_iter().chain(waiting.into_iter().map(|(_, m)| m));
            for queued in queued {
                queued.settle(Delivery { error: Some("the session quit".into()), ..status("dropped", session_id) });
            }
        }
        tracing::info!(target: "bub::gateway", "channel.manager quit session_id={session_id}, cancelled {cancelled} tasks");
    }

    /// The grace period is over: cancel running turns, keep every message
    /// that did not get its turn.
    async fn cancel_everything(&mut self, inbound: &mut mpsc::UnboundedReceiver<Inbound>) {
        let running = self.turns.len();
        self.turns.abort_all();
        while let Some(done) = self.turns.join_next_with_id().await {
            let id = match &done {
                Ok((id, _)) => *id,
                Err(e) => e.id(),
            };
            let finished = done.is_ok();
            if let Some(turn) = self.running.remove(&id) {
                if !finished {
                    self.leftovers.push(turn.inbound.message.clone());
                }
                turn.inbound.settle(status(if finished { "processed" } else { "cancelled" }, &turn.session_id));
            }
        }
        self.debounce_tasks.abort_all();
        let mut rest: Vec<Inbound> = Vec::new();
        while let Ok(m) = inbound.try_recv() {
            rest.push(m);
        }
        while let Ok(m) = self.ready_rx.try_recv() {
            rest.push(m);
        }
        rest.extend(std::mem::take(&mut self.waiting).into_iter().map(|(_, m)| m));
        rest.extend(std::mem::take(&mut self.put_off).into_iter().map(|(_, m)| m));
        for session in std::mem::take(&mut self.sessions).into_values() {
            rest.extend(session.pending);
        }
        tracing::warn!(
            target: "bub::gateway",
            "channel.manager cancelled {running} in-flight turn(s); {} queued message(s) did not run",
            rest.len()
        );
        for m in rest {
            self.leftovers.push(m.message.clone());
            let session_id = m.session_hint();
            m.settle(status("cancelled", &session_id));
        }
    }

    fn into_leftovers(self) -> Vec<Envelope> {
        self.leftovers
    }
}

/// What a turn that ended tells its message's waiters: its output and
/// outbounds are moved into it (the scheduler needs neither).
fn delivery_of(session_id: &str, result: &mut Result<TurnResult, FrameworkError>) -> Delivery {
    match result {
        Ok(result) if result.repeated => Delivery {
            error: Some("delivered before, and already run: nothing runs again".into()),
            ..status("dropped", session_id)
        },
        Ok(result) => Delivery {
            status: "processed".into(),
            session_id: Some(result.session_id.clone()),
            model_output: Some(std::mem::take(&mut result.model_output)),
            outbounds: std::mem::take(&mut result.outbounds),
            error: None,
        },
        Err(e) => failed(session_id, e.to_string()),
    }
}

/// Tells every waiter `delivery`.
fn answer(mut waiters: Vec<oneshot::Sender<Delivery>>, delivery: Delivery) {
    if let Some(last) = waiters.pop() {
        for w in waiters {
            let _ = w.send(delivery.clone());
        }
        let _ = last.send(delivery);
    }
}

/// What became of a message of `session_id`, with nothing more to say.
fn status(status: &str, session_id: &str) -> Delivery {
    Delivery { status: status.into(), session_id: Some(session_id.to_owned()), ..Default::default() }
}

fn failed(session_id: &str, error: String) -> Delivery {
    Delivery { error: Some(error), ..status("failed", session_id) }
}

/// Appends `messages` to `<home>/gateway/unprocessed.jsonl`; the path, or
/// None (with an error naming the messages' sessions) when it cannot.
fn save_unprocessed(home: &std::path::Path, messages: Vec<Envelope>) -> Option<PathBuf> {
    use std::io::Write;
    let dir = home.join("gateway");
    let path = dir.join("unprocessed.jsonl");
    let write = || -> std::io::Result<()> {
        bub_kit::files::create_private_dir(&dir)?;
        let mut file = bub_kit::files::open_private_append(&path)?;
        let mut text = String::new();
        for m in &messages {
            text.push_str(&serde_json::to_string(m).unwrap_or_else(|_| "null".into()));
            text.push('\n');
        }
        file.write_all(text.as_bytes())?;
        file.sync_all()
    };
    match write() {
        Ok(()) => {
            tracing::warn!(
                target: "bub::gateway",
                "{} message(s) did not get their turn before the gateway stopped; they are saved in {}",
                messages.len(),
                path.display()
            );
            Some(path)
        }
        Err(e) => {
            let sessions: Vec<String> =
                messages.iter().filter_map(|m| field_of(m, "session_id").map(|v| v.to_string())).collect();
            tracing::error!(
                target: "bub::gateway",
                "could not save {} unprocessed message(s) to {}: {e} (sessions: {})",
                messages.len(),
                path.display(),
                sessions.join(", ")
            );
            None
        }
    }
}
