//! Opens a plugin library and checks it before any of its code runs.
//!
//! The checks, in order, each with its own precise error:
//!
//! 1. `dlopen` (absolute paths only) — not a library, empty file, wrong platform;
//! 2. abi_stable's header — the library exports no bub root module;
//! 3. the ABI version (semver): the major must equal the host's;
//! 4. the type layout, checked by abi_stable, made *tolerant* of one thing:
//!    a plugin built against an older minor ABI has fewer hook slots.
//!    abi_stable's stock check rejects that ("too many fields"), which would
//!    make every new host refuse every plugin of the previous minor. We run
//!    the check ourselves and accept exactly that case: field-count shortfalls
//!    of prefix types. Inserting a slot mid-table or changing a signature is
//!    still rejected;
//! 5. the root module is initialised, then the plugin's constructor runs.
//!
//! Step 4 walks the whole type graph and costs ~0.3 ms per library, the
//! largest part of loading. Plugins export a layout fingerprint (a hash of
//! the `bub-abi` source that defines the layout, see
//! `bub_abi::abi::LAYOUT_FINGERPRINT`); one equal to the host's, or to a
//! plugin's that passed the full check in this process, skips the walk.
//!
//! Libraries are never unloaded: a plugin's statics, thread-locals and
//! runtime threads must outlive every use, and `dlclose` with live TLS
//! destructors is unsound. Reloading means a new process.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    sync::{Mutex, OnceLock},
};

use abi_stable::{
    abi_stability::abi_checking::{check_layout_compatibility, AbiInstability, AbiInstabilityErrors},
    library::{lib_header_from_raw_library, LibraryError, RawLibrary},
    std_types::{RResult, RStr},
    type_layout::TLFieldOrFunction,
    StableAbi,
};
use bub_abi::{
    abi::{InitArgs, Instance, PluginModRef, LAYOUT_FINGERPRINT, LAYOUT_FINGERPRINT_SYMBOL},
    ABI_VERSION,
};
use serde_json::{Map, Value};

use crate::{error::LoadError, host::Places, host_services::host_services};

/// A library that passed every check; its module is ready to initialise.
#[derive(Clone, Copy)]
pub struct Library {
    /// The root module.
    pub module: PluginModRef,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library").field("name", &self.name()).finish()
    }
}

impl Library {
    /// The plugin's own name (its crate name unless overridden).
    pub fn name(&self) -> &'static str {
        self.module.name().as_str()
    }
    /// The plugin's version.
    pub fn version(&self) -> &'static str {
        self.module.version().as_str()
    }
    /// The plugin's description.
    pub fn description(&self) -> &'static str {
        self.module.description().as_str()
    }
    /// The ABI version the plugin was built against.
    pub fn abi_version(&self) -> &'static str {
        self.module.abi_version().as_str()
    }
    /// The plugins it declares it replaces (none before ABI 2.1).
    pub fn replaces(&self) -> Vec<String> {
        self.module.replaces().map(|r| r.iter().map(|s| s.as_str().to_owned()).collect()).unwrap_or_default()
    }
}

/// The host's ABI version, parsed.
pub fn host_abi() -> semver::Version {
    semver::Version::parse(ABI_VERSION).expect("bub-abi's version is valid semver")
}

/// Opens and checks the library at `path` (steps 1–4).
pub fn open(path: &Path) -> Result<Library, LoadError> {
    let path = crate::places::absolute(path.to_path_buf());
    open_as(&path, &path, None)
}

/// Opens and checks the library already open as `file` (whose trust and
/// hash were checked on that very descriptor), through `/proc/self/fd/N`,
/// so that what is loaded is exactly what was checked even if `path` is
/// swapped meanwhile. `path` names it in messages.
///
/// A loaded library keeps its descriptor open for the life of the process:
/// the dynamic loader recognises libraries by the name they were opened
/// under, and a reused descriptor number would name another library.
pub fn open_file(file: std::fs::File, path: &Path) -> Result<Library, LoadError> {
    use std::os::fd::AsRawFd;
    let by_fd = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    if !by_fd.exists() {
        // No /proc (a chroot, another OS): the path, checked just before.
        return open(path);
    }
    open_as(&by_fd, &crate::places::absolute(path.to_path_buf()), Some(file))
}

