//! Registered plugins and, per hook, their implementations in pluggy's order.
//!
//! pluggy keeps one list per hook, `[trylast…, normal…, tryfirst…]`:
//! a normal implementation goes after the last normal one, a `tryfirst` one
//! is appended, a `trylast` one is inserted at the *front*. Dispatch walks the
//! list reversed. So: tryfirst first (last registered first), then normal
//! (last registered first), then trylast in *registration* order. `bub hooks`
//! prints the stored list, which is the reverse of the call order.

use crate::settings::RuntimeSettings;
use std::{path::PathBuf, sync::Arc};

use bub_abi::{
    abi::{HookCall, HookMarker, HookReturn, HookSlot, HookTableRef, Instance},
    HookId, HOOK_COUNT,
};

/// A plugin's hook implementations: its library's static table, or (a
/// member of a plugin set, ABI 2.3) slots the set gave at registration.
#[derive(Clone)]
pub(crate) enum Hooks {
    Table(HookTableRef),
    Slots(Arc<[HookSlot; HOOK_COUNT]>),
}

impl Hooks {
    pub(crate) fn slot(&self, hook: HookId) -> HookSlot {
        match self {
            Hooks::Table(table) => table.slot(hook),
            Hooks::Slots(slots) => slots[hook as usize],
        }
    }
}

/// Where a plugin stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginStatus {
    /// Loaded and registered.
    Loaded,
    /// Discovered but not loaded; `detail` says why and what to do.
    Failed {
        /// The reason.
        detail: String,
    },
    /// Installed but disabled in its manifest.
    Disabled,
    /// Not loaded: another plugin declares it replaces this one.
    Replaced {
        /// The replacing plugin.
        by: String,
    },
}

impl PluginStatus {
    /// `loaded`, `failed` or `disabled`.
    pub fn as_str(&self) -> &'static str {
        match self {
            PluginStatus::Loaded => "loaded",
            PluginStatus::Failed { .. } => "failed",
            PluginStatus::Disabled => "disabled",
            PluginStatus::Replaced { .. } => "replaced",
        }
    }
}

/// One discovered plugin, loaded or not.
#[derive(Clone)]
pub struct PluginRecord {
    /// The registered name.
    pub name: String,
    /// The plugin's version ("" when unknown).
    pub version: String,
    /// The ABI version it was built against ("" when unknown).
    pub abi_version: String,
    /// Its description.
    pub description: String,
    /// Its library (None for plugins compiled into the host).
    pub path: Option<PathBuf>,
    /// Loaded, failed or disabled.
    pub status: PluginStatus,
    pub(crate) hooks: Option<Hooks>,
    pub(crate) instance: Instance,
    /// The plugin set (library plugin) this plugin is a member of (ABI 2.3).
    pub member_of: Option<String>,
    /// Whether it runs in a process of its own (`crate::isolation`).
    pub isolated: bool,
    // Whether it claims its name (a folder whose manifest names another
    // plugin does not).
    pub(crate) claims: bool,
}

impl std::fmt::Debug for PluginRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginRecord")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("path", &self.path)
            .field("status", &self.status)
            .finish()
    }
}

impl PluginRecord {
    /// A plugin that was not loaded.
    pub fn failed(name: String, path: Option<PathBuf>, detail: String) -> Self {
        PluginRecord {
            name,
            version: String::new(),
            abi_version: String::new(),
            description: String::new(),
            path,
            status: PluginStatus::Failed { detail },
            hooks: None,
            instance: Instance::NONE,
            member_of: None,
            isolated: false,
            claims: true,
        }
    }

    /// The hooks this plugin implements, with marker and whether declared async.
    pub fn implementations(&self) -> Vec<(HookId, HookMarker, bool)> {
        let Some(table) = &self.hooks else { return Vec::new() };
        HookId::ALL
            .iter()
            .filter_map(|&h| {
                let slot = table.slot(h);
                slot.call.is_some().then_some((h, slot.marker, slot.is_async))
            })
            .collect()
    }

    /// Whether the plugin implements `hook`.
    pub fn implements(&self, hook: HookId) -> bool {
        self.hooks.as_ref().is_some_and(|t| t.slot(hook).call.is_some())
    }
}

/// One hook implementation, ready to call.
#[derive(Clone)]
pub struct Impl {
    /// The plugin's registered name.
    pub plugin: Arc<str>,
    /// Index of the plugin in registration order.
    pub plugin_index: usize,
    /// The entry point.
    pub call: extern "C" fn(&HookCall<'_>) -> HookReturn,
    /// The plugin instance its calls carry.
    pub instance: Instance,
    /// Its priority marker.
    pub marker: HookMarker,
    /// Declared `async fn`.
    pub is_async: bool,
    /// The hook it implements.
    pub hook: HookId,
    /// What the watchdog and the crash handler call it.
    pub(crate) label: crate::runtime::watchdog::Label,
    /// Its deadline when async (`RuntimeSettings::hook_timeout`).
    pub deadline: Option<std::time::Duration>,
    /// A hook without a deadline (the model stage) is named in a warning
    /// each time this much passes while it runs (the hook timeout).
    pub slow_warning: Option<std::time::Duration>,
    /// The cap on its value answers (`RuntimeSettings::max_result_bytes`).
    pub max_result_bytes: usize,
}

impl Impl {
    /// Calls this implementation with `call` (its instance filled in).
    #[inline]
    pub fn invoke(&self, call: &mut HookCall<'_>) -> HookReturn {
        call.instance = self.instance;
        (self.call)(call)
    }
}

impl std::fmt::Debug for Impl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.plugin, self.marker.as_str())
    }
}

