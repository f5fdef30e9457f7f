//! The manifest of an installed plugin (`plugin.json`).

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::LoadError;

/// File name of the manifest inside a plugin folder.
pub const MANIFEST_FILE: &str = "plugin.json";

/// What an installed plugin folder declares about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The name the plugin is registered under (like a Python entry-point name).
    pub name: String,
    /// The library file, relative to the plugin folder (a plain file name).
    pub library: String,
    /// The plugin's version, as installed.
    #[serde(default)]
    pub version: Option<String>,
    /// The ABI version the plugin was built for, as installed.
    #[serde(default)]
    pub abi_version: Option<String>,
    /// sha256 of the library, hex.
    #[serde(default)]
    pub sha256: Option<String>,
    /// When it was installed (RFC 3339).
    #[serde(default)]
    pub installed_at: Option<String>,
    /// Whether the plugin is loaded (a disabled plugin is listed, not loaded).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Configuration handed to the plugin's constructor.
    #[serde(default)]
    pub config: Map<String, Value>,
    /// Plugins this one replaces (declared by the library, recorded at
    /// install): listed as `replaced`, not loaded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaces: Vec<String>,
    /// Where it was installed from (`bub plugins update` fetches it again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<crate::source::Source>,
    /// Whether (and how) it runs in a process of its own
    /// (`bub plugins install --isolated`, `bub plugins config NAME isolated=true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<crate::isolation::Isolation>,
}

impl Manifest {
    /// Its isolation, when enabled.
    pub fn isolated(&self) -> Option<&crate::isolation::Isolation> {
        self.isolation.as_ref().filter(|i| i.enabled)
    }
}

fn yes() -> bool {
    true
}

/// Whether `name` may name a plugin: 1–64 ASCII letters, digits, `-`, `_`
/// and `.`, not starting with `.` (so it is a safe folder name, prints as
/// itself, and is never a hidden installer folder).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// `text` fit to print in a terminal row: control characters and bidi
/// overrides escaped (a plugin cannot forge rows or reorder text), and at
/// most `max` characters (`…` marks a cut).
pub fn printable(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (n, c) in text.chars().enumerate() {
        if n >= max {
            out.push('…');
            break;
        }
        let bidi =
            matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}');
        if c.is_control() || bidi {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

impl Manifest {
    /// Reads and validates `<dir>/plugin.json`.
    pub fn read(dir: &Path) -> Result<Manifest, LoadError> {
        let path = dir.join(MANIFEST_FILE);
        let text = crate::files::read_settings_file_now(&path)
            .map_err(|cause| LoadError::ManifestRead { path: path.clone(), cause })?;
        let manifest: Manifest = serde_json::from_str(&text)
            .map_err(|e| LoadError::ManifestInvalid { path: path.clone(), detail: e.to_string() })?;
        manifest.validate(&path)?;
        Ok(manifest)
    }

    fn validate(&self, path: &Path) -> Result<(), LoadError> {
        let invalid = |detail: String| LoadError::ManifestInvalid { path: path.to_owned(), detail };
        if self.name.trim().is_empty() {
            return Err(invalid("`name` is empty".into()));
        }
        let lib = Path::new(&self.library);
        let plain = lib.components().count() == 1 && matches!(lib.components().next(), Some(Component::Normal(_)));
        if !plain {
            return Err(invalid(format!(
                "`library` must be a file name inside the plugin folder, got {:?}",
                self.library
            )));
        }
        Ok(())
    }

    /// The absolute path of the library inside `dir`.
    pub fn library_path(&self, dir: &Path) -> PathBuf {
        dir.join(&self.library)
    }
}
