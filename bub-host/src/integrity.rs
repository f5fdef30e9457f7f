//! Trust and integrity checks made before a plugin library is opened.
//!
//! A native plugin runs with the rights of whoever runs `bub`, so the host
//! only loads what is installed safely:
//!
//! - the plugin folder and the library must not be writable by group or
//!   others, and must be owned by the user running `bub` (or by root);
//! - the library's sha256 must match the one its manifest recorded at install.
//!
//! Hashing a library costs ~1 ms per MB, paid on every `bub` start for every
//! plugin. So a successful verification is remembered in the plugin folder
//! (`.verified`), keyed by the library's device, inode, size, mtime and
//! ctime: any change to the file (even a `touch` or `chmod`) changes its
//! ctime, which the owner cannot set back, and the hash is checked again.

use std::{
    fs::Metadata,
    io::Read,
    os::unix::fs::{MetadataExt, PermissionsExt},
    path::Path,
};

use sha2::{Digest, Sha256};

use crate::error::LoadError;

/// File holding the remembered verification, inside the plugin folder.
pub const VERIFIED_FILE: &str = ".verified";

/// Refuses a folder or library writable by group/others or owned by someone else.
pub fn check_trust(dir: &Path, library: &Path) -> Result<(), LoadError> {
    for path in [dir, library] {
        let meta = std::fs::metadata(path).map_err(|e| LoadError::Untrusted {
            path: path.to_owned(),
            detail: format!("cannot be inspected: {e}"),
            fix: "check that it exists and is readable".into(),
        })?;
        let mode = meta.permissions().mode();
        if mode & 0o022 != 0 {
            return Err(LoadError::Untrusted {
                path: path.to_owned(),
                detail: format!("is writable by group or others (mode {:o})", mode & 0o7777),
                fix: format!("run `chmod go-w {}`", path.display()),
            });
        }
        let me = rustix::process::geteuid().as_raw();
        if meta.uid() != me && meta.uid() != 0 {
            return Err(LoadError::Untrusted {
                path: path.to_owned(),
                detail: format!("is owned by uid {}, but bub runs as uid {me}", meta.uid()),
                fix: "reinstall the plugin as this user with `bub plugins install`".into(),
            });
        }
    }
    Ok(())
}

/// The sha256 of a file, in lowercase hex.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
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

/// Checks the library against the manifest's sha256 (`expected`), using and
/// refreshing the remembered verification in `dir`.
pub fn verify_sha256(dir: &Path, library: &Path, expected: Option<&str>) -> Result<(), LoadError> {
    let Some(expected) = expected.map(str::to_ascii_lowercase) else {
        return Err(LoadError::Integrity { path: library.to_owned(), detail: "its manifest records no sha256".into() });
    };
    let meta = std::fs::metadata(library).map_err(|_| LoadError::LibraryMissing { path: library.to_owned() })?;
    let remembered = std::fs::read_to_string(dir.join(VERIFIED_FILE)).unwrap_or_default();
    if remembered == stamp(&meta, &expected) {
        return Ok(());
    }
    let found = sha256_file(library).map_err(|e| LoadError::Integrity {
        path: library.to_owned(),
        detail: format!("cannot be read to check its sha256: {e}"),
    })?;
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

/// Remembers that `library` (with `meta`) has sha256 `sha256`.
pub fn remember(dir: &Path, meta: &Metadata, sha256: &str) {
    // Best effort: without it the next start just hashes again.
    let _ = std::fs::write(dir.join(VERIFIED_FILE), stamp(meta, sha256));
}
