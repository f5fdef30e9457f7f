//! `bub plugins config <name> [KEY=VALUE…] [--unset KEY…]`: show or change
//! the configuration kept in a plugin's manifest.

use anyhow::{bail, Result};
use serde_json::Value;

use crate::cli::Context;

pub fn run(ctx: &Context, name: &str, set: &[String], unset: &[String]) -> Result<()> {
    let installer = ctx.installer();
    let mut config = installer.manifest(name)?.config;
    if set.is_empty() && unset.is_empty() {
        println!("{}", serde_json::to_string_pretty(&config)?);
        return Ok(());
    }
    for pair in set {
        let Some((key, text)) = pair.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            bail!("`{pair}` is not KEY=VALUE (e.g. model=gpt-4o, or limits={{\"max\": 3}} for JSON)");
        };
        // JSON when it parses (numbers, booleans, objects), a string otherwise.
        let value = serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()));
        config.insert(key.to_owned(), value);
    }
    for key in unset {
        config.remove(key);
    }
    let manifest = installer.set_config(name, config)?;
    println!("{}", serde_json::to_string_pretty(&manifest.config)?);
    Ok(())
}
