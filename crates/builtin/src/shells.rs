//! Background shells owned by a `running()` scope (semantics §H5.3).
//!
//! The builtin `provide_lifespan` opens a [`ShellScope`]; the `bash` tool
//! starts shells in the newest open one. Each shell runs `sh -c` in its own
//! process group (stdin closed, stdout and stderr drained together), id
//! `bash-<8 hex>`. When the scope exits: no new starts (`shell runtime is
//! closed`), then every group gets SIGTERM, is polled every 50 ms for up to
//! 3 s, then gets SIGKILL; output readers get 1 s more to drain.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
    time::{Duration, Instant},
};

use bub_abi::{
    resources::{Fut, Lifespan},
    types::{ErrorInfo, ProcessRequest},
    BoxError,
};
use rustix::process::Signal;
use tokio::io::AsyncReadExt;

use super::environment::{command, signal_group};

/// One background shell.
struct Shell {
    pid: Option<u32>,
    // The session whose turn started it (`,quit` stops that session's).
    session: Option<String>,
    output: Arc<Mutex<Vec<u8>>>,
    status: Arc<Mutex<Option<Option<i32>>>>,
    reader: tokio::task::JoinHandle<()>,
}

/// The shells of one scope.
#[derive(Default)]
pub struct ShellScope {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    closed: bool,
    shells: HashMap<String, Shell>,
}

/// The shell scopes one builtin instance (one host) has open, newest last;
/// its `bash` tool uses the newest. Per instance, so two hosts in one
/// process never run commands in each other's scopes.
#[derive(Default)]
pub struct OpenScopes {
    open: Mutex<Vec<Weak<ShellScope>>>,
}

