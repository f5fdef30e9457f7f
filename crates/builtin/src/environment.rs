//! The builtin environment: the local machine, rooted at the workspace.
//!
//! Every process gets its own process group, so a timeout (or the scope's
//! shell cleanup) can stop the whole tree a command started, not just the
//! shell. Paths resolve against the workspace and may not leave it, by `..`
//! or through a symlink: a model-driven `../../etc/passwd` is refused, not read.
//!
//! `spawn` starts a process whose input and output stream (Bub's
//! `Environment.spawn`); it lives in the environment's process table under
//! an id until `wait` reaps it, and `close` (the scope's exit) kills every
//! one still running with its group.

use std::{
    collections::HashMap,
    path::{Component, Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use bub_abi::{
    resources::{Environment, Fut},
    types::{Bytes, ProcessOutput, ProcessRequest},
    BoxError,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `LocalEnvironment(workspace)`.
#[derive(Clone, Debug)]
pub struct LocalEnvironment {
    workspace: PathBuf,
    processes: Arc<Mutex<HashMap<String, Arc<Spawned>>>>,
}

/// One `spawn`ed process: its pipes, each behind its own lock so a reader
/// of stdout never waits for a writer of stdin.
#[derive(Debug)]
struct Spawned {
    pid: Option<u32>,
    child: tokio::sync::Mutex<tokio::process::Child>,
    stdin: tokio::sync::Mutex<Option<tokio::process::ChildStdin>>,
    stdout: tokio::sync::Mutex<Option<tokio::process::ChildStdout>>,
    stderr: tokio::sync::Mutex<Option<tokio::process::ChildStderr>>,
}

impl LocalEnvironment {
    /// An environment rooted at `workspace`.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        LocalEnvironment { workspace: workspace.into(), processes: Default::default() }
    }

    fn process(&self, id: &str) -> Result<Arc<Spawned>, BoxError> {
        bub_abi::sync::lock(&self.processes)
            .get(id)
            .cloned()
            .ok_or_else(|| format!("no process {id:?} (never spawned, or already waited for)").into())
    }

    /// `path` resolved against the workspace; an error if it leaves it.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, BoxError> {
        let outside = || format!("path {path:?} is outside the workspace {}", self.workspace.display());
        let normal = normalize(&self.workspace.join(path));
        if !normal.starts_with(normalize(&self.workspace)) {
            return Err(outside().into());
        }
        // A symlink inside the workspace may point out of it: the deepest
        // part of the path that exists must resolve inside the workspace too.
        let existing = normal.ancestors().find(|a| a.exists()).unwrap_or(&normal);
        // A dangling link would be followed by a write, to wherever it points.
        if std::fs::symlink_metadata(&normal).is_ok_and(|m| m.file_type().is_symlink()) && !normal.exists() {
            return Err(outside().into());
        }
        if let (Ok(real), Ok(root)) = (existing.canonicalize(), self.workspace.canonicalize()) {
            if !real.starts_with(&root) {
                return Err(outside().into());
            }
        }
        Ok(normal)
    }
}

/// `p` with `.` and `..` resolved lexically (symlinks are not followed).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in p.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// A command for `request`, in its own process group, stdin closed.
pub fn command(request: &ProcessRequest, cwd: &Path) -> Result<tokio::process::Command, BoxError> {
    let mut cmd = match (&request.command, request.argv.split_first()) {
        (Some(line), _) => {
            let mut c = tokio::process::Command::new("sh");
            c.arg("-c").arg(line);
            c
        }
        (None, Some((program, rest))) => {
            let mut c = tokio::process::Command::new(program);
            c.args(rest);
            c
        }
        (None, None) => return Err("a process needs `command` or `argv`".into()),
    };
    cmd.current_dir(cwd).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    for (k, v) in &request.env {
        cmd.env(k, v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()));
    }
    Ok(cmd)
}

/// Sends `signal` to the process group led by `pid`; false if it is gone.
pub fn signal_group(pid: u32, signal: rustix::process::Signal) -> bool {
    let Some(pid) = rustix::process::Pid::from_raw(pid as i32) else { return false };
    rustix::process::kill_process_group(pid, signal).is_ok()
}

