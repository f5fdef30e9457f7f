//! `bub plugins install <source>` and `bub plugins update [name]`.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};
use bub_host::{install::Installed, source::Source};

use crate::cli::Context;

pub fn run(ctx: &Context, source: &str, name: Option<&str>, isolated: bool) -> Result<()> {
    let source = Source::parse(source)?;
    if !matches!(source, Source::Path { .. }) {
        eprintln!("fetching {source} and building it in release (this runs its build scripts as you)…");
    }
    let installer = ctx.installer();
    let mut installed = installer.install_from(&source, name)?;
    if isolated {
        installed.manifest = installer.update_manifest(&installed.manifest.name, |m| {
            m.isolation.get_or_insert_with(Default::default).enabled = true;
        })?;
    }
    report(&installed);
    Ok(())
}

/// Every plugin with a recorded source, or the one named.
pub fn update(ctx: &Context, name: Option<&str>) -> Result<()> {
    let installer = ctx.installer();
    // Each plugin's recorded source, read once.
    let sourced: Vec<(String, Option<Source>)> = match name {
        Some(name) => vec![(name.to_owned(), installer.manifest(name).ok().and_then(|m| m.source))],
        None => {
            let mut sourced: Vec<(String, Option<Source>)> = std::fs::read_dir(installer.root())
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .filter_map(|n| {
                    let source = installer.manifest(&n).ok()?.source?;
                    Some((n, Some(source)))
                })
                .collect();
            sourced.sort_by(|a, b| a.0.cmp(&b.0));
            if sourced.is_empty() {
                println!("no installed plugin has a recorded source; nothing to update");
            }
            sourced
        }
    };
    let mut failed = Vec::new();
    for (name, source) in &sourced {
        if let Some(source) = source {
            eprintln!("updating {name} from {}…", source.unresolved());
        }
        match installer.update(name) {
            Ok(installed) => report(&installed),
            Err(e) => {
                eprintln!("error: {name}: {e}");
                failed.push(name.clone());
            }
        }
    }
    if !failed.is_empty() {
        bail!("not updated: {} (the installed versions stay as they were)", failed.join(", "));
    }
    Ok(())
}

fn report(installed: &Installed) {
    let m = &installed.manifest;
    let version = m.version.as_deref().unwrap_or("?");
    let abi = m.abi_version.as_deref().unwrap_or("?");
    match &installed.replaced {
        Some(old) if old == version => println!("reinstalled {} {version} (ABI {abi})", m.name),
        Some(old) => println!("replaced {} {old} with {version} (ABI {abi})", m.name),
        None => println!("installed {} {version} (ABI {abi})", m.name),
    }
    if let Some(source) = &m.source {
        println!("  from {source}");
    }
    println!("  into {}", installed.dir.display());
    if m.isolated().is_some() {
        println!("  isolated: it runs in a process of its own");
    }
    if !m.enabled {
        println!("  (kept disabled, as before; `bub plugins enable {}` to load it)", m.name);
    }
}

/// The bridge plugin's install name.
const BRIDGE: &str = "python-bridge";

/// What the installed python bridge was built for, from its description
/// ("… built for Bub 0.6.0a3 on Python 3.12 (/usr/bin/python3.12)").
#[derive(Debug, PartialEq)]
struct BridgeBuild {
    bub: String,
    python_version: String,
    python: String,
}

impl BridgeBuild {
    fn parse(description: &str) -> Option<BridgeBuild> {
        let rest = description.split("built for Bub ").nth(1)?;
        let (bub, rest) = rest.split_once(" on Python ")?;
        let (version, rest) = rest.split_once(" (")?;
        let python = rest.strip_suffix(')')?;
        Some(BridgeBuild { bub: bub.to_owned(), python_version: version.to_owned(), python: python.to_owned() })
    }
}

