//! What can go wrong installing, updating, removing or toggling a plugin,
//! each variant with the message that says what to do.

use std::path::{Path, PathBuf};

use crate::error::LoadError;

/// Why an install, removal or toggle failed. Every message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The source path does not exist.
    #[error("{path} does not exist. Pass a built plugin library (.so) or a plugin crate folder")]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// `cargo build` failed.
    #[error("building {dir} failed ({status}); fix the errors above and try again")]
    BuildFailed {
        /// The crate folder.
        dir: PathBuf,
        /// cargo's exit status.
        status: String,
    },
    /// The crate builds no cdylib.
    #[error("{dir} builds no shared library. Add `[lib] crate-type = [\"cdylib\"]` to its Cargo.toml")]
    NoLibrary {
        /// The crate folder.
        dir: PathBuf,
    },
    /// The crate builds several cdylibs.
    #[error("{dir} builds several shared libraries ({libs}); pass the one to install")]
    SeveralLibraries {
        /// The crate folder.
        dir: PathBuf,
        /// Their paths.
        libs: String,
    },
    /// The library failed the load checks; nothing was installed.
    #[error("not installed: {0}")]
    Check(LoadError),
    /// The library failed the load checks (the message names the source file).
    #[error("not installed: {0}")]
    Rejected(String),
    /// A git repository or crate could not be fetched.
    #[error("cannot fetch {spec}: {why}")]
    Fetch {
        /// The source, as given.
        spec: String,
        /// What failed.
        why: String,
    },
    /// `update` of a plugin whose source is not recorded.
    #[error("{name} has no recorded source (it was installed before bub recorded sources); install it again with `bub plugins install <library, folder, git URL or crate>`")]
    NoSource {
        /// The plugin.
        name: String,
    },
    /// The plugin name is not usable as a folder name.
    #[error("invalid plugin name {name:?}: use 1 to 64 letters, digits, '-', '_' or '.', not starting with '.' (and not `builtin`, the host's own)")]
    InvalidName {
        /// The name.
        name: String,
    },
    /// Another installed plugin reads the same environment variables.
    #[error("plugin name {name:?} collides with the installed plugin {other:?}: both would read {env}* settings; choose another name with --name")]
    NameCollision {
        /// The new name.
        name: String,
        /// The installed one.
        other: String,
        /// The shared variable prefix.
        env: String,
    },
    /// No plugin of that name is installed.
    #[error("no plugin named '{name}' is installed in {root}. See `bub plugins list`")]
    NotInstalled {
        /// The name.
        name: String,
        /// The plugins folder.
        root: PathBuf,
    },
    /// A file operation failed.
    #[error("cannot {what} {path}: {cause}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// The error.
        cause: std::io::Error,
    },
}

pub(super) fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> InstallError {
    let path = path.to_owned();
    move |cause| InstallError::Io { what, path, cause }
}

// Not `#[from]`: the message already holds the load error, and a `source`
// would print it a second time in an error chain (`{:#}`).
impl From<LoadError> for InstallError {
    fn from(e: LoadError) -> Self {
        InstallError::Check(e)
    }
}
