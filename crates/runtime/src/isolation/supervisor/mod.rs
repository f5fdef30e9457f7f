//! The host's side of an isolated plugin: its process (started, watched,
//! restarted) and its registrations; how a call reaches it is `calls`.
//!
//! A registration's hooks are slots like any library's: one `extern "C"`
//! function per hook (generated from the hook table), whose instance is
//! this side's [`Member`]. The registry, the runtime and `bub hooks` see
//! an ordinary plugin.

mod calls;

pub(crate) use calls::into_return;
use calls::slot_of;

use std::{
    collections::VecDeque,
    ffi::OsString,
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock, Weak},
    time::{Duration, Instant, SystemTime},
};

use abi_stable::std_types::{ROption, RVec};
use bub_abi::{
    abi::{DispatchMode, HookCall, HookMarker, HookReturn, HookSlot, Instance, Outcome},
    async_ffi::FutureExt,
    ErrorKind, HookError, HookId, Value, ValueRef, HOOK_COUNT,
};

use super::{
    codec::{self, RemoteObject},
    peer::{self, Peer},
    process::{self, Status},
    state,
    wire::{self, Answer, Init, Message, Registration},
    Isolation, Limits,
};

/// Restarts are counted over this window.
const CRASH_WINDOW: Duration = Duration::from_secs(600);
/// How long a child may take to load its library.
const LOAD_LIMIT: Duration = Duration::from_secs(60);

/// The runtime that serves an isolated plugin's requests to the host (its
/// calls of host objects, `call_rest`): the host's own runtime may not
/// exist when the plugin is loaded (`bub hooks`), and may be busy.
fn service_runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("bub-isolation")
            .enable_time()
            .build()
            .expect("the isolation runtime starts")
    })
}

/// What starting an isolated plugin needs.
pub(crate) struct Spec {
    pub name: String,
    pub dir: PathBuf,
    pub library: PathBuf,
    pub sha256: Option<String>,
    pub config: serde_json::Map<String, serde_json::Value>,
    pub places: crate::Places,
    pub isolation: Isolation,
    pub program: PathBuf,
    pub env: Vec<(OsString, OsString)>,
    /// How long a sync hook may take.
    pub sync_limit: Duration,
    /// The deadline of its async hooks (`BUB_HOOK_TIMEOUT_SECONDS`; None:
    /// none), but the model stage's: a call given up at it ends the process.
    pub async_limit: Option<Duration>,
}

/// One isolated library and its process.
pub(crate) struct Supervisor {
    spec: Spec,
    limits: Limits,
    inner: Mutex<Inner>,
    /// Held while a process starts: one start at a time.
    starting: Mutex<()>,
    /// Channels it answered: started again in a restarted process.
    eager: Mutex<Vec<Weak<codec::Remote>>>,
    /// The registrations of its first start (the slots the registry holds).
    registrations: OnceLock<Vec<Registration>>,
    /// This side's instance of each registration, in the same order.
    instances: OnceLock<Vec<Instance>>,
}

#[derive(Default)]
struct Inner {
    peer: Option<Arc<Peer>>,
    crashes: VecDeque<Instant>,
    not_before: Option<Instant>,
    stopped: Option<String>,
    status: Status,
}

/// This side's instance of one registration: what a slot is called with.
pub(crate) struct Member {
    sup: Arc<Supervisor>,
    index: usize,
}

