//! Private files and trusted reads, for the host and for plugins.
//!
//! Everything under `$BUB_HOME` is a secret: manifests hold tokens and
//! database URLs, tapes hold conversations, job and server lists lead to
//! code being run. So the host and every plugin create those files through
//! these helpers:
//!
//! - [`create_private_dir`]: folders `0700`, whatever the umask;
//! - [`write_private`]: a whole file replaced atomically, `0600`;
//! - [`open_private_append`] / [`create_private`]: files opened for writing,
//!   created `0600` (an existing file is narrowed to `0600` too);
//!
//! and read any file that leads to code running (settings, `mcp.json`,
//! `jobs.json`, …) with [`read_trusted`]: a regular file (a FIFO would block
//! the reader, `/dev/zero` never end), owned by the user (or root), not
//! writable by group or others, and under a size cap, checked on the file
//! *opened once* so it cannot be swapped between the check and the read.
//!
//! [`exposed`] tells whether others can read a file, for `bub plugins list`.

use std::{
    fs::File,
    io::{Read, Write},
    os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt},
    path::Path,
};

/// Creates `dir` and its missing parents with mode `0700`. An existing
/// folder is left as it is (see [`exposed`] for reporting it).
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Writes `bytes` to `path` through a `0600` temporary file in the same
/// folder, synced, then renamed over `path`: readers see the old file or the
/// new one, never half, and never a moment where others could read it.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.{}.tmp", std::process::id(), unique()));
    let result = (|| {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        // The mode given to open is narrowed by the umask, never widened; set
        // it exactly so a umask of 0 or 002 changes nothing.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        file.write_all(bytes)?;
        file.sync_data()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Opens `path` for appending (and reading), created `0600` if missing; an
/// existing file that others can read or write is narrowed to `0600` when
/// it is the user's own. A symbolic link at `path` is refused (`ELOOP`),
/// not followed: a link planted there would have bub append to, and narrow
/// the mode of, whatever file it names.
pub fn open_private_append(path: &Path) -> std::io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .mode(0o600)
        .custom_flags(NOFOLLOW)
        .open(path)
        .map_err(|e| refused_link(e, path))?;
    narrow(&file)?;
    Ok(file)
}

/// Opens `path` for writing, truncated, created `0600` if missing; a
/// symbolic link at `path` is refused, as by [`open_private_append`].
pub fn create_private(path: &Path) -> std::io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(NOFOLLOW)
        .open(path)
        .map_err(|e| refused_link(e, path))?;
    narrow(&file)?;
    Ok(file)
}

/// `O_NOFOLLOW`: the last component of a path is never a link followed.
pub const NOFOLLOW: i32 = rustix::fs::OFlags::NOFOLLOW.bits() as i32;

/// Opens `path` for reading without following a link at it: a private
/// file (a tape) that is a link was put there by someone else.
pub fn open_nofollow(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new().read(true).custom_flags(NOFOLLOW).open(path).map_err(|e| refused_link(e, path))
}

/// `ELOOP` from an `O_NOFOLLOW` open, said as what it is.
fn refused_link(e: std::io::Error, path: &Path) -> std::io::Error {
    if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
        return std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} is a symbolic link; bub does not follow links at its private files (someone may have put \
                 it there to make bub write elsewhere): remove it",
                path.display()
            ),
        );
    }
    e
}

/// The process's effective user id, asked once: trust checks compare file
/// owners with it for every settings file, plugin folder and parent, and
/// `bub` never changes its ids.
pub fn euid() -> u32 {
    static EUID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *EUID.get_or_init(|| rustix::process::geteuid().as_raw())
}

/// Sets an owned file's mode to `0600` when group or others have any bit.
pub fn narrow(file: &File) -> std::io::Result<()> {
    let meta = file.metadata()?;
    if meta.mode() & 0o077 != 0 && meta.uid() == euid() {
        file.set_permissions(std::fs::Permissions::from_mode(meta.mode() & 0o700 | 0o600))?;
    }
    Ok(())
}

