//! A call that only waited for a held loop says so, and names the holder.
//!
//! Every Python plugin shares one loop, so a blocking call inside one
//! `async def` hook (`time.sleep`) holds every other Python plugin's
//! calls. The host cancels those at their deadline and, knowing nothing
//! of the loop, reported each as its own plugin's failure ("plugin
//! 'probe-module' failed in hook 'dispatch_outbound': did not finish
//! within 3s"), blaming the innocent. So a call still waiting for a loop
//! that another call holds answers just before its deadline with an error
//! of kind `CLOSED` ("held up") that names the holder; the host's
//! admission reads that kind as held up, not failed, and puts the message
//! off, as it does a deadline.
//!
//! The wait needs a wake-up at the right moment without the host's
//! timers (the plugin's tokio is another copy than the host's): one
//! alarm thread wakes the waiting futures at their times.

use std::{
    collections::BinaryHeap,
    sync::{Condvar, Mutex, OnceLock},
    task::Waker,
    time::{Duration, Instant},
};

use bub_abi::{ErrorKind, HookError};

/// How long before the host's deadline a held-up call answers.
const EARLY: Duration = Duration::from_millis(250);

/// How long a holder must have held the loop to be named.
const HELD_AT_LEAST: Duration = Duration::from_secs(1);

/// When a call waiting for the loop gives up (None: never; the host has
/// no deadline): `BUB_HOOK_TIMEOUT_SECONDS` less [`EARLY`], read once.
pub fn limit() -> Option<Duration> {
    static LIMIT: OnceLock<Option<Duration>> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let seconds = match std::env::var("BUB_HOOK_TIMEOUT_SECONDS") {
            Ok(text) => text.trim().parse::<f64>().ok().filter(|s| s.is_finite())?,
            Err(_) => 300.0,
        };
        (seconds > 0.0).then(|| Duration::from_secs_f64(seconds).saturating_sub(EARLY)).filter(|d| !d.is_zero())
    })
}

/// The error for call `label`, waiting since `since`, if it should give up
/// now: it waited [`limit`] for a loop that another call (`holder`, held
/// for that many seconds) holds.
pub fn give_up(label: &str, since: Instant, holder: Option<(String, f64)>) -> Option<HookError> {
    let limit = limit()?;
    let waited = since.elapsed();
    let (what, held) = holder?;
    if waited < limit || what == label || held < HELD_AT_LEAST.as_secs_f64() {
        return None;
    }
    Some(HookError::new(
        ErrorKind::CLOSED,
        format!(
            "held up: it waited {:.1} s for the Python loop, which {what} has held for {held:.1} s (a blocking \
             call, such as time.sleep, inside an `async def` hook holds up every Python plugin), and did not run",
            waited.as_secs_f64()
        ),
    ))
}

/// Wakes `waker` at `at` (from the alarm thread).
pub fn wake_at(at: Instant, waker: Waker) {
    let alarm = alarm();
    bub_abi::sync::lock(&alarm.due).push(Due { at, waker });
    alarm.changed.notify_one();
}

struct Due {
    at: Instant,
    waker: Waker,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    // The earliest first (a max-heap reversed).
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.at.cmp(&self.at)
    }
}

struct Alarm {
    due: Mutex<BinaryHeap<Due>>,
    changed: Condvar,
}

fn alarm() -> &'static Alarm {
    static ALARM: OnceLock<Alarm> = OnceLock::new();
    ALARM.get_or_init(|| {
        let started = std::thread::Builder::new().name("bub-python-alarm".into()).spawn(ring);
        if let Err(e) = started {
            tracing::error!("python bridge: cannot start its alarm thread: {e}");
        }
        Alarm { due: Mutex::new(BinaryHeap::new()), changed: Condvar::new() }
    })
}

fn ring() {
    let alarm = alarm();
    let mut due = bub_abi::sync::lock(&alarm.due);
    loop {
        let now = Instant::now();
        while due.peek().is_some_and(|d| d.at <= now) {
            if let Some(d) = due.pop() {
                d.waker.wake();
            }
        }
        due = match due.peek().map(|d| d.at - now) {
            Some(wait) => match alarm.changed.wait_timeout(due, wait) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            },
            None => alarm.changed.wait(due).unwrap_or_else(std::sync::PoisonError::into_inner),
        };
    }
}
