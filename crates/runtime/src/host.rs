//! [`Host`]: discovery → load → register, then dispatch through [`Runtime`].

use std::{cell::RefCell, collections::HashMap, path::PathBuf, sync::Arc};

use bub_abi::abi::PluginModRef;
use serde_json::Map;

use crate::{
    discovery::SearchPath,
    error::LoadError,
    load::{load_source, replacements, shadowed, Loading, NotLoaded, Taken},
    manifest::Manifest,
    registry::{PluginStatus, Registry},
    runtime::Runtime,
    settings::RuntimeSettings,
};

/// A plugin to register: compiled in, or a library file.
pub enum PluginSource {
    /// Compiled into the host (like `builtin`, or a plugin under test),
    /// constructed with `config`.
    Static {
        /// Its root module (`bub_abi::static_plugin!`).
        module: PluginModRef,
        /// Constructor config.
        config: Map<String, serde_json::Value>,
    },
    /// Compiled into the host, constructed with the config `config` derives
    /// from the host's final settings (called when the host is built,
    /// whatever order the builder was told things in).
    StaticFromSettings {
        /// Its root module (`bub_abi::static_plugin!`).
        module: PluginModRef,
        /// The constructor config, from the host's settings.
        config: fn(&RuntimeSettings) -> Map<String, serde_json::Value>,
    },
    /// An installed plugin folder (manifest + library).
    Folder(PathBuf),
    /// A library file, registered under `name` with `config`.
    Library {
        /// Registered name.
        name: String,
        /// Library path.
        path: PathBuf,
        /// Constructor config.
        config: Map<String, serde_json::Value>,
    },
}

/// Where a host lives: its home and its workspace. Plugins are told both
/// (and their own data folder) when they are initialised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Places {
    /// Bub's home (`$BUB_HOME`, `~/.bub` by default): plugins, config, tapes.
    pub home: PathBuf,
    /// The workspace the host works in.
    pub workspace: PathBuf,
}

impl Places {
    /// Plugin `name`'s data folder: `<home>/data/<name>`.
    pub fn data_dir(&self, name: &str) -> PathBuf {
        self.home.join("data").join(name)
    }
}

impl Default for Places {
    /// `$BUB_HOME` (else `~/.bub`) and the current directory.
    fn default() -> Self {
        Places { home: crate::discovery::bub_home(), workspace: current_workspace() }
    }
}

/// The default workspace: the current directory.
fn current_workspace() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))
}

/// Builds a [`Host`] from plugin sources, in registration order.
#[derive(Default)]
pub struct HostBuilder {
    sources: Vec<(String, PluginSource)>,
    // `$BUB_HOME/config.json` (what `bub onboard` writes): a plugin's section
    // overrides its manifest config.
    app_config: Map<String, serde_json::Value>,
    home: Option<PathBuf>,
    workspace: Option<PathBuf>,
    // Installed plugins not to load, with the reason (they crashed a probe).
    skip: HashMap<String, String>,
    settings: RuntimeSettings,
}

impl HostBuilder {
    /// An empty builder (no builtin).
    pub fn new() -> Self {
        HostBuilder::default()
    }

    /// Lists the installed plugin `name` as failed with `reason` instead of
    /// loading it (`bub plugins list` probing around a plugin that crashes).
    pub fn skip(mut self, name: impl Into<String>, reason: impl Into<String>) -> Self {
        self.skip.insert(name.into(), reason.into());
        self
    }

