//! The child's side: `bub __plugin-runner`, started by the host with a
//! socket as its standard input. It limits itself, checks and loads the
//! library exactly as the host would (trust, sha256, ABI), answers its
//! registrations, then serves calls until the host's end closes.

use std::{
    collections::HashMap,
    marker::PhantomData,
    os::unix::net::UnixStream,
    path::Path,
    process::ExitCode,
    sync::{Arc, Mutex, OnceLock},
};

use abi_stable::std_types::RSlice;
use bub_abi::{
    abi::{DispatchMode, HookCall, HookReturn, Instance},
    ErrorKind, HookId, Value, ValueRef,
};

use super::{
    codec::{self, RemoteObject},
    peer::{self, Peer},
    state::RemoteState,
    supervisor::outcome_answer,
    wire::{self, Answer, Init, Message, Registration},
    Limits,
};
use crate::{registry::Hooks, Places};

/// One registration as loaded here.
struct Loaded {
    instance: Instance,
    hooks: Option<Hooks>,
}

/// The runner's entry point (`bub __plugin-runner`): returns when the host
/// goes away.
pub fn main() -> ExitCode {
    let stream = match take_connection() {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "bub {}: {e}. This command is started by bub for an isolated plugin; it is not meant to be run by hand",
                super::RUNNER_ARG
            );
            return ExitCode::from(2);
        }
    };
    let init = match wire::read(&mut &stream, 64 << 20) {
        Ok(Message::Init(init)) => init,
        Ok(_) | Err(_) => return ExitCode::from(2),
    };
    let cap = init.limits.max_message_bytes;
    let send = |m: &Message| wire::write(&mut &stream, &wire::encode(m));
    if let Err(e) = apply_limits(&init.limits) {
        let _ = send(&Message::Failed(format!("its resource limits could not be set: {e}")));
        return ExitCode::from(1);
    }
    let (abi_version, registrations, loaded) = match load(&init) {
        Ok(found) => found,
        Err(why) => {
            let _ = send(&Message::Failed(why));
            return ExitCode::from(1);
        }
    };
    if send(&Message::Ready { abi_version, registrations }).is_err() {
        return ExitCode::from(1);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bub-plugin")
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(_) => return ExitCode::from(1),
    };
    let label = format!("the host of isolated plugin '{}'", init.name);
    let Ok(peer) = Peer::new(label, &stream, cap, runtime.handle().clone()) else { return ExitCode::from(1) };
    let loaded = Arc::new(loaded);
    forward_call_rest(&peer, &loaded);
    let tasks: Arc<Mutex<HashMap<u64, tokio::task::AbortHandle>>> = Arc::default();
    let serving = peer.clone();
    let _ = peer::serve(&peer, stream, move |message| match message {
        Message::Call { id, member, hook, args, state, object, sync } => {
            let fut = call(serving.clone(), loaded.clone(), id, member, hook, args, state, object, sync);
            // Under the lock until its abort handle is kept: the task forgets
            // it when it ends, which cannot come first.
            let mut running = bub_abi::sync::lock(&tasks);
            let tasks = tasks.clone();
            let task = serving.runtime.spawn(async move {
                fut.await;
                bub_abi::sync::lock(&tasks).remove(&id);
            });
            running.insert(id, task.abort_handle());
        }
        Message::Cancel(id) => {
            if let Some(task) = bub_abi::sync::lock(&tasks).remove(&id) {
                task.abort();
            }
        }
        Message::Ping(id) => {
            // Through the runtime: a wedged runtime does not answer.
            let peer = serving.clone();
            serving.runtime.spawn(async move { peer.send(&Message::Reply { id, answer: Answer::None }) });
        }
        _ => {}
    });
    // The host is gone: nothing more to do. The process leads a group of
    // its own (the host starts it so): the group ends at once, this
    // process and whatever the plugin started (a server, a shell), none
    // left behind its host. Not `exit`, whose handlers may wait for a
    // thread the plugin holds forever (a Python hook blocking its loop).
    // Libraries are never unloaded, and their destructors are not run (as
    // when the host exits).
    let me = rustix::process::getpid();
    if rustix::process::getpgid(None).is_ok_and(|group| group == me) {
        let _ = rustix::process::kill_process_group(me, rustix::process::Signal::KILL);
    }
    std::process::exit(0)
}

