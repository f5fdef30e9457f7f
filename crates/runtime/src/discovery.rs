//! Finds installed plugins, the way Python finds entry points.
//!
//! An installed plugin is a folder `<root>/<name>/` holding a
//! [`plugin.json`](crate::manifest) and the library it names. The roots are
//! searched in this order:
//!
//! 1. `$BUB_HOME/plugins` (`BUB_HOME` defaults to `~/.bub`);
//! 2. each folder of `BUB_PLUGIN_PATH` (`:`-separated), in order.
//!
//! Within a root, folders are taken in byte order of their names. That order
//! is the registration order, hence the priority order (later registered runs
//! first). Only absolute roots are searched: a relative entry in
//! `BUB_PLUGIN_PATH` is ignored with a warning, so nothing is ever loaded from
//! the working directory by accident.

use std::path::{Path, PathBuf};

/// Where to look for plugins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchPath {
    /// Roots, in search order.
    pub roots: Vec<PathBuf>,
    /// Entries that were refused, with why.
    pub ignored: Vec<(String, &'static str)>,
}

impl SearchPath {
    /// `<home>/plugins` followed by the entries of `plugin_path` (the value of
    /// `BUB_PLUGIN_PATH`).
    pub fn new(home: &Path, plugin_path: Option<&str>) -> SearchPath {
        let mut roots = vec![home.join("plugins")];
        let mut ignored = Vec::new();
        for entry in plugin_path.unwrap_or_default().split(':') {
            if entry.is_empty() {
                continue;
            }
            let p = PathBuf::from(entry);
            if !p.is_absolute() {
                ignored.push((entry.to_owned(), "BUB_PLUGIN_PATH entries must be absolute paths"));
            } else if p.join("plugin.json").is_file() {
                // A plugin folder given where a root of plugin folders goes.
                ignored.push((
                    entry.to_owned(),
                    "is a plugin folder; BUB_PLUGIN_PATH lists folders that hold plugin folders (use its parent)",
                ));
            } else if p.exists() && !p.is_dir() {
                ignored.push((entry.to_owned(), "is not a folder"));
            } else if !p.exists() {
                ignored.push((entry.to_owned(), "does not exist"));
            } else if !roots.contains(&p) {
                roots.push(p);
            }
        }
        SearchPath { roots, ignored }
    }

    /// From the environment: `BUB_HOME` (or `home_override`) and `BUB_PLUGIN_PATH`.
    pub fn from_env(home_override: Option<&Path>) -> SearchPath {
        let home = home_override.map(Path::to_path_buf).unwrap_or_else(bub_home);
        SearchPath::new(&home, crate::settings::env_plugin_path().as_deref())
    }

    /// Every candidate plugin folder, in registration order.
    pub fn candidates(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for root in &self.roots {
            let Ok(entries) = std::fs::read_dir(root) else { continue };
            // Hidden folders are never plugins: the installer stages and
            // retires versions in `.staging-*` / `.old-*` folders.
            // The entry's type comes with the listing (no `stat` per entry);
            // only a symbolic link is followed to see what it points at.
            let mut dirs: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .filter(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => true,
                    Ok(t) if t.is_symlink() => e.path().is_dir(),
                    Ok(_) => false,
                    Err(_) => e.path().is_dir(),
                })
                .map(|e| e.path())
                .collect();
            dirs.sort();
            out.extend(dirs);
        }
        out
    }
}

/// `$BUB_HOME`, or `~/.bub`.
pub fn bub_home() -> PathBuf {
    crate::settings::env_home()
}
