//! bub-rs's own builtin skills (`gh`, `skill-creator`, `telegram`), in its
//! own words and for its own tooling, listed where Bub lists its builtin
//! skills: after the project's, the user's and the installed plugins'.
//!
//! They are compiled into the binary (`crates/builtin/skills/`) and written
//! out under `$BUB_HOME/builtin-skills/<digest>/` on first use, because a
//! skill is a file the model reads by its location (and a skill may name
//! files beside it). The digest of their text names the folder, so an
//! upgrade writes a new one and never serves an older text; older folders
//! are removed. When the python bridge also names Bub's own builtin skills,
//! these come first and the list holds each name once.

use std::path::{Path, PathBuf};

/// The skills: folder name and `SKILL.md` text.
pub const SKILLS: [(&str, &str); 3] = [
    ("gh", include_str!("../skills/gh/SKILL.md")),
    ("skill-creator", include_str!("../skills/skill-creator/SKILL.md")),
    ("telegram", include_str!("../skills/telegram/SKILL.md")),
];

/// Where they are kept, under the home.
pub const FOLDER: &str = "builtin-skills";

fn digest() -> String {
    // FNV-1a over the texts: a name for this version of them, not a secret.
    let mut h: u64 = 0xcbf29ce484222325;
    for (name, text) in SKILLS {
        for b in name.bytes().chain([0]).chain(text.bytes()) {
            h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        }
    }
    format!("{h:016x}")
}

/// The folder holding the builtin skills under `home`, written if missing;
/// None (logged) when it cannot be written (a read-only home: the other
/// skills still work).
pub fn root(home: &Path) -> Option<PathBuf> {
    let base = home.join(FOLDER);
    let root = base.join(digest());
    if SKILLS.iter().all(|(name, _)| root.join(name).join("SKILL.md").is_file()) {
        return Some(root);
    }
    let written = (|| -> std::io::Result<()> {
        for (name, text) in SKILLS {
            let dir = root.join(name);
            bub_kit::files::create_private_dir(&dir)?;
            bub_kit::files::write_private(&dir.join("SKILL.md"), text.as_bytes())?;
        }
        Ok(())
    })();
    if let Err(e) = written {
        tracing::warn!(target: "bub::skills", "cannot write the builtin skills under {}: {e}", base.display());
        return None;
    }
    // Earlier versions' folders go.
    for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
        if entry.path() != root && entry.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    Some(root)
}
