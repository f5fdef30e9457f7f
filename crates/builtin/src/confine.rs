//! Opt-in workspace confinement (`BUB_CONFINE_WORKSPACE=true`, or
//! `confine_workspace: true` in config.json; off by default, as in Bub).
//!
//! Confined, the builtin's tools stay in the workspace:
//! - `fs.read` / `fs.write` / `fs.edit` and `bash`'s `cwd` take only paths
//!   that resolve inside it: `..`, absolute paths elsewhere and symbolic
//!   links pointing out (dangling ones included) are refused by a path check;
//! - `bash` runs under Landlock where the kernel has it (Linux 5.13+): its
//!   processes may read and execute the system folders (`/usr`, `/bin`,
//!   `/lib*`, `/etc`, `/opt`, `/proc`, `/sys`), read and write the
//!   workspace, `/tmp`, `/var/tmp` and `/dev`, and nothing else — not your
//!   home, `$BUB_HOME`, or other users' files. Where Landlock is missing,
//!   `bash` runs with the `cwd` check only, and a warning says so once.
//! - `subagent` may name only the turn's own session, `inherit` or `temp`.
//!
//! Landlock restricts a thread and what it forks, so the confined shells are
//! spawned from one thread per workspace that restricted itself once and
//! does nothing else; the host's other threads stay free.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{mpsc, Mutex, OnceLock},
};

use bub_abi::BoxError;

type Job = (tokio::process::Command, tokio::runtime::Handle, mpsc::Sender<std::io::Result<tokio::process::Child>>);

/// Spawns `command` confined to `workspace` (see the module docs).
pub fn spawn(command: tokio::process::Command, workspace: &Path) -> Result<tokio::process::Child, BoxError> {
    let handle = tokio::runtime::Handle::try_current().map_err(|_| "a confined shell needs a tokio runtime")?;
    let sender = spawner(workspace)?;
    let (tx, rx) = mpsc::channel();
    sender.send((command, handle, tx)).map_err(|_| "the confined spawner stopped")?;
    let child = rx.recv().map_err(|_| "the confined spawner stopped")??;
    Ok(child)
}

fn spawner(workspace: &Path) -> Result<mpsc::Sender<Job>, BoxError> {
    static SPAWNERS: OnceLock<Mutex<HashMap<PathBuf, mpsc::Sender<Job>>>> = OnceLock::new();
    let root = workspace.canonicalize().map_err(|e| format!("the workspace {}: {e}", workspace.display()))?;
    let mut spawners = bub_abi::sync::lock(SPAWNERS.get_or_init(Default::default));
    if let Some(sender) = spawners.get(&root) {
        return Ok(sender.clone());
    }
    let (tx, rx) = mpsc::channel::<Job>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let dir = root.clone();
    std::thread::Builder::new().name("bub-confined-spawner".into()).spawn(move || {
        let _ = ready_tx.send(restrict(&dir));
        for (mut command, handle, reply) in rx {
            let _entered = handle.enter();
            let _ = reply.send(command.spawn());
        }
    })?;
    ready_rx.recv().map_err(|_| "the confined spawner did not start")??;
    spawners.insert(root, tx.clone());
    Ok(tx)
}

/// Restricts the calling thread (and what it forks) with Landlock.
fn restrict(workspace: &Path) -> Result<(), BoxError> {
    use landlock::{
        path_beneath_rules, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, ABI,
    };
    let abi = ABI::V3;
    let existing = |paths: &[&str]| paths.iter().map(PathBuf::from).filter(|p| p.exists()).collect::<Vec<_>>();
    let read =
        existing(&["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc", "/sys"]);
    let mut write = existing(&["/tmp", "/var/tmp", "/dev"]);
    write.push(workspace.to_path_buf());
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(&read, AccessFs::from_read(abi))))
        .and_then(|r| r.add_rules(path_beneath_rules(&write, AccessFs::from_all(abi))))
        .and_then(|r| r.restrict_self())
        .map_err(|e| format!("cannot confine shells to the workspace with Landlock: {e}"))?;
    if status.ruleset == RulesetStatus::NotEnforced {
        tracing::warn!(
            target: "bub::builtin",
            "confine_workspace: this kernel has no Landlock; bash runs with the cwd check only (fs tools stay confined)"
        );
    }
    Ok(())
}