/// The socket on standard input, which then reads `/dev/null` (a plugin
/// that reads standard input must not eat the protocol). The socket is
/// moved to a close-on-exec descriptor: a subprocess the plugin starts
/// must not hold it, or a crash of this process would not close it, and
/// the host would learn of the crash only when its pings went unanswered.
fn take_connection() -> std::io::Result<UnixStream> {
    let fd = rustix::io::fcntl_dupfd_cloexec(std::io::stdin(), 3)?;
    let stream = UnixStream::from(fd);
    stream.peer_addr().map_err(|_| std::io::Error::other("its standard input is not a socket"))?;
    let null = std::fs::File::open("/dev/null")?;
    rustix::stdio::dup2_stdin(&null)?;
    Ok(stream)
}

fn apply_limits(limits: &Limits) -> Result<(), String> {
    use rustix::process::{setrlimit, Resource, Rlimit};
    let set = |resource: Resource, value: u64, what: &str| {
        if value == 0 {
            return Ok(());
        }
        setrlimit(resource, Rlimit { current: Some(value), maximum: Some(value) }).map_err(|e| format!("{what}: {e}"))
    };
    set(Resource::As, limits.memory_mb.saturating_mul(1 << 20), "memory_mb")?;
    set(Resource::Cpu, limits.cpu_seconds, "cpu_seconds")?;
    set(Resource::Nofile, limits.open_files, "open_files")?;
    Ok(())
}

type LoadedAll = (String, Vec<Registration>, Vec<Loaded>);

/// Checks and loads the library as the host would; its registrations.
fn load(init: &Init) -> Result<LoadedAll, String> {
    let (dir, library) = (Path::new(&init.dir), Path::new(&init.library));
    let file = crate::integrity::check_parents_once(dir, &mut Vec::new())
        .and_then(|()| crate::integrity::open_trusted(dir, library, init.sha256.as_deref()))
        .map_err(|e| e.to_string())?;
    let lib = crate::loader::open_file(file, library).map_err(|e| e.to_string())?;
    let places = Places { home: init.home.clone().into(), workspace: init.workspace.clone().into() };
    let instance = crate::loader::initialise(&lib, &init.name, &init.config, &places).map_err(|e| e.to_string())?;
    let members = crate::loader::members(&lib, instance).map_err(|e| e.to_string())?;
    // As the host registers them: the library's own table, or (a set) its
    // members' slots and none of its own.
    let mut loaded = vec![Loaded {
        instance,
        hooks: if members.is_empty() { Some(Hooks::Table(lib.module.hooks())) } else { None },
    }];
    let mut registrations = vec![Registration {
        name: init.name.clone(),
        version: lib.version().to_owned(),
        description: lib.description().to_owned(),
        hooks: hooks_of(loaded[0].hooks.as_ref()),
    }];
    for member in members {
        let hooks = Some(Hooks::Slots(Arc::new(crate::members::member_slots(&init.name, &member))));
        registrations.push(Registration {
            name: member.name.as_str().to_owned(),
            version: member.version.as_str().to_owned(),
            description: member.description.as_str().to_owned(),
            hooks: hooks_of(hooks.as_ref()),
        });
        loaded.push(Loaded { instance: member.instance, hooks });
    }
    Ok((lib.abi_version().to_owned(), registrations, loaded))
}

