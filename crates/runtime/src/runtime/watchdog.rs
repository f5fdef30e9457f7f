//! Deadlines and a watchdog for plugin code: no plugin blocks `bub` silently.
//!
//! - **Async hooks** get a deadline: `BUB_HOOK_TIMEOUT_SECONDS` (300; 0 =
//!   none). A hook still pending then is cancelled (its future dropped) and
//!   fails as that plugin's error, naming the hook. The model stage
//!   (`run_model`, `run_model_stream`) is exempt: an agent run is long by
//!   nature and has its own deadlines (`model_timeout_seconds`, the tool
//!   timeout). Lifespans have theirs (`BUB_LIFESPAN_TIMEOUT_SECONDS`).
//! - **Sync code cannot be cancelled** (it holds the thread), so it is
//!   watched: every thread marks which plugin and hook it is in while it
//!   runs plugin code (a sync hook, or one poll of an async hook's future);
//!   a watchdog thread warns, naming both, once the mark is older than
//!   `BUB_HOOK_WARN_SECONDS` (10) and again every such interval. Marking
//!   costs a clock read and two atomic stores per call.
//! - **Results** are capped: a hook's value answer larger than
//!   `BUB_MAX_RESULT_BYTES` (64 MiB, counted as its JSON text would be,
//!   roughly) fails as that plugin's error instead of flowing on into
//!   tapes and outputs. The count stops at the cap, so it costs a walk of
//!   small answers only, and large lists and maps remember their size
//!   (`ValueRef::approx_json_bytes`): an argument every plugin of a chain
//!   hands back unread is counted once, not once per plugin.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicPtr, AtomicU64, Ordering},
        Arc, Mutex, OnceLock,
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use crate::registry::Impl;

/// One thread's mark: since when (in watchdog ticks, 0 = not in plugin
/// code) and what (a leaked label).
pub(crate) struct Slot {
    since: AtomicU64,
    warned: AtomicU64,
    label: AtomicPtr<LabelData>,
}

impl Slot {
    /// The crash-report line of what this thread runs now, if it runs
    /// plugin code. Lock- and allocation-free (called from a signal handler).
    pub(crate) fn active_label(&self) -> Option<&'static [u8]> {
        if self.since.load(Ordering::Acquire) == 0 {
            return None;
        }
        let ptr = self.label.load(Ordering::Acquire);
        // SAFETY: `ptr` is null or a leaked `LabelData` (see `Label::new`),
        // never freed.
        unsafe { ptr.as_ref() }.map(|l| &*l.line)
    }
}

/// What a mark says: the plugin, the activity (a hook's name, or
/// `loading`), and the crash handler's line for them. Leaked once per
/// implementation or plugin load (a few bytes per host), so marking is a
/// pointer store and the watchdog and crash handler may read it any time.
#[derive(Clone, Copy)]
pub(crate) struct Label(&'static LabelData);

pub(crate) struct LabelData {
    plugin: Arc<str>,
    activity: &'static str,
    line: Box<[u8]>,
}

impl Label {
    pub(crate) fn new(plugin: Arc<str>, activity: &'static str) -> Label {
        // Pushed, not `format!`ed: one label per implementation at load,
        // 1,500 of them with 100 plugins.
        let mut line = Vec::with_capacity(plugin.len() + activity.len() + 2);
        line.extend_from_slice(plugin.as_bytes());
        line.push(b'\t');
        line.extend_from_slice(activity.as_bytes());
        line.push(b'\n');
        let line = line.into_boxed_slice();
        Label(Box::leak(Box::new(LabelData { plugin, activity, line })))
    }
}

/// A coarse clock in milliseconds, advanced by the watchdog thread at each
/// tick: marking reads an atomic instead of the system clock (a hook call
/// costs nanoseconds; warnings are about seconds).
static TICKS: AtomicU64 = AtomicU64::new(1);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    epoch().elapsed().as_millis() as u64 + 1
}

pub(crate) fn slots() -> &'static Mutex<Vec<&'static Slot>> {
    static SLOTS: OnceLock<Mutex<Vec<&'static Slot>>> = OnceLock::new();
    SLOTS.get_or_init(|| {
        start_watchdog();
        Default::default()
    })
}

thread_local! {
    static SLOT: &'static Slot = {
        let slot: &'static Slot = Box::leak(Box::new(Slot {
            since: AtomicU64::new(0),
            warned: AtomicU64::new(0),
            label: AtomicPtr::new(std::ptr::null_mut()),
        }));
        bub_abi::sync::lock(slots()).push(slot);
        slot
    };
}