/// Starts the plugin of `spec` and answers its registrations (the library
/// first, then a set's members), ready for the registry.
pub(crate) fn load(spec: Spec) -> Result<Vec<crate::PluginRecord>, String> {
    let limits = spec.isolation.limits();
    let sup = Arc::new(Supervisor {
        spec,
        limits,
        inner: Mutex::new(Inner::default()),
        starting: Mutex::new(()),
        eager: Mutex::new(Vec::new()),
        registrations: OnceLock::new(),
        instances: OnceLock::new(),
    });
    let (peer, abi_version, registrations) = sup.start()?;
    bub_abi::sync::lock(&sup.inner).peer = Some(peer);
    let instances: Vec<Instance> = (0..registrations.len())
        .map(|index| {
            // Never freed, like a library's instance: the registry keeps it.
            let member: &'static Member = Box::leak(Box::new(Member { sup: sup.clone(), index }));
            Instance(member as *const Member as *const std::ffi::c_void)
        })
        .collect();
    let _ = sup.instances.set(instances.clone());
    let _ = sup.registrations.set(registrations.clone());
    sup.watch();
    let path = Some(sup.spec.library.clone());
    let set = sup.spec.name.clone();
    let mut records = Vec::new();
    for (i, (reg, instance)) in registrations.into_iter().zip(instances).enumerate() {
        let mut record = crate::PluginRecord::failed(reg.name.clone(), path.clone(), String::new());
        record.status = crate::PluginStatus::Loaded;
        record.version = reg.version;
        record.abi_version = abi_version.clone();
        record.description = reg.description;
        record.instance = instance;
        record.isolated = true;
        if i > 0 {
            record.member_of = Some(set.clone());
            if let Some(detail) = crate::members::member_name_problem(&set, &reg.name) {
                record.name = crate::manifest::printable(&reg.name, 64);
                record.status = crate::PluginStatus::Failed { detail };
                record.claims = false;
                records.push(record);
                continue;
            }
        }
        let mut slots = [HookSlot::EMPTY; HOOK_COUNT];
        for (hook, marker, is_async) in &reg.hooks {
            if let Some(id) = HookId::from_name(hook) {
                let marker = [HookMarker::TryFirst, HookMarker::TryLast]
                    .into_iter()
                    .find(|m| *m as u8 == *marker)
                    .unwrap_or(HookMarker::Normal);
                slots[id as usize] = HookSlot { call: ROption::RSome(slot_of(id)), marker, is_async: *is_async };
            }
        }
        record.hooks = Some(crate::registry::Hooks::Slots(Arc::new(slots)));
        records.push(record);
    }
    Ok(records)
}

impl Supervisor {
    fn label(&self) -> String {
        format!("isolated plugin '{}'", self.spec.name)
    }

    /// Starts a process, loads the library in it, and starts reading it.
    fn start(self: &Arc<Self>) -> Result<(Arc<Peer>, String, Vec<Registration>), String> {
        let (host_end, child_end) = UnixStream::pair().map_err(|e| format!("cannot make its socket: {e}"))?;
        let mut child = process::spawn(&self.spec.program, child_end, &self.spec.env)
            .map_err(|e| format!("cannot start {} for it: {e}", self.spec.program.display()))?;
        let places = &self.spec.places;
        let text = |p: &Path| p.to_string_lossy().into_owned();
        let init = Init {
            name: self.spec.name.clone(),
            dir: text(&self.spec.dir),
            library: text(&self.spec.library),
            sha256: self.spec.sha256.clone(),
            config: self.spec.config.clone(),
            home: text(&places.home),
            workspace: text(&places.workspace),
            data_dir: text(&places.data_dir(&self.spec.name)),
            limits: self.limits,
        };
        let handshake = (|| -> Result<Message, wire::FrameError> {
            let mut stream = &host_end;
            wire::write(&mut stream, &wire::encode(&Message::Init(Box::new(init)))).map_err(wire::FrameError::Io)?;
            host_end.set_read_timeout(Some(LOAD_LIMIT)).map_err(wire::FrameError::Io)?;
            let answer = wire::read(&mut stream, self.limits.max_message_bytes);
            let _ = host_end.set_read_timeout(None);
            answer
        })();
        // Killed (and reaped) before its failure is told: the exit status
        // says how it ended when it ended by itself.
        let mut fail = |why: String, ended_by_itself: bool| -> String {
            let _ = child.kill();
            match child.wait() {
                Ok(status) if ended_by_itself => format!("its process {} while loading it", process::describe(status)),
                _ => why,
            }
        };
        let (abi_version, registrations) = match handshake {
            Ok(Message::Ready { abi_version, registrations }) => (abi_version, registrations),
            Ok(Message::Failed(why)) => {
                let _ = child.wait();
                return Err(why);
            }
            Ok(other) => return Err(fail(format!("its process answered {other:?} to loading"), false)),
            Err(e) if e.is_timeout() => {
                return Err(fail(format!("it did not load within {} s", LOAD_LIMIT.as_secs()), false))
            }
            Err(e) => {
                let ended = matches!(e, wire::FrameError::Closed);
                return Err(fail(e.to_string(), ended));
            }
        };
        let peer =
            Peer::new(self.label(), &host_end, self.limits.max_message_bytes, service_runtime().handle().clone())
                .map_err(|e| format!("cannot start its writer: {e}"))?;
        let pid = child.id();
        {
            let mut inner = bub_abi::sync::lock(&self.inner);
            inner.status.host_pid = std::process::id();
            inner.status.pid = Some(pid);
            inner.status.started_at = Some(humantime::format_rfc3339_seconds(SystemTime::now()).to_string());
            // Written on a restart only: a first start says nothing new, and
            // `bub plugins list` (which starts one too) must not overwrite
            // what a running gateway recorded.
            if inner.status.restarts > 0 {
                inner.status.write(&places.home, &self.spec.name);
            }
        }
        let sup = Arc::downgrade(self);
        let reader_peer = peer.clone();
        std::thread::Builder::new()
            .name(format!("bub-isolated-{}", self.spec.name))
            .spawn(move || {
                let why = {
                    let serving = reader_peer.clone();
                    let sup = sup.clone();
                    peer::serve(&reader_peer, host_end, move |m| handle(&serving, &sup, m))
                };
                // The socket ended: the process is ending (or broke the
                // protocol, or was killed by us): reap it and say how.
                let broke = !why.is_hang_up();
                if broke {
                    let _ = child.kill();
                }
                let status = wait_briefly(&mut child);
                let how = match status {
                    _ if broke => format!("broke the protocol ({why}) and was killed"),
                    Some(s) => process::describe(s),
                    None => format!("stopped answering ({why}) and was killed"),
                };
                if let Some(sup) = sup.upgrade() {
                    sup.ended(&reader_peer, how);
                } else {
                    reader_peer.close(how);
                }
            })
            .map_err(|e| format!("cannot start its reader: {e}"))?;
        Ok((peer, abi_version, registrations))
    }