fn open_as(load: &Path, path: &Path, keep: Option<std::fs::File>) -> Result<Library, LoadError> {
    let path = path.to_path_buf();
    let raw = RawLibrary::load_at(load).map_err(|e| open_error(&path, e))?;
    // Loaded (and never unloaded): its descriptor must stay reserved.
    std::mem::forget(keep);
    // SAFETY: the header is read from a library we never unload (the
    // `forget` below), so its `'static` references stay valid. Reading the
    // symbol trusts that a symbol with abi_stable's mangled root-module name
    // is abi_stable's header; abi_stable validates the header's own magic and
    // version before `upgrade` hands it out.
    let header = unsafe { lib_header_from_raw_library(&raw) };
    // SAFETY: a symbol of this name is only defined by `bub_abi::export_plugin!`,
    // as a `u64` static; `get` yields its address, which stays valid because
    // the library is never unloaded.
    let fingerprint = unsafe { raw.get::<*const u64>(LAYOUT_FINGERPRINT_SYMBOL) }.ok().map(|s| unsafe { **s });
    std::mem::forget(raw);
    let header = header.map_err(|e| match e {
        LibraryError::GetSymbolError { .. } => LoadError::NoRootModule { path: path.clone() },
        other => LoadError::AbiHeader { path: path.clone(), detail: one_line(&other.to_string()), host: ABI_VERSION },
    })?;

    let plugin_version = header.version_strings().version.as_str().to_owned();
    check_version(&path, &plugin_version)?;

    let Some(found) = header.layout() else {
        return Err(LoadError::Layout {
            path,
            plugin: plugin_version,
            host: ABI_VERSION,
            detail: "the library carries no layout information".into(),
        });
    };
    if !already_verified(fingerprint) {
        if let Err(errors) = check_layout_compatibility(<PluginModRef as StableAbi>::LAYOUT, found) {
            if !only_appended_slots_missing(&errors) {
                return Err(LoadError::Layout {
                    path,
                    plugin: plugin_version,
                    host: ABI_VERSION,
                    detail: first_mismatch(&errors),
                });
            }
        }
        if let Some(f) = fingerprint {
            verified().insert(f);
        }
    }

    // SAFETY: the layout was checked just above; the only difference we
    // accepted is a prefix type with fewer trailing fields, which abi_stable's
    // prefix accessors handle (a missing slot reads as its default, "empty").
    let module = unsafe { header.init_root_module_with_unchecked_layout::<PluginModRef>() }
        .map_err(|e| LoadError::RootModule { path: path.clone(), detail: one_line(&e.to_string()) })?;
    Ok(Library { module })
}

/// Layout fingerprints known to pass the check: the host's own, and those of
/// plugins checked in full earlier in this process.
fn verified() -> std::sync::MutexGuard<'static, HashSet<u64>> {
    static VERIFIED: OnceLock<Mutex<HashSet<u64>>> = OnceLock::new();
    bub_abi::sync::lock(VERIFIED.get_or_init(|| Mutex::new(HashSet::from([LAYOUT_FINGERPRINT]))))
}

fn already_verified(fingerprint: Option<u64>) -> bool {
    fingerprint.is_some_and(|f| verified().contains(&f))
}

/// Runs the plugin's constructor (step 5), telling it where the host
/// lives (`places`) so that it needs no environment variables.
pub fn initialise(
    lib: &Library,
    name: &str,
    config: &Map<String, Value>,
    places: &Places,
) -> Result<Instance, LoadError> {
    let config = Value::Object(config.clone()).to_string();
    let text = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let (home, workspace, data_dir) = (text(&places.home), text(&places.workspace), text(&places.data_dir(name)));
    let args = InitArgs {
        name: RStr::from_str(name),
        config: RStr::from_str(&config),
        home: RStr::from_str(&home),
        workspace: RStr::from_str(&workspace),
        data_dir: RStr::from_str(&data_dir),
    };
    match (lib.module.init())(host_services(), &args) {
        RResult::ROk(instance) => Ok(instance),
        RResult::RErr(error) => Err(LoadError::Init { name: name.to_owned(), error }),
    }
}

