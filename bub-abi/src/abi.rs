#![allow(non_local_definitions)] // abi_stable 0.11's #[sabi_trait] expands to impls the newer lint flags.

//! The FFI-safe types that cross between the host and a plugin library.
//!
//! Everything here derives [`StableAbi`], so the host can check at load time
//! that a plugin was built against a compatible layout. Two types are *prefix
//! types* and may grow in a minor ABI release: the [`HookTable`] (new hooks
//! are appended) and [`HostServices`] (new host services are appended). A
//! host reads a slot an older plugin lacks as "not implemented".
//!
//! Plugin authors do not use this module directly; the SDK ([`crate::Plugin`],
//! [`crate::export_plugin!`]) builds all of it.

use abi_stable::{
    library::RootModule,
    sabi_trait,
    sabi_types::VersionStrings,
    std_types::{RArc, RBox, ROption, RResult, RSlice, RStr, RString, RVec},
    StableAbi,
};
use async_ffi::FfiFuture;

/// The ABI version this crate implements (`major.minor.patch`).
///
/// It is the `bub-abi` crate version, deliberately separate from the version
/// of the `bub` host: major = breaking change, minor = hooks or host services
/// appended.
pub const ABI_VERSION: &str = abi_version_str();

const fn abi_version_str() -> &'static str {
    #[cfg(feature = "__test-abi-major-2")]
    {
        "2.0.0"
    }
    #[cfg(all(feature = "__test-abi-1-0", not(feature = "__test-abi-major-2")))]
    {
        "1.0.0"
    }
    #[cfg(not(any(feature = "__test-abi-1-0", feature = "__test-abi-major-2")))]
    {
        env!("CARGO_PKG_VERSION")
    }
}

/// A fingerprint of this ABI's layout: a hash of the source that defines it
/// (`abi.rs`, `hooks.rs`), the test features that change it, and the pointer
/// width. abi_stable and async-ffi are pinned exactly in `bub-abi`'s
/// manifest, so equal fingerprints mean equal layouts, and the host can skip
/// abi_stable's (expensive) structural check for such plugins. Any other
/// plugin still gets the full check.
pub const LAYOUT_FINGERPRINT: u64 = {
    let mut h = fnv1a(0xcbf2_9ce4_8422_2325, include_str!("abi.rs").as_bytes());
    h = fnv1a(h, include_str!("hooks.rs").as_bytes());
    h = fnv1a(h, if cfg!(feature = "__test-abi-1-0") { b"abi-1-0" } else { b"-" });
    h = fnv1a(h, if cfg!(feature = "__test-abi-major-2") { b"major-2" } else { b"-" });
    h = fnv1a(h, if cfg!(feature = "__test-abi-broken-layout") { b"broken" } else { b"-" });
    fnv1a(h, &(usize::BITS as u64).to_le_bytes())
};

/// Name of the exported symbol holding [`LAYOUT_FINGERPRINT`] (NUL-terminated).
pub const LAYOUT_FINGERPRINT_SYMBOL: &[u8] = b"BUB_ABI_LAYOUT_FINGERPRINT\0";

const fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

/// Priority marker of one hook implementation (pluggy's `tryfirst` / `trylast`).
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HookMarker {
    /// No marker.
    #[default]
    Normal = 0,
    /// `tryfirst`: runs before every normal implementation.
    TryFirst = 1,
    /// `trylast`: runs after every normal implementation.
    TryLast = 2,
}

impl HookMarker {
    /// `normal`, `tryfirst` or `trylast`.
    pub const fn as_str(self) -> &'static str {
        match self {
            HookMarker::Normal => "normal",
            HookMarker::TryFirst => "tryfirst",
            HookMarker::TryLast => "trylast",
        }
    }
}

/// Whether the host will await a pending result of this call.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchMode {
    /// Async dispatch: a pending result is awaited.
    Async = 0,
    /// Sync dispatch: a pending result is dropped unpolled, with a warning.
    Sync = 1,
}

/// One hook implementation slot in a plugin's [`HookTable`].
#[repr(C)]
#[derive(StableAbi, Clone, Copy)]
pub struct HookSlot {
    /// The implementation, or `None` when the plugin does not implement the hook.
    pub call: ROption<extern "C" fn(&HookCall<'_>) -> HookReturn>,
    /// The implementation's priority marker.
    pub marker: HookMarker,
    /// Whether the implementation is an `async fn` (for listings; dispatch
    /// looks at what a call actually returns).
    pub is_async: bool,
}

impl HookSlot {
    /// An empty slot.
    pub const EMPTY: HookSlot = HookSlot { call: ROption::RNone, marker: HookMarker::Normal, is_async: false };
}

impl Default for HookSlot {
    fn default() -> Self {
        HookSlot::EMPTY
    }
}

/// The arguments of one hook call, borrowed for the duration of the call.
#[repr(C)]
#[derive(StableAbi)]
pub struct HookCall<'a> {
    /// One JSON text per argument, in the hook's wire order. `state` and
    /// `object` arguments hold `null` here and travel in the fields below.
    pub args: RSlice<'a, RStr<'a>>,
    /// The live turn state, for hooks with a `state` argument.
    pub state: ROption<&'a StateHandle>,
    /// The host object, for hooks with an `object` argument.
    pub object: ROption<&'a ObjectHandle>,
    /// Whether a pending result will be awaited.
    pub mode: DispatchMode,
}

