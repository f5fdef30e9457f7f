//! The builtin environment: the local machine, rooted at the workspace.
//!
//! Every process gets its own process group, so a timeout (or the scope's
//! shell cleanup) can stop the whole tree a command started, not just the
//! shell. Paths resolve against the workspace and may not leave it, by `..`
//! or through a symlink: a model-driven `../../etc/passwd` is refused, not read.

use std::{
    path::{Component, Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use bub_abi::{
    resources::{Environment, Fut},
    types::{ProcessOutput, ProcessRequest},
    BoxError,
};
use tokio::io::AsyncReadExt;

/// `LocalEnvironment(workspace)`.
#[derive(Clone, Debug)]
pub struct LocalEnvironment {
    workspace: PathBuf,
}

impl LocalEnvironment {
    /// An environment rooted at `workspace`.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        LocalEnvironment { workspace: workspace.into() }
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
}
