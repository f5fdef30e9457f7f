//! The tests' Python plugin venv: Bub 0.6.0a3 and real Bub plugins from
//! PyPI (bub-schedule, bub-mcp, bub-web-search, pinned in
//! `tests/python/requirements.txt`), plus the tests' own plugins under
//! `tests/python/`, installed with pip into `<target>/python-venv` once per
//! target folder (a stamp of the pins and sources says when to redo it).
//!
//! The venv is made with the Python the python bridge is built with
//! (`PYO3_PYTHON`, else `python3`, as PyO3 picks it); Bub needs 3.12 or
//! newer. Without such a Python, or without pip, the tests that need the
//! venv say why and skip.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use crate::{target_dir, workspace};

/// The tests' own Python plugins (folders under `tests/python/`).
pub const OWN_PLUGINS: &[&str] = &["bub-rs-probe", "bub-rs-courier"];

/// One venv: its folder under the target folder, its pins, its own plugins.
struct Spec {
    dir: &'static str,
    requirements: &'static str,
    own: &'static [&'static str],
    // The pins without the Bub plugins (lines `bub-…`): Python Bub alone,
    // as a user has it before installing any plugin.
    without_plugins: bool,
    // More pins, installed in the same run.
    extra: Option<&'static str>,
}

const TESTS: Spec = Spec {
    dir: "python-venv",
    requirements: "requirements.txt",
    own: OWN_PLUGINS,
    without_plugins: false,
    extra: None,
};
const BENCH: Spec = Spec {
    dir: "python-bench-venv",
    requirements: "bench-requirements.txt",
    own: &["bub-rs-bench"],
    without_plugins: false,
    extra: None,
};
const PUBLISHED: Spec = Spec {
    dir: "python-published-venv",
    requirements: "published-requirements.txt",
    own: &[],
    without_plugins: false,
    extra: None,
};
const OPENAI_CLIENT: Spec = Spec {
    dir: "python-openai-venv",
    requirements: "openai-client-requirements.txt",
    own: &[],
    without_plugins: false,
    extra: None,
};
const DISCORD_CLIENT: Spec = Spec {
    dir: "python-discord-venv",
    requirements: "discord-client-requirements.txt",
    own: &[],
    without_plugins: false,
    extra: None,
};
const BUB_ALONE: Spec = Spec {
    dir: "python-bub-alone-venv",
    requirements: "requirements.txt",
    own: &[],
    without_plugins: true,
    extra: None,
};
const BUB_TRACE: Spec = Spec {
    dir: "python-bub-trace-venv",
    requirements: "requirements.txt",
    own: &[],
    without_plugins: true,
    extra: Some("trace-requirements.txt"),
};
const CRONITER: Spec = Spec {
    dir: "python-croniter-venv",
    requirements: "croniter-requirements.txt",
    own: &[],
    without_plugins: false,
    extra: None,
};

/// The interpreter the bridge is built with.
pub fn python() -> String {
    std::env::var("PYO3_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The venv, made on first use; `Err` is the reason to skip (no Python
/// 3.12+, no pip); a failing pip install panics.
pub fn venv() -> Result<&'static Path, String> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    VENV.get_or_init(|| make(&TESTS)).as_ref().map(PathBuf::as_path).map_err(Clone::clone)
}

/// The benchmark's venv: Bub 0.6.0a3 and `bub-rs-bench` only (every plugin
/// in a venv is registered, so the tests' plugins would be called too).
pub fn bench_venv() -> Result<&'static Path, String> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    VENV.get_or_init(|| make(&BENCH)).as_ref().map(PathBuf::as_path).map_err(Clone::clone)
}

/// A Bub user's venv: Bub 0.6.0a3 and the Bub plugins published on PyPI
/// (`tests/python/published-requirements.txt`), nothing of the tests' own:
/// bub-rs and Python Bub run side by side on it.
pub fn published_venv() -> Result<&'static Path, String> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    VENV.get_or_init(|| make(&PUBLISHED)).as_ref().map(PathBuf::as_path).map_err(Clone::clone)
}

/// A venv with the official `openai` client
/// (`tests/python/openai-client-requirements.txt`), or `None` (the test
/// says it skipped, and why: no Python 3.12+ or no pip).
pub fn openai_client_venv_or_skip(test: &str) -> Option<&'static Path> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    made_or_skip(&VENV, &OPENAI_CLIENT, test)
}

/// A venv with discord.py (`tests/python/discord-client-requirements.txt`),
/// or `None` (the test says it skipped, and why).
pub fn discord_client_venv_or_skip(test: &str) -> Option<&'static Path> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    made_or_skip(&VENV, &DISCORD_CLIENT, test)
}

/// Python Bub 0.6.0a3 alone, no plugin (the pins of
/// `tests/python/requirements.txt` without its `bub-` packages), or `None`
/// (the test says it skipped, and why): Bub side by side with bub-rs where
/// a plugin's hooks would make the two differ.
pub fn bub_alone_venv_or_skip(test: &str) -> Option<&'static Path> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    made_or_skip(&VENV, &BUB_ALONE, test)
}