/// An error produced by a plugin, a plugin panic, or a payload that could not
/// be read.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct HookError {
    /// What kind of failure: `error`, `panic`, `args`, `type`, `init`.
    pub kind: RString,
    /// Human-readable detail.
    pub message: RString,
    /// Test-only: a layout change that keeps the version number, to prove
    /// the host's layout check refuses it.
    #[cfg(feature = "__test-abi-broken-layout")]
    pub code: u32,
}

impl HookError {
    /// A new error of `kind` with `message`.
    pub fn new(kind: &str, message: impl Into<String>) -> Self {
        HookError {
            kind: kind.into(),
            message: RString::from(message.into()),
            #[cfg(feature = "__test-abi-broken-layout")]
            code: 0,
        }
    }

    /// A plugin's own error.
    pub fn plugin(message: impl Into<String>) -> Self {
        Self::new("error", message)
    }
}

impl std::fmt::Display for HookError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.kind == "error" {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.kind, self.message)
        }
    }
}

impl std::error::Error for HookError {}

/// A finished hook call: nothing, a value, or an error.
///
/// Kept small (40 bytes) and flat on purpose: it is returned by every
/// implementation on every call, and the error, which is rare, is boxed.
#[repr(C, u8)]
#[derive(StableAbi)]
pub enum HookResult {
    /// Python's `None`: the implementation contributes nothing.
    None,
    /// A JSON value.
    Json(RString),
    /// One object (tape store, channel, tool, environment, stream, …).
    Object(ObjectHandle),
    /// A list of objects (channels, tools).
    Objects(RVec<ObjectHandle>),
    /// The implementation failed (an error it returned, a panic, unreadable
    /// arguments, an unserializable result).
    Error(RBox<HookError>),
}

impl HookResult {
    /// An error result.
    pub fn error(error: HookError) -> Self {
        HookResult::Error(RBox::new(error))
    }
}

impl std::fmt::Debug for HookResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HookResult::None => f.write_str("None"),
            HookResult::Json(s) => write!(f, "Json({})", s.as_str()),
            HookResult::Object(o) => write!(f, "Object({})", o.kind()),
            HookResult::Objects(v) => write!(f, "Objects({})", v.len()),
            HookResult::Error(e) => write!(f, "Error({})", &**e),
        }
    }
}

/// What a hook implementation returns: finished now, or a pending future
/// (an `async fn`) that the host may await.
#[repr(C, u8)]
#[derive(StableAbi)]
pub enum HookReturn {
    /// Finished during the call.
    Ready(HookResult),
    /// An `async` implementation; awaiting it yields the result.
    Pending(FfiFuture<HookResult>),
}

impl HookReturn {
    /// The `None` result.
    pub const NONE: HookReturn = HookReturn::Ready(HookResult::None);
}