/// The members of a plugin set (ABI 2.3), after `initialise`: none for an
/// ordinary plugin or one built before 2.3.
pub fn members(lib: &Library, instance: Instance) -> Result<Vec<bub_abi::abi::MemberPlugin>, LoadError> {
    let Some(members) = lib.module.members() else { return Ok(Vec::new()) };
    match members(instance) {
        RResult::ROk(list) => Ok(list.into_iter().collect()),
        RResult::RErr(error) => Err(LoadError::Init { name: lib.name().to_owned(), error }),
    }
}

fn check_version(path: &Path, plugin: &str) -> Result<(), LoadError> {
    let host = host_abi();
    let err = |why| LoadError::AbiVersion {
        path: path.to_path_buf(),
        plugin: plugin.to_owned(),
        host: ABI_VERSION,
        host_major: host.major,
        why,
    };
    let v = semver::Version::parse(plugin).map_err(|_| err("its version is not valid semver"))?;
    if v.major == 1 && host.major == 2 {
        return Err(LoadError::AbiOne { path: path.to_path_buf(), plugin: plugin.to_owned() });
    }
    if v.major != host.major {
        return Err(err("major versions differ"));
    }
    if host.major == 0 && v.minor != host.minor {
        return Err(err("0.x minor versions differ"));
    }
    Ok(())
}

/// True when every layout difference is a prefix type (the hook table,
/// host services) that has fewer trailing fields in the plugin than in the
/// host: the plugin predates hooks appended in a later minor. abi_stable
/// also reports context entries without errors; those are ignored.
fn only_appended_slots_missing(errors: &AbiInstabilityErrors) -> bool {
    let mut real = errors.errors.iter().filter(|e| !e.errs.is_empty()).peekable();
    real.peek().is_some()
        && real.all(|e| {
            let on_prefix_type = match e.stack_trace.last().map(|f| &f.expected) {
                Some(TLFieldOrFunction::Field(f)) => f.layout().is_prefix_kind(),
                _ => false,
            };
            on_prefix_type
                && e.errs.iter().all(|x| matches!(x, AbiInstability::FieldCountMismatch(ef) if ef.expected > ef.found))
        })
}

fn first_mismatch(errors: &AbiInstabilityErrors) -> String {
    let Some(e) = errors.errors.iter().find(|e| !e.errs.is_empty()) else {
        return "the layouts differ".into();
    };
    let at: Vec<String> = e
        .stack_trace
        .iter()
        .map(|f| match &f.expected {
            TLFieldOrFunction::Field(f) => format!("{}: {}", f.name(), f.layout().full_type()),
            TLFieldOrFunction::Function(_) => "<fn>".into(),
        })
        .collect();
    let what = match &e.errs[0] {
        AbiInstability::FieldCountMismatch(ef) => {
            format!("field count differs (expected {}, found {})", ef.expected, ef.found)
        }
        other => {
            let mut s = one_line(&format!("{other:?}"));
            s.truncate(300);
            s
        }
    };
    format!("in {}: {what}", at.join(" -> "))
}

fn open_error(path: &Path, e: LibraryError) -> LoadError {
    let detail = match &e {
        LibraryError::OpenError { err, .. } => err.to_string(),
        other => other.to_string(),
    };
    // dlerror() repeats the path; the message already names it.
    let prefix = format!("{}: ", path.display());
    let detail = detail.strip_prefix(&prefix).map(str::to_owned).unwrap_or(detail);
    let detail = match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => format!("it is not a regular file ({})", one_line(&detail)),
        Ok(m) if m.len() == 0 => format!("the file is empty ({})", one_line(&detail)),
        Err(_) => format!("the file does not exist ({})", one_line(&detail)),
        _ => one_line(&detail),
    };
    LoadError::Open { path: PathBuf::from(path), detail }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