/// Why [`read_trusted`] refused a file.
#[derive(Debug)]
pub enum TrustError {
    /// The file does not exist.
    Missing,
    /// Opening or reading it failed.
    Io(std::io::Error),
    /// It broke a rule; the text says which and what to do.
    Refused(String),
}

impl std::fmt::Display for TrustError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TrustError::Missing => f.write_str("does not exist"),
            TrustError::Io(e) => write!(f, "cannot be read: {e}"),
            TrustError::Refused(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for TrustError {}

impl From<TrustError> for std::io::Error {
    fn from(e: TrustError) -> Self {
        match e {
            TrustError::Missing => std::io::Error::new(std::io::ErrorKind::NotFound, "does not exist"),
            TrustError::Io(e) => e,
            TrustError::Refused(why) => std::io::Error::new(std::io::ErrorKind::PermissionDenied, why),
        }
    }
}

/// Reads a file that steers what runs: only a regular file of at most `max`
/// bytes, owned by the effective user (or root) and not writable by group
/// or others. Opened without blocking (a FIFO is refused, not waited on)
/// and checked on the opened file.
pub fn read_trusted(path: &Path, max: u64) -> Result<Vec<u8>, TrustError> {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32 | rustix::fs::OFlags::NOCTTY.bits() as i32)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(TrustError::Missing),
        Err(e) => return Err(TrustError::Io(e)),
    };
    let meta = file.metadata().map_err(TrustError::Io)?;
    if !meta.is_file() {
        return Err(TrustError::Refused(format!("{} is not a regular file; replace it with one", path.display())));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(TrustError::Refused(format!(
            "{} is writable by group or others (mode {:o}): anyone who can write it could make bub run their \
             commands; run `chmod go-w {}`",
            path.display(),
            meta.mode() & 0o7777,
            path.display()
        )));
    }
    let me = euid();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(TrustError::Refused(format!(
            "{} is owned by uid {}, but bub runs as uid {me}: remove it or take it over (`chown`)",
            path.display(),
            meta.uid()
        )));
    }
    if meta.len() > max {
        return Err(TrustError::Refused(format!(
            "{} is {} bytes, over the {max}-byte limit for this file",
            path.display(),
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    (&file).take(max + 1).read_to_end(&mut bytes).map_err(TrustError::Io)?;
    if bytes.len() as u64 > max {
        return Err(TrustError::Refused(format!("{} grew over the {max}-byte limit while read", path.display())));
    }
    Ok(bytes)
}

/// Whether group or others may read or write `path` (a file or folder of
/// secrets that should be `0600` / `0700`).
pub fn exposed(path: &Path) -> Option<u32> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let mode = meta.mode() & 0o7777;
    (mode & 0o066 != 0 && !meta.file_type().is_symlink()).then_some(mode)
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_files_are_owner_only_whatever_the_umask() {
        let dir = std::env::temp_dir().join(format!("bub-abi-files-{}", std::process::id()));
        create_private_dir(&dir.join("a/b")).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(&dir.join("a/b")), 0o700);
        write_private(&dir.join("a/f.json"), b"{}").unwrap();
        assert_eq!(mode(&dir.join("a/f.json")), 0o600);
        std::fs::set_permissions(dir.join("a/f.json"), std::fs::Permissions::from_mode(0o644)).unwrap();
        open_private_append(&dir.join("a/f.json")).unwrap();
        assert_eq!(mode(&dir.join("a/f.json")), 0o600);
        assert_eq!(read_trusted(&dir.join("a/f.json"), 10).unwrap(), b"{}");
        assert!(matches!(read_trusted(&dir.join("a/f.json"), 1), Err(TrustError::Refused(_))));
        std::fs::set_permissions(dir.join("a/f.json"), std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = read_trusted(&dir.join("a/f.json"), 10).unwrap_err().to_string();
        assert!(e.contains("writable by group or others"), "{e}");
        assert!(matches!(read_trusted(&dir.join("nope"), 10), Err(TrustError::Missing)));
        assert!(read_trusted(Path::new("/dev/zero"), 10).unwrap_err().to_string().contains("not a regular file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
