//! The nearest `.env` (Bub's `load_dotenv(find_dotenv(usecwd=True))`): the
//! first `.env` in the current folder or one of its parents is read into
//! the process environment, never overriding a variable already set, before
//! the settings are resolved — so its variables configure bub and reach
//! the commands the tools run, as in Bub.
//!
//! One check Bub does not make: the file must belong to the user running
//! bub (or root) and not be writable by others, since whoever can write it
//! chooses where the model's API key is sent (`BUB_API_BASE`). The check is
//! made on the file opened once, and what is parsed is what that open file
//! holds: a check of the path followed by a second open could be raced by
//! anyone who owns a folder above it. A refused file is named on standard
//! error.

use std::sync::OnceLock;

/// A `.env` larger than this is refused (it is a handful of settings).
const MAX_DOTENV_BYTES: u64 = 1024 * 1024;

/// The variables the `.env` set (not those of the environment), so that
/// `bub gateway --install` does not copy them out of it.
static LOADED: OnceLock<Vec<String>> = OnceLock::new();

/// Whether variable `key` came from the `.env` file.
pub fn from_dotenv(key: &str) -> bool {
    LOADED.get().is_some_and(|keys| keys.iter().any(|k| k == key))
}

/// Loads the nearest `.env`; call before any thread starts.
pub fn load() {
    let Ok(start) = std::env::current_dir() else { return };
    let Some(path) = start.ancestors().map(|d| d.join(".env")).find(|p| p.is_file()) else { return };
    let bytes = match bub_kit::files::read_trusted(&path, MAX_DOTENV_BYTES) {
        Ok(bytes) => bytes,
        Err(why) => {
            eprintln!("warning: {} not loaded: {why}", path.display());
            return;
        }
    };
    // Existing variables win (dotenvy never overrides), as python-dotenv's
    // default `override=False`.
    let before: std::collections::HashSet<String> =
        std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()).collect();
    if let Err(e) = dotenvy::from_read(bytes.as_slice()) {
        eprintln!("warning: {} not loaded: {e}", path.display());
    }
    let set = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()).filter(|k| !before.contains(k)).collect();
    let _ = LOADED.set(set);
}
