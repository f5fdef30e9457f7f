//! Where an installed plugin came from, and fetching it again.
//!
//! `bub plugins install` takes a built library, a crate folder, a git URL
//! (`https://…`, `ssh://…`, `git@host:path`, `file://…`, with `@<ref>`: a
//! branch, tag or commit) or a crates.io crate (`name` or
//! `name@version`). Git sources are cloned with `git`, crates fetched with
//! `cargo` (the dependency of a throw-away package, resolved by
//! `cargo metadata`, which downloads it into cargo's cache); both are then
//! built in release and installed exactly like a crate folder. The source
//! is recorded in the manifest, so `bub plugins update` fetches and builds
//! from the same place (a branch or an unpinned crate moves forward; a tag,
//! a commit or an exact version stays).
//!
//! Fetched crates build into one cache shared by every fetched plugin
//! (`$BUB_HOME/cache/build`, or `CARGO_TARGET_DIR`), so an update rebuilds
//! only what changed. Building runs the crate's build scripts and macros
//! as you, as any `cargo build` does: install only what you would build.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::install::error::InstallError;

/// A plugin's source, as recorded in its manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// A library file or a crate folder on this machine.
    Path {
        /// Its absolute path.
        path: PathBuf,
    },
    /// A git repository whose root is the plugin crate.
    Git {
        /// The URL as given.
        url: String,
        /// The branch, tag or commit asked for (none: the default branch).
        #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
        reference: Option<String>,
        /// The commit installed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        commit: Option<String>,
    },
    /// A crate of crates.io (or of the registry cargo is configured to use).
    Crate {
        /// The crate's name.
        name: String,
        /// The version requirement asked for (none: the newest).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<String>,
        /// The version installed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resolved: Option<String>,
    },
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Path { path } => write!(f, "{}", path.display()),
            Source::Git { url, reference, commit } => {
                write!(f, "{url}")?;
                if let Some(r) = reference {
                    write!(f, "@{r}")?;
                }
                if let Some(c) = commit {
                    write!(f, " (commit {})", &c[..c.len().min(12)])?;
                }
                Ok(())
            }
            Source::Crate { name, version, resolved } => {
                write!(f, "crate {name}")?;
                if let Some(v) = version {
                    write!(f, "@{v}")?;
                }
                if let Some(r) = resolved.as_ref().filter(|r| Some(*r) != version.as_ref()) {
                    write!(f, " ({r})")?;
                }
                Ok(())
            }
        }
    }
}