    /// The running process's connection, if it runs.
    fn live(&self) -> Option<Arc<Peer>> {
        bub_abi::sync::lock(&self.inner).peer.clone().filter(|p| p.closed().is_none())
    }

    /// When the next start may be tried (after a crash's backoff) and how
    /// it last crashed, or why it never will start again.
    fn next_start(&self) -> Result<Option<(Instant, Option<String>)>, HookError> {
        let inner = bub_abi::sync::lock(&self.inner);
        if let Some(why) = &inner.stopped {
            return Err(HookError::new(ErrorKind::CLOSED, format!("{} is stopped: {why}", self.label())));
        }
        Ok(inner.not_before.filter(|t| *t > Instant::now()).map(|t| (t, inner.status.last_crash.clone())))
    }

    /// The running process's connection, starting it again if it ended
    /// (after its backoff, within its restart limit). Blocks while it starts.
    fn peer(self: &Arc<Self>) -> Result<Arc<Peer>, HookError> {
        if let Some(p) = self.live() {
            return Ok(p);
        }
        let _one_at_a_time = bub_abi::sync::lock(&self.starting);
        if let Some(p) = self.live() {
            return Ok(p);
        }
        if let Some((t, crash)) = self.next_start()? {
            // A call in the backoff names the crash too: it failed because
            // of it as much as the calls in flight did.
            let wait = t.saturating_duration_since(Instant::now());
            let crash = crash.map(|c| format!("{c}; ")).unwrap_or_default();
            return Err(HookError::new(
                ErrorKind::CLOSED,
                format!(
                    "{} is restarting after a crash ({crash}next try in {:.1} s)",
                    self.label(),
                    wait.as_secs_f64()
                ),
            ));
        }
        bub_abi::sync::lock(&self.inner).status.restarts += 1;
        let started = self.start();
        let mut inner = bub_abi::sync::lock(&self.inner);
        match started {
            Ok((peer, _, registrations)) => {
                if self.registrations.get().is_some_and(|first| !same_hooks(first, &registrations)) {
                    tracing::warn!(
                        target: "bub::isolation",
                        "{} came back with other hooks than at its first start (its library changed?); the first ones \
                         stay registered until bub restarts",
                        self.label()
                    );
                }
                tracing::info!(target: "bub::isolation", "{} started again (restart {})", self.label(), inner.status.restarts);
                inner.peer = Some(peer.clone());
                Ok(peer)
            }
            Err(why) => {
                let message = format!("{} could not be started again: {why}", self.label());
                self.record_crash(&mut inner, message.clone());
                Err(HookError::new(ErrorKind::CLOSED, message))
            }
        }
    }

