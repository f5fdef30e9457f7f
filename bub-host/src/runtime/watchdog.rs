//! Deadlines and a watchdog for plugin code (reliability issue, item 11).
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

use std::{
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex, OnceLock,
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use bub_abi::HookId;

use crate::registry::Impl;

fn seconds(name: &str, default: f64) -> Option<Duration> {
    let value = std::env::var(name).ok().and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(default);
    (value > 0.0 && value.is_finite()).then(|| Duration::from_secs_f64(value))
}

/// The deadline of an async `hook`, if it has one.
pub(crate) fn hook_deadline(hook: HookId) -> Option<Duration> {
    static DEADLINE: OnceLock<Option<Duration>> = OnceLock::new();
    if matches!(hook, HookId::RunModel | HookId::RunModelStream) {
        return None;
    }
    *DEADLINE.get_or_init(|| seconds("BUB_HOOK_TIMEOUT_SECONDS", 300.0))
}

/// One thread's mark: since when (ms after `EPOCH`, 0 = not in plugin
/// code) and in what.
pub(crate) struct Slot {
    since: AtomicU64,
    warned: AtomicU64,
    what: Mutex<Option<(Arc<str>, &'static str)>>,
    // `plugin\tactivity\n`, for the crash handler (which may not lock or
    // allocate): a leaked label's address and length.
    label: AtomicPtr<u8>,
    label_len: AtomicUsize,
}

impl Slot {
    /// The label of what this thread runs now, if it runs plugin code.
    /// Lock- and allocation-free (called from a signal handler).
    pub(crate) fn active_label(&self) -> Option<&'static [u8]> {
        if self.since.load(Ordering::Acquire) == 0 {
            return None;
        }
        let ptr = self.label.load(Ordering::Acquire);
        let len = self.label_len.load(Ordering::Acquire);
        if ptr.is_null() {
            return None;
        }
        // SAFETY: `ptr`/`len` always come from one leaked `&'static [u8]`
        // (see `Label`), stored before `since` was set; never freed.
        Some(unsafe { std::slice::from_raw_parts(ptr, len) })
    }
}

/// What a mark says: the plugin, the activity (a hook's name, or
/// `loading`), and the crash handler's line for them (leaked once per
/// implementation or plugin load: a few bytes per host).
#[derive(Clone)]
pub(crate) struct Label {
    plugin: Arc<str>,
    activity: &'static str,
    line: &'static [u8],
}

impl Label {
    pub(crate) fn new(plugin: Arc<str>, activity: &'static str) -> Label {
        let line: &'static [u8] = Box::leak(format!("{plugin}\t{activity}\n").into_bytes().into_boxed_slice());
        Label { plugin, activity, line }
    }
}

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
            what: Mutex::new(None),
            label: AtomicPtr::new(std::ptr::null_mut()),
            label_len: AtomicUsize::new(0),
        }));
        slots().lock().unwrap_or_else(|p| p.into_inner()).push(slot);
        slot
    };
}

/// Marks this thread as running `imp`'s `hook` until dropped (nested
/// marks, a hook calling back into the host, keep the outer one).
pub(crate) struct Mark(Option<&'static Slot>);

pub(crate) fn mark(imp: &Impl) -> Mark {
    mark_label(&imp.label)
}

/// Marks this thread as running what `label` names (a plugin's load).
pub(crate) fn mark_label(label: &Label) -> Mark {
    let slot = SLOT.try_with(|s| *s).ok();
    let Some(slot) = slot.filter(|s| s.since.load(Ordering::Relaxed) == 0) else { return Mark(None) };
    *slot.what.lock().unwrap_or_else(|p| p.into_inner()) = Some((label.plugin.clone(), label.activity));
    slot.label_len.store(label.line.len(), Ordering::Release);
    slot.label.store(label.line.as_ptr().cast_mut(), Ordering::Release);
    slot.warned.store(0, Ordering::Relaxed);
    slot.since.store(now_ms(), Ordering::Release);
    Mark(Some(slot))
}

impl Drop for Mark {
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

fn start_watchdog() {
    let Some(warn_after) = seconds("BUB_HOOK_WARN_SECONDS", 10.0) else { return };
    let tick = (warn_after / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let _ = std::thread::Builder::new().name("bub-watchdog".into()).spawn(move || loop {
        std::thread::sleep(tick);
        let now = now_ms();
        let warn_ms = warn_after.as_millis() as u64;
        let all: Vec<&'static Slot> = slots().lock().unwrap_or_else(|p| p.into_inner()).clone();
        for slot in all {
            let since = slot.since.load(Ordering::Acquire);
            if since == 0 || now.saturating_sub(since) < warn_ms {
                continue;
            }
            let warned = slot.warned.load(Ordering::Relaxed);
            if warned != 0 && now.saturating_sub(warned) < warn_ms {
                continue;
            }
            slot.warned.store(now, Ordering::Relaxed);
            let what = slot.what.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some((plugin, activity)) = what {
                let doing = if activity == "loading" { "loading".to_owned() } else { format!("hook '{activity}'") };
                tracing::warn!(
                    target: "bub::hooks",
                    "plugin '{plugin}' has been running {doing} for {}s without returning (it holds its \
                     thread; an async hook can be cancelled, a sync one cannot: if it never returns, \
                     `bub plugins disable {plugin}`)",
                    (now - since) / 1000
                );
            }
        }
    });
}
