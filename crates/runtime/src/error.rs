//! Typed errors of the host library.

use std::path::PathBuf;

use bub_abi::{ErrorKind, HookError, HookId};

/// Why a plugin could not be discovered or loaded. Every message says what
/// failed, where, and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The manifest is missing or unreadable.
    #[error("cannot read manifest {path}: {cause}. Reinstall the plugin, or remove the folder")]
    ManifestRead {
        /// Manifest path.
        path: PathBuf,
        /// The I/O error.
        cause: std::io::Error,
    },
    /// The manifest is not valid.
    #[error("manifest {path} is not valid: {detail}. Reinstall the plugin")]
    ManifestInvalid {
        /// Manifest path.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The library file the manifest names does not exist.
    #[error("library {path} (named by the manifest) does not exist. Reinstall the plugin")]
    LibraryMissing {
        /// Library path.
        path: PathBuf,
    },
    /// dlopen failed.
    #[error("cannot open {path} as a shared library: {detail}. Is it a `cdylib` built for this platform?")]
    Open {
        /// Library path.
        path: PathBuf,
        /// The loader's message.
        detail: String,
    },
    /// The library does not export a bub root module.
    #[error("{path} is not a bub plugin: it exports no plugin root module. Build it with `bub_abi::export_plugin!`")]
    NoRootModule {
        /// Library path.
        path: PathBuf,
    },
    /// abi_stable's own header is incompatible.
    #[error("{path} was built with an incompatible abi_stable: {detail}. Rebuild it against bub-abi {host}")]
    AbiHeader {
        /// Library path.
        path: PathBuf,
        /// Detail.
        detail: String,
        /// Host ABI version.
        host: &'static str,
    },
    /// The plugin's ABI version is not compatible with the host's.
    #[error("{path} was built for plugin ABI {plugin}, but this host speaks ABI {host} ({why}). Rebuild the plugin against bub-abi {host_major}.x")]
    AbiVersion {
        /// Library path.
        path: PathBuf,
        /// The plugin's ABI version.
        plugin: String,
        /// The host's ABI version.
        host: &'static str,
        /// The host's major version.
        host_major: u64,
        /// Why.
        why: &'static str,
    },
    /// The plugin was built for ABI 1, which ABI 2 replaced.
    #[error(
        "{path} was built for plugin ABI {plugin} (bub-abi 1.x); this host speaks ABI 2, where hook arguments are host-owned values instead of JSON text. Rebuild the plugin against bub-abi 2.x: docs/plugin-guide.md, \"Porting a plugin from ABI 1\", lists what to change"
    )]
    AbiOne {
        /// Library path.
        path: PathBuf,
        /// The plugin's ABI version.
        plugin: String,
    },
    /// The plugin's types do not match the host's.
    #[error(
        "{path} has an incompatible ABI layout (built for ABI {plugin}): {detail}. Rebuild it against bub-abi {host}"
    )]
    Layout {
        /// Library path.
        path: PathBuf,
        /// The plugin's ABI version.
        plugin: String,
        /// The host's ABI version.
        host: &'static str,
        /// The first mismatch.
        detail: String,
    },
    /// abi_stable refused the root module.
    #[error("{path}: the root module could not be initialised: {detail}")]
    RootModule {
        /// Library path.
        path: PathBuf,
        /// Detail.
        detail: String,
    },
    /// The plugin's constructor failed or panicked.
    #[error("plugin '{name}' failed to initialise: {error}")]
    Init {
        /// Plugin name.
        name: String,
        /// The error.
        error: HookError,
    },
    /// The folder or library is not safe to load.
    #[error("refusing {path}: it {detail}. To fix: {fix}")]
    Untrusted {
        /// What was refused.
        path: PathBuf,
        /// What is wrong.
        detail: String,
        /// What to do.
        fix: String,
    },
    /// The library does not match its manifest.
    #[error("refusing {path}: it {detail}. Reinstall it with `bub plugins install`")]
    Integrity {
        /// The library.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// Another plugin of the same name came first.
    #[error("plugin name '{name}' is already taken by {first}; this copy is ignored. Remove or rename one of them")]
    Shadowed {
        /// Plugin name.
        name: String,
        /// Which plugin came first: its library, or what it is.
        first: String,
    },
    /// Another plugin whose settings variables are the same came first.
    #[error(
        "plugin '{name}' would read the settings variables {env}* of plugin '{other}' ({first}); this copy is \
         ignored. Rename one of them (`bub plugins install --name …`)"
    )]
    SettingsTaken {
        /// Plugin name.
        name: String,
        /// The plugin that came first.
        other: String,
        /// Where it is.
        first: String,
        /// The shared prefix, `BUB_E_M__`.
        env: String,
    },
}

/// A plugin failed inside a hook; in Bub this is the exception that stops the
/// dispatch and propagates to the caller.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", describe(.plugin, .hook, .error))]
pub struct HookFailure {
    /// The plugin's registered name.
    pub plugin: String,
    /// The hook.
    pub hook: HookId,
    /// What the plugin reported.
    pub error: HookError,
}

impl HookFailure {
    /// Whether the hook was cancelled at its deadline
    /// (`BUB_HOOK_TIMEOUT_SECONDS`) rather than failing by itself: a caller
    /// may wait and try again (the plugin may have been held up, as Python
    /// plugins are behind one that blocks their shared loop).
    pub fn timed_out(&self) -> bool {
        self.error.kind == ErrorKind::ERROR && self.error.message.ends_with(crate::runtime::DEADLINE_MARK)
    }

    /// Whether the plugin was held up rather than failing by itself: it
    /// ran past its deadline ([`timed_out`](Self::timed_out)), or its
    /// isolated process was ended under the call (another call of it
    /// wedged the process; it starts again at the next call). A caller may
    /// wait and try again.
    pub fn held_up(&self) -> bool {
        self.timed_out() || self.error.kind == ErrorKind::CLOSED
    }
}

fn describe(plugin: &str, hook: &HookId, error: &HookError) -> String {
    match error.kind {
        ErrorKind::PANIC => format!("plugin '{plugin}' panicked in hook '{hook}': {}", error.message),
        ErrorKind::ARGS => {
            format!("plugin '{plugin}' could not read the arguments of hook '{hook}': {}", error.message)
        }
        ErrorKind::TYPE => format!("plugin '{plugin}' returned an invalid value from hook '{hook}': {}", error.message),
        _ => format!("plugin '{plugin}' failed in hook '{hook}': {}", error.message),
    }
}

impl HookFailure {
    /// A failure attributed to `plugin` in `hook`.
    pub fn new(plugin: &str, hook: HookId, error: HookError) -> Self {
        HookFailure { plugin: plugin.to_owned(), hook, error }
    }
}
