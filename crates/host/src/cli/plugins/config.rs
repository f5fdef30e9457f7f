//! `bub plugins config <name> [KEY=VALUE…] [--unset KEY…]`: show or change
//! the configuration kept in a plugin's manifest.

use anyhow::{bail, Result};
use bub_host::{isolation::Isolation, manifest::Manifest};
use serde_json::Value;

use crate::cli::Context;

/// `isolated` and `isolated.KEY` are the manifest's isolation, not the
/// plugin's config (the plugin never sees them).
fn is_isolation_key(key: &str) -> bool {
    key == "isolated" || key.starts_with("isolated.")
}

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
    let only_isolation =
        changes.iter().map(|(k, _)| k.as_str()).chain(unset.iter().map(String::as_str)).all(is_isolation_key);
    // Read, changed and written under the plugins folder's lock: parallel
    // `config` calls (or an install) never lose each other's keys. Nothing
    // is written when one change is refused.
    let mut problem = None;
    let manifest = installer.update_manifest(name, |current| {
        let mut next = current.clone();
        match change(&mut next, changes, unset) {
            Ok(()) => *current = next,
            Err(e) => problem = Some(e),
        }
    })?;
    if let Some(problem) = problem {
        bail!("{problem} (nothing was changed)");
    }
    if only_isolation {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({"isolation": manifest.isolation}))?);
    } else {
        println!("{}", serde_json::to_string_pretty(&manifest.config)?);
    }
    Ok(())
}

/// Applies the unsets, then the sets, to `m`.
fn change(m: &mut Manifest, set: Vec<(String, Value)>, unset: &[String]) -> Result<(), String> {
    for key in unset {
        match key.strip_prefix("isolated.") {
            _ if !is_isolation_key(key) => drop(m.config.shift_remove(key)),
            None => m.isolation = None,
            // Back to its default: rebuilt without the field.
            Some(field) => {
                if let Some(iso) = &m.isolation {
                    let mut map = serde_json::to_value(iso).unwrap_or_default();
                    if let Some(o) = map.as_object_mut() {
                        o.shift_remove(field);
                    }
                    m.isolation = serde_json::from_value(map).ok();
                }
            }
        }
    }
    for (key, value) in set {
        if !is_isolation_key(&key) {
            m.config.insert(key, value);
            continue;
        }
        let iso = m.isolation.get_or_insert_with(Isolation::default);
        match key.strip_prefix("isolated.") {
            None => {
                iso.enabled = value.as_bool().ok_or_else(|| format!("isolated takes true or false, not {value}"))?
            }
            Some(field) => iso.set(field, &value)?,
        }
    }
    Ok(())
}
