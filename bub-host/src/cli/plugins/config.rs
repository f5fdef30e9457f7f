//! `bub plugins config <name> [KEY=VALUE…] [--unset KEY…]`: show or change
//! the configuration kept in a plugin's manifest.

use anyhow::{bail, Result};
use serde_json::Value;

use crate::cli::Context;

pub fn run(ctx: &Context, name: &str, set: &[String], unset: &[String]) -> Result<()> {
    let installer = ctx.installer();
    if set.is_empty() && unset.is_empty() {
        println!("{}", serde_json::to_string_pretty(&installer.manifest(name)?.config)?);
        return Ok(());
    }
    let mut changes = Vec::new();
    for pair in set {
        let Some((key, text)) = pair.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            bail!("`{pair}` is not KEY=VALUE (e.g. model=gpt-4o, or limits={{\"max\": 3}} for JSON)");
        };
        // JSON when it parses (numbers, booleans, objects), a string otherwise.
        let value = serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()));
        changes.push((key.to_owned(), value));
    }
    // Read, changed and written under the plugins folder's lock: parallel
    // `config` calls (or an install) never lose each other's keys.
    let manifest = installer.update_config(name, |config| {
        config.extend(changes);
        for key in unset {
            config.remove(key);
        }
    })?;
    println!("{}", serde_json::to_string_pretty(&manifest.config)?);
    Ok(())
}
