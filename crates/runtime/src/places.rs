//! Where things live under a Bub home: the one place that spells their
//! names, so that a reader of `config.json` and its writer cannot drift
//! apart.

use std::path::{Path, PathBuf};

/// The user's settings file, under the home: the model, keys, channel
/// sections, plugin settings (`bub onboard` writes it; the agent, the
/// gateway, plugin configuration and skills templates read it).
pub const CONFIG_FILE: &str = "config.json";

/// `<home>/config.json`.
pub fn config_file(home: &Path) -> PathBuf {
    home.join(CONFIG_FILE)
}
