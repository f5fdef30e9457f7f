//! The host's own files under `$BUB_HOME`: settings files read under the
//! rules that keep another user's file from steering the host, locks for
//! read-modify-write changes across processes, atomic writes, and tree
//! copies that follow no symbolic link.
//!
//! One room for them because modules in four crates need them (the
//! installer, manifests, isolated plugins, `config.json` for plugins and
//! the agent, skills, the gateway command, onboarding); private files a
//! plugin keeps are `bub_kit::files`, on which these build.

pub(crate) mod cache;

use std::{os::unix::fs::PermissionsExt, path::Path};

/// The largest settings file the host reads (`config.json`, `plugin.json`,
/// `sessions.json`): 4 MiB.
pub const MAX_SETTINGS_FILE: u64 = 4 << 20;

/// Reads a settings file: only a regular file (a FIFO would block, a device
/// like `/dev/zero` never end) of at most [`MAX_SETTINGS_FILE`] bytes, owned
/// by the user (or root) and not writable by group or others (another
/// user's `config.json` could point a model's `base_url` at her server),
/// with an error that says which rule it broke. A file unchanged since it
/// was last read is not read again ([`cache`]).
pub fn read_settings_file(path: &Path) -> std::io::Result<String> {
    cache::read_kept(path, read_settings_file_now)
}

/// [`read_settings_file`] without the cache: for files read once per
/// process (a plugin's `plugin.json` at load), where the cache's two
/// `stat`s would be pure cost and 100 manifests would evict the files it
/// is for (`config.json`, the sessions).
pub(crate) fn read_settings_file_now(path: &Path) -> std::io::Result<String> {
    let bytes = bub_kit::files::read_trusted(path, MAX_SETTINGS_FILE).map_err(|e| match e {
        // The caller names the file; the rule alone reads better after it.
        bub_kit::files::TrustError::Refused(why) => std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            why.strip_prefix(&format!("{} ", path.display())).unwrap_or(&why).to_owned(),
        ),
        other => other.into(),
    })?;
    String::from_utf8(bytes).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "is not UTF-8 text"))
}

/// An exclusive lock on a file, held until dropped (`flock`): serializes
/// read-modify-write changes across processes (two `bub plugins config` at
/// once keep both changes).
#[derive(Debug)]
pub struct FileLock {
    _fd: rustix::fd::OwnedFd,
}

/// Takes the exclusive lock of `path` (created, mode 0600), waiting for
/// another holder to finish.
pub fn lock_file(path: &Path) -> std::io::Result<FileLock> {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    if let Some(dir) = path.parent() {
        bub_kit::files::create_private_dir(dir)?;
    }
    let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))?;
    rustix::fs::flock(&fd, FlockOperation::LockExclusive)?;
    Ok(FileLock { _fd: fd })
}

/// rename, mode 0600 (settings hold secrets): readers see the old file or
/// the new one, never half.
pub fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    bub_kit::files::write_private(path, text.as_bytes())
}

/// Copies the folder `from` to `to`: folders and regular files only (a
/// symbolic link could point anywhere on the machine), owner-only, at most
/// `max` levels below `from` (`depth`: this call's level, 0 at the top).
pub fn copy_tree(from: &Path, to: &Path, depth: usize, max: usize) -> std::io::Result<()> {
    if depth > max {
        return Ok(());
    }
    let at = |what: &'static str, path: &Path| {
        let path = path.to_owned();
        move |e: std::io::Error| std::io::Error::new(e.kind(), format!("cannot {what} {}: {e}", path.display()))
    };
    bub_kit::files::create_private_dir(to).map_err(at("create", to))?;
    for entry in std::fs::read_dir(from).map_err(at("read", from))? {
        let entry = entry.map_err(at("read", from))?;
        let (path, kind) = (entry.path(), entry.file_type().map_err(at("read", from))?);
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&path, &target, depth + 1, max)?;
        } else if kind.is_file() {
            std::fs::copy(&path, &target).map_err(at("copy", &path))?;
            // Scripts stay runnable, by the owner only.
            let exec = entry.metadata().map(|m| m.permissions().mode() & 0o111 != 0).unwrap_or(false);
            let mode = if exec { 0o700 } else { 0o600 };
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))
                .map_err(at("set permissions of", &target))?;
        } else {
            tracing::warn!(target: "bub::install", "skipped {} (not a regular file or folder)", path.display());
        }
    }
    Ok(())
}