/// The live, mutable turn state shared by all hooks of one turn.
///
/// Values are JSON texts; a change made by one hook is seen by later hooks.
#[sabi_trait]
pub trait StateStore: Send + Sync + Clone {
    /// The JSON text stored under `key`.
    fn get(&self, key: RStr<'_>) -> ROption<RString>;
    /// Stores a JSON text under `key`; fails if it is not valid JSON.
    fn set(&self, key: RStr<'_>, json: RStr<'_>) -> RResult<(), RString>;
    /// Removes `key`; returns whether it was present.
    fn remove(&self, key: RStr<'_>) -> bool;
    /// Every key, in insertion order.
    fn keys(&self) -> RVec<RString>;
    /// The whole state as one JSON object.
    #[sabi(last_prefix_field)]
    fn snapshot(&self) -> RString;
}

/// FFI handle to a [`StateStore`], cheap to clone.
pub type StateHandle = StateStore_TO<'static, RArc<()>>;

/// An object that crosses the boundary: a tape store, a channel, a tool, an
/// environment, a model stream, a CLI registry, a message handler, …
///
/// Methods are addressed by name with JSON arguments, so new object kinds do
/// not change the ABI. Typed wrappers live on both sides.
#[sabi_trait]
pub trait ForeignObject: Send + Sync + Clone {
    /// What the object is (`tape_store`, `channel`, `tool`, `stream`, …).
    fn kind(&self) -> RString;
    /// The object's name, where it has one (channels, tools, sidecars).
    fn name(&self) -> RString;
    /// Calls method `method` with JSON `args`; the future yields JSON.
    #[sabi(last_prefix_field)]
    fn invoke(&self, method: RStr<'_>, args: RStr<'_>) -> FfiFuture<RResult<RString, HookError>>;
}

/// FFI handle to a [`ForeignObject`], cheap to clone.
pub type ObjectHandle = ForeignObject_TO<'static, RArc<()>>;

/// Log levels forwarded from a plugin to the host.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// `ERROR`
    Error = 1,
    /// `WARN`
    Warn = 2,
    /// `INFO`
    Info = 3,
    /// `DEBUG`
    Debug = 4,
    /// `TRACE`
    Trace = 5,
}

/// Services the host hands a plugin at initialisation.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = HostServicesRef)))]
#[sabi(missing_field(panic))]
pub struct HostServices {
    /// The host's ABI version.
    pub abi_version: RStr<'static>,
    /// Whether a log record of `level` would be kept by the host.
    pub log_enabled: extern "C" fn(level: LogLevel) -> bool,
    /// Emits one log record on the host's subscriber.
    #[sabi(last_prefix_field)]
    pub log: extern "C" fn(plugin: RStr<'_>, level: LogLevel, target: RStr<'_>, message: RStr<'_>),
}

/// What a plugin receives besides [`HostServices`] when it is initialised.
#[repr(C)]
#[derive(StableAbi)]
pub struct InitArgs<'a> {
    /// The name the plugin is registered under.
    pub name: RStr<'a>,
    /// The plugin's configuration, a JSON object (`{}` when none).
    pub config: RStr<'a>,
}

macro_rules! gen_hook_table {
    ($( ($name:ident $Pascal:ident {
        kind: $kind:ident,
        args: [$($idx:literal $ak:ident $arg:ident : $aty:ty),* $(,)?],
        returns: $ret:ty,
        doc: $doc:literal $(,)?
    }) )*) => {
        /// One slot per hook. A prefix type: a minor ABI release appends
        /// slots; a slot that an older plugin lacks reads as empty.
        #[repr(C)]
        #[derive(StableAbi)]
        #[sabi(kind(Prefix(prefix_ref = HookTableRef)))]
        #[sabi(missing_field(default))]
        pub struct HookTable {
            /// How many hook slots the plugin was built with.
            #[sabi(last_prefix_field)]
            pub slot_count: u32,
            $(
                #[doc = $doc]
                pub $name: HookSlot,
            )*
        }

        impl HookTableRef {
            /// The slot of `hook` (empty if this plugin predates it).
            pub fn slot(self, hook: $crate::hooks::HookId) -> HookSlot {
                match hook {
                    $($crate::hooks::HookId::$Pascal => self.$name(),)*
                }
            }
        }

        impl HookTable {
            /// Builds a table from a slot function (used by the SDK in const context).
            #[doc(hidden)]
            pub const fn __from_slots(slots: &[HookSlot; $crate::hooks::HOOK_COUNT]) -> HookTable {
                HookTable {
                    slot_count: $crate::hooks::HOOK_COUNT as u32,
                    $($name: slots[$crate::hooks::HookId::$Pascal as usize],)*
                }
            }
        }
    };
}
for_each_hook!(gen_hook_table);

/// The root module a plugin library exports (through [`crate::export_plugin!`]).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
#[sabi(missing_field(panic))]
pub struct PluginMod {
    /// The ABI version the plugin was built against.
    pub abi_version: RStr<'static>,
    /// The plugin's own name (its crate name by default).
    pub name: RStr<'static>,
    /// The plugin's version.
    pub version: RStr<'static>,
    /// One-line description.
    pub description: RStr<'static>,
    /// Creates the plugin instance. Called once, before any hook.
    pub init: extern "C" fn(HostServicesRef, &InitArgs<'_>) -> RResult<(), HookError>,
    /// The hook implementations.
    #[sabi(last_prefix_field)]
    pub hooks: HookTableRef,
}

impl RootModule for PluginModRef {
    abi_stable::declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "bub_plugin";
    const NAME: &'static str = "bub_plugin";
    const VERSION_STRINGS: VersionStrings = version_strings();
}

const fn version_strings() -> VersionStrings {
    #[cfg(feature = "__test-abi-major-2")]
    {
        VersionStrings::new("2.0.0")
    }
    #[cfg(all(feature = "__test-abi-1-0", not(feature = "__test-abi-major-2")))]
    {
        VersionStrings::new("1.0.0")
    }
    #[cfg(not(any(feature = "__test-abi-1-0", feature = "__test-abi-major-2")))]
    {
        abi_stable::package_version_strings!()
    }
}
