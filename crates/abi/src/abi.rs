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

use std::{ffi::c_void, marker::PhantomData, mem::ManuallyDrop};

use abi_stable::{
    library::RootModule,
    sabi_trait,
    sabi_types::VersionStrings,
    std_types::{RArc, ROption, RResult, RSlice, RStr, RString, RVec},
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
    #[cfg(feature = "__test-abi-major-3")]
    {
        "3.0.0"
    }
    #[cfg(all(feature = "__test-abi-1", not(feature = "__test-abi-major-3")))]
    {
        "1.2.0"
    }
    #[cfg(not(any(feature = "__test-abi-1", feature = "__test-abi-major-3")))]
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
    h = fnv1a(h, if cfg!(feature = "__test-abi-prev-minor") { b"prev-minor" } else { b"-" });
    h = fnv1a(h, if cfg!(feature = "__test-abi-1") { b"abi-1" } else { b"-" });
    h = fnv1a(h, if cfg!(feature = "__test-abi-major-3") { b"major-3" } else { b"-" });
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

/// What kind of value a [`ValueRef`] holds.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueKind {
    /// `null` (Python's `None`).
    Null = 0,
    /// `true` / `false`.
    Bool = 1,
    /// An integer that fits `i64`.
    Int = 2,
    /// An integer above `i64::MAX`.
    UInt = 3,
    /// A float.
    Float = 4,
    /// A string.
    Str = 5,
    /// A list.
    Array = 6,
    /// A map with string keys, in insertion order.
    Object = 7,
}

