//! Packages from the npm registry (pinned), installed once per target
//! folder under `<target>/npm-<name>`: reference servers and official
//! clients nobody here wrote. A test skips (saying so) only when npm itself
//! is missing; a failing install is a failure.

use std::{path::PathBuf, process::Command};

use crate::target_dir;

/// `package` (`name@version`) installed under `<target>/<dir>`, with
/// `marker` (a path under it, e.g. `node_modules/.bin/codex`) proving a
/// finished install; the marker's path, or None without npm.
pub fn install(dir: &str, package: &str, marker: &str) -> Option<PathBuf> {
    if Command::new("npm").arg("--version").output().is_err() {
        return None;
    }
    let dir = target_dir().join(dir);
    let marker = dir.join(marker);
    if !marker.exists() {
        std::fs::create_dir_all(&dir).expect("make the npm folder");
        let out = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(package)
            .output()
            .expect("run npm");
        assert!(out.status.success(), "npm install {package} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Some(marker)
}