/// Python Bub 0.6.0a3 alone with its `trace` extra and opentelemetry-proto
/// (`tests/python/trace-requirements.txt`), or `None` (the test says it
/// skipped, and why).
pub fn bub_trace_venv_or_skip(test: &str) -> Option<&'static Path> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    made_or_skip(&VENV, &BUB_TRACE, test)
}

/// A venv with croniter (`tests/python/croniter-requirements.txt`), the
/// cron reference, or `None` (the test says it skipped, and why).
pub fn croniter_venv_or_skip(test: &str) -> Option<&'static Path> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    made_or_skip(&VENV, &CRONITER, test)
}

fn made_or_skip(cell: &'static OnceLock<Result<PathBuf, String>>, spec: &Spec, test: &str) -> Option<&'static Path> {
    match cell.get_or_init(|| make(spec)) {
        Ok(v) => Some(v.as_path()),
        Err(why) => {
            eprintln!("SKIPPED {test}: {why}");
            None
        }
    }
}

/// [`published_venv`], or `None` (the test says it skipped, and why).
pub fn published_venv_or_skip(test: &str) -> Option<&'static Path> {
    match published_venv() {
        Ok(v) => Some(v),
        Err(why) => {
            eprintln!("SKIPPED {test}: {why}");
            None
        }
    }
}

/// Skips the calling test (returns `None`) with a message when the venv
/// cannot be made.
pub fn venv_or_skip(test: &str) -> Option<&'static Path> {
    match venv() {
        Ok(v) => Some(v),
        Err(why) => {
            eprintln!("SKIPPED {test}: {why}");
            None
        }
    }
}

fn stamp(spec: &Spec) -> String {
    let mut text =
        std::fs::read_to_string(workspace().join("tests/python").join(spec.requirements)).unwrap_or_default();
    if let Some(extra) = spec.extra {
        text.push_str(&std::fs::read_to_string(workspace().join("tests/python").join(extra)).unwrap_or_default());
    }
    for plugin in spec.own {
        let dir = workspace().join("tests/python").join(plugin);
        let mut files: Vec<PathBuf> = walk(&dir);
        files.sort();
        for f in files {
            text.push_str(&f.display().to_string());
            text.push_str(&std::fs::read_to_string(&f).unwrap_or_default());
        }
    }
    text.push_str(&python());
    format!("{:016x}", fnv1a(&text))
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "__pycache__" || n.to_string_lossy().ends_with(".egg-info")) {
                continue;
            }
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn fnv1a(text: &str) -> u64 {
    // FNV-1a: stable across runs and platforms (the stamp is a file).
    text.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

fn make(spec: &Spec) -> Result<PathBuf, String> {
    let python = python();
    let version = Command::new(&python)
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .map_err(|e| format!("no Python to make the plugin venv with (`{python}`: {e}); set PYO3_PYTHON"))?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    let (major, minor) = version.split_once('.').unwrap_or(("0", "0"));
    if (major.parse::<u32>().unwrap_or(0), minor.parse::<u32>().unwrap_or(0)) < (3, 12) {
        return Err(format!(
            "`{python}` is Python {version}; Bub needs 3.12 or newer: set PYO3_PYTHON to one (the python bridge \
             is built with it too)"
        ));
    }
    let has_pip = Command::new(&python).args(["-m", "pip", "--version"]).output().is_ok_and(|o| o.status.success());
    if !has_pip {
        return Err(format!("`{python} -m pip` is not available to install Bub plugins from PyPI"));
    }
    let venv = target_dir().join(spec.dir);
    let stamp_file = venv.join("bub-rs-stamp");
    let stamp = stamp(spec);
    if std::fs::read_to_string(&stamp_file).is_ok_and(|s| s == stamp) {
        return Ok(venv);
    }
    let _ = std::fs::remove_dir_all(&venv);
    let status = Command::new(&python).args(["-m", "venv"]).arg(&venv).status().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("`{python} -m venv {}` failed ({status})", venv.display()));
    }
    let mut requirements = workspace().join("tests/python").join(spec.requirements);
    if spec.without_plugins {
        let pins = std::fs::read_to_string(&requirements).map_err(|e| e.to_string())?;
        let alone: String = pins.lines().filter(|l| !l.starts_with("bub-")).map(|l| format!("{l}\n")).collect();
        requirements = venv.join("bub-rs-requirements.txt");
        std::fs::write(&requirements, alone).map_err(|e| e.to_string())?;
    }
    let mut pip = Command::new(venv.join("bin/python"));
    pip.args(["-m", "pip", "install", "-q", "--disable-pip-version-check", "-r"]).arg(&requirements);
    if let Some(extra) = spec.extra {
        pip.arg("-r").arg(workspace().join("tests/python").join(extra));
    }
    for plugin in spec.own {
        pip.arg(workspace().join("tests/python").join(plugin));
    }
    let out = pip.output().map_err(|e| format!("cannot run pip: {e}"))?;
    // pip is there: a failed install is a failure, not a reason to skip.
    assert!(
        out.status.success(),
        "pip could not install the plugin venv {} ({}): {}",
        venv.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&stamp_file, stamp).map_err(|e| e.to_string())?;
    Ok(venv)
}
