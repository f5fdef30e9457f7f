//! Trust and integrity checks made before a plugin library is opened.
//!
//! A native plugin runs with the rights of whoever runs `bub`, so the host
//! only loads what is installed safely:
//!
//! - the plugin folder and the library must not be writable by group or
//!   others, and must be owned by the user running `bub` (or by root);
//! - the library's sha256 must match the one its manifest recorded at install.
//!
//! - every folder from the plugin folder up to `/` must not be writable by
//!   group or others unless it is sticky (like `/tmp`), and must be owned by
//!   the user or root (ssh's `StrictModes`): otherwise another user could
//!   swap what lies below it;
//! - the checks are made on the library *opened once* ([`open_trusted`]),
//!   and the loader loads that open file (`/proc/self/fd/N`), so a path
//!   swapped between check and load changes nothing.
//!
//! Hashing a library costs ~1 ms per MB, paid on every `bub` start for every
//! plugin. So a successful verification is remembered in the plugin folder
//! (`.verified`), keyed by the library's device, inode, size, mtime and
//! ctime: any change to the file (even a `touch` or `chmod`) changes its
//! ctime, which the owner cannot set back, and the hash is checked again.

use std::{
    fs::Metadata,
    io::Read,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use sha2::{Digest, Sha256};

use crate::error::LoadError;

/// File holding the remembered verification, inside the plugin folder.
pub const VERIFIED_FILE: &str = ".verified";

fn refuse(path: &Path, uid: u32, mode: u32, dir: bool) -> Result<(), LoadError> {
    let sticky_dir = dir && mode & 0o1000 != 0;
    if mode & 0o022 != 0 && !sticky_dir {
        return Err(LoadError::Untrusted {
            path: path.to_owned(),
            detail: format!("is writable by group or others (mode {:o})", mode & 0o7777),
            fix: format!("run `chmod go-w {}`", path.display()),
        });
    }
    let me = bub_kit::files::euid();
    if uid != me && uid != 0 {
        return Err(LoadError::Untrusted {
            path: path.to_owned(),
            detail: format!("is owned by uid {uid}, but bub runs as uid {me}"),
            fix: "reinstall the plugin as this user with `bub plugins install` (or move BUB_HOME to a folder you own)"
                .into(),
        });
    }
    Ok(())
}

/// Refuses a home (`$BUB_HOME`) that another user could have written: the
/// home and its `tapes` folder must be the user's own (or root's) and not
/// writable by group or others (no sticky exception: a sticky home still
/// lets others add files), and every folder above them the same unless
/// sticky. Otherwise plugins would be refused but tapes still read: a
/// tape another user planted would be read as history, and a link she
/// put at a tape's path would have bub append to (and narrow the mode of)
/// any file. What does not exist yet is skipped (bub creates it `0700`).
pub fn check_home(home: &Path) -> Result<(), LoadError> {
    let fix = || {
        format!(
            "use a home of your own: unset BUB_HOME (for ~/.bub) or pass --home DIR; or, if {} is yours, \
             `chown -R $(id -u) {0}` and `chmod go-w {0}`",
            home.display()
        )
    };
    let home = crate::places::absolute(home.to_path_buf());
    let existing = home.ancestors().find(|p| p.exists()).unwrap_or(Path::new("/"));
    let real = std::fs::canonicalize(existing).unwrap_or_else(|_| existing.to_owned());
    for dir in [home.clone(), home.join("tapes")] {
        let Ok(meta) = std::fs::metadata(&dir) else { continue };
        let me = bub_kit::files::euid();
        if meta.mode() & 0o022 != 0 {
            return Err(LoadError::Untrusted {
                path: dir.clone(),
                detail: format!(
                    "is writable by group or others (mode {:o}): others could plant tapes read as your history",
                    meta.mode() & 0o7777
                ),
                fix: fix(),
            });
        }
        if meta.uid() != me && meta.uid() != 0 {
            return Err(LoadError::Untrusted {
                path: dir.clone(),
                detail: format!("is owned by uid {}, but bub runs as uid {me}", meta.uid()),
                fix: fix(),
            });
        }
    }
    check_parents(&real.join("home")).map_err(|e| match e {
        LoadError::Untrusted { path, detail, .. } => {
            LoadError::Untrusted { path, detail: detail.replace("the plugin folder", "the home"), fix: fix() }
        }
        other => other,
    })
}

/// Refuses a plugin folder any of whose parents, up to `/`, another user
/// could write (a sticky folder such as `/tmp` is fine: others cannot
/// rename or remove what they do not own in it).
pub fn check_parents(dir: &Path) -> Result<(), LoadError> {
    check_parents_once(dir, &mut Vec::new())
}

/// [`check_parents`], skipping the parents in `checked` and adding the ones
/// it checks: the plugins of one load share their parents, which are then
/// inspected once rather than once per plugin. A folder is added only once
/// every folder above it passed too, so one in `checked` vouches for all
/// its parents.
pub fn check_parents_once(dir: &Path, checked: &mut Vec<PathBuf>) -> Result<(), LoadError> {
    let dir = crate::places::absolute(dir.to_path_buf());
    let mut passed = Vec::new();
    for parent in dir.ancestors().skip(1) {
        if checked.iter().any(|c| c == parent) {
            break;
        }
        let meta = std::fs::metadata(parent).map_err(|e| LoadError::Untrusted {
            path: parent.to_owned(),
            detail: format!("cannot be inspected: {e}"),
            fix: "check that the plugin folder's parents exist and are readable".into(),
        })?;
        refuse(parent, meta.uid(), meta.mode(), true).map_err(|e| match e {
            LoadError::Untrusted { path, detail, fix } => LoadError::Untrusted {
                path,
                detail: format!("{detail}; it holds the plugin folder {}", dir.display()),
                fix,
            },
            other => other,
        })?;
        passed.push(parent.to_owned());
    }
    checked.extend(passed);
    Ok(())
}

/// Opens `library` (a file directly in the plugin folder `dir`) once,
/// without following symbolic links, and checks trust (folder and file:
/// owner, mode, a regular file) and the sha256 `expected` on the open
/// descriptors. Load the returned file with `loader::open_file`.
pub fn open_trusted(dir: &Path, library: &Path, expected: Option<&str>) -> Result<std::fs::File, LoadError> {
    use rustix::fs::{fstat, openat, FileType, Mode, OFlags};
    let untrusted = |path: &Path, detail: String, fix: &str| LoadError::Untrusted {
        path: path.to_owned(),
        detail,
        fix: fix.to_owned(),
    };
    let name = match (library.parent(), library.file_name()) {
        (Some(parent), Some(name)) if parent == dir => name,
        _ => {
            return Err(untrusted(
                library,
                "is not a file directly in its plugin folder".into(),
                "reinstall the plugin with `bub plugins install`",
            ))
        }
    };
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let dir_fd = rustix::fs::open(dir, flags | OFlags::DIRECTORY, Mode::empty()).map_err(|e| {
        untrusted(
            dir,
            format!("cannot be opened as a folder ({e}; a symbolic link?)"),
            "reinstall the plugin with `bub plugins install`",
        )
    })?;
    let st =
        fstat(&dir_fd).map_err(|e| untrusted(dir, format!("cannot be inspected: {e}"), "check that it is readable"))?;
    refuse(dir, st.st_uid, st.st_mode, true)?;
    let fd = openat(&dir_fd, name, flags, Mode::empty()).map_err(|e| match e {
        rustix::io::Errno::LOOP => {
            untrusted(library, "is a symbolic link".into(), "reinstall the plugin with `bub plugins install`")
        }
        rustix::io::Errno::NOENT => LoadError::LibraryMissing { path: library.to_owned() },
        other => untrusted(library, format!("cannot be opened: {other}"), "check that it is readable"),
    })?;
    let st =
        fstat(&fd).map_err(|e| untrusted(library, format!("cannot be inspected: {e}"), "check that it is readable"))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(untrusted(
            library,
            "is not a regular file".into(),
            "reinstall the plugin with `bub plugins install`",
        ));
    }
    refuse(library, st.st_uid, st.st_mode, false)?;
    let mut file = std::fs::File::from(fd);
    verify_open_file(dir, library, &mut file, expected)?;
    Ok(file)
}