fn is_crate_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Splits `url@ref`: the `@` must come after the host part (`git@host:`
/// and `user@host` of `ssh://` are not refs).
fn split_ref(spec: &str) -> (String, Option<String>) {
    let path_start = match spec.find("://") {
        Some(i) => spec[i + 3..].find('/').map_or(spec.len(), |j| i + 3 + j),
        None => spec.find(':').unwrap_or(0),
    };
    match spec[path_start..].rfind('@') {
        Some(at) if !spec[path_start + at + 1..].is_empty() => {
            (spec[..path_start + at].to_owned(), Some(spec[path_start + at + 1..].to_owned()))
        }
        _ => (spec.to_owned(), None),
    }
}

impl Source {
    /// Reads what the user typed: an existing path, a git URL, or a crate.
    pub fn parse(spec: &str) -> Result<Source, InstallError> {
        let spec = spec.trim();
        // `git+https://…` as pip and cargo write it; only these transports
        // (never git's `ext::`, which runs a command).
        let url = spec.strip_prefix("git+").unwrap_or(spec);
        let url_like = ["https://", "http://", "ssh://", "git://", "file://"].iter().any(|p| url.starts_with(p))
            || (url.starts_with("git@") && url.contains(':'));
        if url_like {
            let (url, reference) = split_ref(url);
            return Ok(Source::Git { url, reference, commit: None });
        }
        if spec.starts_with("git+") || spec.contains("::") {
            return Err(InstallError::Fetch {
                spec: spec.to_owned(),
                why: "a git source is an https://, http://, ssh://, git://, file:// or git@host:path URL".into(),
            });
        }
        let path = Path::new(spec);
        if path.exists() {
            return Ok(Source::Path { path: crate::places::absolute(path.to_path_buf()) });
        }
        let (name, version) = match spec.split_once('@') {
            Some((n, v)) => (n, Some(v.to_owned())),
            None => (spec, None),
        };
        if is_crate_name(name) && !spec.contains('/') {
            if let Some(v) = &version {
                semver::VersionReq::parse(v).map_err(|e| InstallError::Fetch {
                    spec: spec.to_owned(),
                    why: format!("{v:?} is not a version or requirement like 1.2.3 or ^1.2 ({e})"),
                })?;
            }
            return Ok(Source::Crate { name: name.to_owned(), version, resolved: None });
        }
        Err(InstallError::NotFound { path: path.to_path_buf() })
    }

    /// The same source, to fetch again for an update: what was asked for,
    /// not what it resolved to then.
    pub fn unresolved(&self) -> Source {
        match self {
            Source::Git { url, reference, .. } => {
                Source::Git { url: url.clone(), reference: reference.clone(), commit: None }
            }
            Source::Crate { name, version, .. } => {
                Source::Crate { name: name.clone(), version: version.clone(), resolved: None }
            }
            path => path.clone(),
        }
    }
}

/// A fetched source: the crate folder (or library) to install from, the
/// source with what it resolved to, and the temporary folder holding it.
pub(crate) struct Fetched {
    pub path: PathBuf,
    pub source: Source,
    /// Where to build (fetched crates share one cache).
    pub target_dir: Option<PathBuf>,
    pub _temp: Option<FetchDir>,
}

fn fetch_error(source: &Source, why: impl Into<String>) -> InstallError {
    InstallError::Fetch { spec: source.to_string(), why: why.into() }
}

/// Runs a command, its output captured, in a process group of its own
/// that is ended when it outlives `BUB_INSTALL_TIMEOUT_SECONDS` (git runs its
/// transport as a child); the error quotes its stderr.
fn run(source: &Source, cmd: &mut Command, what: &str) -> Result<String, InstallError> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| {
            let program = cmd.get_program().to_string_lossy().into_owned();
            let hint =
                if e.kind() == std::io::ErrorKind::NotFound { format!(" (install {program})") } else { String::new() };
            fetch_error(source, format!("cannot run {program}{hint}: {e}"))
        })?;
    fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let limit = crate::settings::env_install_timeout();
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) | Err(_) => {
                let group = rustix::process::Pid::from_child(&child);
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
                let _ = child.kill();
                let _ = child.wait();
                return Err(fetch_error(
                    source,
                    format!(
                        "{what} did not finish within {} s and was stopped; is the server reachable? \
                         (BUB_INSTALL_TIMEOUT_SECONDS sets the limit)",
                        limit.as_secs_f64()
                    ),
                ));
            }
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    if !status.success() {
        let stderr = String::from_utf8_lossy(&stderr);
        let detail: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).take(12).collect();
        return Err(fetch_error(source, format!("{what} failed: {}", detail.join(" | "))));
    }
    Ok(String::from_utf8_lossy(&stdout).into_owned())
}

/// A fetch folder: a fresh owner-only folder under the scratch folder,
/// removed when dropped, and locked while in use, so that the next fetch
/// can tell a folder an install still uses from one a killed install left.
pub(crate) struct FetchDir {
    temp: tempfile::TempDir,
    _lock: crate::files::FileLock,
}

impl FetchDir {
    fn path(&self) -> &Path {
        self.temp.path()
    }
}

/// The lock file inside a fetch folder.
const FETCH_LOCK: &str = ".lock";

