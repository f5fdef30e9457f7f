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
    let mut isolation = Vec::new();
    for pair in set {
        let Some((key, text)) = pair.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            bail!("`{pair}` is not KEY=VALUE (e.g. model=gpt-4o, or limits={{\"max\": 3}} for JSON)");
        };
        // JSON when it parses (numbers, booleans, objects), a string otherwise.
        let value = serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()));
        // `isolated` and `isolated.KEY` are the manifest's isolation, not
        // the plugin's config (the plugin never sees them).
        if key == "isolated" || key.starts_with("isolated.") {
            isolation.push((key.to_owned(), value));
        } else {
            changes.push((key.to_owned(), value));
        }
    }
    let unset_isolation: Vec<&String> =
        unset.iter().filter(|k| *k == "isolated" || k.starts_with("isolated.")).collect();
    if !isolation.is_empty() || !unset_isolation.is_empty() {
        let mut problem = None;
        let manifest = installer.update_manifest(name, |current| {
            let mut m = current.clone();
            for key in &unset_isolation {
                match key.strip_prefix("isolated.") {
                    None => m.isolation = None,
                    Some(field) => {
                        // Back to its default: rebuilt without the field.
                        if let Some(iso) = &m.isolation {
                            let mut map = serde_json::to_value(iso).unwrap_or_default();
                            if let Some(o) = map.as_object_mut() {
                                o.remove(field);
                            }
                            m.isolation = serde_json::from_value(map).ok();
                        }
                    }
                }
            }
            for (key, value) in &isolation {
                let iso = m.isolation.get_or_insert_with(Default::default);
                let result = match key.strip_prefix("isolated.") {
                    None => match value.as_bool() {
                        Some(on) => {
                            iso.enabled = on;
                            Ok(())
                        }
                        None => Err(format!("isolated takes true or false, not {value}")),
                    },
                    Some(field) => iso.set(field, value),
                };
                if let Err(e) = result {
                    problem.get_or_insert(e);
                }
            }
            if problem.is_none() {
                *current = m;
            }
        });
        if let Some(problem) = problem {
            bail!("{problem} (nothing was changed)");
        }
        let manifest = manifest?;
        if changes.is_empty() && unset.len() == unset_isolation.len() {
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({"isolation": manifest.isolation}))?);
            return Ok(());
        }
    }
    // Read, changed and written under the plugins folder's lock: parallel
    // `config` calls (or an install) never lose each other's keys.
    let manifest = installer.update_config(name, |config| {
        config.extend(changes);
        for key in unset.iter().filter(|k| *k != "isolated" && !k.starts_with("isolated.")) {
            config.remove(key);
        }
    })?;
    println!("{}", serde_json::to_string_pretty(&manifest.config)?);
    Ok(())
}
