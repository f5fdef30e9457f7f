//! Loading one plugin source into registry records: a folder's manifest,
//! integrity checks and config, a library opened once and registered, an
//! isolated plugin's process, a plugin set's members, and the names each
//! claims. [`HostBuilder::build`](crate::HostBuilder::build) walks the
//! sources in order and calls into here; what it decides (order, claims,
//! replacements) stays readable there, how one source loads lives here.

use std::{
    cell::RefCell,
    collections::HashMap,
    ffi::OsString,
    path::{Path, PathBuf},
};

use serde_json::Map;

use crate::{
    config::env_prefix,
    error::LoadError,
    host::{Places, PluginSource},
    integrity,
    loader::{self, Library},
    manifest::Manifest,
    members::member_record,
    registry::{Hooks, PluginRecord, PluginStatus},
    settings::RuntimeSettings,
};

/// Why an installed plugin is not loaded though enabled.
pub(crate) enum NotLoaded {
    /// Another plugin replaces it.
    ReplacedBy(String),
    /// The caller said so (it crashed a probe), with the reason.
    Skipped(String),
}

/// Which plugins are replaced, and by whom: every enabled installed
/// plugin's `replaces`, in discovery order; a plugin that is itself
/// replaced replaces nothing (so two plugins replacing each other leave the
/// first), and the builtin cannot be replaced.
pub(crate) fn replacements(
    sources: &[(String, PluginSource)],
    manifests: &[Option<Result<Manifest, LoadError>>],
) -> HashMap<String, NotLoaded> {
    let mut replaced: HashMap<String, NotLoaded> = HashMap::new();
    for ((_, source), manifest) in sources.iter().zip(manifests) {
        let (PluginSource::Folder(dir), Some(Ok(manifest))) = (source, manifest) else { continue };
        let own_folder = dir.file_name().is_some_and(|f| f == manifest.name.as_str());
        if !manifest.enabled || !own_folder || replaced.contains_key(&manifest.name) {
            continue;
        }
        for name in &manifest.replaces {
            if name == "builtin" {
                tracing::warn!(target: "bub::plugin", "plugin {} declares it replaces the builtin, which cannot be replaced; ignored", manifest.name);
                continue;
            }
            if name != &manifest.name {
                replaced.entry(name.clone()).or_insert_with(|| NotLoaded::ReplacedBy(manifest.name.clone()));
            }
        }
    }
    replaced
}

/// What every source's load reads: names already taken, replacements, the
/// app config and the host's places.
pub(crate) struct Loading<'a> {
    pub(crate) taken: &'a Taken,
    pub(crate) replaced: &'a HashMap<String, NotLoaded>,
    pub(crate) app_config: &'a Map<String, serde_json::Value>,
    pub(crate) places: &'a Places,
    /// Plugin folders' parents already found trustworthy in this load.
    pub(crate) parents_checked: &'a RefCell<Vec<PathBuf>>,
}

pub(crate) fn load_source(
    fallback_name: String,
    source: PluginSource,
    manifest: Option<Result<Manifest, LoadError>>,
    loading: &Loading<'_>,
    settings: &RuntimeSettings,
) -> Vec<PluginRecord> {
    let Loading { taken, places, .. } = *loading;
    match source {
        PluginSource::Static { module, config } => {
            let lib = Library { module };
            register_library(fallback_name, None, lib, &config, places)
        }
        PluginSource::StaticFromSettings { module, config } => {
            register_library(fallback_name, None, Library { module }, &config(settings), places)
        }
        PluginSource::Library { name, path, config } => match shadowed(&name, &path, taken) {
            Some(record) => vec![record],
            None => open_and_register(name, path, &config, places),
        },
        PluginSource::Folder(dir) => {
            let manifest = manifest.unwrap_or_else(|| Manifest::read(&dir));
            load_folder(fallback_name, &dir, manifest, loading, settings)
        }
    }
}

