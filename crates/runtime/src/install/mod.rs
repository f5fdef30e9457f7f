//! Installing, replacing, removing, enabling and disabling plugins.
//!
//! An install is staged in a hidden folder next to the installed plugins,
//! checked there (it must load and speak a compatible ABI: exactly what will
//! be loaded is what was checked), then swapped in with renames. A failed
//! install therefore leaves the previous version installed and working.

pub(crate) mod error;

use error::io;
pub use error::InstallError;

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::SystemTime,
};

use serde_json::Value;

use crate::{
    files::{lock_file, write_atomically, FileLock},
    integrity, loader,
    manifest::{Manifest, MANIFEST_FILE},
    source::Source,
};

/// What an install did.
#[derive(Debug, Clone)]
pub struct Installed {
    /// The manifest written.
    pub manifest: Manifest,
    /// The plugin folder.
    pub dir: PathBuf,
    /// The version it replaced, if any ("" when unknown).
    pub replaced: Option<String>,
}

/// Manages the plugins folder of one Bub home.
#[derive(Debug, Clone)]
pub struct Installer {
    root: PathBuf,
}

impl Installer {
    /// The installer of `<home>/plugins`.
    pub fn new(home: &Path) -> Self {
        Installer { root: home.join("plugins") }
    }

    /// The plugins folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The lock every change to the plugins folder holds.
    fn lock(&self) -> Result<FileLock, InstallError> {
        // Beside the plugins folder (`<home>/.plugins.lock`), not in it.
        let path = self.root.parent().unwrap_or(&self.root).join(".plugins.lock");
        lock_file(&path).map_err(io("lock", &path))
    }

    fn plugin_dir(&self, name: &str) -> Result<PathBuf, InstallError> {
        // `builtin` is the host's own plugin: one installed under that name
        // could never load.
        if !crate::manifest::valid_name(name) || name == "builtin" {
            return Err(InstallError::InvalidName { name: name.to_owned() });
        }
        Ok(self.root.join(name))
    }

    /// The manifest of installed plugin `name`.
    pub fn manifest(&self, name: &str) -> Result<Manifest, InstallError> {
        let dir = self.plugin_dir(name)?;
        if !dir.join(MANIFEST_FILE).is_file() {
            return Err(InstallError::NotInstalled { name: name.to_owned(), root: self.root.clone() });
        }
        Ok(Manifest::read(&dir)?)
    }

    /// Installs `source` (a library, or a crate folder that is built first
    /// with `cargo build --release`) as `name` (default: the plugin's own
    /// name). Replaces an installed version atomically, keeping its config
    /// and enabled state.
    pub fn install(&self, source: &Path, name: Option<&str>) -> Result<Installed, InstallError> {
        self.install_from(&Source::Path { path: crate::places::absolute(source.to_path_buf()) }, name)
    }