/// Runs `request` to completion in `cwd`, killing its group on timeout.
pub async fn run(request: &ProcessRequest, cwd: &Path) -> Result<ProcessOutput, BoxError> {
    let mut child = command(request, cwd)?.spawn().map_err(|e| format!("cannot start process: {e}"))?;
    let pid = child.id();
    let (mut out, mut err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let io = async {
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let (a, b) = tokio::join!(out.read_to_end(&mut o), err.read_to_end(&mut e));
        a?;
        b?;
        let status = child.wait().await?;
        Ok::<_, std::io::Error>((status, o, e))
    };
    let timeout = request.timeout_ms.map(Duration::from_millis).unwrap_or(Duration::MAX);
    match tokio::time::timeout(timeout, io).await {
        Ok(result) => {
            let (status, o, e) = result.map_err(|e| format!("process failed: {e}"))?;
            Ok(ProcessOutput {
                returncode: status.code(),
                stdout: String::from_utf8_lossy(&o).into_owned(),
                stderr: String::from_utf8_lossy(&e).into_owned(),
                timed_out: false,
            })
        }
        Err(_) => {
            if let Some(pid) = pid {
                signal_group(pid, rustix::process::Signal::KILL);
            }
            Ok(ProcessOutput { returncode: None, timed_out: true, ..Default::default() })
        }
    }
}

impl Environment for LocalEnvironment {
    fn workspace(&self) -> impl Fut<Option<String>> {
        let w = self.workspace.display().to_string();
        async move { Ok(Some(w)) }
    }

    fn read_text(&self, path: String) -> impl Fut<String> {
        let resolved = self.resolve(&path);
        async move {
            let p = resolved?;
            tokio::fs::read_to_string(&p).await.map_err(|e| format!("cannot read {}: {e}", p.display()).into())
        }
    }

    fn write_text(&self, path: String, content: String) -> impl Fut<()> {
        let resolved = self.resolve(&path);
        async move {
            let p = resolved?;
            if let Some(parent) = p.parent() {
                tokio::fs::create_dir_all(parent).await?;
            }
            tokio::fs::write(&p, content).await.map_err(|e| format!("cannot write {}: {e}", p.display()).into())
        }
    }

    fn resolve_path(&self, path: String) -> impl Fut<String> {
        let resolved = self.resolve(&path);
        async move { Ok(resolved?.display().to_string()) }
    }

    fn run(&self, request: ProcessRequest) -> impl Fut<ProcessOutput> {
        let cwd = match &request.cwd {
            Some(c) => self.resolve(c),
            None => Ok(self.workspace.clone()),
        };
        async move { run(&request, &cwd?).await }
    }

    fn read_bytes(&self, path: String) -> impl Fut<Bytes> {
        let resolved = self.resolve(&path);
        async move {
            let p = resolved?;
            tokio::fs::read(&p).await.map(Bytes).map_err(|e| format!("cannot read {}: {e}", p.display()).into())
        }
    }

    fn spawn(&self, request: ProcessRequest) -> impl Fut<String> {
        let this = self.clone();
        async move {
            let cwd = match &request.cwd {
                Some(c) => this.resolve(c)?,
                None => this.workspace.clone(),
            };
            // The process outlives this call: its pipes belong to the SDK's
            // long-lived runtime (as the builtin's background shells).
            let rt = bub_abi::sdk::bridge::runtime()?;
            let _entered = rt.enter();
            let mut command = command(&request, &cwd)?;
            command.stdin(Stdio::piped()).kill_on_drop(true);
            let mut child = command.spawn().map_err(|e| format!("cannot start process: {e}"))?;
            let spawned = Spawned {
                pid: child.id(),
                stdin: tokio::sync::Mutex::new(child.stdin.take()),
                stdout: tokio::sync::Mutex::new(child.stdout.take()),
                stderr: tokio::sync::Mutex::new(child.stderr.take()),
                child: tokio::sync::Mutex::new(child),
            };
            let mut table = bub_abi::sync::lock(&this.processes);
            let id = loop {
                let id = format!("proc-{:08x}", bub_kit::random::u64() as u32);
                if !table.contains_key(&id) {
                    break id;
                }
            };
            table.insert(id.clone(), Arc::new(spawned));
            Ok(id)
        }
    }

    fn write_stdin(&self, process: String, data: Bytes, close: bool) -> impl Fut<()> {
        let found = self.process(&process);
        async move {
            let p = found?;
            let mut stdin = p.stdin.lock().await;
            let pipe = stdin.as_mut().ok_or("the process's input is closed")?;
            pipe.write_all(&data.0).await.map_err(|e| format!("cannot write to the process: {e}"))?;
            pipe.flush().await?;
            if close {
                *stdin = None;
            }
            Ok(())
        }
    }

    fn read_output(&self, process: String, stream: String, max: usize) -> impl Fut<Option<Bytes>> {
        let found = self.process(&process);
        async move {
            let p = found?;
            let mut buf = vec![0u8; max.clamp(1, 1 << 20)];
            let n = match stream.as_str() {
                "stdout" => match p.stdout.lock().await.as_mut() {
                    Some(pipe) => pipe.read(&mut buf).await?,
                    None => 0,
                },
                "stderr" => match p.stderr.lock().await.as_mut() {
                    Some(pipe) => pipe.read(&mut buf).await?,
                    None => 0,
                },
                other => return Err(format!("no stream {other:?}: use stdout or stderr").into()),
            };
            buf.truncate(n);
            Ok((n > 0).then_some(Bytes(buf)))
        }
    }

    fn signal(&self, process: String, kill: bool) -> impl Fut<bool> {
        let found = self.process(&process);
        async move {
            let p = found?;
            let signal = if kill { rustix::process::Signal::KILL } else { rustix::process::Signal::TERM };
            Ok(p.pid.is_some_and(|pid| signal_group(pid, signal)))
        }
    }

    fn wait(&self, process: String) -> impl Fut<i32> {
        let found = self.process(&process);
        let table = self.processes.clone();
        async move {
            let p = found?;
            let status = p.child.lock().await.wait().await.map_err(|e| format!("cannot wait for the process: {e}"))?;
            bub_abi::sync::lock(&table).remove(&process);
            use std::os::unix::process::ExitStatusExt;
            Ok(status.code().or_else(|| status.signal().map(|s| -s)).unwrap_or(-1))
        }
    }

    fn close(&self) -> impl Fut<()> {
        let running: Vec<Arc<Spawned>> = bub_abi::sync::lock(&self.processes).drain().map(|(_, p)| p).collect();
        async move {
            for p in running {
                if let Some(pid) = p.pid {
                    signal_group(pid, rustix::process::Signal::KILL);
                }
            }
            Ok(())
        }
    }
}
