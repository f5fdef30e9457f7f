//! `bub plugins install <source>` and `bub plugins update [name]`.

use anyhow::{bail, Result};
use bub_host::{install::Installed, source::Source};

use crate::cli::Context;

pub fn run(ctx: &Context, source: &str, name: Option<&str>) -> Result<()> {
    let source = Source::parse(source)?;
    if !matches!(source, Source::Path { .. }) {
        eprintln!("fetching {source} and building it in release (this runs its build scripts as you)…");
    }
    report(&ctx.installer().install_from(&source, name)?);
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
    if !m.enabled {
        println!("  (kept disabled, as before; `bub plugins enable {}` to load it)", m.name);
    }
}
