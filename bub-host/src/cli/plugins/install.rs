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

/// `bub plugins install --python <requirement>`: into the bridge's venv
/// (its `venv` setting, else `VIRTUAL_ENV`, else `$BUB_HOME/python/venv`,
/// as the bridge picks it; made with the
/// bridge's `python` setting, `PYO3_PYTHON` or `python3` when missing).
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
    if !venv.join("bin/python").exists() {
        let python =
            setting("python").or_else(|| std::env::var("PYO3_PYTHON").ok()).unwrap_or_else(|| "python3".into());
        eprintln!("making the plugin venv {} with {python}…", venv.display());
        if let Some(parent) = venv.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        let status = Command::new(&python).args(["-m", "venv"]).arg(&venv).status().with_context(|| {
            format!("running `{python} -m venv` (set the bridge's `python` setting to a Python 3.12+)")
        })?;
        if !status.success() {
            bail!("`{python} -m venv {}` failed ({status})", venv.display());
        }
    }
    let interpreter = venv.join("bin/python");
    let uv = Command::new("uv").arg("--version").output().is_ok_and(|o| o.status.success());
    let mut cmd = if uv {
        let mut c = Command::new("uv");
        c.args(["pip", "install", "--python"]).arg(&interpreter);
        c
    } else {
        let mut c = Command::new(&interpreter);
        c.args(["-m", "pip", "install", "--disable-pip-version-check"]);
        c
    };
    cmd.arg(requirement);
    eprintln!("installing {requirement} into {} with {}…", venv.display(), if uv { "uv" } else { "pip" });
    let status = cmd.status().context("running the Python package installer")?;
    if !status.success() {
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
