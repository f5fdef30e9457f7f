//! A plugin's configuration, and where each part comes from.
//!
//! Lowest first: the manifest's `config` (what the plugin ships), the
//! plugin's section of `$BUB_HOME/config.json` (merged key by key, maps
//! recursively), then `BUB_<NAME>__<KEY>` variables. The same precedence
//! for every plugin, in the one function the loader calls
//! ([`plugin_config`]); `bub plugins config` edits only the first layer.

use std::path::Path;

use serde_json::{Map, Value};

use bub_abi::types::StateMap;

/// The configuration plugin `name` is given: `manifest` under its
/// `config.json` section (`app_config[name]`) under its variables (`vars`).
/// A section that is not a map is ignored with a warning that says what to
/// write instead.
pub fn plugin_config(
    name: &str,
    manifest: Map<String, Value>,
    app_config: &Map<String, Value>,
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Map<String, Value> {
    let mut config = manifest;
    match app_config.get(name) {
        Some(Value::Object(section)) => deep_merge(&mut config, section.clone()),
        None => {}
        Some(other) => tracing::warn!(
            target: "bub::plugin",
            "config.json: the section \"{}\" is {}, not an object of settings; ignored (write {{\"{}\": {{\"key\": …}}}})",
            name,
            match other {
                serde_json::Value::Array(_) => "a list",
                serde_json::Value::String(_) => "a string",
                serde_json::Value::Null => "null",
                _ => "a scalar",
            },
            name
        ),
    }
    config.extend(env_config(name, vars));
    config
}

/// `<home>/config.json`, or nothing (a broken file is reported, not fatal).
pub(crate) fn read_app_config(home: &Path) -> Map<String, serde_json::Value> {
    let path = crate::places::config_file(home);
    let problem = match crate::files::read_settings_file(&path) {
        Ok(text) => match serde_json::from_str(&text) {
            Ok(serde_json::Value::Object(m)) => return m,
            Ok(_) => "is not a JSON object".to_owned(),
            Err(e) => format!("is not valid JSON ({e})"),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Map::new(),
        Err(e) => format!("cannot be read: {e}"),
    };
    tracing::warn!(
        target: "bub::plugin",
        "{} {problem}; plugins get their manifest config only. Fix it or run `bub onboard`",
        path.display()
    );
    Map::new()
}

/// Config keys from the environment: `BUB_<NAME>__<KEY>=value` sets `key`
/// (lowercased) of plugin `name` (uppercased, `-` as `_`), over the manifest
/// and `config.json`. A value that parses as JSON is JSON, otherwise a string.
pub fn env_config(
    name: &str,
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Map<String, serde_json::Value> {
    let prefix = env_prefix(name);
    vars.filter_map(|(k, v)| {
        let key = k.to_str()?.strip_prefix(&prefix)?.to_lowercase();
        let text = v.into_string().ok()?;
        let value = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
        (!key.is_empty()).then_some((key, value))
    })
    .collect()
}

/// The prefix of plugin `name`'s settings variables: `BUB_<NAME>__`, upper
/// case, `-` as `_` (so `e-m` and `e_m` share one).
pub fn env_prefix(name: &str) -> String {
    format!("BUB_{}__", name.to_uppercase().replace('-', "_"))
}

/// Merges `from` into `into`, recursing where both sides hold maps.
pub fn deep_merge(into: &mut StateMap, from: StateMap) {
    for (k, v) in from {
        match (into.get_mut(&k), v) {
            (Some(Value::Object(a)), Value::Object(b)) => deep_merge(a, b),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}
