//! One end of the connection between the host and an isolated plugin's
//! process, the same on both sides: requests with ids and their waiters,
//! the objects this side lent the other, and a writer thread.
//!
//! A reader never blocks on the other side: the reader thread (one per
//! connection, in [`serve`]) hands every request that may take time to the
//! runtime, and what it sends itself goes through a writer thread's
//! unbounded queue. Other threads write their frames directly (one lock,
//! no thread hop: half the cost of a call), which may wait only for the
//! other side's reader, which always drains. So two sides writing big
//! frames at each other cannot wedge, and a slow object method delays
//! only its own answer.

use std::{
    collections::HashMap,
    os::unix::net::UnixStream,
    sync::{
        atomic::{AtomicU64, Ordering},
        mpsc, Arc, Mutex,
    },
    time::Duration,
};

use abi_stable::std_types::{RResult, RStr};
use bub_abi::{abi::ObjectHandle, abi::StateHandle, ErrorKind, HookError};
use tokio::sync::oneshot;

use super::{
    codec,
    wire::{self, Answer, Message, ObjRef},
};

/// Someone waiting for the answer to a request.
enum Waiter {
    Async(oneshot::Sender<Result<Answer, HookError>>),
    Sync(mpsc::Sender<Result<Answer, HookError>>),
}

impl Waiter {
    fn send(self, answer: Result<Answer, HookError>) {
        match self {
            Waiter::Async(tx) => drop(tx.send(answer)),
            Waiter::Sync(tx) => drop(tx.send(answer)),
        }
    }
}

/// One end of a connection.
pub(crate) struct Peer {
    /// "isolated plugin 'name'", for messages.
    pub label: String,
    frames: mpsc::Sender<Vec<u8>>,
    /// The socket, shared with the writer thread.
    out: Arc<Mutex<UnixStream>>,
    next_id: AtomicU64,
    waiting: Mutex<HashMap<u64, Waiter>>,
    /// Objects lent to the other side, by id.
    exports: Mutex<HashMap<u64, ObjectHandle>>,
    /// Turn states lent to the other side (host side only), by id.
    pub states: Mutex<HashMap<u64, StateHandle>>,
    /// Why the connection ended, once it has.
    closed: Mutex<Option<String>>,
    /// The largest frame read (bytes).
    pub cap: usize,
    /// Where requests of the other side run.
    pub runtime: tokio::runtime::Handle,
}

impl Peer {
    /// A peer writing to `stream` (its writer thread starts here).
    pub fn new(
        label: String,
        stream: &UnixStream,
        cap: usize,
        runtime: tokio::runtime::Handle,
    ) -> std::io::Result<Arc<Peer>> {
        let (frames, queue) = mpsc::channel::<Vec<u8>>();
        // One lock for both ways of writing: a frame is written whole.
        let out = Arc::new(Mutex::new(stream.try_clone()?));
        let queued = out.clone();
        std::thread::Builder::new().name("bub-isolation-writer".into()).spawn(move || {
            for frame in queue {
                let mut stream = bub_abi::sync::lock(&queued);
                if wire::write(&mut *stream, &frame).is_err() {
                    // The reader sees the same end and closes the peer.
                    return;
                }
            }
        })?;
        Ok(Arc::new(Peer {
            label,
            frames,
            out,
            next_id: AtomicU64::new(1),
            waiting: Mutex::new(HashMap::new()),
            exports: Mutex::new(HashMap::new()),
            states: Mutex::new(HashMap::new()),
            closed: Mutex::new(None),
            cap,
            runtime,
        }))
    }

    /// Sends a message: queued from the reader thread, written directly
    /// from any other.
    pub fn send(&self, message: &Message) {
        let frame = wire::encode(message);
        if IS_READER.with(|r| r.get()) {
            let _ = self.frames.send(frame);
        } else {
            let mut out = bub_abi::sync::lock(&self.out);
            let _ = wire::write(&mut *out, &frame);
        }
    }

    /// Why the connection ended, if it has.
    pub fn closed(&self) -> Option<String> {
        bub_abi::sync::lock(&self.closed).clone()
    }

    fn closed_error(&self, why: &str) -> HookError {
        HookError::new(ErrorKind::CLOSED, format!("{}: {why}", self.label))
    }

