//! The thread `async def` hooks run on, so that their deadline holds.
//!
//! Why: the fast path runs a Python call on the host thread that made it
//! (`call::dispatch_with`), which is right for plain functions but not for
//! a coroutine that blocks (`time.sleep` inside an `async def`): the host
//! thread would be stuck inside the hook call itself, where no deadline
//! reaches, and the turn would wait for as long as Python blocks. Handing
//! the call to the loop thread instead keeps the deadline but costs two
//! cross-thread wake-ups (measured 57 µs a call against 1.8 µs).
//!
//! So an `async def` hook is run exactly as the fast path runs it (taking
//! the loop's turn, as one callback of the loop), only on this one runner
//! thread, and the host thread waits for it briefly by spinning: a cheap
//! hook is answered within that spin, with no thread put to sleep and
//! woken on either side (the runner spins for the next job too). A hook
//! that takes longer is awaited as a future, which the host's deadline
//! can drop: the runner stays blocked in Python, the host does not.

use std::{
    collections::VecDeque,
    future::Future as _,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Condvar, Mutex, OnceLock,
    },
    time::{Duration, Instant},
};

use bub_abi::HookError;
use tokio::sync::oneshot;

use crate::call::Pending;

/// How long the host thread spins for a job's answer before it awaits it.
const CALLER_SPIN: Duration = Duration::from_micros(50);
/// How long the runner spins for its next job before it sleeps.
const RUNNER_SPIN: Duration = Duration::from_micros(200);

/// What a job ends with: its answer, or a call left running on the loop.
pub enum Outcome<T> {
    /// Answered.
    Done(Result<T, HookError>),
    /// Still running on the loop (it awaits something): await this.
    Later(Pending<T>),
}

type Job = Box<dyn FnOnce() + Send>;

struct Runner {
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
    queued: AtomicUsize,
    /// What the runner runs now (a label) and since when, to name it when
    /// it holds others up.
    running: Mutex<Option<(String, Instant)>>,
}

static RUNNER: OnceLock<Runner> = OnceLock::new();

fn runner() -> &'static Runner {
    RUNNER.get_or_init(|| {
        let started = std::thread::Builder::new().name("bub-python-runner".into()).spawn(serve);
        if let Err(e) = started {
            tracing::error!("python bridge: cannot start its runner thread: {e}");
        }
        Runner {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            queued: AtomicUsize::new(0),
            running: Mutex::new(None),
        }
    })
}

fn serve() {
    let runner = runner();
    loop {
        let spin_until = Instant::now() + RUNNER_SPIN;
        while runner.queued.load(Ordering::Acquire) == 0 && Instant::now() < spin_until {
            std::hint::spin_loop();
        }
        let job = {
            let mut queue = bub_abi::sync::lock(&runner.queue);
            loop {
                if let Some(job) = queue.pop_front() {
                    runner.queued.fetch_sub(1, Ordering::AcqRel);
                    break job;
                }
                queue = runner.ready.wait(queue).unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        };
        job();
    }
}

/// What the runner runs now, and for how many seconds it has.
pub fn holder() -> Option<(String, f64)> {
    let running = bub_abi::sync::lock(&RUNNER.get()?.running);
    running.as_ref().map(|(what, since)| (what.clone(), since.elapsed().as_secs_f64()))
}

/// Runs `call` (which makes the Python call and says how it ended) on the
/// runner thread, `label` naming it; the answer if it came within the
/// caller's spin, else a future of it.
pub fn run<T: Send + 'static>(
    label: String,
    call: impl FnOnce() -> Outcome<T> + Send + 'static,
) -> Result<Result<T, HookError>, impl std::future::Future<Output = Result<T, HookError>>> {
    let (tx, mut rx) = oneshot::channel::<Outcome<T>>();
    let queued_at = Instant::now();
    let waiting_label = label.clone();
    let job: Job = Box::new(move || {
        // The host gave up before it started (its deadline): skip it.
        if tx.is_closed() {
            return;
        }
        let runner = runner();
        *bub_abi::sync::lock(&runner.running) = Some((label, Instant::now()));
        let outcome = call();
        *bub_abi::sync::lock(&runner.running) = None;
        // A caller gone meanwhile drops the outcome here (a call still
        // running on the loop is cancelled with its `Pending`).
        let _ = tx.send(outcome);
    });
    let runner = runner();
    bub_abi::sync::lock(&runner.queue).push_back(job);
    runner.queued.fetch_add(1, Ordering::AcqRel);
    runner.ready.notify_one();
    let spin_until = Instant::now() + CALLER_SPIN;
    loop {
        match rx.try_recv() {
            Ok(Outcome::Done(result)) => return Ok(result),
            Ok(Outcome::Later(pending)) => return Err(Answer::Later(pending).into_future()),
            Err(oneshot::error::TryRecvError::Closed) => return Ok(Err(gone())),
            Err(oneshot::error::TryRecvError::Empty) if Instant::now() < spin_until => std::hint::spin_loop(),
            Err(oneshot::error::TryRecvError::Empty) => {
                return Err(Answer::Waiting { rx, queued_at, label: waiting_label }.into_future());
            }
        }
    }
}