    /// Installs from `source`: a path as [`install`](Self::install) does, or
    /// a git repository or crate, fetched and built in release first. The
    /// source is recorded in the manifest, for [`update`](Self::update).
    pub fn install_from(&self, source: &Source, name: Option<&str>) -> Result<Installed, InstallError> {
        let home = self.root.parent().unwrap_or(&self.root);
        let fetched =
            crate::source::fetch(source, &home.join("cache").join("fetch"), &home.join("cache").join("build"))?;
        let recorded = fetched.source.clone();
        let source = fetched.path.clone();
        if !source.exists() {
            return Err(InstallError::NotFound { path: source });
        }
        if !source.is_dir() && !source.is_file() {
            // A FIFO or a device would block the copy or never end.
            let e = std::io::Error::new(std::io::ErrorKind::InvalidInput, "it is not a regular file or a crate folder");
            return Err(io("read", &source)(e));
        }
        let library =
            if source.is_dir() { build_crate(&source, fetched.target_dir.as_deref())? } else { source.clone() };
        // A crate may ship skills (`skills/<name>/SKILL.md`): installed with
        // the library, found by the agent in the plugin's folder. A link
        // named `skills` is not followed: a crate from a stranger could
        // point it at any folder of the machine (`/etc`) to have it copied.
        let skills = Some(source.join("skills"))
            .filter(|s| source.is_dir() && std::fs::symlink_metadata(s).is_ok_and(|m| m.is_dir()));
        if source.is_dir() && std::fs::symlink_metadata(source.join("skills")).is_ok_and(|m| m.is_symlink()) {
            tracing::warn!(target: "bub::install", "not installing skills: {} is a link", source.join("skills").display());
        }

        // Owner-only whatever the umask: under umask 002 a group-writable
        // folder would make every plugin in it fail the loader's checks, and
        // the manifests in it hold secrets.
        bub_kit::files::create_private_dir(&self.root).map_err(io("create", &self.root))?;
        let _lock = self.lock()?;
        self.clean_leftovers();
        let stage = self.root.join(format!(".staging-{}-{}", std::process::id(), nanos()));
        let result = self.stage_and_swap(&library, skills.as_deref(), &stage, name, recorded);
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&stage);
        }
        result
    }

    /// Fetches, builds and installs plugin `name` again from its recorded
    /// source (a branch or an unpinned crate moves forward), keeping its
    /// config and enabled state.
    pub fn update(&self, name: &str) -> Result<Installed, InstallError> {
        let source = self.manifest(name)?.source.ok_or_else(|| InstallError::NoSource { name: name.to_owned() })?;
        self.install_from(&source.unresolved(), Some(name))
    }

    fn stage_and_swap(
        &self,
        library: &Path,
        skills: Option<&Path>,
        stage: &Path,
        name: Option<&str>,
        source: Source,
    ) -> Result<Installed, InstallError> {
        std::fs::create_dir(stage).map_err(io("create", stage))?;
        set_mode(stage, 0o700)?;
        if let Some(skills) = skills {
            crate::files::copy_tree(skills, &stage.join("skills"), 0, 8).map_err(io("copy", skills))?;
        }
        // Installed under one fixed name, whatever the source is called: a
        // source named `plugin.json` or `.verified` cannot overwrite the
        // installer's own files.
        let file = std::ffi::OsStr::new(INSTALLED_LIBRARY);
        let staged = stage.join(file);
        std::fs::copy(library, &staged).map_err(io("copy the library to", &staged))?;
        set_mode(&staged, 0o700)?;

        // The check loads exactly the copy that will be installed; its
        // errors name the user's file, not the hidden staging copy.
        let lib = loader::open(&staged).map_err(|e| {
            let text = e.to_string().replace(&staged.display().to_string(), &library.display().to_string());
            InstallError::Rejected(text)
        })?;
        let name = name.unwrap_or(lib.name()).to_owned();
        let target = self.plugin_dir(&name)?;
        self.check_env_collision(&name)?;
        let previous = Manifest::read(&target).ok();

        let sha256 = integrity::sha256_file(&staged).map_err(io("hash", &staged))?;
        let manifest = Manifest {
            name: name.clone(),
            library: file.to_string_lossy().into_owned(),
            version: Some(lib.version().to_owned()),
            abi_version: Some(lib.abi_version().to_owned()),
            sha256: Some(sha256.clone()),
            installed_at: Some(humantime::format_rfc3339_seconds(SystemTime::now()).to_string()),
            enabled: previous.as_ref().is_none_or(|m| m.enabled),
            config: previous.as_ref().map(|m| m.config.clone()).unwrap_or_default(),
            replaces: lib.replaces().into_iter().filter(|r| crate::manifest::valid_name(r) && *r != name).collect(),
            source: Some(source),
            // Kept across a reinstall, as its config is.
            isolation: previous.as_ref().and_then(|m| m.isolation.clone()),
        };
        manifest.write(stage)?;

        // Swap. Where the filesystem can exchange two names atomically, a
        // concurrent run sees the old version or the new one, never neither;
        // the old folder is then under the staging name and goes.
        if target.exists() && exchange(stage, &target).is_ok() {
            let _ = std::fs::remove_dir_all(stage);
            let installed = target.join(&manifest.library);
            if let Ok(meta) = std::fs::metadata(&installed) {
                integrity::remember(&target, &meta, &sha256);
            }
            return Ok(Installed { manifest, dir: target, replaced: previous.map(|m| m.version.unwrap_or_default()) });
        }
        // Otherwise: the old folder moves aside, the new one takes its name;
        // if that fails, the old one comes back.
        let aside = self.root.join(format!(".old-{name}-{}-{}", std::process::id(), nanos()));
        let had_old = target.exists();
        if had_old {
            std::fs::rename(&target, &aside).map_err(io("move aside", &target))?;
        }
        if let Err(e) = std::fs::rename(stage, &target) {
            if had_old {
                let _ = std::fs::rename(&aside, &target);
            }
            return Err(io("move into place", &target)(e));
        }
        if had_old {
            let _ = std::fs::remove_dir_all(&aside);
        }
        let installed = target.join(&manifest.library);
        if let Ok(meta) = std::fs::metadata(&installed) {
            integrity::remember(&target, &meta, &sha256);
        }
        Ok(Installed { manifest, dir: target, replaced: previous.map(|m| m.version.unwrap_or_default()) })
    }

    /// Refuses a name whose settings variables (`BUB_<NAME>__*`, upper case,
    /// `-` as `_`) an installed plugin of another name already reads.
    fn check_env_collision(&self, name: &str) -> Result<(), InstallError> {
        let key = crate::config::env_prefix;
        let Ok(entries) = std::fs::read_dir(&self.root) else { return Ok(()) };
        for entry in entries.flatten() {
            let other = entry.file_name().to_string_lossy().into_owned();
            if other != name && !other.starts_with('.') && key(&other) == key(name) {
                return Err(InstallError::NameCollision { name: name.to_owned(), other, env: key(name) });
            }
        }
        Ok(())
    }

    /// Removes what killed installs left: `.staging-<pid>-*` and
    /// `.old-<name>-<pid>-*` folders of processes that no longer run.
    fn clean_leftovers(&self) {
        let Ok(entries) = std::fs::read_dir(&self.root) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = if let Some(rest) = name.strip_prefix(".staging-") {
                rest.split('-').next()
            } else if let Some(rest) = name.strip_prefix(".old-") {
                rest.rsplit('-').nth(1)
            } else {
                continue;
            };
            let Some(pid) = pid.and_then(|p| p.parse::<i32>().ok()) else { continue };
            // Alive unless the kernel says there is no such process.
            let alive = rustix::process::Pid::from_raw(pid)
                .is_some_and(|p| !matches!(rustix::process::test_kill_process(p), Err(rustix::io::Errno::SRCH)));
            if !alive {
                tracing::info!(target: "bub::install", "removing {}, left by an install that did not finish", entry.path().display());
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }

    /// Removes installed plugin `name`; returns its folder.
    pub fn remove(&self, name: &str) -> Result<PathBuf, InstallError> {
        let dir = self.plugin_dir(name)?;
        let _lock = self.lock()?;
        if !dir.exists() {
            return Err(InstallError::NotInstalled { name: name.to_owned(), root: self.root.clone() });
        }
        std::fs::remove_dir_all(&dir).map_err(io("remove", &dir))?;
        Ok(dir)
    }

    /// Enables or disables installed plugin `name` (a disabled plugin is
    /// discovered and listed, not loaded).
    pub fn set_enabled(&self, name: &str, enabled: bool) -> Result<Manifest, InstallError> {
        let _lock = self.lock()?;
        let mut manifest = self.manifest(name)?;
        manifest.enabled = enabled;
        manifest.write(&self.plugin_dir(name)?)?;
        Ok(manifest)
    }

    /// Replaces the configuration of installed plugin `name`.
    pub fn set_config(&self, name: &str, config: serde_json::Map<String, Value>) -> Result<Manifest, InstallError> {
        self.update_config(name, |c| *c = config)
    }

    /// Changes the manifest of installed plugin `name` with `change`, read
    /// and written under the folder's lock.
    pub fn update_manifest(&self, name: &str, change: impl FnOnce(&mut Manifest)) -> Result<Manifest, InstallError> {
        let _lock = self.lock()?;
        let mut manifest = self.manifest(name)?;
        change(&mut manifest);
        manifest.write(&self.plugin_dir(name)?)?;
        Ok(manifest)
    }

    /// Changes the configuration of installed plugin `name` with `change`,
    /// read and written under the folder's lock (no lost updates).
    pub fn update_config(
        &self,
        name: &str,
        change: impl FnOnce(&mut serde_json::Map<String, Value>),
    ) -> Result<Manifest, InstallError> {
        let _lock = self.lock()?;
        let mut manifest = self.manifest(name)?;
        change(&mut manifest.config);
        manifest.write(&self.plugin_dir(name)?)?;
        Ok(manifest)
    }
}

