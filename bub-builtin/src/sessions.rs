//! Per-session settings (Bub's session settings): what the `,model` command
//! sets lives on in `<home>/sessions.json` (`{session: {model: …}}`), read by
//! the builtin's `load_state` and written by its `save_state` when changed.
//! Written to a temporary file and renamed, so a crash never leaves half a
//! file, under a lock, so parallel turns never lose each other's changes.

use std::path::Path;

use bub_abi::{BoxError, TurnState};
use serde_json::{Map, Value};

/// The keys kept per session.
const KEPT: &[&str] = &["model"];

fn path(home: &Path) -> std::path::PathBuf {
    home.join("sessions.json")
}

/// Every session's settings (nothing when the file is missing or unreadable).
pub fn load(home: &Path) -> Map<String, Value> {
    match bub_runtime::install::read_settings_file(&path(home)) {
        Ok(text) => match serde_json::from_str(&text) {
            Ok(Value::Object(m)) => m,
            _ => {
                tracing::warn!(target: "bub::builtin", "{} is not a JSON object; session settings ignored", path(home).display());
                Map::new()
            }
        },
        Err(_) => Map::new(),
    }
}

/// Stores the kept keys of `state` for `session_id` when they changed.
pub fn save(home: &Path, session_id: &str, state: &TurnState) -> Result<(), BoxError> {
    let mut wanted = Map::new();
    for key in KEPT {
        if let Some(v) = state.get_value(key).filter(|v| !v.is_null()) {
            wanted.insert((*key).to_owned(), v);
        }
    }
    let unchanged = |all: &Map<String, Value>| {
        all.get(session_id).and_then(Value::as_object).cloned().unwrap_or_default() == wanted
    };
    // Most turns change nothing: no lock for them.
    if unchanged(&load(home)) {
        return Ok(());
    }
    let lock = home.join(".sessions.lock");
    let _lock = bub_runtime::install::lock_file(&lock).map_err(|e| format!("cannot lock {}: {e}", lock.display()))?;
    let mut all = load(home);
    if unchanged(&all) {
        return Ok(());
    }
    if wanted.is_empty() {
        all.remove(session_id);
    } else {
        all.insert(session_id.to_owned(), Value::Object(wanted));
    }
    bub_abi::files::create_private_dir(home)?;
    bub_abi::files::write_private(&path(home), &serde_json::to_vec_pretty(&Value::Object(all))?)
        .map_err(|e| format!("cannot write {}: {e}", path(home).display()).into())
}