    /// Its process ended: the calls in flight fail with how, and the next
    /// call starts it again (after a backoff).
    fn ended(&self, peer: &Arc<Peer>, how: String) {
        let mut inner = bub_abi::sync::lock(&self.inner);
        let current = inner.peer.as_ref().is_some_and(|p| Arc::ptr_eq(p, peer));
        let why = peer.closed().filter(|w| w.starts_with("killed by bub")).unwrap_or_else(|| how.clone());
        let at = humantime::format_rfc3339_seconds(SystemTime::now());
        let message = format!("its process {why} at {at}");
        if current {
            inner.status.pid = None;
            self.record_crash(&mut inner, message.clone());
        }
        drop(inner);
        let restart = "bub starts it again on its next call";
        tracing::error!(target: "bub::isolation", "{}: {message}; the calls in flight failed; {restart}", self.label());
        peer.close(format!("{message}; {restart}"));
        if current {
            self.restart_channels();
        }
    }

    /// After a crash: its channels that were started come back at once
    /// (after the backoff), in a restarted process: no call would bring
    /// them back, since it is they that bring calls.
    fn restart_channels(&self) {
        let channels: Vec<Arc<codec::Remote>> = {
            let mut eager = bub_abi::sync::lock(&self.eager);
            eager.retain(|w| w.strong_count() > 0);
            eager.iter().filter_map(Weak::upgrade).filter(|c| c.in_service()).collect()
        };
        if channels.is_empty() {
            return;
        }
        let label = self.label();
        service_runtime().spawn(async move {
            for channel in channels {
                match channel.live().await {
                    Ok(_) => tracing::info!(target: "bub::isolation", "{label}: a channel of it was started again"),
                    Err(e) => tracing::error!(target: "bub::isolation", "{label}: a channel of it could not be started again: {}", e.message),
                }
            }
        });
    }

    fn record_crash(&self, inner: &mut Inner, message: String) {
        let now = Instant::now();
        inner.crashes.push_back(now);
        while inner.crashes.front().is_some_and(|t| now.duration_since(*t) > CRASH_WINDOW) {
            inner.crashes.pop_front();
        }
        let n = inner.crashes.len() as u32;
        let max = self.spec.isolation.max_restarts.unwrap_or(super::DEFAULT_MAX_RESTARTS);
        if n > max {
            let why = format!(
                "it crashed {n} times in {} minutes (isolated.max_restarts is {max}); restart bub to try again",
                CRASH_WINDOW.as_secs() / 60
            );
            tracing::error!(target: "bub::isolation", "{} is stopped: {why}", self.label());
            inner.stopped = Some(why.clone());
            inner.status.stopped = Some(why);
        } else {
            // 0.1 s, 0.2 s, 0.4 s, … at most 30 s, by the crashes of the
            // last minute: a plugin that crashes now and then comes back at
            // once, one that crashes in a loop backs off.
            let recent =
                inner.crashes.iter().filter(|t| now.duration_since(**t) < Duration::from_secs(60)).count() as u32;
            let backoff = Duration::from_millis(100u64 << recent.saturating_sub(1).min(9)).min(Duration::from_secs(30));
            inner.not_before = Some(now + backoff);
        }
        inner.status.last_crash = Some(message);
        inner.status.write(&self.spec.places.home, &self.spec.name);
    }