/// Removes the fetch folders of installs that were killed: their lock is
/// free (a folder without a lock file is removed once a day old).
fn remove_abandoned(scratch: &Path) {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let Ok(entries) = std::fs::read_dir(scratch) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let fetch_folder =
            entry.file_name().to_string_lossy().starts_with(".fetch-") && entry.file_type().is_ok_and(|t| t.is_dir());
        if !fetch_folder {
            continue;
        }
        // A folder made this minute may not hold its lock yet.
        let age = entry.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
        if age.is_none_or(|age| age < Duration::from_secs(60)) {
            continue;
        }
        let flags = OFlags::RDWR | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let Ok(fd) = rustix::fs::open(path.join(FETCH_LOCK), flags, Mode::empty()) else {
            if age.is_some_and(|age| age > Duration::from_secs(24 * 3600)) {
                let _ = std::fs::remove_dir_all(&path);
            }
            continue;
        };
        if rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).is_ok() {
            tracing::info!(target: "bub::install", "removing {}, left by an install that was stopped", path.display());
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// A fresh fetch folder under `scratch`, after removing abandoned ones.
fn fetch_dir(source: &Source, scratch: &Path) -> Result<FetchDir, InstallError> {
    bub_kit::files::create_private_dir(scratch).map_err(|e| fetch_error(source, e.to_string()))?;
    remove_abandoned(scratch);
    let temp = tempfile::Builder::new()
        .prefix(".fetch-")
        .tempdir_in(scratch)
        .map_err(|e| fetch_error(source, format!("cannot make a folder in {}: {e}", scratch.display())))?;
    let lock =
        crate::files::lock_file(&temp.path().join(FETCH_LOCK)).map_err(|e| fetch_error(source, e.to_string()))?;
    Ok(FetchDir { temp, _lock: lock })
}

/// Fetches `source` into a temporary folder under `scratch`.
pub(crate) fn fetch(source: &Source, scratch: &Path, cache: &Path) -> Result<Fetched, InstallError> {
    let target_dir = Some(crate::settings::cargo_target_dir().unwrap_or_else(|| cache.to_owned()));
    match source {
        Source::Path { path } => {
            Ok(Fetched { path: path.clone(), source: source.clone(), target_dir: None, _temp: None })
        }
        Source::Git { url, reference, .. } => {
            let temp = fetch_dir(source, scratch)?;
            let dir = temp.path().join("repo");
            // `--` ends the options: a URL starting with `-` is no flag.
            run(source, Command::new("git").args(["clone", "--quiet", "--", url]).arg(&dir), "git clone")?;
            if let Some(r) = reference {
                if r.starts_with('-') {
                    return Err(fetch_error(source, format!("{r:?} is not a branch, tag or commit")));
                }
                run(
                    source,
                    Command::new("git").arg("-C").arg(&dir).args(["checkout", "--quiet", "--detach", r]),
                    &format!("git checkout {r} (is it a branch, tag or commit of {url}?)"),
                )?;
            }
            let commit =
                run(source, Command::new("git").arg("-C").arg(&dir).args(["rev-parse", "HEAD"]), "git rev-parse")?;
            let resolved =
                Source::Git { url: url.clone(), reference: reference.clone(), commit: Some(commit.trim().to_owned()) };
            Ok(Fetched { path: dir, source: resolved, target_dir, _temp: Some(temp) })
        }
        Source::Crate { name, version, .. } => {
            let temp = fetch_dir(source, scratch)?;
            // A throw-away package depending on the crate: cargo resolves
            // and downloads it, and says where its source is.
            let stub = temp.path().join("fetch");
            std::fs::create_dir_all(stub.join("src")).map_err(|e| fetch_error(source, e.to_string()))?;
            let requirement = match version.as_deref() {
                // A bare version is that version (as `cargo install x@1.2.3`).
                Some(v) if semver::Version::parse(v).is_ok() => format!("={v}"),
                Some(v) => v.to_owned(),
                None => "*".to_owned(),
            };
            let manifest = format!(
                "[package]\nname = \"bub-plugin-fetch\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
                 [dependencies]\n{name} = {}\n\n[workspace]\n",
                Value::String(requirement)
            );
            std::fs::write(stub.join("Cargo.toml"), manifest).map_err(|e| fetch_error(source, e.to_string()))?;
            std::fs::write(stub.join("src/lib.rs"), "").map_err(|e| fetch_error(source, e.to_string()))?;
            let metadata = run(
                source,
                Command::new(crate::settings::cargo())
                    .args(["metadata", "--format-version", "1", "--manifest-path"])
                    .arg(stub.join("Cargo.toml"))
                    .current_dir(&stub),
                &format!(
                    "cargo metadata (is {name} a crate of the registry{}?)",
                    version.as_deref().map(|v| format!(", with a version {v}")).unwrap_or_default()
                ),
            )?;
            let metadata: Value = serde_json::from_str(&metadata).map_err(|e| fetch_error(source, e.to_string()))?;
            let package = metadata["packages"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| {
                    p["name"] == name.as_str()
                        && p["source"].as_str().is_some_and(|s| s.starts_with("registry+") || s.starts_with("sparse+"))
                })
                .ok_or_else(|| fetch_error(source, "cargo resolved no such crate"))?;
            let manifest_path = PathBuf::from(package["manifest_path"].as_str().unwrap_or_default());
            let resolved_version = package["version"].as_str().unwrap_or_default().to_owned();
            // Built from a copy: cargo's cache of sources stays untouched.
            let dir = temp.path().join(format!("{name}-{resolved_version}"));
            // Deep enough for any crate's sources (skills stop at 8 levels).
            crate::files::copy_tree(manifest_path.parent().unwrap_or(Path::new(".")), &dir, 0, 64)
                .map_err(|e| fetch_error(source, e.to_string()))?;
            // Its own workspace, wherever the home is (a published crate's
            // manifest has none, and a Cargo.toml above would claim it).
            let copied = dir.join("Cargo.toml");
            let mut text = std::fs::read_to_string(&copied).map_err(|e| fetch_error(source, e.to_string()))?;
            if !text.lines().any(|l| l.trim() == "[workspace]") {
                text.push_str("\n[workspace]\n");
                std::fs::write(&copied, text).map_err(|e| fetch_error(source, e.to_string()))?;
            }
            let resolved =
                Source::Crate { name: name.clone(), version: version.clone(), resolved: Some(resolved_version) };
            Ok(Fetched { path: dir, source: resolved, target_dir, _temp: Some(temp) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_are_paths_git_urls_or_crates() {
        let git =
            |url: &str, r: Option<&str>| Source::Git { url: url.into(), reference: r.map(Into::into), commit: None };
        assert_eq!(
            Source::parse("https://github.com/a/b.git@v1.2").unwrap(),
            git("https://github.com/a/b.git", Some("v1.2"))
        );
        assert_eq!(Source::parse("https://github.com/a/b").unwrap(), git("https://github.com/a/b", None));
        assert_eq!(Source::parse("ssh://git@host/a/b.git").unwrap(), git("ssh://git@host/a/b.git", None));
        assert_eq!(Source::parse("git@github.com:a/b.git@main").unwrap(), git("git@github.com:a/b.git", Some("main")));
        assert_eq!(Source::parse("file:///srv/repo@feature/x").unwrap(), git("file:///srv/repo", Some("feature/x")));
        let krate =
            |n: &str, v: Option<&str>| Source::Crate { name: n.into(), version: v.map(Into::into), resolved: None };
        assert_eq!(Source::parse("bub-echo").unwrap(), krate("bub-echo", None));
        assert_eq!(Source::parse("bub-echo@0.3.1").unwrap(), krate("bub-echo", Some("0.3.1")));
        assert_eq!(Source::parse("bub-echo@^0.3").unwrap(), krate("bub-echo", Some("^0.3")));
        assert!(Source::parse("bub-echo@soon").unwrap_err().to_string().contains("not a version"));
        assert!(matches!(Source::parse("./missing/lib.so"), Err(InstallError::NotFound { .. })));
        assert!(matches!(Source::parse("/").unwrap(), Source::Path { .. }));
        assert_eq!(Source::parse("git+https://h/r@v2").unwrap(), git("https://h/r", Some("v2")));
        assert!(Source::parse("git+ext::sh -c touch% /tmp/x").unwrap_err().to_string().contains("a git source is"));
    }

    #[test]
    fn sources_round_trip_through_the_manifest_and_print() {
        let git = Source::Git {
            url: "file:///r".into(),
            reference: Some("v1".into()),
            commit: Some("0123456789abcdef".into()),
        };
        let json = serde_json::to_value(&git).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"kind": "git", "url": "file:///r", "ref": "v1", "commit": "0123456789abcdef"})
        );
        assert_eq!(serde_json::from_value::<Source>(json).unwrap(), git);
        assert_eq!(git.to_string(), "file:///r@v1 (commit 0123456789ab)");
        assert_eq!(git.unresolved().to_string(), "file:///r@v1");
        let krate = Source::Crate { name: "x".into(), version: None, resolved: Some("1.0.0".into()) };
        assert_eq!(krate.to_string(), "crate x (1.0.0)");
    }
}
