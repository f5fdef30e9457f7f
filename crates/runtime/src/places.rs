//! Where things live under a Bub home: the one place that spells their
//! names, so that a reader of `config.json` and its writer cannot drift
//! apart; and how a path given by a user becomes the absolute one every
//! check and log names.

use std::path::{Path, PathBuf};

/// The user's settings file, under the home: the model, keys, channel
/// sections, plugin settings (`bub onboard` writes it; the agent, the
/// gateway, plugin configuration and skills templates read it).
pub const CONFIG_FILE: &str = "config.json";

/// `<home>/config.json`.
pub fn config_file(home: &Path) -> PathBuf {
    home.join(CONFIG_FILE)
}

/// Makes `p` absolute against the current directory (without touching disk).
pub fn absolute(p: PathBuf) -> PathBuf {
    if p.is_absolute() {
        p
    } else {
        std::env::current_dir().map(|d| d.join(&p)).unwrap_or(p)
    }
}