    /// Kills the running process (it wedged): its calls fail with `why`.
    fn kill(&self, peer: &Arc<Peer>, why: String) {
        let inner = bub_abi::sync::lock(&self.inner);
        let current = inner.peer.as_ref().is_some_and(|p| Arc::ptr_eq(p, peer));
        let pid = inner.status.pid.filter(|_| current);
        drop(inner);
        tracing::error!(target: "bub::isolation", "{}: {why}; killing its process", self.label());
        peer.close(format!("killed by bub: {why}"));
        // The whole group: the process and what it started.
        if let Some(pid) = pid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
            end_group(pid);
        }
    }

    /// Pings the process while it runs; one that does not answer within
    /// its ping timeout (a stopped process, a wedged runtime) is killed.
    fn watch(self: &Arc<Self>) {
        let limit = self.spec.isolation.ping_timeout_seconds.unwrap_or(super::DEFAULT_PING_TIMEOUT_SECONDS);
        if limit == 0 {
            return;
        }
        let limit = Duration::from_secs(limit);
        let sup: Weak<Supervisor> = Arc::downgrade(self);
        let _ = std::thread::Builder::new().name("bub-isolation-ping".into()).spawn(move || loop {
            std::thread::sleep((limit / 3).max(Duration::from_millis(200)));
            let Some(sup) = sup.upgrade() else { return };
            let Some(peer) = sup.live() else { continue };
            if let Err(e) = peer.request_blocking(Message::Ping, limit) {
                if peer.closed().is_none() {
                    sup.kill(&peer, format!("it answered no ping for {} s ({})", limit.as_secs(), e.message));
                }
            }
        });
    }
}

/// Serves one request of the child (its reader thread).
fn handle(peer: &Arc<Peer>, sup: &Weak<Supervisor>, message: Message) {
    match message {
        Message::State { id, state, op } => {
            let answer = state::serve(peer, state, op);
            peer.send(&Message::Reply { id, answer });
        }
        Message::ReleaseState(state) => {
            let gone = bub_abi::sync::lock(&peer.states).remove(&state);
            drop(gone);
        }
        Message::CallRest { id, member, hook, args } => {
            let instance = sup.upgrade().and_then(|s| s.instances.get().and_then(|i| i.get(member).copied()));
            let peer = peer.clone();
            peer.runtime.clone().spawn(async move {
                let answer = match (instance, codec::decode(&args, &peer)) {
                    (None, _) => Answer::Error(ErrorKind::ERROR.0, format!("call_rest: no registration {member}")),
                    (_, Err(e)) => Answer::Error(e.kind.0, e.message.into_string()),
                    (Some(instance), Ok(args)) => {
                        let ret = crate::runtime::rest::call_rest(
                            instance,
                            abi_stable::std_types::RStr::from_str(&hook),
                            args,
                        )
                        .await;
                        outcome_answer(ret.into_outcome(bub_abi::value::own_table()), &peer).await
                    }
                };
                peer.send(&Message::Reply { id, answer });
            });
        }
        other => {
            tracing::warn!(target: "bub::isolation", "{}: unexpected message {other:?}; ignored", peer.label);
        }
    }
}

/// A hook return as an answer to the other side, awaited if pending.
pub(crate) async fn outcome_answer(outcome: Outcome, peer: &Arc<Peer>) -> Answer {
    let mut outcome = outcome;
    loop {
        return match outcome {
            Outcome::None => Answer::None,
            Outcome::Value(v) => Answer::Value(codec::encode(v.as_ref(), peer)),
            Outcome::Object(o) => Answer::Object(peer.export(o)),
            Outcome::Objects(list) => Answer::Objects(list.into_iter().map(|o| peer.export(o)).collect()),
            Outcome::Error(e) => Answer::Error(e.kind.0, e.message.into_string()),
            Outcome::Pending(fut) => {
                outcome = fut.await.into_outcome(bub_abi::value::own_table());
                continue;
            }
        };
    }
}

fn same_hooks(a: &[Registration], b: &[Registration]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.name == y.name && x.hooks == y.hooks)
}

/// Waits up to two seconds for a process whose socket closed; kills it
/// after that. `None` when it had to be killed. Either way its process
/// group goes with it: what the plugin started (a shell, a server) would
/// otherwise be orphaned, holding whatever it held. The group is ended
/// while the process is exited but not yet reaped, so its id cannot have
/// been reused by then.
fn wait_briefly(child: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    use rustix::process::{waitid, Pid, WaitId, WaitIdOptions};
    let until = Instant::now() + Duration::from_secs(2);
    let pid = Pid::from_child(child);
    loop {
        match waitid(WaitId::Pid(pid), WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG) {
            Ok(Some(_)) => {
                end_group(pid);
                return child.wait().ok();
            }
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                end_group(pid);
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// SIGKILL to the process group an isolated plugin's process leads.
fn end_group(pid: rustix::process::Pid) {
    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
}