    fn register(&self, waiter: Waiter) -> Result<u64, (Waiter, HookError)> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut waiting = bub_abi::sync::lock(&self.waiting);
        // Checked under the waiters' lock, which `close` drains under: no
        // waiter is added after the drain.
        if let Some(why) = self.closed() {
            return Err((waiter, self.closed_error(&why)));
        }
        waiting.insert(id, waiter);
        Ok(id)
    }

    /// Sends the request `make` builds with a fresh id; the answer arrives
    /// on the receiver (an error if the connection ends first).
    pub fn request(&self, make: impl FnOnce(u64) -> Message) -> (u64, oneshot::Receiver<Result<Answer, HookError>>) {
        let (tx, rx) = oneshot::channel();
        match self.register(Waiter::Async(tx)) {
            Ok(id) => {
                self.send(&make(id));
                (id, rx)
            }
            Err((waiter, e)) => {
                waiter.send(Err(e));
                (0, rx)
            }
        }
    }

    /// Sends a request and blocks this thread for its answer, at most `limit`.
    pub fn request_blocking(&self, make: impl FnOnce(u64) -> Message, limit: Duration) -> Result<Answer, HookError> {
        let (tx, rx) = mpsc::channel();
        let id = match self.register(Waiter::Sync(tx)) {
            Ok(id) => id,
            Err((_, e)) => return Err(e),
        };
        self.send(&make(id));
        match rx.recv_timeout(limit) {
            Ok(answer) => answer,
            Err(_) => {
                bub_abi::sync::lock(&self.waiting).remove(&id);
                Err(HookError::new(
                    ErrorKind::ERROR,
                    format!("{}: no answer within {:.0} s", self.label, limit.as_secs_f64()),
                ))
            }
        }
    }

    /// Stops waiting for request `id` (its answer, if one comes, is dropped).
    pub fn forget(&self, id: u64) {
        bub_abi::sync::lock(&self.waiting).remove(&id);
    }

    /// Whether request `id` is still waited for.
    pub fn is_waiting(&self, id: u64) -> bool {
        bub_abi::sync::lock(&self.waiting).contains_key(&id)
    }

    /// Hands the answer of request `id` to its waiter.
    pub fn complete(&self, id: u64, answer: Answer) {
        if let Some(waiter) = bub_abi::sync::lock(&self.waiting).remove(&id) {
            waiter.send(Ok(answer));
        }
    }

    /// Ends the connection: every waiter gets an error saying `why`, and
    /// lent objects and states are dropped.
    pub fn close(&self, why: String) {
        let drained: Vec<Waiter> = {
            let mut waiting = bub_abi::sync::lock(&self.waiting);
            let mut closed = bub_abi::sync::lock(&self.closed);
            if closed.is_none() {
                *closed = Some(why.clone());
            }
            waiting.drain().map(|(_, w)| w).collect()
        };
        for waiter in drained {
            waiter.send(Err(self.closed_error(&why)));
        }
        // Outside the locks: dropping a handle may run the object's code.
        let exports = std::mem::take(&mut *bub_abi::sync::lock(&self.exports));
        let states = std::mem::take(&mut *bub_abi::sync::lock(&self.states));
        drop((exports, states));
    }

    /// Lends `object` to the other side.
    pub fn export(&self, object: ObjectHandle) -> ObjRef {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let r = ObjRef { id, kind: object.kind().into_string(), name: object.name().into_string() };
        bub_abi::sync::lock(&self.exports).insert(id, object);
        r
    }

    /// Lends `state` to the other side.
    pub fn export_state(&self, state: StateHandle) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        bub_abi::sync::lock(&self.states).insert(id, state);
        id
    }

    /// The other side dropped object `id`.
    pub fn release(&self, id: u64) {
        let gone = bub_abi::sync::lock(&self.exports).remove(&id);
        drop(gone);
    }

    /// Runs `method` of lent object `object` for the other side's request `id`.
    pub fn serve_invoke(
        self: &Arc<Self>,
        id: u64,
        object: u64,
        method: String,
        args: Box<serde_json::value::RawValue>,
    ) {
        let handle = bub_abi::sync::lock(&self.exports).get(&object).cloned();
        let peer = self.clone();
        self.runtime.spawn(async move {
            let answer = match handle {
                None => Answer::Error(
                    ErrorKind::CLOSED.0,
                    format!("{method}: that object is gone (it was released, or its plugin restarted)"),
                ),
                Some(handle) => match codec::decode(&args, &peer) {
                    Err(e) => Answer::Error(e.kind.0, e.message.into_string()),
                    Ok(args) => match handle.invoke(RStr::from_str(&method), args).await {
                        RResult::ROk(v) => Answer::Value(codec::encode(v.as_ref(), &peer)),
                        RResult::RErr(e) => Answer::Error(e.kind.0, e.message.into_string()),
                    },
                },
            };
            peer.send(&Message::Reply { id, answer });
        });
    }
}

thread_local! {
    /// Whether this thread is a connection's reader (which must not block
    /// on writing).
    static IS_READER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Reads messages from `stream` until it ends, handing each to `handle`
/// (replies complete their waiters first); returns why it ended. The
/// caller closes the peer, with what it then knows (how the process ended).
pub(crate) fn serve(peer: &Arc<Peer>, stream: UnixStream, mut handle: impl FnMut(Message)) -> wire::FrameError {
    IS_READER.with(|r| r.set(true));
    let mut reader = std::io::BufReader::with_capacity(64 << 10, stream);
    loop {
        match wire::read(&mut reader, peer.cap) {
            Ok(Message::Reply { id, answer }) => peer.complete(id, answer),
            Ok(Message::Invoke { id, object, method, args }) => peer.serve_invoke(id, object, method, args),
            Ok(Message::Release(id)) => peer.release(id),
            Ok(other) => handle(other),
            Err(e) => break e,
        }
    }
}