/// `bub plugins install --python <requirement>`: into the bridge's venv
/// (its `venv` setting, else `VIRTUAL_ENV`, else `$BUB_HOME/python/venv`,
/// as the bridge picks it). A missing venv is made with the Python the
/// bridge links (its `python` setting may name another interpreter of the
/// same `major.minor`), and removed again if the first install fails.
/// The requirement is installed in one run of pip (or uv) beside the Bub
/// release the bridge runs plugins of (`bub[app]==<release>`): plugins
/// depend on an unpinned `bub`, which would otherwise resolve to the last
/// stable release, whose API the bridge does not follow. A venv made here
/// is made without a pip of its own (`--without-pip`: `ensurepip` would be
/// a second installer run) in a folder created owner-only, and filled by
/// uv, or by the making Python's pip aimed at it (`pip --python`).
pub fn python(ctx: &Context, requirement: &str) -> Result<()> {
    let installer = ctx.installer();
    let manifest = installer.manifest(BRIDGE).map_err(|e| {
        anyhow::anyhow!(
            "Python plugins run through the python bridge, which is not installed ({e}): build it with \
             `cargo build --release -p python-bridge` and `bub plugins install target/release/libpython_bridge.so`"
        )
    })?;
    let setting = |key: &str| manifest.config.get(key).and_then(|v| v.as_str()).map(str::to_owned);
    let venv = match setting("venv") {
        Some(v) if Path::new(&v).is_relative() => ctx.workspace.join(v),
        Some(v) => PathBuf::from(v),
        None => match std::env::var_os("VIRTUAL_ENV").filter(|v| !v.is_empty()) {
            Some(v) => PathBuf::from(v),
            None => ctx.home.join("python").join("venv"),
        },
    };
    let build = bridge_build(ctx)?;
    let made = !venv.join("bin/python").exists();
    if made {
        let python = setting("python").unwrap_or_else(|| build.python.clone());
        eprintln!("making the plugin venv {} with {python} (Python {})…", venv.display(), build.python_version);
        // Owner-only from the start: the venv holds what plugins keep.
        bub_kit::files::create_private_dir(&venv).with_context(|| format!("creating {}", venv.display()))?;
        let made_venv = Command::new(&python).args(["-m", "venv", "--without-pip"]).arg(&venv).status();
        let status = made_venv.with_context(|| {
            format!(
                "running `{python} -m venv` (set the bridge's `python` setting to a Python {})",
                build.python_version
            )
        })?;
        if !status.success() {
            let _ = std::fs::remove_dir_all(&venv);
            bail!("`{python} -m venv {}` failed ({status})", venv.display());
        }
        match venv_python_version(&venv) {
            Ok(v) if v == build.python_version => {}
            found => {
                let _ = std::fs::remove_dir_all(&venv);
                bail!(
                    "{python} made a venv of Python {}, but the python bridge links Python {} ({}): set the \
                     bridge's `python` setting to a Python {} (`bub plugins config python-bridge python=…`); the \
                     venv was removed",
                    found.unwrap_or_else(|e| e),
                    build.python_version,
                    build.python,
                    build.python_version
                );
            }
        }
    }
    let interpreter = venv.join("bin/python");
    let uv = Command::new("uv").arg("--version").output().is_ok_and(|o| o.status.success());
    let has_pip = |python: &Path| {
        Command::new(python).args(["-m", "pip", "--version"]).output().is_ok_and(|o| o.status.success())
    };
    let mut cmd = if uv {
        let mut c = Command::new("uv");
        c.args(["pip", "install", "--python"]).arg(&interpreter);
        c
    } else if has_pip(&interpreter) {
        let mut c = Command::new(&interpreter);
        c.args(["-m", "pip", "install", "--disable-pip-version-check"]);
        c
    } else {
        // The making Python's pip, installing into the venv.
        let python = PathBuf::from(setting("python").unwrap_or_else(|| build.python.clone()));
        if !has_pip(&python) {
            if made {
                let _ = std::fs::remove_dir_all(&venv);
            }
            bail!(
                "neither uv nor pip is available to install {requirement}: install uv, or pip for {} \
                 (`{} -m ensurepip`)",
                python.display(),
                python.display()
            );
        }
        let mut c = Command::new(&python);
        c.args(["-m", "pip", "--python"]).arg(&interpreter).args(["install", "--disable-pip-version-check"]);
        c
    };
    let bub = format!("bub[app]=={}", build.bub);
    cmd.arg(requirement).arg(&bub);
    eprintln!("installing {requirement} with {bub} into {} with {}…", venv.display(), if uv { "uv" } else { "pip" });
    let status = cmd.status().context("running the Python package installer")?;
    if !status.success() {
        if made {
            let _ = std::fs::remove_dir_all(&venv);
            bail!("installing {requirement} into a new venv failed ({status}); the venv was removed");
        }
        bail!("installing {requirement} into {} failed ({status}); nothing else changed", venv.display());
    }
    if venv.starts_with(&ctx.home) {
        // `$BUB_HOME` is private (plugins may keep secrets in their files).
        owner_only(&venv, 0);
    }
    // The plugins as the host now sees them (loading the venv's entry points).
    crate::cli::probe::guarded(ctx, || {
        let host = ctx.host();
        let members: Vec<_> =
            host.registry().plugins().iter().filter(|p| p.member_of.as_deref() == Some(BRIDGE)).collect();
        if members.is_empty() {
            println!("installed {requirement}; it brings no Bub plugin (no entry point in group `bub`)");
        }
        for p in members {
            println!("python plugin {} {} ({})", p.name, p.version, p.status.as_str());
        }
        Ok(())
    })
}