    /// The settings the host's calls follow (deadlines, caps, plugin
    /// configuration from the environment); default: the documented
    /// defaults and no environment (`bub` passes `RuntimeSettings::from_env()`).
    pub fn settings(mut self, settings: RuntimeSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Adds a plugin compiled into the host, registered as `name` before
    /// the installed ones (Bub's builtin: `bub_host::WithBuiltin::builtin`).
    pub fn with_static(self, name: impl Into<String>, module: PluginModRef) -> Self {
        self.with_static_config(name, module, Map::new())
    }

    /// [`with_static`](Self::with_static), constructed with `config` (a
    /// plugin tested in-process: `bub_runtime::testing::PluginTest`).
    pub fn with_static_config(
        mut self,
        name: impl Into<String>,
        module: PluginModRef,
        config: Map<String, serde_json::Value>,
    ) -> Self {
        self.sources.push((name.into(), PluginSource::Static { module, config }));
        self
    }

    /// [`with_static`](Self::with_static), constructed with the config
    /// `config` derives from the host's settings (the builtin: the knobs it
    /// needs outside a turn, from the binary's resolved environment).
    pub fn with_static_from_settings(
        mut self,
        name: impl Into<String>,
        module: PluginModRef,
        config: fn(&RuntimeSettings) -> Map<String, serde_json::Value>,
    ) -> Self {
        self.sources.push((name.into(), PluginSource::StaticFromSettings { module, config }));
        self
    }

    /// The home plugins are told about (default: the parent of the first
    /// plugin root given to [`discovered`](Self::discovered), else `$BUB_HOME`).
    pub fn home(mut self, home: impl Into<PathBuf>) -> Self {
        self.home = Some(home.into());
        self
    }

    /// The workspace plugins are told about (default: the current directory).
    pub fn workspace(mut self, workspace: impl Into<PathBuf>) -> Self {
        self.workspace = Some(workspace.into());
        self
    }

    /// Adds every installed plugin found on `search`, in discovery order.
    pub fn discovered(mut self, search: &SearchPath) -> Self {
        if let Some(home) = search.roots.first().and_then(|plugins| plugins.parent()) {
            self.app_config = crate::config::read_app_config(home);
            if self.home.is_none() {
                self.home = Some(home.to_path_buf());
            }
        }
        for (entry, why) in &search.ignored {
            tracing::warn!(target: "bub::plugin", "plugin.path_ignored entry={entry:?}: {why}");
        }
        for dir in search.candidates() {
            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            self.sources.push((name, PluginSource::Folder(dir)));
        }
        self
    }

    /// Adds one source.
    pub fn source(mut self, name: impl Into<String>, source: PluginSource) -> Self {
        self.sources.push((name.into(), source));
        self
    }

    /// Adds a library file under `name`.
    pub fn library(
        self,
        name: impl Into<String>,
        path: impl Into<PathBuf>,
        config: Map<String, serde_json::Value>,
    ) -> Self {
        let name = name.into();
        self.source(name.clone(), PluginSource::Library { name, path: path.into(), config })
    }

    /// Loads everything and registers what loaded. Failures are recorded on
    /// the plugin's status (and logged); the host always comes up.
    pub fn build(self) -> Host {
        // The defaults cost a syscall and an environment read: only when needed.
        let places = Places {
            home: self.home.unwrap_or_else(crate::discovery::bub_home),
            workspace: self.workspace.unwrap_or_else(current_workspace),
        };
        let mut registry = Registry::with_settings(self.settings.clone());
        let mut taken = Taken::default();
        // Each folder's manifest is read once here (the file cache keeps only
        // a few files, and with many plugins a second read would miss it).
        let manifests: Vec<Option<Result<Manifest, LoadError>>> = self
            .sources
            .iter()
            .map(|(_, source)| match source {
                PluginSource::Folder(dir) => Some(Manifest::read(dir)),
                _ => None,
            })
            .collect();
        let mut replaced = replacements(&self.sources, &manifests);
        let parents_checked = RefCell::new(Vec::new());
        for (name, reason) in &self.skip {
            replaced.insert(name.clone(), NotLoaded::Skipped(reason.clone()));
        }
        for ((fallback_name, source), manifest) in self.sources.into_iter().zip(manifests) {
            let loading = Loading {
                taken: &taken,
                replaced: &replaced,
                app_config: &self.app_config,
                places: &places,
                parents_checked: &parents_checked,
            };
            let records = load_source(fallback_name, source, manifest, &loading, &self.settings);
            for record in records {
                let record = match &record.member_of {
                    // A member cannot take a name an earlier plugin holds.
                    Some(_) => match shadowed(&record.name, &record.path.clone().unwrap_or_default(), &taken) {
                        Some(mut failed) => {
                            failed.member_of = record.member_of.clone();
                            failed
                        }
                        None => record,
                    },
                    None => record,
                };
                if let PluginStatus::Failed { detail } = &record.status {
                    tracing::warn!(target: "bub::plugin", "plugin.load_failed plugin={} {detail}", record.name);
                }
                // The first plugin discovered under a name claims it, even if it
                // failed: the order stays deterministic and the failure visible.
                // A folder whose manifest names another plugin claims nothing.
                if record.claims {
                    taken.take(&record.name, record.path.as_deref());
                }
                registry.register(record);
            }
        }
        let registry = Arc::new(registry);
        crate::runtime::rest::register(&registry);
        Host { registry, places: Arc::new(places) }
    }
}

/// A host with its plugins loaded and registered.
#[derive(Clone)]
pub struct Host {
    registry: Arc<Registry>,
    places: Arc<Places>,
}

impl Host {
    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Where this host lives.
    pub fn places(&self) -> &Places {
        &self.places
    }

    /// The dispatcher.
    pub fn runtime(&self) -> Runtime {
        Runtime::new(self.registry.clone())
    }
}
