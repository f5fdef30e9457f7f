//! `bub plugins enable <name>` / `bub plugins disable <name>`.

use anyhow::Result;

use crate::cli::Context;

pub fn run(ctx: &Context, name: &str, enabled: bool) -> Result<()> {
    ctx.installer().set_enabled(name, enabled)?;
    println!("{} {name}", if enabled { "enabled" } else { "disabled" });
    Ok(())
}