/// Plugins in registration order and per-hook implementation lists.
#[derive(Debug, Default)]
pub struct Registry {
    settings: RuntimeSettings,
    plugins: Vec<PluginRecord>,
    stored: Vec<Vec<Impl>>,
    calls: Vec<Vec<Impl>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::with_settings(RuntimeSettings::default())
    }

    /// An empty registry whose calls follow `settings` (deadlines, caps).
    pub fn with_settings(settings: RuntimeSettings) -> Self {
        Registry {
            settings,
            plugins: Vec::new(),
            stored: vec![Vec::new(); HOOK_COUNT],
            calls: vec![Vec::new(); HOOK_COUNT],
        }
    }

    /// The settings its calls follow.
    pub fn settings(&self) -> &RuntimeSettings {
        &self.settings
    }

    /// Records a plugin; a loaded one's hooks are registered after those of
    /// every plugin recorded before it.
    pub fn register(&mut self, record: PluginRecord) {
        let index = self.plugins.len();
        if let (PluginStatus::Loaded, Some(table)) = (&record.status, &record.hooks) {
            let name: Arc<str> = Arc::from(record.name.as_str());
            for &hook in HookId::ALL {
                let slot = table.slot(hook);
                let Some(call) = slot.call.into_option() else { continue };
                let imp = Impl {
                    plugin: name.clone(),
                    plugin_index: index,
                    call,
                    instance: record.instance,
                    marker: slot.marker,
                    is_async: slot.is_async,
                    hook,
                    label: crate::runtime::watchdog::Label::new(name.clone(), hook.name()),
                    // The model hooks stream for as long as the model talks.
                    deadline: self
                        .settings
                        .hook_timeout
                        .filter(|_| !matches!(hook, HookId::RunModel | HookId::RunModelStream)),
                    slow_warning: self
                        .settings
                        .hook_timeout
                        .filter(|_| matches!(hook, HookId::RunModel | HookId::RunModelStream)),
                    max_result_bytes: self.settings.max_result_bytes,
                };
                // Call order is the stored order reversed: the new
                // implementation goes to the mirrored place (copying the
                // whole list per registration made loading N plugins
                // quadratic).
                let stored = &mut self.stored[hook as usize];
                let at = insert_like_pluggy(stored, imp.clone());
                let mirrored = stored.len() - 1 - at;
                self.calls[hook as usize].insert(mirrored, imp);
                debug_assert!(
                    self.calls[hook as usize]
                        .iter()
                        .map(|i| i.plugin_index)
                        .eq(self.stored[hook as usize].iter().rev().map(|i| i.plugin_index)),
                    "call order must be the stored order reversed"
                );
            }
        }
        self.plugins.push(record);
    }

    /// Every plugin in registration order.
    pub fn plugins(&self) -> &[PluginRecord] {
        &self.plugins
    }

    /// A plugin by registered name.
    pub fn plugin(&self, name: &str) -> Option<&PluginRecord> {
        self.plugins.iter().find(|p| p.name == name)
    }

    /// Implementations of `hook` in call order.
    pub fn impls(&self, hook: HookId) -> &[Impl] {
        &self.calls[hook as usize]
    }

    /// Implementations of `hook` in pluggy's stored order (reverse of calls).
    pub fn stored(&self, hook: HookId) -> &[Impl] {
        &self.stored[hook as usize]
    }

    /// Bub's `hook_report()`: hook name → plugin names in stored order, for
    /// hooks with implementations, sorted by hook name.
    pub fn hook_report(&self) -> Vec<(&'static str, Vec<&str>)> {
        let mut report: Vec<(&'static str, Vec<&str>)> = HookId::ALL
            .iter()
            .filter(|h| !self.stored(**h).is_empty())
            .map(|h| (h.name(), self.stored(*h).iter().map(|i| &*i.plugin).collect()))
            .collect();
        report.sort_by_key(|(name, _)| *name);
        report
    }
}

fn insert_like_pluggy(list: &mut Vec<Impl>, imp: Impl) -> usize {
    let at = match imp.marker {
        HookMarker::TryLast => 0,
        HookMarker::TryFirst => list.len(),
        HookMarker::Normal => list.iter().rposition(|i| i.marker != HookMarker::TryFirst).map_or(0, |i| i + 1),
    };
    list.insert(at, imp);
    at
}