/// Marks this thread as running `imp`'s `hook` until dropped (nested
/// marks, a hook calling back into the host, keep the outer one).
pub(crate) struct Mark(Option<&'static Slot>);

#[inline]
pub(crate) fn mark(imp: &Impl) -> Mark {
    mark_label(imp.label)
}

/// Marks this thread as running what `label` names (a plugin's load).
#[inline]
pub(crate) fn mark_label(label: Label) -> Mark {
    let slot = SLOT.try_with(|s| *s).ok();
    let Some(slot) = slot.filter(|s| s.since.load(Ordering::Relaxed) == 0) else { return Mark(None) };
    slot.label.store((label.0 as *const LabelData).cast_mut(), Ordering::Release);
    slot.since.store(TICKS.load(Ordering::Relaxed), Ordering::Release);
    Mark(Some(slot))
}

impl Drop for Mark {
    #[inline]
    fn drop(&mut self) {
        if let Some(slot) = self.0 {
            slot.since.store(0, Ordering::Release);
        }
    }
}

/// A pending hook future whose every poll is marked.
pub(crate) struct Watched<'a, F> {
    inner: F,
    imp: &'a Impl,
}

impl<'a, F> Watched<'a, F> {
    pub(crate) fn new(inner: F, imp: &'a Impl) -> Self {
        Watched { inner, imp }
    }
}

impl<F: Future + Unpin> Future for Watched<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _mark = mark(self.imp);
        Pin::new(&mut self.inner).poll(cx)
    }
}

/// Awaits `fut` (a hook exempt from the deadline: the model stage), naming
/// it in a warning each time `every` passes, so that a model hook that
/// never answers is not a silent hang.
pub(crate) async fn warn_while_slow<F: Future + Unpin>(mut fut: F, imp: &Impl, every: Duration) -> F::Output {
    let started = Instant::now();
    loop {
        match tokio::time::timeout(every, &mut fut).await {
            Ok(out) => return out,
            Err(_) => tracing::warn!(
                target: "bub::hooks",
                "plugin '{}' has been running hook '{}' for {}s (the model stage has no deadline of its own; \
                 Ctrl-C cancels the turn; if it never answers, `bub plugins disable {}`)",
                imp.plugin,
                imp.hook.name(),
                started.elapsed().as_secs(),
                imp.plugin
            ),
        }
    }
}

fn start_watchdog() {
    epoch();
    // One watchdog for the process (it watches threads, whatever host
    // they serve): its threshold is the process's.
    let warn_after = crate::settings::env_hook_warn();
    let tick =
        warn_after.map_or(Duration::from_secs(1), |w| (w / 4).clamp(Duration::from_millis(50), Duration::from_secs(1)));
    let _ = std::thread::Builder::new().name("bub-watchdog".into()).spawn(move || loop {
        std::thread::sleep(tick);
        let now = now_ms();
        TICKS.store(now, Ordering::Relaxed);
        let Some(warn_after) = warn_after else { continue };
        let warn_ms = warn_after.as_millis() as u64;
        let all: Vec<&'static Slot> = bub_abi::sync::lock(slots()).clone();
        for slot in all {
            let since = slot.since.load(Ordering::Acquire);
            if since == 0 || now.saturating_sub(since) < warn_ms {
                continue;
            }
            let warned = slot.warned.load(Ordering::Relaxed);
            if warned > since && now.saturating_sub(warned) < warn_ms {
                continue;
            }
            slot.warned.store(now, Ordering::Relaxed);
            // SAFETY: null or a leaked `LabelData`, never freed.
            let Some(label) = (unsafe { slot.label.load(Ordering::Acquire).as_ref() }) else { continue };
            let plugin = &label.plugin;
            let doing =
                if label.activity == "loading" { "loading".to_owned() } else { format!("hook '{}'", label.activity) };
            tracing::warn!(
                target: "bub::hooks",
                "plugin '{plugin}' has been running {doing} for {}s without returning (it holds its \
                 thread; an async hook can be cancelled, a sync one cannot: if it never returns, \
                 `bub plugins disable {plugin}`)",
                now.saturating_sub(since) / 1000
            );
        }
    });
}

/// The error for a value answer over `cap` bytes (`BUB_MAX_RESULT_BYTES`;
/// 0 = no cap), if it is.
pub(crate) fn oversized(value: bub_abi::ValueRef<'_>, cap: usize) -> Option<bub_abi::HookError> {
    if cap == 0 || value.approx_json_bytes(cap) <= cap {
        return None;
    }
    Some(bub_abi::HookError::new(
        bub_abi::ErrorKind::ERROR,
        format!(
            "returned a result of more than {} bytes (BUB_MAX_RESULT_BYTES): return less, or spill it to a file",
            cap
        ),
    ))
}