fn load_folder(
    fallback_name: String,
    dir: &Path,
    manifest: Result<Manifest, LoadError>,
    loading: &Loading<'_>,
    settings: &RuntimeSettings,
) -> Vec<PluginRecord> {
    let Loading { taken, replaced, app_config, places, parents_checked } = *loading;
    let mut manifest = match manifest {
        Ok(m) => m,
        Err(e) => return vec![PluginRecord::failed(fallback_name, Some(dir.to_path_buf()), e.to_string())],
    };
    // The name must be a safe one and the folder's own: a folder cannot
    // claim (and so shadow) another plugin's name.
    let folder = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if !crate::manifest::valid_name(&manifest.name) || manifest.name != folder {
        let detail = format!(
            "{}/plugin.json names the plugin \"{}\", but a plugin's name must be its folder's (\"{}\") and use only \
             letters, digits, '-', '_' and '.': reinstall it with `bub plugins install`",
            dir.display(),
            crate::manifest::printable(&manifest.name, 64),
            crate::manifest::printable(&folder, 64),
        );
        let mut record = PluginRecord::failed(fallback_name, Some(dir.to_path_buf()), detail);
        record.claims = false;
        return vec![record];
    }
    let path = manifest.library_path(dir);
    if let Some(record) = shadowed(&manifest.name, &path, taken) {
        return vec![record];
    }
    let by = match replaced.get(&manifest.name) {
        Some(NotLoaded::Skipped(reason)) if manifest.enabled => {
            return vec![PluginRecord::failed(manifest.name, Some(path), reason.clone())]
        }
        Some(NotLoaded::ReplacedBy(by)) => Some(by),
        _ => None,
    };
    if !manifest.enabled || by.is_some() {
        let mut r = PluginRecord::failed(manifest.name, Some(path), String::new());
        r.version = manifest.version.unwrap_or_default();
        r.abi_version = manifest.abi_version.unwrap_or_default();
        r.status = match by {
            Some(by) if manifest.enabled => PluginStatus::Replaced { by: by.clone() },
            _ => PluginStatus::Disabled,
        };
        return vec![r];
    }
    // Checked on the library opened once, and that open file is what loads.
    let file = match integrity::check_parents_once(dir, &mut parents_checked.borrow_mut())
        .and_then(|()| integrity::open_trusted(dir, &path, manifest.sha256.as_deref()))
    {
        Ok(file) => file,
        // A missing library says so rather than why it could not be opened.
        Err(_) if !path.is_file() => {
            let detail = LoadError::LibraryMissing { path: path.clone() }.to_string();
            return vec![PluginRecord::failed(manifest.name, Some(path), detail)];
        }
        Err(e) => return vec![PluginRecord::failed(manifest.name, Some(path), e.to_string())],
    };
    let config = crate::config::plugin_config(
        &manifest.name,
        std::mem::take(&mut manifest.config),
        app_config,
        settings.plugin_env.iter().cloned(),
    );
    if let Some(isolation) = manifest.isolated() {
        // Checked above as any library is; its own process checks it again
        // and runs it, so nothing of it runs here.
        drop(file);
        return load_isolated(
            manifest.name.clone(),
            dir,
            path,
            manifest.sha256.clone(),
            config,
            places,
            isolation,
            settings,
        );
    }
    // dlopen runs the library's constructors: plugin code too.
    let label = crate::runtime::watchdog::Label::new(manifest.name.as_str().into(), "loading");
    let opened = {
        let _mark = crate::runtime::watchdog::mark_label(label);
        loader::open_file(file, &path)
    };
    match opened {
        Ok(lib) => register_library(manifest.name, Some(path), lib, &config, places),
        Err(e) => vec![PluginRecord::failed(manifest.name, Some(path), e.to_string())],
    }
}

/// Starts an isolated plugin (see [`crate::isolation`]); its records, or
/// one failed record saying why it did not start.
#[allow(clippy::too_many_arguments)]
fn load_isolated(
    name: String,
    dir: &Path,
    path: PathBuf,
    sha256: Option<String>,
    config: Map<String, serde_json::Value>,
    places: &Places,
    isolation: &crate::isolation::Isolation,
    settings: &RuntimeSettings,
) -> Vec<PluginRecord> {
    let program = match settings.plugin_runner.clone().map(Ok).unwrap_or_else(std::env::current_exe) {
        Ok(p) => p,
        Err(e) => {
            let detail = format!("it is isolated, but this program's path is unknown ({e}) to run it in; set RuntimeSettings::plugin_runner");
            return vec![PluginRecord::failed(name, Some(path), detail)];
        }
    };
    let wanted = crate::isolation::BASE_ENV.iter().copied().chain(isolation.env.iter().map(String::as_str));
    let env =
        wanted.filter_map(|k| settings.environment.get(k).map(|v| (OsString::from(k), OsString::from(v)))).collect();
    let spec = crate::isolation::supervisor::Spec {
        name: name.clone(),
        dir: dir.to_path_buf(),
        library: path.clone(),
        sha256,
        config,
        places: places.clone(),
        isolation: isolation.clone(),
        program,
        env,
        sync_limit: settings.hook_timeout.unwrap_or(std::time::Duration::from_secs(300)),
        async_limit: settings.hook_timeout,
    };
    match crate::isolation::supervisor::load(spec) {
        Ok(records) => records,
        Err(why) => {
            let mut record = PluginRecord::failed(name.clone(), Some(path), format!("isolated plugin '{name}': {why}"));
            record.isolated = true;
            vec![record]
        }
    }
}

