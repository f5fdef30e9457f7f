//! `bub plugins remove <name>`.

use anyhow::Result;

use crate::cli::Context;

pub fn run(ctx: &Context, name: &str) -> Result<()> {
    let dir = ctx.installer().remove(name)?;
    println!("removed {name} ({})", dir.display());
    Ok(())
}