/// Checks the open library against the manifest's sha256 (`expected`),
/// using and refreshing the remembered verification in `dir`; metadata and
/// contents come from the descriptor, not the path.
fn verify_open_file(
    dir: &Path,
    library: &Path,
    file: &mut std::fs::File,
    expected: Option<&str>,
) -> Result<(), LoadError> {
    use std::io::Seek;
    let Some(expected) = expected.map(str::to_ascii_lowercase) else {
        return Err(LoadError::Integrity {
            path: library.to_owned(),
            detail: "has no sha256 recorded in its manifest".into(),
        });
    };
    let read_error = |e: std::io::Error| LoadError::Integrity {
        path: library.to_owned(),
        detail: format!("cannot be read to check its sha256: {e}"),
    };
    let meta = file.metadata().map_err(read_error)?;
    let remembered = std::fs::read_to_string(dir.join(VERIFIED_FILE)).unwrap_or_default();
    if remembered == stamp(&meta, &expected) {
        return Ok(());
    }
    let found = sha256_reader(&mut *file).map_err(read_error)?;
    file.rewind().map_err(read_error)?;
    if found != expected {
        return Err(LoadError::Integrity {
            path: library.to_owned(),
            detail: format!(
                "has sha256 {found}, but its manifest records {expected}: the library changed after it was installed"
            ),
        });
    }
    remember(dir, &meta, &found);
    Ok(())
}

fn sha256_reader(mut file: impl Read) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// The sha256 of a file, in lowercase hex.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    sha256_reader(std::fs::File::open(path)?)
}

fn stamp(meta: &Metadata, sha256: &str) -> String {
    format!(
        "{sha256} {} {} {} {}.{} {}.{}\n",
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec()
    )
}

/// Remembers that `library` (with `meta`) has sha256 `sha256`.
pub fn remember(dir: &Path, meta: &Metadata, sha256: &str) {
    // Best effort: without it the next start just hashes again.
    let _ = bub_kit::files::write_private(&dir.join(VERIFIED_FILE), stamp(meta, sha256).as_bytes());
}