impl Manifest {
    /// Writes `<dir>/plugin.json` atomically (temp file + rename), mode 0600:
    /// its config holds tokens and database URLs.
    pub fn write(&self, dir: &Path) -> Result<(), InstallError> {
        let path = dir.join(MANIFEST_FILE);
        let text = serde_json::to_string_pretty(self).expect("a manifest always serializes") + "\n";
        write_atomically(&path, &text).map_err(io("write", &path))
    }
}

/// The file name an installed library gets in its plugin folder.
pub const INSTALLED_LIBRARY: &str = "plugin.so";

/// Exchanges two paths atomically (Linux `renameat2(RENAME_EXCHANGE)`).
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    rustix::fs::renameat_with(rustix::fs::CWD, a, rustix::fs::CWD, b, rustix::fs::RenameFlags::EXCHANGE)
        .map_err(std::io::Error::from)
}

fn nanos() -> u128 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default()
}

/// Builds the crate in `dir` with `cargo build --release` (cargo's progress
/// shown on stderr) and returns the cdylib it produced.
fn build_crate(dir: &Path, target_dir: Option<&Path>) -> Result<PathBuf, InstallError> {
    let manifest = dir.join("Cargo.toml");
    if !manifest.is_file() {
        return Err(InstallError::NotFound { path: manifest });
    }
    let cargo = crate::settings::cargo();
    let mut command = Command::new(cargo);
    if let Some(target) = target_dir {
        command.arg("--config").arg(format!("build.target-dir={}", Value::String(target.display().to_string())));
    }
    let output = command
        .args(["build", "--release", "--message-format=json-render-diagnostics", "--manifest-path"])
        .arg(&manifest)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(io("run cargo for", dir))?;
    if !output.status.success() {
        return Err(InstallError::BuildFailed { dir: dir.to_owned(), status: output.status.to_string() });
    }
    let suffix = std::env::consts::DLL_SUFFIX;
    let mut libs = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<Value>(line) else { continue };
        let is_cdylib = msg["reason"] == "compiler-artifact"
            && msg["target"]["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "cdylib"))
            && msg["manifest_path"].as_str().is_some_and(|m| Path::new(m) == manifest);
        if is_cdylib {
            for f in msg["filenames"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                if f.ends_with(suffix) {
                    libs.push(PathBuf::from(f));
                }
            }
        }
    }
    match libs.len() {
        0 => Err(InstallError::NoLibrary { dir: dir.to_owned() }),
        1 => Ok(libs.remove(0)),
        _ => Err(InstallError::SeveralLibraries {
            dir: dir.to_owned(),
            libs: libs.iter().map(|l| l.display().to_string()).collect::<Vec<_>>().join(", "),
        }),
    }
}
fn set_mode(path: &Path, mode: u32) -> Result<(), InstallError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io("set permissions of", path))
}