/// The `major.minor` of a venv's Python, from its `pyvenv.cfg`.
fn venv_python_version(venv: &Path) -> Result<String, String> {
    let cfg = venv.join("pyvenv.cfg");
    let text = std::fs::read_to_string(&cfg).map_err(|e| format!("? ({}: {e})", cfg.display()))?;
    text.lines()
        .filter_map(|line| line.split_once('='))
        .find(|(key, _)| matches!(key.trim(), "version" | "version_info"))
        .map(|(_, value)| value.trim().split('.').take(2).collect::<Vec<_>>().join("."))
        .ok_or_else(|| format!("? ({} names no version)", cfg.display()))
}

/// What the installed bridge was built for, read from its description
/// (loading the bridge library, not Python).
fn bridge_build(ctx: &Context) -> Result<BridgeBuild> {
    let host = ctx.host();
    let record = host.registry().plugin(BRIDGE);
    let description = record.map(|r| r.description.clone()).unwrap_or_default();
    BridgeBuild::parse(&description).ok_or_else(|| {
        anyhow::anyhow!(
            "the installed python bridge does not say which Bub and Python it was built for (its description: \
             {description:?}); rebuild it from this bub-rs (`cargo build --release -p python-bridge`) and install \
             it again"
        )
    })
}

/// Clears group and other permission bits below `path` (bounded depth; a
/// venv is a dozen levels at most). Best effort: a file that cannot be
/// changed is left as it is, and `bub plugins list` reports it.
fn owner_only(path: &Path, depth: usize) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else { return };
    if meta.file_type().is_symlink() {
        return;
    }
    let mode = meta.permissions().mode();
    if mode & 0o077 != 0 {
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & !0o077));
    }
    if meta.is_dir() && depth < 32 {
        for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
            owner_only(&entry.path(), depth + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BridgeBuild;

    #[test]
    fn the_bridges_description_says_its_bub_and_python() {
        let d = "Runs Bub's Python plugins (a venv's `bub` entry points) as plugins of bub-rs; built for Bub 0.6.0a3 \
                 on Python 3.12 (/root/.pyenv/versions/3.12.1/bin/python3.12)";
        assert_eq!(
            BridgeBuild::parse(d),
            Some(BridgeBuild {
                bub: "0.6.0a3".into(),
                python_version: "3.12".into(),
                python: "/root/.pyenv/versions/3.12.1/bin/python3.12".into()
            })
        );
        assert_eq!(BridgeBuild::parse("Runs Bub's Python plugins"), None);
    }
}