/// The hooks `hooks` implements, as a registration lists them.
fn hooks_of(hooks: Option<&Hooks>) -> Vec<(String, u8, bool)> {
    let Some(hooks) = hooks else { return Vec::new() };
    HookId::ALL
        .iter()
        .filter_map(|&h| {
            let slot = hooks.slot(h);
            slot.call.is_some().then(|| (h.name().to_owned(), slot.marker as u8, slot.is_async))
        })
        .collect()
}

/// Runs one call of the host and sends its answer.
#[allow(clippy::too_many_arguments)]
async fn call(
    peer: Arc<Peer>,
    loaded: Arc<Vec<Loaded>>,
    id: u64,
    member: usize,
    hook: String,
    args: Vec<Box<serde_json::value::RawValue>>,
    state: Option<u64>,
    object: Option<wire::ObjRef>,
    sync: bool,
) {
    let fail = |kind: ErrorKind, message: String| Message::Reply { id, answer: Answer::Error(kind.0, message) };
    let Some((hook_id, target)) = HookId::from_name(&hook).zip(loaded.get(member)) else {
        return peer.send(&fail(ErrorKind::UNSUPPORTED, format!("no hook {hook} in registration {member}")));
    };
    let Some(slot) = target.hooks.as_ref().and_then(|h| h.slot(hook_id).call.into_option()) else {
        return peer.send(&fail(ErrorKind::UNSUPPORTED, format!("{hook} is not implemented here")));
    };
    let mut values = Vec::with_capacity(args.len());
    for raw in &args {
        match codec::decode(raw, &peer) {
            Ok(v) => values.push(v),
            Err(e) => return peer.send(&fail(e.kind, format!("{hook}: arguments: {}", e.message))),
        }
    }
    let ret: HookReturn = {
        let refs: Vec<ValueRef<'_>> = values.iter().map(Value::as_ref).collect();
        let state = state.map(|s| RemoteState::handle(&peer, s));
        let object = object.map(|r| RemoteObject::object(&peer, r).into_handle());
        let call = HookCall {
            args: RSlice::from_slice(&refs),
            state: state.as_ref().into(),
            object: object.as_ref().into(),
            mode: if sync { DispatchMode::Sync } else { DispatchMode::Async },
            instance: target.instance,
            _payloads: PhantomData,
        };
        slot(&call)
    };
    let answer = match ret.into_outcome(bub_abi::value::own_table()) {
        // Under sync dispatch a pending answer is dropped unpolled, as the
        // host does in process; the host then warns as it would.
        bub_abi::abi::Outcome::Pending(fut) if sync => {
            drop(fut);
            Answer::Pending
        }
        outcome => outcome_answer(outcome, &peer).await,
    };
    peer.send(&Message::Reply { id, answer });
}

/// `call_rest` from a hook here goes to the host, which runs the rest of
/// the chain after this registration's place in it.
fn forward_call_rest(peer: &Arc<Peer>, loaded: &Arc<Vec<Loaded>>) {
    static REMOTE: OnceLock<(Arc<Peer>, Vec<usize>)> = OnceLock::new();
    let instances = loaded.iter().map(|l| l.instance.0 as usize).collect();
    let _ = REMOTE.set((peer.clone(), instances));
    crate::runtime::rest::set_fallback(|instance, hook, args| {
        let (peer, instances) = REMOTE.get()?;
        let member = instances.iter().position(|i| *i == instance.0 as usize)?;
        let args = codec::encode(args.as_ref(), peer);
        let (id, rx) = peer.request(|id| Message::CallRest { id, member, hook: hook.to_owned(), args });
        let peer = peer.clone();
        Some(bub_abi::async_ffi::FutureExt::into_ffi(async move {
            let guard = codec::Forget { peer: peer.clone(), id };
            let answer =
                rx.await.unwrap_or_else(|_| Err(bub_abi::HookError::new(ErrorKind::CLOSED, "the host went away")));
            drop(guard);
            super::supervisor::into_return(answer, &peer)
        }))
    });
}
