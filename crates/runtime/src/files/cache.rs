//! The text of settings files, kept while the file is unchanged.
//!
//! A turn reads `config.json` several times (provider settings, the
//! builtin agent, skills): each read was an open, an fstat, a read and a
//! close. A kept text costs one `stat` of the path. It is served only
//! while the file's identity is the one it was read from — device, inode,
//! size, mode, owner, modification and change times — so a replaced
//! (renamed over), rewritten, chmod-ed or chown-ed file is read again and
//! its trust rules checked again. A file modified within [`RACY`] of its
//! read is not kept (git's "racily clean" rule): a filesystem's timestamps
//! can be coarser than two writes, and a same-size rewrite inside one tick
//! would otherwise look unchanged.

use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

/// How recently modified a file may be and still be kept.
const RACY: Duration = Duration::from_secs(2);

/// How many files are kept (a process reads a handful).
const ENTRIES: usize = 32;

/// What identifies one version of a file.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mode: u32,
    uid: u32,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mode: meta.mode(),
            uid: meta.uid(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

static KEPT: Mutex<Vec<(PathBuf, Stamp, Arc<str>)>> = Mutex::new(Vec::new());

/// The text of `path`: the kept one while the file is unchanged, else
/// `read(path)`'s, kept when the file did not change while it was read.
pub(crate) fn read_kept(path: &Path, read: impl FnOnce(&Path) -> std::io::Result<String>) -> std::io::Result<String> {
    let before = std::fs::metadata(path).ok();
    let stamp = before.as_ref().map(Stamp::of);
    if let Some(stamp) = stamp {
        let kept = bub_abi::sync::lock(&KEPT);
        if let Some((_, _, text)) = kept.iter().find(|(p, s, _)| *s == stamp && p == path) {
            return Ok(text.to_string());
        }
    }
    let text = read(path)?;
    let (Some(before), Some(stamp), Ok(after)) = (before, stamp, std::fs::metadata(path)) else { return Ok(text) };
    let settled =
        before.modified().ok().and_then(|m| SystemTime::now().duration_since(m).ok()).is_some_and(|age| age >= RACY);
    if stamp == Stamp::of(&after) && settled {
        let mut kept = bub_abi::sync::lock(&KEPT);
        kept.retain(|(p, _, _)| p != path);
        if kept.len() >= ENTRIES {
            kept.remove(0);
        }
        kept.push((path.to_owned(), stamp, Arc::from(text.as_str())));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use std::{cell::Cell, os::unix::fs::PermissionsExt, time::Duration};

    use super::read_kept;

    /// Sets the file's modification time `secs` seconds into the past.
    fn age(path: &std::path::Path, secs: u64) {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(std::time::SystemTime::now() - Duration::from_secs(secs)).unwrap();
    }

    #[test]
    fn a_settled_file_is_read_once_until_it_changes_in_any_way() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, "{\"a\": 1}").unwrap();
        age(&path, 60);
        let reads = Cell::new(0);
        let read = |p: &std::path::Path| {
            reads.set(reads.get() + 1);
            std::fs::read_to_string(p)
        };
        assert_eq!(read_kept(&path, read).unwrap(), "{\"a\": 1}");
        assert_eq!(read_kept(&path, read).unwrap(), "{\"a\": 1}");
        assert_eq!(reads.get(), 1, "the second read is served from the kept text");

        // Rewritten in place with the same size: the times change.
        std::fs::write(&path, "{\"a\": 2}").unwrap();
        age(&path, 60);
        assert_eq!(read_kept(&path, read).unwrap(), "{\"a\": 2}");
        assert_eq!(reads.get(), 2);

        // A mode change alone (the trust rules read it) is a change too.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let _ = read_kept(&path, read).unwrap();
        assert_eq!(reads.get(), 3);

        // Replaced by another file (renamed over it).
        let other = dir.path().join("new.json");
        std::fs::write(&other, "{\"a\": 3}").unwrap();
        age(&other, 60);
        std::fs::rename(&other, &path).unwrap();
        assert_eq!(read_kept(&path, read).unwrap(), "{\"a\": 3}");
        assert_eq!(reads.get(), 4);
    }

    #[test]
    fn a_file_modified_just_now_is_read_every_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, "{}").unwrap();
        let reads = Cell::new(0);
        let read = |p: &std::path::Path| {
            reads.set(reads.get() + 1);
            std::fs::read_to_string(p)
        };
        read_kept(&path, read).unwrap();
        read_kept(&path, read).unwrap();
        assert_eq!(reads.get(), 2, "a racily new file is never served from memory");
    }

    #[test]
    fn errors_are_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.json");
        assert!(read_kept(&path, |p| std::fs::read_to_string(p)).is_err());
        std::fs::write(&path, "{}").unwrap();
        assert_eq!(read_kept(&path, |p| std::fs::read_to_string(p)).unwrap(), "{}");
    }
}