fn gone() -> HookError {
    HookError::plugin("the python bridge's runner thread ended without an answer (see the log)")
}

enum Answer<T> {
    Later(Pending<T>),
    Waiting { rx: oneshot::Receiver<Outcome<T>>, queued_at: Instant, label: String },
}

impl<T: Send + 'static> Answer<T> {
    async fn into_future(self) -> Result<T, HookError> {
        match self {
            Answer::Later(pending) => pending.await,
            Answer::Waiting { rx, queued_at, label } => {
                let mut waiting = Waiting { rx: Some(rx), queued_at, label };
                let mut alarmed = false;
                let outcome = std::future::poll_fn(|cx| {
                    let rx = waiting.rx.as_mut().expect("polled after its answer");
                    let polled = std::pin::Pin::new(rx).poll(cx);
                    if polled.is_pending() {
                        // Waiting for a runner another call holds: held up,
                        // said before the host's deadline blames this one.
                        if let Some(limit) = crate::held_up::limit() {
                            if waiting.queued_at.elapsed() >= limit {
                                if let Some(e) = crate::held_up::give_up(&waiting.label, waiting.queued_at, holder()) {
                                    return std::task::Poll::Ready(Err(e));
                                }
                            } else if !alarmed {
                                alarmed = true;
                                crate::held_up::wake_at(waiting.queued_at + limit, cx.waker().clone());
                            }
                        }
                    }
                    polled.map(Ok)
                })
                .await;
                match outcome {
                    Ok(outcome) => {
                        waiting.rx = None;
                        match outcome {
                            Ok(Outcome::Done(result)) => result,
                            Ok(Outcome::Later(pending)) => pending.await,
                            Err(_) => Err(gone()),
                        }
                    }
                    // Held up (the error names the holder): the job is
                    // skipped when the runner gets to it, its answer no
                    // longer awaited.
                    Err(e) => {
                        waiting.rx = None;
                        Err(e)
                    }
                }
            }
        }
    }
}

/// A call waiting for the runner: given up while still waiting (its
/// deadline), it names what holds the runner up.
struct Waiting<T> {
    rx: Option<oneshot::Receiver<Outcome<T>>>,
    queued_at: Instant,
    label: String,
}

impl<T> Drop for Waiting<T> {
    fn drop(&mut self) {
        if self.rx.is_none() {
            return;
        }
        if let Some((what, held)) = holder().filter(|(_, held)| *held >= 1.0) {
            tracing::warn!(
                "python bridge: {} was given up after waiting {:.1} s for the Python loop, which {what} has \
                 held for {held:.1} s: a blocking call (time.sleep, a blocking read) inside an `async def` hook \
                 holds up every Python plugin; make it `await` or run it in a thread (asyncio.to_thread)",
                self.label,
                self.queued_at.elapsed().as_secs_f64()
            );
        }
    }
}
