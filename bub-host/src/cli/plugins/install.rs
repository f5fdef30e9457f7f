//! `bub plugins install <path>`.

use std::path::Path;

use anyhow::Result;

use crate::cli::Context;

pub fn run(ctx: &Context, path: &Path, name: Option<&str>) -> Result<()> {
    let installed = ctx.installer().install(path, name)?;
    let m = &installed.manifest;
    let version = m.version.as_deref().unwrap_or("?");
    match &installed.replaced {
        Some(old) => {
            println!("replaced {} {old} with {version} (ABI {})", m.name, m.abi_version.as_deref().unwrap_or("?"))
        }
        None => println!("installed {} {version} (ABI {})", m.name, m.abi_version.as_deref().unwrap_or("?")),
    }
    println!("  into {}", installed.dir.display());
    if !m.enabled {
        println!("  (kept disabled, as before; `bub plugins enable {}` to load it)", m.name);
    }
    Ok(())
}