/// The host's functions over its values: how a plugin reads the values it
/// is lent and builds the values it returns. See [`crate::value`].
///
/// A prefix type: a minor ABI release may append functions.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = ValueVTableRef)))]
#[sabi(missing_field(panic))]
pub struct ValueVTable {
    pub(crate) kind: extern "C" fn(*const c_void) -> u8,
    pub(crate) as_bool: extern "C" fn(*const c_void) -> bool,
    pub(crate) as_i64: extern "C" fn(*const c_void, &mut i64) -> bool,
    pub(crate) as_u64: extern "C" fn(*const c_void, &mut u64) -> bool,
    pub(crate) as_f64: extern "C" fn(*const c_void, &mut f64) -> bool,
    pub(crate) as_str: extern "C" fn(*const c_void, &mut RStr<'static>) -> bool,
    pub(crate) len: extern "C" fn(*const c_void) -> usize,
    pub(crate) get: extern "C" fn(*const c_void, RStr<'_>) -> *const c_void,
    pub(crate) index: extern "C" fn(*const c_void, usize) -> *const c_void,
    pub(crate) entry: extern "C" fn(*const c_void, usize, &mut RStr<'static>) -> *const c_void,
    pub(crate) retain: extern "C" fn(*const c_void) -> *const c_void,
    pub(crate) release: extern "C" fn(*const c_void),
    pub(crate) scalar: extern "C" fn(u8, u64) -> *const c_void,
    pub(crate) string: extern "C" fn(RStr<'_>) -> *const c_void,
    pub(crate) array: extern "C" fn(usize) -> *const c_void,
    pub(crate) object: extern "C" fn(usize) -> *const c_void,
    pub(crate) push: extern "C" fn(*const c_void, *const c_void) -> bool,
    pub(crate) insert: extern "C" fn(*const c_void, RStr<'_>, *const c_void) -> bool,
    pub(crate) insert_scalar: extern "C" fn(*const c_void, RStr<'_>, u8, u64) -> bool,
    pub(crate) insert_string: extern "C" fn(*const c_void, RStr<'_>, RStr<'_>) -> bool,
    pub(crate) push_scalar: extern "C" fn(*const c_void, u8, u64) -> bool,
    pub(crate) push_string: extern "C" fn(*const c_void, RStr<'_>) -> bool,
    pub(crate) with_key: extern "C" fn(*const c_void, RStr<'_>, *const c_void) -> *const c_void,
    pub(crate) without_key: extern "C" fn(*const c_void, RStr<'_>) -> *const c_void,
    pub(crate) eq: extern "C" fn(*const c_void, *const c_void) -> bool,
    pub(crate) parse_json: extern "C" fn(RStr<'_>, &mut RString) -> *const c_void,
    #[sabi(last_prefix_field)]
    pub(crate) write_json: extern "C" fn(*const c_void, bool) -> RString,
    /// A value holding a live object (ABI 2.2; absent from older hosts).
    #[sabi(missing_field(option))]
    pub(crate) handle: extern "C" fn(ObjectHandle) -> *const c_void,
    /// The object a value holds, if it holds one (ABI 2.2).
    #[sabi(missing_field(option))]
    pub(crate) as_handle: extern "C" fn(*const c_void) -> ROption<ObjectHandle>,
    /// Appends a borrowed value to a list the caller is building, sharing
    /// it (ABI 2.6): what `retain` then `push` do, without the owned
    /// handle in between (an allocation and a free per item).
    #[sabi(missing_field(option))]
    pub(crate) push_ref: extern "C" fn(*const c_void, *const c_void) -> bool,
    /// Sets a key of a map the caller is building to a borrowed value,
    /// sharing it (ABI 2.6); see `push_ref`.
    #[sabi(missing_field(option))]
    pub(crate) insert_ref: extern "C" fn(*const c_void, RStr<'_>, *const c_void) -> bool,
}

/// A borrowed view of a host value, valid while the call (or the owned
/// [`Value`]) that lent it lasts. Two words; `Copy`.
///
/// Reading it calls the host: a field, an index, a length, a string view
/// (borrowed, never copied), a number. See [`crate::value`].
#[repr(C)]
#[derive(StableAbi, Clone, Copy)]
pub struct ValueRef<'a> {
    pub(crate) node: *const c_void,
    pub(crate) vt: ValueVTableRef,
    pub(crate) _life: PhantomData<&'a ()>,
}

/// An owned, reference-counted host value: cloning it bumps a count, and
/// its subtrees are shared, so keeping or forwarding a value never copies
/// it. Build one with [`Value::from`], [`Value::object`],
/// [`Value::from_serialize`] or [`ValueRef::with`].
#[repr(C)]
#[derive(StableAbi)]
pub struct Value {
    pub(crate) node: *const c_void,
    pub(crate) vt: ValueVTableRef,
}

/// The arguments of one hook call, borrowed for the duration of the call.
#[repr(C)]
#[derive(StableAbi)]
pub struct HookCall<'a> {
    /// One host value per argument, in the hook's wire order. `state` and
    /// `object` arguments hold `null` here and travel in the fields below.
    pub args: RSlice<'a, ValueRef<'a>>,
    /// The live turn state, for hooks with a `state` argument.
    pub state: ROption<&'a StateHandle>,
    /// The host object, for hooks with an `object` argument.
    pub object: ROption<&'a ObjectHandle>,
    /// Whether a pending result will be awaited.
    pub mode: DispatchMode,
    /// The plugin instance this implementation belongs to: what the
    /// plugin's `init` returned for this registration. One library may be
    /// registered by several hosts in one process, each with its own
    /// instance and configuration.
    pub instance: Instance,
    /// Puts the types that travel behind [`HookReturn`]'s pointer into the
    /// layout the host checks at load time.
    pub _payloads: PhantomData<ReturnPayloads>,
}

/// A plugin instance, opaque to the host: made by the plugin's `init`,
/// handed back with every call to one of its hooks, never freed (libraries
/// are never unloaded).
#[repr(transparent)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instance(pub *const c_void);

impl Instance {
    /// No instance (a plugin that failed to initialise is never called).
    pub const NONE: Instance = Instance(std::ptr::null());
}

// SAFETY: an instance is a plugin value that is `Send + Sync` (the
// `Plugin` trait requires it); the host only hands the pointer back.
unsafe impl Send for Instance {}
// SAFETY: as above.
unsafe impl Sync for Instance {}

/// The types a [`HookReturn`] may carry behind its pointer (never built;
/// named so that the load-time layout check covers them).
#[repr(C)]
#[derive(StableAbi)]
pub struct ReturnPayloads {
    object: ObjectHandle,
    objects: RVec<ObjectHandle>,
    error: HookError,
    pending: FfiFuture<HookReturn>,
    value: Value,
}

/// What kind of failure a [`HookError`] is. Constants rather than an enum,
/// so that a newer plugin's kind cannot be an invalid value in an older host.
#[repr(transparent)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorKind(pub u8);

impl ErrorKind {
    /// The plugin's own error (an `Err` it returned).
    pub const ERROR: ErrorKind = ErrorKind(0);
    /// The plugin panicked.
    pub const PANIC: ErrorKind = ErrorKind(1);
    /// The arguments could not be read as the declared types.
    pub const ARGS: ErrorKind = ErrorKind(2);
    /// A value of the wrong type (Bub's `TypeError`).
    pub const TYPE: ErrorKind = ErrorKind(3);
    /// The plugin could not be initialised.
    pub const INIT: ErrorKind = ErrorKind(4);
    /// An object was asked for a method it does not have.
    pub const UNSUPPORTED: ErrorKind = ErrorKind(5);
    /// An operation on a closed resource (a stream, a shell runtime).
    pub const CLOSED: ErrorKind = ErrorKind(6);

    /// The kind's name: `error`, `panic`, `args`, `TypeError`, `init`,
    /// `unsupported`, `closed` (`TypeError` is Bub's name for it).
    pub const fn as_str(self) -> &'static str {
        match self.0 {
            0 => "error",
            1 => "panic",
            2 => "args",
            3 => "TypeError",
            4 => "init",
            5 => "unsupported",
            6 => "closed",
            _ => "unknown",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error produced by a plugin, a plugin panic, or a payload that could not
/// be read.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct HookError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// Human-readable detail.
    pub message: RString,
    /// Test-only: a layout change that keeps the version number, to prove
    /// the host's layout check refuses it.
    #[cfg(feature = "__test-abi-broken-layout")]
    pub code: u32,
}

impl HookError {
    /// A new error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        HookError {
            kind,
            message: RString::from(message.into()),
            #[cfg(feature = "__test-abi-broken-layout")]
            code: 0,
        }
    }

    /// A plugin's own error.
    pub fn plugin(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::ERROR, message)
    }
}

impl std::fmt::Display for HookError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.kind == ErrorKind::ERROR {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.kind, self.message)
        }
    }
}

impl std::error::Error for HookError {}

/// What one hook implementation returns: two words (a tag and a pointer),
/// so that it comes back in registers.
///
/// | tag | pointer |
/// |---|---|
/// | `NONE` | null: Python's `None` |
/// | `VALUE` | an owned host [`Value`], built through the host's table |
/// | `OBJECT`, `OBJECTS`, `ERROR`, `PENDING` | a cell owned by the plugin's allocator holding an `ObjectHandle`, `RVec<ObjectHandle>`, [`HookError`] or `FfiFuture<HookReturn>`, with the function that frees it |
///
/// Build one with the constructors; read one with
/// [`into_outcome`](Self::into_outcome). Dropping an unread return frees
/// what it carries.
#[repr(C)]
#[derive(StableAbi)]
#[must_use]
pub struct HookReturn {
    tag: u8,
    payload: *mut c_void,
}

// SAFETY: every payload is Send (values are immutable and reference-counted
// atomically; handles, errors and futures are Send).
unsafe impl Send for HookReturn {}

/// A payload in the allocator of the side that made it, with the function
/// that frees its memory (after the item was moved out).
#[repr(C)]
struct Cell<T> {
    free: extern "C" fn(*mut c_void),
    item: ManuallyDrop<T>,
}

extern "C" fn free_cell<T>(cell: *mut c_void) {
    // SAFETY: `cell` came from `Box::into_raw(Box<Cell<T>>)` in this copy of
    // the crate, and its item was moved out (ManuallyDrop: not dropped here).
    drop(unsafe { Box::from_raw(cell as *mut Cell<T>) });
}

impl HookReturn {
    const TAG_NONE: u8 = 0;
    const TAG_VALUE: u8 = 1;
    const TAG_OBJECT: u8 = 2;
    const TAG_OBJECTS: u8 = 3;
    const TAG_ERROR: u8 = 4;
    const TAG_PENDING: u8 = 5;

    /// Python's `None`: the implementation contributes nothing.
    pub const NONE: HookReturn = HookReturn { tag: Self::TAG_NONE, payload: std::ptr::null_mut() };

    fn cell<T>(tag: u8, item: T) -> Self {
        let cell = Box::new(Cell { free: free_cell::<T>, item: ManuallyDrop::new(item) });
        HookReturn { tag, payload: Box::into_raw(cell) as *mut c_void }
    }

    /// A value (copied into the host's values first if it was built with
    /// another table, which only happens before a plugin is initialised).
    #[inline]
    pub fn value(value: Value) -> Self {
        let value = ManuallyDrop::new(value.into_host());
        HookReturn { tag: Self::TAG_VALUE, payload: value.node as *mut c_void }
    }

    /// One object (tape store, channel, tool, environment, stream, …).
    pub fn object(object: ObjectHandle) -> Self {
        Self::cell(Self::TAG_OBJECT, object)
    }

    /// A list of objects (channels, tools).
    pub fn objects(objects: RVec<ObjectHandle>) -> Self {
        Self::cell(Self::TAG_OBJECTS, objects)
    }

    /// The implementation failed (an error it returned, a panic, unreadable
    /// arguments, an unserializable result).
    pub fn error(error: HookError) -> Self {
        Self::cell(Self::TAG_ERROR, error)
    }

    /// An `async` implementation; awaiting it yields the result.
    pub fn pending(future: FfiFuture<HookReturn>) -> Self {
        Self::cell(Self::TAG_PENDING, future)
    }

    /// The return as two words, for the SDK to keep it in: a one-byte tag
    /// written to memory and read back as part of a word defeats the
    /// CPU's store forwarding (a stall on every hook call).
    #[inline]
    pub(crate) fn into_words(self) -> (usize, *mut c_void) {
        let this = ManuallyDrop::new(self);
        (this.tag as usize, this.payload)
    }

    /// The return [`into_words`](Self::into_words) gave.
    ///
    /// # Safety
    ///
    /// `words` came from `into_words` and is used once.
    #[inline]
    pub(crate) unsafe fn from_words((tag, payload): (usize, *mut c_void)) -> Self {
        HookReturn { tag: tag as u8, payload }
    }

    /// Whether this is `None`.
    pub fn is_none(&self) -> bool {
        self.tag == Self::TAG_NONE
    }

    /// Takes the item out of a cell and frees the cell with its maker's
    /// allocator.
    unsafe fn take<T>(payload: *mut c_void) -> T {
        let cell = payload as *mut Cell<T>;
        // SAFETY: the tag said this is a `Cell<T>`; the item is read once.
        let item = unsafe { ManuallyDrop::into_inner(std::ptr::read(&(*cell).item)) };
        // SAFETY: `free` is the maker's `free_cell::<T>`.
        (unsafe { (*cell).free })(payload);
        item
    }

    /// What the return carries. `values` is the host's value table, which
    /// owns a `VALUE` payload.
    #[inline]
    pub fn into_outcome(self, values: ValueVTableRef) -> Outcome {
        let this = ManuallyDrop::new(self);
        let p = this.payload;
        // SAFETY: each tag names what `p` is (see the type's table).
        unsafe {
            match this.tag {
                Self::TAG_NONE => Outcome::None,
                Self::TAG_VALUE => Outcome::Value(Value { node: p, vt: values }),
                Self::TAG_OBJECT => Outcome::Object(Self::take(p)),
                Self::TAG_OBJECTS => Outcome::Objects(Self::take(p)),
                Self::TAG_ERROR => Outcome::Error(Self::take(p)),
                Self::TAG_PENDING => Outcome::Pending(Self::take(p)),
                other => Outcome::Error(unknown_tag(other)),
            }
        }
    }
}

#[cold]
fn unknown_tag(tag: u8) -> HookError {
    HookError::new(
        ErrorKind::TYPE,
        format!("the plugin returned an unknown return tag {tag}; was it built for a newer ABI?"),
    )
}

impl Drop for HookReturn {
    fn drop(&mut self) {
        let this = std::mem::replace(self, HookReturn::NONE);
        drop(this.into_outcome(crate::value::vtable()));
    }
}

/// A [`HookReturn`], read.
pub enum Outcome {
    /// Python's `None`.
    None,
    /// A host value.
    Value(Value),
    /// One object.
    Object(ObjectHandle),
    /// A list of objects.
    Objects(RVec<ObjectHandle>),
    /// A failure.
    Error(HookError),
    /// A future yielding the return.
    Pending(FfiFuture<HookReturn>),
}

impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::None => f.write_str("None"),
            Outcome::Value(v) => write!(f, "Value({v:?})"),
            Outcome::Object(o) => write!(f, "Object({})", o.kind()),
            Outcome::Objects(v) => write!(f, "Objects({})", v.len()),
            Outcome::Error(e) => write!(f, "Error({e})"),
            Outcome::Pending(_) => f.write_str("Pending"),
        }
    }
}

/// The live, mutable turn state shared by all hooks of one turn.
///
/// A change made by one hook is seen by later hooks.
#[sabi_trait]
pub trait StateStore: Send + Sync + Clone {
    /// The value stored under `key`.
    fn get(&self, key: RStr<'_>) -> ROption<Value>;
    /// Stores `value` under `key`.
    fn set(&self, key: RStr<'_>, value: Value) -> RResult<(), RString>;
    /// Removes `key`; returns whether it was present.
    fn remove(&self, key: RStr<'_>) -> bool;
    /// Every key, in insertion order.
    fn keys(&self) -> RVec<RString>;
    /// The whole state as one map value.
    #[sabi(last_prefix_field)]
    fn snapshot(&self) -> Value;
    /// Stores a live object under `key` (ABI 2.2): hooks of any plugin
    /// later in the turn get it back with `get_object`; the state's values
    /// show `{"$object": kind, "name": name}` there. Call only on a host of
    /// 2.2 or later (the SDK checks).
    fn set_object(&self, key: RStr<'_>, object: ObjectHandle) -> RResult<(), RString>;
    /// The live object stored under `key`, while `key` still holds it (ABI 2.2).
    fn get_object(&self, key: RStr<'_>) -> ROption<ObjectHandle>;
    /// A number that changes whenever the state is written: `set`,
    /// `remove`, `set_object`, or a merge by the host (ABI 2.4). Two equal
    /// numbers read from the same store mean nothing was written in
    /// between, so a plugin (a language bridge) can keep its own view of
    /// the state for a whole turn instead of converting it on every call.
    /// Call only on a host of 2.4 or later (the SDK checks).
    fn revision(&self) -> u64;
}

/// FFI handle to a [`StateStore`], cheap to clone.
pub type StateHandle = StateStore_TO<'static, RArc<()>>;

/// An object that crosses the boundary: a tape store, a channel, a tool, an
/// environment, a model stream, a CLI registry, a message handler, …
///
/// Methods are addressed by name with a map of named arguments, so new
/// object kinds do not change the ABI; each kind's methods are declared
/// once (`bub_abi::resources`) for both sides.
#[sabi_trait]
pub trait ForeignObject: Send + Sync + Clone {
    /// What the object is (`tape_store`, `channel`, `tool`, `stream`, …).
    fn kind(&self) -> RString;
    /// The object's name, where it has one (channels, tools, sidecars).
    fn name(&self) -> RString;
    /// Calls method `method` with `args` (a map); the future yields a value.
    #[sabi(last_prefix_field)]
    fn invoke(&self, method: RStr<'_>, args: Value) -> FfiFuture<RResult<Value, HookError>>;
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
    pub log: extern "C" fn(plugin: RStr<'_>, level: LogLevel, target: RStr<'_>, message: RStr<'_>),
    /// The host's value functions: plugins build the values they return
    /// with these, so every value a hook returns belongs to the host.
    #[sabi(last_prefix_field)]
    pub values: ValueVTableRef,
    /// Calls the rest of a hook's chain for the plugin registered as
    /// `instance`, from inside one of its hooks (ABI 2.1; pluggy's
    /// `subset_hook_caller`): the implementations after it in call order.
    /// `args` is a map of the hook's arguments by name (a `state` argument
    /// as a map; hooks with an object argument cannot be called). A
    /// first-result hook answers the first non-None answer; a broadcast
    /// hook a list of the values, or the objects, answered.
    #[cfg(not(feature = "__test-abi-prev-minor"))]
    #[sabi(missing_field(option))]
    pub call_rest: extern "C" fn(instance: Instance, hook: RStr<'_>, args: Value) -> FfiFuture<HookReturn>,
}

/// What a plugin receives besides [`HostServices`] when it is initialised.
#[repr(C)]
#[derive(StableAbi)]
pub struct InitArgs<'a> {
    /// The name the plugin is registered under.
    pub name: RStr<'a>,
    /// The plugin's configuration, a JSON object (`{}` when none).
    pub config: RStr<'a>,
    /// The host's home (`$BUB_HOME`, `~/.bub` by default).
    pub home: RStr<'a>,
    /// The workspace the host works in (`-w`, else the launch folder).
    pub workspace: RStr<'a>,
    /// This plugin's own data folder (inside the home; created on demand by
    /// the plugin).
    pub data_dir: RStr<'a>,
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
    /// Creates a plugin instance (once per registration, before any of its
    /// hooks is called).
    pub init: extern "C" fn(HostServicesRef, &InitArgs<'_>) -> RResult<Instance, HookError>,
    /// The hook implementations.
    #[sabi(last_prefix_field)]
    pub hooks: HookTableRef,
    /// Plugins this one replaces, by name (ABI 2.1): the installer records
    /// them in the manifest and the host then lists them as replaced
    /// instead of loading them. Absent in plugins built before 2.1.
    #[cfg(not(feature = "__test-abi-prev-minor"))]
    #[sabi(missing_field(option))]
    pub replaces: RSlice<'static, RStr<'static>>,
    /// The plugins this library contributes besides itself (ABI 2.3; a
    /// plugin set: a bridge to Python plugins, a wasm runtime, another
    /// process). Called once, right after `init`, with the instance it
    /// returned; the host registers each member as a plugin of its own
    /// right after the library's registration, in the order given.
    /// Ordinary plugins answer no members; plugins built before 2.3 lack it.
    #[cfg(not(feature = "__test-abi-prev-minor"))]
    #[sabi(missing_field(option))]
    pub members: extern "C" fn(Instance) -> RResult<RVec<MemberPlugin>, HookError>,
}

/// One plugin of a plugin set (ABI 2.3), as [`PluginMod::members`] gives it.
#[repr(C)]
#[derive(StableAbi)]
pub struct MemberPlugin {
    /// The name it is registered under (a plugin name: letters, digits,
    /// `-`, `_`, `.`).
    pub name: RString,
    /// Its version.
    pub version: RString,
    /// One-line description.
    pub description: RString,
    /// Its instance, handed back in every [`HookCall`] of its hooks.
    pub instance: Instance,
    /// Its implementations. By hook name, so that a member built for a
    /// newer minor with hooks this host lacks still registers the rest.
    pub hooks: RVec<MemberHook>,
}

/// One hook implementation of a [`MemberPlugin`]: its own marker, so that
/// members of one library rank like separate plugins.
#[repr(C)]
#[derive(StableAbi)]
pub struct MemberHook {
    /// The hook's name (`resolve_session`).
    pub hook: RString,
    /// The implementation.
    pub slot: HookSlot,
}

impl PluginMod {
    /// The module of a plugin built against this ABI (what
    /// [`crate::export_plugin!`] builds).
    pub const fn new(
        name: RStr<'static>,
        version: RStr<'static>,
        description: RStr<'static>,
        init: extern "C" fn(HostServicesRef, &InitArgs<'_>) -> RResult<Instance, HookError>,
        hooks: HookTableRef,
        replaces: RSlice<'static, RStr<'static>>,
        members: extern "C" fn(Instance) -> RResult<RVec<MemberPlugin>, HookError>,
    ) -> PluginMod {
        #[cfg(feature = "__test-abi-prev-minor")]
        let _ = (replaces, members);
        PluginMod {
            abi_version: RStr::from_str(ABI_VERSION),
            name,
            version,
            description,
            init,
            hooks,
            #[cfg(not(feature = "__test-abi-prev-minor"))]
            replaces,
            #[cfg(not(feature = "__test-abi-prev-minor"))]
            members,
        }
    }
}

impl RootModule for PluginModRef {
    abi_stable::declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "bub_plugin";
    const NAME: &'static str = "bub_plugin";
    const VERSION_STRINGS: VersionStrings = version_strings();
}

const fn version_strings() -> VersionStrings {
    #[cfg(feature = "__test-abi-major-3")]
    {
        VersionStrings::new("3.0.0")
    }
    #[cfg(all(feature = "__test-abi-1", not(feature = "__test-abi-major-3")))]
    {
        VersionStrings::new("1.2.0")
    }
    #[cfg(not(any(feature = "__test-abi-1", feature = "__test-abi-major-3")))]
    {
        abi_stable::package_version_strings!()
    }
}