impl OpenScopes {
    /// The newest open scope.
    pub fn current(&self) -> Option<Arc<ShellScope>> {
        let mut open = lock(&self.open);
        open.retain(|w| w.strong_count() > 0);
        open.iter().rev().filter_map(Weak::upgrade).find(|s| !lock(&s.inner).closed)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    bub_abi::sync::lock(m)
}

impl ShellScope {
    /// Starts `cmd` in `cwd`; with `confine`, confined to that workspace.
    /// Its output is kept up to `max_output` bytes, then a note says it was
    /// cut (the rest is read and dropped, so the command never blocks on a
    /// full pipe); returns its id.
    pub fn start(
        &self,
        cmd: &str,
        cwd: &std::path::Path,
        confine: Option<&std::path::Path>,
        session: Option<&str>,
        max_output: usize,
    ) -> Result<String, BoxError> {
        let mut inner = lock(&self.inner);
        if inner.closed {
            return Err("shell runtime is closed".into());
        }
        // A shell outlives the call that starts it, so its pipes and reader
        // belong to the SDK's long-lived runtime, not to whichever runtime
        // polled the `bash` call (it may be gone by the time output comes).
        let rt = bub_abi::sdk::bridge::runtime()?;
        let _entered = rt.enter();
        let request = ProcessRequest { command: Some(cmd.to_owned()), ..Default::default() };
        let mut command = command(&request, cwd)?;
        let mut child = match confine {
            Some(workspace) => super::confine::spawn(command, workspace)?,
            None => command.spawn().map_err(|e| format!("cannot start shell: {e}"))?,
        };
        let id = loop {
            let id = format!("bash-{:08x}", bub_kit::random::u64() as u32);
            if !inner.shells.contains_key(&id) {
                break id;
            }
        };
        let output = Arc::new(Mutex::new(Vec::new()));
        let status = Arc::new(Mutex::new(None));
        let (mut out, mut err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
        let pid = child.id();
        if let Some(pid) = pid {
            remember_group(pid);
        }
        let (o, s) = (output.clone(), status.clone());
        let reader = rt.spawn(async move {
            let (mut a, mut b) = ([0u8; 4096], [0u8; 4096]);
            let (mut out_open, mut err_open) = (true, true);
            let keep = |bytes: &[u8]| {
                let mut kept = lock(&o);
                let room = max_output.saturating_sub(kept.len());
                if room == 0 {
                    return;
                }
                kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
                if bytes.len() >= room {
                    let note =
                        format!("\n[output cut at {max_output} bytes (BUB_TOOL_MAX_BYTES); the command runs on]\n");
                    kept.extend_from_slice(note.as_bytes());
                }
            };
            while out_open || err_open {
                tokio::select! {
                    n = out.read(&mut a), if out_open => match n {
                        Ok(0) | Err(_) => out_open = false,
                        Ok(n) => keep(&a[..n]),
                    },
                    n = err.read(&mut b), if err_open => match n {
                        Ok(0) | Err(_) => err_open = false,
                        Ok(n) => keep(&b[..n]),
                    },
                }
            }
            // A signal is a negative code, as Python's `returncode` (-15).
            let code = child.wait().await.ok().and_then(|st| {
                use std::os::unix::process::ExitStatusExt;
                st.code().or_else(|| st.signal().map(|s| -s))
            });
            *lock(&s) = Some(code);
        });
        let session = session.map(str::to_owned);
        inner.shells.insert(id.clone(), Shell { pid, session, output, status, reader });
        Ok(id)
    }

    /// A shell's exit code (outer None: still running), without its output.
    pub fn status(&self, id: &str) -> Result<Option<Option<i32>>, BoxError> {
        let inner = lock(&self.inner);
        let shell = inner.shells.get(id).ok_or_else(|| format!("unknown shell id: {id}"))?;
        let status = *lock(&shell.status);
        Ok(status)
    }

    /// A shell's output so far and its exit code (outer None: still running).
    pub fn output(&self, id: &str) -> Result<(String, Option<Option<i32>>), BoxError> {
        let inner = lock(&self.inner);
        let shell = inner.shells.get(id).ok_or_else(|| format!("unknown shell id: {id}"))?;
        let text = String::from_utf8_lossy(&lock(&shell.output)).into_owned();
        let status = *lock(&shell.status);
        Ok((text, status))
    }

    /// Ends what is left of a foreground shell's process group once the
    /// command is done (a redirected `cmd &` would otherwise outlive it):
    /// TERM, then KILL after 3 s, in the background.
    pub fn end_group(&self, id: &str) {
        let pid = lock(&self.inner).shells.get(id).and_then(|s| s.pid);
        let Some(pid) = pid.filter(|p| group_alive(*p)) else { return };
        if let Ok(rt) = bub_abi::sdk::bridge::runtime() {
            rt.spawn(terminate_group(pid));
        }
    }

    /// Stops a shell whose caller went away (a cancelled turn): TERM, then
    /// KILL after 3 s, in the background.
    pub fn kill_detached(self: &Arc<Self>, id: &str) {
        let (scope, id) = (self.clone(), id.to_owned());
        if let Ok(rt) = bub_abi::sdk::bridge::runtime() {
            rt.spawn(async move {
                let _ = scope.kill(&id).await;
            });
        }
    }

    /// Stops every running shell a turn of `session` started (Bub's
    /// `terminate_session`, for `,quit`); how many there were.
    pub async fn kill_session(&self, session: &str) -> usize {
        let ids: Vec<String> = lock(&self.inner)
            .shells
            .iter()
            .filter(|(_, s)| s.session.as_deref() == Some(session) && lock(&s.status).is_none())
            .map(|(id, _)| id.clone())
            .collect();
        for id in &ids {
            let _ = self.kill(id).await;
        }
        ids.len()
    }

    /// Forgets a finished shell (after `bash.kill` reported it, as Bub).
    pub fn forget(&self, id: &str) {
        lock(&self.inner).shells.remove(id);
    }

    /// Terminates a shell's process group (TERM, then KILL after 3 s).
    pub async fn kill(&self, id: &str) -> Result<(), BoxError> {
        let pid = {
            let inner = lock(&self.inner);
            let shell = inner.shells.get(id).ok_or_else(|| format!("unknown shell id: {id}"))?;
            if lock(&shell.status).is_some() {
                return Ok(());
            }
            shell.pid
        };
        let Some(pid) = pid else { return Ok(()) };
        terminate_group(pid).await;
        // Let the reader record the exit.
        for _ in 0..100 {
            if self.output(id)?.1.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// Closes the scope: no new starts, every group terminated.
    pub async fn close(&self) {
        let shells: Vec<Shell> = {
            let mut inner = lock(&self.inner);
            inner.closed = true;
            inner.shells.drain().map(|(_, s)| s).collect()
        };
        for s in &shells {
            if let Some(pid) = s.pid {
                signal_group(pid, Signal::TERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let alive: Vec<&Shell> = shells.iter().filter(|s| s.pid.is_some_and(group_alive)).collect();
            if alive.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                for s in alive {
                    signal_group(s.pid.expect("alive"), Signal::KILL);
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for s in shells {
            let mut reader = s.reader;
            if tokio::time::timeout(Duration::from_secs(1), &mut reader).await.is_err() {
                reader.abort();
            }
        }
    }
}

/// Whether any process of the group led by `pid` is alive (signal 0).
/// TERM to the process group led by `pid`, then KILL if any of it is still
/// there after 3 s.
async fn terminate_group(pid: u32) {
    signal_group(pid, Signal::TERM);
    let deadline = Instant::now() + Duration::from_secs(3);
    while group_alive(pid) {
        if Instant::now() >= deadline {
            signal_group(pid, Signal::KILL);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The process groups `bash` calls of this process started, while any of
/// them may be alive: what [`end_all_groups`] ends.
static GROUPS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn remember_group(pid: u32) {
    let mut groups = lock(&GROUPS);
    groups.retain(|p| group_alive(*p));
    groups.push(pid);
}

/// Ends every process group a `bash` call of this process started that is
/// still there: TERM, then KILL what is left after `grace`; how many were
/// there. Blocking, for a process's last moments (a second Ctrl-C ends
/// `bub` at once, but not before a command that ignores SIGTERM is gone).
pub fn end_all_groups(grace: Duration) -> usize {
    let groups: Vec<u32> = lock(&GROUPS).drain(..).filter(|p| group_alive(*p)).collect();
    for pid in &groups {
        signal_group(*pid, Signal::TERM);
    }
    let deadline = Instant::now() + grace;
    loop {
        let alive: Vec<u32> = groups.iter().copied().filter(|p| group_alive(*p)).collect();
        if alive.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            for pid in alive {
                signal_group(pid, Signal::KILL);
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    groups.len()
}

fn group_alive(pid: u32) -> bool {
    let Some(pid) = rustix::process::Pid::from_raw(pid as i32) else { return false };
    rustix::process::test_kill_process_group(pid).is_ok()
}

/// The builtin lifespan: a shell scope per `running()` scope.
pub struct ShellLifespan {
    scope: Arc<ShellScope>,
    registry: Arc<OpenScopes>,
}

impl ShellLifespan {
    /// A lifespan with a fresh shell scope, listed in `registry` while open.
    pub fn new(registry: Arc<OpenScopes>) -> Self {
        ShellLifespan { scope: Arc::new(ShellScope::default()), registry }
    }
}

impl Lifespan for ShellLifespan {
    fn enter(&self) -> impl Fut<()> {
        lock(&self.registry.open).push(Arc::downgrade(&self.scope));
        async { Ok(()) }
    }

    fn exit(&self, _error: Option<ErrorInfo>) -> impl Fut<()> {
        let scope = self.scope.clone();
        let registry = self.registry.clone();
        async move {
            scope.close().await;
            lock(&registry.open).retain(|w| !std::ptr::eq(w.as_ptr(), Arc::as_ptr(&scope)));
            Ok(())
        }
    }
}
