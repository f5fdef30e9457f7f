//! What a crashing plugin leaves behind: a breadcrumb naming the plugin and
//! hook, for the next start to report.
//!
//! An in-process plugin that aborts, segfaults, overflows its stack or
//! calls `exit` takes the process with it; nothing can contain that. What
//! the host can do is say afterwards which plugin it was. Every thread
//! marks the plugin code it runs (a hook, or a plugin's load; see
//! `runtime::watchdog`), and [`install`] arms handlers for the fatal
//! signals and for `exit`: they write the marked plugin and activity to
//! `$BUB_HOME/.last-crash` and let the process die as it would have. The
//! next `bub` command reads it ([`take_report`]) and says "the last run
//! died in plugin X (hook Y); disable it with …".
//!
//! The handlers only read atomics, `open`, `write` and re-raise: all
//! async-signal-safe. Unsafe code lives here because this is the process's
//! boundary with plugin code, like the loader.

use std::{
    ffi::CString,
    path::{Path, PathBuf},
    sync::OnceLock,
};

const FILE: &str = ".last-crash";
const SIGNALS: [libc::c_int; 5] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGABRT];

struct Armed {
    path: CString,
    previous: [std::sync::atomic::AtomicPtr<libc::sigaction>; 5],
}

static ARMED: OnceLock<Armed> = OnceLock::new();
static DISARMED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Before the host itself ends the process on purpose (a second Ctrl-C
/// while a hook blocks): that is no plugin's crash.
pub fn disarm() {
    DISARMED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Arms the handlers, writing to `<home>/.last-crash`. Once per process
/// (the binary calls it; an embedding application decides for itself).
pub fn install(home: &Path) {
    let Ok(path) = CString::new(home.join(FILE).as_os_str().as_encoded_bytes()) else { return };
    let armed = Armed { path, previous: Default::default() };
    if ARMED.set(armed).is_err() {
        return;
    }
    let armed = ARMED.get().expect("set above");
    for (i, signal) in SIGNALS.iter().enumerate() {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask"
        // value; `on_fatal` is an `extern "C" fn(c_int)` as SA_SIGINFO-less
        // handlers must be; `previous` receives the old action, leaked so
        // the handler can restore it without allocating.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fatal as *const () as usize;
            // The alternate stack Rust sets up: a stack overflow still runs us.
            action.sa_flags = libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let previous: &'static mut libc::sigaction = Box::leak(Box::new(std::mem::zeroed()));
            if libc::sigaction(*signal, &action, previous) == 0 {
                armed.previous[i].store(previous, std::sync::atomic::Ordering::Release);
            }
        }
    }
    // SAFETY: `on_exit` is a plain `extern "C" fn()` that only reads atomics
    // and writes a file; registering it has no other precondition.
    unsafe {
        libc::atexit(on_exit);
    }
}

/// Writes the marked plugin code (if any) to the breadcrumb file, with
/// `how` as the first line. Async-signal-safe.
fn write_breadcrumb(how: &[u8]) {
    let Some(armed) = ARMED.get() else { return };
    if DISARMED.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    // Never block: if the slot list is being changed, we know nothing.
    let Ok(slots) = crate::runtime::watchdog::slots().try_lock() else { return };
    let mut fd = -1;
    for slot in slots.iter() {
        let Some(label) = slot.active_label() else { continue };
        if fd < 0 {
            // SAFETY: a NUL-terminated path; flags and mode are constants.
            fd = unsafe {
                libc::open(armed.path.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC, 0o600)
            };
            if fd < 0 {
                return;
            }
            write_all(fd, how);
        }
        write_all(fd, label);
    }
    if fd >= 0 {
        // SAFETY: `fd` was opened above.
        unsafe { libc::close(fd) };
    }
}

fn write_all(fd: libc::c_int, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid slice for its length.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

extern "C" fn on_fatal(signal: libc::c_int) {
    let how: &[u8] = match signal {
        libc::SIGSEGV => b"crashed (segmentation fault or stack overflow)\n",
        libc::SIGBUS => b"crashed (bus error)\n",
        libc::SIGILL => b"crashed (illegal instruction)\n",
        libc::SIGFPE => b"crashed (arithmetic fault)\n",
        _ => b"aborted\n",
    };
    write_breadcrumb(how);
    // Die as we would have: the previous action (Rust's stack-overflow
    // report, or the default) handles the fault when it recurs on return.
    if let (Some(armed), Some(i)) = (ARMED.get(), SIGNALS.iter().position(|s| *s == signal)) {
        let previous = armed.previous[i].load(std::sync::atomic::Ordering::Acquire);
        // SAFETY: `previous` is null or the leaked action saved in `install`.
        unsafe {
            if previous.is_null() {
                libc::signal(signal, libc::SIG_DFL);
            } else {
                libc::sigaction(signal, previous, std::ptr::null_mut());
            }
        }
    }
    if signal == libc::SIGABRT || signal == libc::SIGFPE {
        // A raised signal does not recur on return: raise it again.
        // SAFETY: raising a signal whose action was just restored.
        unsafe { libc::raise(signal) };
    }
}

extern "C" fn on_exit() {
    write_breadcrumb(b"exited the process\n");
}

/// What the last run's breadcrumb says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashReport {
    /// The plugin whose code ran when the process died (the first marked).
    pub plugin: String,
    /// `loading`, or the hook's name.
    pub activity: String,
    /// `aborted`, `crashed (…)`, `exited the process`.
    pub how: String,
    /// Other plugins that were running code then.
    pub others: Vec<String>,
}

impl std::fmt::Display for CrashReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plugin = crate::manifest::printable(&self.plugin, 64);
        let doing = match self.activity.as_str() {
            "loading" => "while loading".to_owned(),
            hook => format!("in hook '{}'", crate::manifest::printable(hook, 64)),
        };
        write!(f, "the last bub run {} in plugin '{plugin}' ({doing})", self.how)?;
        if !self.others.is_empty() {
            let others: Vec<String> = self.others.iter().map(|o| crate::manifest::printable(o, 64)).collect();
            write!(f, " (also running then: {})", others.join(", "))?;
        }
        write!(f, "; if it happens again, disable it with `bub plugins disable {plugin}`")
    }
}

/// The last run's breadcrumb, removing it; None when the last run ended
/// normally (or died outside plugin code).
pub fn take_report(home: &Path) -> Option<CrashReport> {
    let path: PathBuf = home.join(FILE);
    let text = std::fs::read_to_string(&path).ok()?;
    let _ = std::fs::remove_file(&path);
    let mut lines = text.lines();
    let how = lines.next()?.to_owned();
    let mut culprits = lines.filter_map(|l| l.split_once('\t'));
    let (plugin, activity) = culprits.next()?;
    Some(CrashReport {
        plugin: plugin.to_owned(),
        activity: activity.to_owned(),
        how,
        others: culprits.map(|c| c.0.to_owned()).collect(),
    })
}