/// The names claimed so far in a load, and their settings variables'
/// prefixes: each looked up by hash, not by comparing every earlier
/// plugin's prefix (which made loading N plugins quadratic).
#[derive(Default)]
pub(crate) struct Taken {
    /// Name → the library or folder that claimed it (empty: built in).
    by_name: HashMap<String, PathBuf>,
    /// Settings prefix ([`env_prefix`]) → the first name that claimed it.
    by_env: HashMap<String, String>,
}

impl Taken {
    /// Claims `name` for `path`; the first claim of a name or a prefix stays.
    pub(crate) fn take(&mut self, name: &str, path: Option<&Path>) {
        if self.by_name.contains_key(name) {
            return;
        }
        self.by_name.insert(name.to_owned(), path.map(Path::to_path_buf).unwrap_or_default());
        self.by_env.entry(env_prefix(name)).or_insert_with(|| name.to_owned());
    }
}

/// The record of a plugin whose name, or settings variables, an earlier
/// plugin already took.
pub(crate) fn shadowed(name: &str, path: &Path, taken: &Taken) -> Option<PluginRecord> {
    let first = |p: &PathBuf| {
        if p.as_os_str().is_empty() {
            "a plugin built into bub".to_owned()
        } else {
            p.display().to_string()
        }
    };
    let detail = match taken.by_name.get(name) {
        Some(path) => LoadError::Shadowed { name: name.to_owned(), first: first(path) },
        None => {
            let env = env_prefix(name);
            let other = taken.by_env.get(&env)?;
            let path = &taken.by_name[other];
            LoadError::SettingsTaken { name: name.to_owned(), other: other.clone(), first: first(path), env }
        }
    };
    Some(PluginRecord::failed(name.to_owned(), Some(path.to_path_buf()), detail.to_string()))
}

/// Opens (and checks) the library at `path`, then initialises and records it.
fn open_and_register(
    name: String,
    path: PathBuf,
    config: &Map<String, serde_json::Value>,
    places: &Places,
) -> Vec<PluginRecord> {
    match loader::open(&path) {
        Ok(lib) => register_library(name, Some(path), lib, config, places),
        Err(e) => vec![PluginRecord::failed(name, Some(path), e.to_string())],
    }
}

fn register_library(
    name: String,
    path: Option<PathBuf>,
    lib: Library,
    config: &Map<String, serde_json::Value>,
    places: &Places,
) -> Vec<PluginRecord> {
    let mut record = PluginRecord {
        name,
        version: lib.version().to_owned(),
        abi_version: lib.abi_version().to_owned(),
        description: lib.description().to_owned(),
        path,
        status: PluginStatus::Loaded,
        hooks: None,
        instance: bub_abi::abi::Instance::NONE,
        member_of: None,
        isolated: false,
        claims: true,
    };
    // The plugin's constructor is plugin code: a crash in it is named.
    let label = crate::runtime::watchdog::Label::new(record.name.as_str().into(), "loading");
    let init = {
        let _mark = crate::runtime::watchdog::mark_label(label);
        loader::initialise(&lib, &record.name, config, places)
    };
    match init {
        Ok(instance) => {
            record.hooks = Some(Hooks::Table(lib.module.hooks()));
            record.instance = instance;
        }
        Err(e) => {
            record.status = PluginStatus::Failed { detail: e.to_string() };
            return vec![record];
        }
    }
    let members = {
        let _mark = crate::runtime::watchdog::mark_label(label);
        loader::members(&lib, record.instance)
    };
    let mut records = Vec::new();
    match members {
        Ok(members) => {
            // A set's hooks are its members': the library's own table
            // (every hook it can forward) is not registered for it.
            if !members.is_empty() {
                record.hooks = None;
            }
            for member in members {
                records.push(member_record(&record, member));
            }
        }
        Err(e) => {
            tracing::warn!(target: "bub::plugin", "plugin set {}: its members could not be listed: {e}", record.name)
        }
    }
    records.insert(0, record);
    records
}
