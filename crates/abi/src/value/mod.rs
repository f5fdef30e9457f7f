//! Host-owned values: how hook arguments and results cross the boundary.
//!
//! The host keeps every argument as one immutable value tree and lends
//! plugins a [`ValueRef`]: two words that read through the host's functions
//! (a field, an index, a length, a string view, a number). A plugin that
//! reads one field of a tool call pays for that field, whatever else the
//! call holds — a 100 KB file in the arguments costs nothing unread.
//!
//! Results are host values too. A plugin builds them through the host's
//! functions ([`Value::from`], [`Value::object`], [`Value::from_serialize`])
//! or derives them from what it was given: [`ValueRef::with`] returns "this
//! map plus one key", sharing every other entry, so `proceed(arguments +
//! one key)` copies no argument.
//!
//! The small functions a hook's path goes through (the `From`
//! conversions, the accessors, the serializer's steps, the return's
//! wrapping) are `#[inline]`: each is a call into the host's table, and
//! inlined they land inside the plugin's own hook code. Out of line, every
//! plugin ran its own copies of them, spread over pages of its library;
//! with 100 plugins loaded that made a hook that builds a value twice as
//! dear per plugin as with 10, whatever the plugin's profile.
//!
//! Serde works on both ends, costing what it touches:
//! - `ValueRef::deserialize::<T>()` fills a `#[derive(Deserialize)]` struct
//!   by looking up its fields, never walking the rest; a field of type
//!   [`Value`] or [`ValueRef`] takes the subtree as a handle, uncopied.
//! - [`Value::from_serialize`] builds a host value from any `Serialize`; a
//!   [`Value`] inside it is taken as a handle.
//!
//! ```
//! use bub_abi::{Value, ValueRef};
//!
//! let call = Value::from_json(r#"{"tool": "bash", "arguments": {"cmd": "ls"}}"#).unwrap();
//! let call: ValueRef<'_> = call.as_ref();
//! assert_eq!(call.get("tool").and_then(|t| t.as_str()), Some("bash"));
//!
//! let arguments = call.get("arguments").unwrap();
//! let more = arguments.with("timeout", 30);
//! assert_eq!(more.to_json(), r#"{"cmd":"ls","timeout":30}"#);
//!
//! #[derive(serde::Deserialize)]
//! struct Call<'a> {
//!     tool: &'a str,
//!     #[serde(borrow)]
//!     arguments: ValueRef<'a>,
//! }
//! let typed: Call<'_> = call.deserialize().unwrap();
//! assert_eq!((typed.tool, typed.arguments.len()), ("bash", 1));
//! ```

mod compact;
mod de;
mod ser;
pub(crate) mod tree;

use std::marker::PhantomData;

use abi_stable::std_types::{RStr, RString};

use crate::abi::{HookError, ValueVTableRef};
pub use crate::abi::{Value, ValueKind, ValueRef};
pub use ser::ValueSerializer;

/// Why a value could not be read as a type, or built from one (serde's
/// error for both directions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(String);

/// The error of [`ValueRef::deserialize`] (the same type as [`Error`]).
pub type DeError = Error;

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl serde::de::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

impl serde::ser::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

static HOST_TABLE: crate::sync::SetOnce<ValueVTableRef> = crate::sync::SetOnce::new();

/// How many values were copied from one table into another (only values
/// built before a plugin's init should ever be; the tests keep it at 0 on
/// every hot path).
pub(crate) static DEEP_COPIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The host's value table: the one handed over at init in a plugin, this
/// copy's own in the host.
#[inline]
pub(crate) fn vtable() -> ValueVTableRef {
    match HOST_TABLE.get() {
        Some(vt) => *vt,
        None => tree::own_vtable(),
    }
}

/// Adopts the host's value table (called once, when a cdylib plugin is
/// initialised).
pub(crate) fn adopt_host_table(vt: ValueVTableRef) {
    let _ = HOST_TABLE.set(vt);
}

/// This copy's own value table, which the host hands to its plugins. Inside
/// a plugin it is the plugin's copy, not the host's: code that reads or
/// releases a host value there must use the adopted table (`vtable()`),
/// or the host's node is freed by the plugin's allocator.
#[doc(hidden)]
pub const fn own_table() -> ValueVTableRef {
    tree::own_vtable()
}

/// The error of JSON text that does not parse.
fn not_json(error: impl std::fmt::Display) -> HookError {
    HookError::new(crate::abi::ErrorKind::TYPE, format!("not valid JSON: {error}"))
}

#[inline]
fn same_table(a: ValueVTableRef, b: ValueVTableRef) -> bool {
    std::ptr::eq(a.0.to_raw_ptr(), b.0.to_raw_ptr())
}

// SAFETY: host values are immutable once shared and reference-counted
// atomically; builders are never shared.
unsafe impl Send for Value {}
// SAFETY: as above.
unsafe impl Sync for Value {}
// SAFETY: a view of an immutable value.
unsafe impl Send for ValueRef<'_> {}
// SAFETY: as above.
unsafe impl Sync for ValueRef<'_> {}

impl<'a> ValueRef<'a> {
    #[inline]
    pub(crate) fn from_raw(node: *const std::ffi::c_void, vt: ValueVTableRef) -> Option<Self> {
        (!node.is_null()).then_some(ValueRef { node, vt, _life: PhantomData })
    }

    /// `null`, without a host call.
    #[inline]
    pub fn null() -> ValueRef<'static> {
        ValueRef { node: &tree::NULL as *const tree::Node as *const _, vt: tree::own_vtable(), _life: PhantomData }
    }

    /// What kind of value this is.
    #[inline]
    pub fn kind(self) -> ValueKind {
        match (self.vt.kind())(self.node) {
            0 => ValueKind::Null,
            1 => ValueKind::Bool,
            2 => ValueKind::Int,
            3 => ValueKind::UInt,
            4 => ValueKind::Float,
            5 => ValueKind::Str,
            6 => ValueKind::Array,
            _ => ValueKind::Object,
        }
    }

    /// Roughly the JSON size of this value (string bytes plus quotes, 8
    /// per scalar, separators), counted up to just past `cap`: what the
    /// host's cap on a hook's answer measures. For a value of the host's
    /// own table, large lists and maps remember their size, so a subtree
    /// shared by many answers is walked once.
    #[doc(hidden)]
    pub fn approx_json_bytes(self, cap: usize) -> usize {
        if same_table(self.vt, tree::own_vtable()) {
            // SAFETY: a node of this copy's own table is a `tree::Node`,
            // alive for 'a.
            return tree::approx_bytes(unsafe { &*(self.node as *const tree::Node) }, cap);
        }
        match self.kind() {
            ValueKind::Str => self.as_str().map_or(2, |s| s.len() + 2),
            ValueKind::Array => {
                let mut total = 2;
                for item in self.items() {
                    total += item.approx_json_bytes(cap) + 1;
                    if total > cap {
                        break;
                    }
                }
                total
            }
            ValueKind::Object => {
                let mut total = 2;
                for (key, item) in self.entries() {
                    total += key.len() + 4 + item.approx_json_bytes(cap);
                    if total > cap {
                        break;
                    }
                }
                total
            }
            _ => 8,
        }
    }

    /// The JSON text of a list or map not parsed yet (kept as text by
    /// [`Value::from_json_shallow`]), for a reader that wants it as JSON
    /// anyway: parsing it into its own type once is cheaper than walking
    /// host nodes built from it. `None` for every other value.
    #[doc(hidden)]
    pub fn lazy_json(self) -> Option<&'a str> {
        if !same_table(self.vt, tree::own_vtable()) {
            return None;
        }
        // SAFETY: a node of this copy's own table is a `tree::Node`, alive
        // for 'a, and so is its text.
        unsafe { &*(self.node as *const tree::Node) }.lazy_text()
    }

    /// Whether this is `null`.
    #[inline]
    pub fn is_null(self) -> bool {
        self.kind() == ValueKind::Null
    }

    /// The live object this value holds (ABI 2.2: [`Value::from_live_object`]),
    /// if it holds one; a plain marker map (or a host older than 2.2)
    /// answers `None`. Everything else reads such a value as the map
    /// `{"$object": kind, "name": name}`.
    pub fn live_object(self) -> Option<crate::Object> {
        let as_handle = self.vt.as_handle()?;
        as_handle(self.node).into_option().map(crate::Object::from_handle)
    }

    /// Whether this is a map.
    #[inline]
    pub fn is_object(self) -> bool {
        self.kind() == ValueKind::Object
    }

    /// Whether this is a list.
    #[inline]
    pub fn is_array(self) -> bool {
        self.kind() == ValueKind::Array
    }

    /// The string, borrowed from the host (never copied).
    #[inline]
    pub fn as_str(self) -> Option<&'a str> {
        let mut out = RStr::from_str("");
        let found = (self.vt.as_str())(self.node, &mut out);
        // SAFETY: only the lifetime changes: the string lives in a node that
        // lives for 'a.
        found.then(|| unsafe { &*(out.as_str() as *const str) })
    }

    /// The boolean.
    #[inline]
    pub fn as_bool(self) -> Option<bool> {
        (self.kind() == ValueKind::Bool).then(|| (self.vt.as_bool())(self.node))
    }

    /// An integer that fits `i64`.
    #[inline]
    pub fn as_i64(self) -> Option<i64> {
        let mut out = 0;
        (self.vt.as_i64())(self.node, &mut out).then_some(out)
    }

    /// A non-negative integer.
    #[inline]
    pub fn as_u64(self) -> Option<u64> {
        let mut out = 0;
        (self.vt.as_u64())(self.node, &mut out).then_some(out)
    }

    /// Any number, as a float.
    #[inline]
    pub fn as_f64(self) -> Option<f64> {
        let mut out = 0.0;
        (self.vt.as_f64())(self.node, &mut out).then_some(out)
    }

    /// The number of entries of a map or list (bytes of a string; else 0).
    #[inline]
    pub fn len(self) -> usize {
        (self.vt.len())(self.node)
    }

    /// Whether [`len`](Self::len) is 0.
    #[inline]
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// A map's entry (`None` if absent or not a map).
    #[inline]
    pub fn get(self, key: &str) -> Option<ValueRef<'a>> {
        Self::from_raw((self.vt.get())(self.node, RStr::from_str(key)), self.vt)
    }

    /// A list's item (`None` if out of range or not a list).
    #[inline]
    pub fn index(self, i: usize) -> Option<ValueRef<'a>> {
        Self::from_raw((self.vt.index())(self.node, i), self.vt)
    }

    /// A map's `i`-th entry in insertion order.
    #[inline]
    pub fn entry(self, i: usize) -> Option<(&'a str, ValueRef<'a>)> {
        let mut key = RStr::from_str("");
        let v = Self::from_raw((self.vt.entry())(self.node, i, &mut key), self.vt)?;
        // SAFETY: only the lifetime changes: keys live in the map, which
        // lives for 'a.
        let key = unsafe { &*(key.as_str() as *const str) };
        Some((key, v))
    }

    /// A list's items.
    pub fn items(self) -> impl ExactSizeIterator<Item = ValueRef<'a>> + 'a {
        let n = if self.is_array() { self.len() } else { 0 };
        (0..n).map(move |i| self.index(i).expect("index below len"))
    }

    /// A map's entries, in insertion order.
    pub fn entries(self) -> impl ExactSizeIterator<Item = (&'a str, ValueRef<'a>)> + 'a {
        let n = if self.is_object() { self.len() } else { 0 };
        (0..n).map(move |i| self.entry(i).expect("index below len"))
    }

    /// An owned handle to this value (a count bumped; nothing copied).
    #[inline]
    pub fn to_owned(self) -> Value {
        Value { node: (self.vt.retain())(self.node), vt: self.vt }
    }

    /// This map plus (or with a new) `key`, sharing every other entry. On
    /// anything but a map, a map of just `key`.
    pub fn with(self, key: &str, value: impl Into<Value>) -> Value {
        let item = value.into().into_table(self.vt);
        let item = std::mem::ManuallyDrop::new(item);
        Value { node: (self.vt.with_key())(self.node, RStr::from_str(key), item.node), vt: self.vt }
    }

    /// This map without `key`, sharing every other entry.
    #[inline]
    pub fn without(self, key: &str) -> Value {
        Value { node: (self.vt.without_key())(self.node, RStr::from_str(key)), vt: self.vt }
    }

    /// JSON text (built by the host).
    pub fn to_json(self) -> String {
        (self.vt.write_json())(self.node, false).into_string()
    }

    /// Indented JSON text.
    pub fn to_json_pretty(self) -> String {
        (self.vt.write_json())(self.node, true).into_string()
    }

    /// Reads the value as `T`, touching only what `T` asks for: a struct's
    /// fields are looked up by name; a [`Value`] or [`ValueRef`] field takes
    /// its subtree as a handle.
    pub fn deserialize<T: serde::Deserialize<'a>>(self) -> Result<T, DeError> {
        T::deserialize(self)
    }
}

impl PartialEq for ValueRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        if same_table(self.vt, other.vt) {
            (self.vt.eq())(self.node, other.node)
        } else {
            self.to_json() == other.to_json()
        }
    }
}

impl std::fmt::Debug for ValueRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_json())
    }
}

impl std::fmt::Display for ValueRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_json())
    }
}

impl Value {
    /// The view of this value, for reading.
    #[inline]
    pub fn as_ref(&self) -> ValueRef<'_> {
        ValueRef { node: self.node, vt: self.vt, _life: PhantomData }
    }

    #[inline]
    pub(crate) fn from_table(vt: ValueVTableRef, node: *const std::ffi::c_void) -> Value {
        Value { node, vt }
    }

    /// JSON text (built by the host).
    pub fn to_json(&self) -> String {
        self.as_ref().to_json()
    }

    /// `null`.
    #[inline]
    pub fn null() -> Value {
        Self::scalar(crate::value::tree::kind::NULL, 0)
    }

    #[inline]
    fn scalar(kind: u8, bits: u64) -> Value {
        let vt = vtable();
        Value { node: (vt.scalar())(kind, bits), vt }
    }

    /// A value holding a live object (ABI 2.2): put it into a map or a list
    /// like any value (a hook's answer, a tool's context, the turn state),
    /// and whoever receives it gets the object back with
    /// [`ValueRef::live_object`]. Readers that do not ask see the map
    /// `{"$object": kind, "name": name}`. Fails on a host older than 2.2.
    pub fn from_live_object(object: &crate::Object) -> Result<Value, crate::HookError> {
        let vt = vtable();
        let Some(handle) = vt.handle() else {
            return Err(crate::HookError::new(
                crate::abi::ErrorKind::UNSUPPORTED,
                "values holding objects need a host of ABI 2.2 or later; this bub is older: update it",
            ));
        };
        Ok(Value { node: handle(object.handle().clone()), vt })
    }

    /// An empty map, to fill with [`insert`](Self::insert).
    #[inline]
    pub fn object() -> Value {
        let vt = vtable();
        Value { node: (vt.object())(0), vt }
    }

    /// An empty list, to fill with [`push`](Self::push).
    #[inline]
    pub fn array() -> Value {
        Value::array_with_capacity(0)
    }

    /// An empty list with room for `n` items: filling it never regrows it.
    #[inline]
    pub fn array_with_capacity(n: usize) -> Value {
        let vt = vtable();
        Value { node: (vt.array())(n), vt }
    }

    /// Sets `key` in a map. In place when this handle alone holds the map
    /// (one just built); otherwise copy-on-write ([`ValueRef::with`]), so a
    /// value someone else holds never changes.
    pub fn insert(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        let item = std::mem::ManuallyDrop::new(value.into().into_table(self.vt));
        if !(self.vt.insert())(self.node, RStr::from_str(key), item.node) {
            let item = std::mem::ManuallyDrop::into_inner(item);
            *self = self.as_ref().with(key, item);
        }
        self
    }

    /// Appends to a list. In place when this handle alone holds it;
    /// otherwise the list is copied first (its items are shared).
    pub fn push(&mut self, value: impl Into<Value>) -> &mut Self {
        let item = std::mem::ManuallyDrop::new(value.into().into_table(self.vt));
        if !(self.vt.push())(self.node, item.node) {
            let item = std::mem::ManuallyDrop::into_inner(item);
            let mut copy = Value { node: (self.vt.array())(self.as_ref().len()), vt: self.vt };
            for v in self.as_ref().items() {
                copy.push(v.to_owned());
            }
            copy.push(item);
            *self = copy;
        }
        self
    }

    /// Appends `item`, shared: as `push(item.to_owned())`, without the
    /// owned handle in between (ABI 2.6; an older host takes that path).
    pub fn push_ref(&mut self, item: ValueRef<'_>) -> &mut Self {
        if same_table(self.vt, item.vt) {
            if let Some(push_ref) = self.vt.push_ref() {
                if push_ref(self.node, item.node) {
                    return self;
                }
            }
        }
        self.push(item.to_owned())
    }

    /// Sets `key` to `item`, shared: as `insert(key, item.to_owned())`,
    /// without the owned handle in between (ABI 2.6).
    pub fn insert_ref(&mut self, key: &str, item: ValueRef<'_>) -> &mut Self {
        if same_table(self.vt, item.vt) {
            if let Some(insert_ref) = self.vt.insert_ref() {
                if insert_ref(self.node, RStr::from_str(key), item.node) {
                    return self;
                }
            }
        }
        self.insert(key, item.to_owned())
    }

    /// Parses JSON text (in the host).
    pub fn from_json(text: &str) -> Result<Value, HookError> {
        let vt = vtable();
        let mut err = RString::new();
        let node = (vt.parse_json())(RStr::from_str(text), &mut err);
        if node.is_null() {
            Err(not_json(err))
        } else {
            Ok(Value { node, vt })
        }
    }

    /// As [`from_json`](Self::from_json), with the lists and maps inside a
    /// top-level map kept as their text until something looks inside them
    /// (for the host's own readers of stored JSON lines: a tape entry's
    /// payload that is only passed on is never parsed). In a plugin it is
    /// `from_json`.
    #[doc(hidden)]
    pub fn from_json_shallow(text: &str) -> Result<Value, HookError> {
        let vt = vtable();
        if !same_table(vt, tree::own_vtable()) {
            return Value::from_json(text);
        }
        let node = tree::parse_shallow(text).map_err(not_json)?;
        Ok(Value { node: tree::into_raw(node), vt })
    }

    /// A map of `keys` to `values`, each value read from its JSON text as
    /// [`from_json_shallow`](Self::from_json_shallow) reads a top-level
    /// map's values (lists and maps kept as text until read): for a reader
    /// that scanned a line into its fields itself (the builtin store, for
    /// the lines it writes). The keys are a static list, named once for
    /// every map built with them; they must be distinct, and there must be
    /// as many as values. In a plugin it parses each value in full.
    #[doc(hidden)]
    pub fn from_json_fields(
        keys: &'static [&'static str],
        values: &[&serde_json::value::RawValue],
    ) -> Result<Value, HookError> {
        assert_eq!(keys.len(), values.len(), "from_json_fields: as many keys as values");
        let vt = vtable();
        if !same_table(vt, tree::own_vtable()) {
            let mut out = Value::object();
            for (key, raw) in keys.iter().zip(values) {
                out.insert(key, Value::from_json(raw.get())?);
            }
            return Ok(out);
        }
        let node = tree::shallow_fields(keys, values).map_err(not_json)?;
        Ok(Value { node: tree::into_raw(node), vt })
    }

    /// As [`from_json_fields`](Self::from_json_fields), for `text` written
    /// as the compact map `{"k0":v0,"k1":v1,…}` of exactly `keys` in their
    /// order, without whitespace (as serde_json writes a struct): the scan
    /// that splits it also checks each value is JSON, at a fraction of
    /// serde_json's cost. `accept` sees the values' texts first and may
    /// refuse them. `None` when `text` is anything else or holds what the
    /// scan leaves to serde_json (a `\u` escape, nesting deeper than 64),
    /// and in a plugin: the caller then reads it the general way.
    #[doc(hidden)]
    pub fn from_compact_fields(
        keys: &'static [&'static str],
        text: &str,
        accept: impl FnOnce(&[&str]) -> bool,
    ) -> Option<Value> {
        let vt = vtable();
        if !same_table(vt, tree::own_vtable()) {
            return None;
        }
        let node = tree::compact_fields(keys, text, accept)?;
        Some(Value { node: tree::into_raw(node), vt })
    }

    /// This list with its first `keep` items kept (the first replaced by
    /// `first` when given) and `tail` appended, all shared: in place when
    /// this handle holds the list alone (nothing else shares it), else on
    /// a copy. For the host's own long-lived lists (a model request's
    /// messages, extended step by step instead of rebuilt). False, and
    /// nothing changed, when this is not a list of this table, holds fewer
    /// than `keep` items, when an item is of another table, or in a plugin.
    #[doc(hidden)]
    pub fn splice_refs<'a>(
        &mut self,
        keep: usize,
        first: Option<ValueRef<'a>>,
        tail: impl IntoIterator<Item = ValueRef<'a>>,
    ) -> bool {
        let own = tree::own_vtable();
        let lent = |v: &ValueRef<'_>| same_table(v.vt, own);
        if !same_table(self.vt, own) || !first.as_ref().is_none_or(lent) {
            return false;
        }
        // All checked before the list changes.
        let tail: Option<Vec<*const std::ffi::c_void>> = tail.into_iter().map(|v| lent(&v).then_some(v.node)).collect();
        let Some(tail) = tail else { return false };
        // SAFETY: `self.node` is this handle's owned pointer; the others
        // are lent by the caller's values for this call.
        unsafe { tree::splice_refs(self.node, keep, first.map(|f| f.node), &tail) }
    }

    /// Builds a host value from any `Serialize` (a [`Value`] inside is
    /// taken as a handle, uncopied).
    pub fn from_serialize<T: serde::Serialize + ?Sized>(value: &T) -> Result<Value, HookError> {
        value
            .serialize(ValueSerializer::new())
            .map_err(|e| HookError::new(crate::abi::ErrorKind::TYPE, format!("value could not be serialized: {e}")))
    }

    /// Reads the value as `T` (see [`ValueRef::deserialize`]); `T` owns
    /// its data.
    pub fn deserialize<T: serde::de::DeserializeOwned>(&self) -> Result<T, DeError> {
        T::deserialize(self.as_ref())
    }

    /// This value, in `vt`'s representation (a deep copy only if it was
    /// built with another table).
    #[inline]
    pub(crate) fn into_table(self, vt: ValueVTableRef) -> Value {
        if same_table(self.vt, vt) {
            return self;
        }
        self.copied_into(vt)
    }

    /// [`into_table`](Self::into_table)'s copy, out of the hook's path.
    #[cold]
    #[inline(never)]
    fn copied_into(self, vt: ValueVTableRef) -> Value {
        DEEP_COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let json = self.as_ref().to_json();
        let mut err = RString::new();
        let node = (vt.parse_json())(RStr::from_str(&json), &mut err);
        assert!(!node.is_null(), "a value's own JSON always parses: {err}");
        Value { node, vt }
    }

    /// This value in the host's representation.
    #[inline]
    pub(crate) fn into_host(self) -> Value {
        self.into_table(vtable())
    }
}

impl Clone for Value {
    #[inline]
    fn clone(&self) -> Self {
        self.as_ref().to_owned()
    }
}

impl Drop for Value {
    #[inline]
    fn drop(&mut self) {
        (self.vt.release())(self.node);
    }
}

impl Default for Value {
    fn default() -> Self {
        Value::null()
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        self.as_ref() == other.as_ref()
    }
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.as_ref().to_json())
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.as_ref().to_json())
    }
}

impl From<bool> for Value {
    #[inline]
    fn from(b: bool) -> Self {
        Value::scalar(tree::kind::BOOL, b as u64)
    }
}

impl From<i64> for Value {
    #[inline]
    fn from(i: i64) -> Self {
        Value::scalar(tree::kind::INT, i as u64)
    }
}

impl From<i32> for Value {
    #[inline]
    fn from(i: i32) -> Self {
        Value::from(i as i64)
    }
}

impl From<u64> for Value {
    #[inline]
    fn from(u: u64) -> Self {
        Value::scalar(tree::kind::UINT, u)
    }
}

impl From<usize> for Value {
    #[inline]
    fn from(u: usize) -> Self {
        Value::from(u as u64)
    }
}

impl From<f64> for Value {
    #[inline]
    fn from(f: f64) -> Self {
        Value::scalar(tree::kind::FLOAT, f.to_bits())
    }
}

impl From<&str> for Value {
    #[inline]
    fn from(s: &str) -> Self {
        let vt = vtable();
        Value { node: (vt.string())(RStr::from_str(s)), vt }
    }
}

impl From<String> for Value {
    #[inline]
    fn from(s: String) -> Self {
        Value::from(s.as_str())
    }
}

impl From<ValueRef<'_>> for Value {
    #[inline]
    fn from(v: ValueRef<'_>) -> Self {
        v.to_owned()
    }
}

impl From<&Value> for Value {
    #[inline]
    fn from(v: &Value) -> Self {
        v.clone()
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or_else(Value::null, Into::into)
    }
}

impl From<&serde_json::Value> for Value {
    fn from(v: &serde_json::Value) -> Self {
        Value::from_serialize(v).expect("JSON values always serialize")
    }
}

impl From<serde_json::Value> for Value {
    fn from(v: serde_json::Value) -> Self {
        Value::from(&v)
    }
}

impl From<&Value> for serde_json::Value {
    fn from(v: &Value) -> Self {
        v.deserialize().expect("a host value always reads as JSON")
    }
}

impl From<Value> for serde_json::Value {
    fn from(v: Value) -> Self {
        serde_json::Value::from(&v)
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use super::*;

    /// One table per binary: handles made anywhere in it compare equal, so
    /// passing a value on never copies it (a `const` table did: its
    /// promoted copies had different addresses).
    #[test]
    fn one_table_and_no_deep_copies() {
        assert!(same_table(own_table(), vtable()));
        assert!(same_table(ValueRef::null().vt, Value::object().vt));
        let before = DEEP_COPIES.load(std::sync::atomic::Ordering::Relaxed);
        let v = Value::from_json(r#"{"big":"zzzz"}"#).unwrap();
        let node = v.node;
        let wrapped = Value::from_serialize(&serde_json::json!({"a": 1})).unwrap();
        let ret = crate::abi::HookReturn::value(v);
        match ret.into_outcome(own_table()) {
            crate::abi::Outcome::Value(back) => assert_eq!(back.node, node),
            other => panic!("{other:?}"),
        }
        drop(wrapped);
        assert_eq!(DEEP_COPIES.load(std::sync::atomic::Ordering::Relaxed), before);
    }

    #[test]
    fn json_round_trip_keeps_order_and_kinds() {
        let text = r#"{"b":1,"a":[true,null,-2,18446744073709551615,1.5,"x"],"c":{}}"#;
        let v = Value::from_json(text).unwrap();
        assert_eq!(v.as_ref().to_json(), text);
        let r = v.as_ref();
        assert_eq!(r.kind(), ValueKind::Object);
        let a = r.get("a").unwrap();
        let kinds: Vec<_> = a.items().map(ValueRef::kind).collect();
        use ValueKind::*;
        assert_eq!(kinds, [Bool, Null, Int, UInt, Float, Str]);
        assert_eq!(a.index(3).unwrap().as_u64(), Some(u64::MAX));
        assert_eq!(a.index(2).unwrap().as_i64(), Some(-2));
        assert_eq!(r.entries().map(|(k, _)| k).collect::<Vec<_>>(), ["b", "a", "c"]);
        assert!(Value::from_json("{").is_err());
    }

    /// A stored line's lists and maps stay text until something
    /// looks inside; every reader sees the same value as a full parse.
    #[test]
    fn a_shallow_parse_reads_as_a_full_one_and_parses_inside_only_when_read() {
        let text = r#"{"id":7,"kind":"message","payload":{"role":"user","content":"hi \u00e9","n":[1,2.5,{"x":null}]},"meta":{},"date":"2026-12-01T00:00:00+00:00","list":[true]}"#;
        let full = Value::from_json(text).unwrap();
        let lazy = Value::from_json_shallow(text).unwrap();
        let payload = lazy.as_ref().get("payload").unwrap();
        // Kind and text without a parse; the text is the line's own.
        assert_eq!(payload.kind(), ValueKind::Object);
        assert_eq!(lazy.as_ref().get("list").unwrap().kind(), ValueKind::Array);
        assert_eq!(payload.lazy_json(), Some(r#"{"role":"user","content":"hi \u00e9","n":[1,2.5,{"x":null}]}"#));
        // Written out afresh (`é`, not its escape), as a full parse is.
        assert_eq!(payload.to_json(), full.as_ref().get("payload").unwrap().to_json());
        assert!(payload.to_json().contains("hi é"));
        assert_eq!(lazy.as_ref().get("meta").unwrap().lazy_json(), None, "an empty map is parsed at once");
        // Scalars read straight from their text (no second parse) read as
        // a full parse does, kinds included; others go through the parser.
        let scalars = r#"{"s":"plain","long":"2026-12-01T00:00:00+00:00","e":"a\"b\\c\u00e9","n":12,"zero":0,
            "neg":-3,"f":1.5,"x":1e3,"big":18446744073709551615,"t":true,"no":false,"z":null,"m":{},"a":[],"sp":{ }}"#;
        let (parsed, quick) = (Value::from_json(scalars).unwrap(), Value::from_json_shallow(scalars).unwrap());
        assert_eq!(quick.to_json(), parsed.to_json());
        for ((k, a), (_, b)) in quick.as_ref().entries().zip(parsed.as_ref().entries()) {
            assert_eq!(
                (k, a.kind(), a.as_i64(), a.as_u64(), a.as_f64()),
                (k, b.kind(), b.as_i64(), b.as_u64(), b.as_f64())
            );
            assert_eq!(a, b, "{k}");
        }
        // Built from fields scanned elsewhere: the same value, the same laziness.
        let raw = |t: &str| serde_json::value::RawValue::from_string(t.to_owned()).unwrap();
        let (id, text) = (raw("7"), raw(r#"{"role":"user","content":"hi \u00e9","n":[1,2.5,{"x":null}]}"#));
        let fields = Value::from_json_fields(&["id", "payload"], &[&id, &text]).unwrap();
        assert_eq!(
            fields.to_json(),
            format!(r#"{{"id":7,"payload":{}}}"#, full.as_ref().get("payload").unwrap().to_json())
        );
        assert!(fields.as_ref().get("payload").unwrap().lazy_json().is_some());
        // A map of static keys reads, compares and changes as any map.
        let same = Value::from_json(&fields.to_json()).unwrap();
        let f = fields.as_ref();
        assert_eq!((f.len(), f.get("id").and_then(|v| v.as_u64()), f.get("nope")), (2, Some(7), None));
        assert_eq!(f.entries().map(|(k, _)| k).collect::<Vec<_>>(), ["id", "payload"]);
        assert_eq!(f.entry(1).map(|(k, _)| k), Some("payload"));
        assert_eq!(fields, same);
        assert_eq!(f.with("id", 8).to_json(), same.as_ref().with("id", 8).to_json());
        assert_eq!(f.with("x", 1).to_json(), same.as_ref().with("x", 1).to_json());
        assert_eq!(f.without("id").to_json(), same.as_ref().without("id").to_json());
        assert_eq!(fields, same, "a change of a copy changed the original");
        for (key, value) in [("id", 9), ("new", 1)] {
            let (mut mine, mut theirs) =
                (Value::from_json_fields(&["id", "payload"], &[&id, &text]).unwrap(), same.clone());
            mine.insert(key, value);
            theirs.insert(key, value);
            assert_eq!(mine.to_json(), theirs.to_json());
        }
        // Every `{}` read so is one shared map: changing one changes no other.
        let (a, b) =
            (Value::from_json_shallow(r#"{"m":{}}"#).unwrap(), Value::from_json_shallow(r#"{"m":{}}"#).unwrap());
        let mut m = a.as_ref().get("m").unwrap().to_owned();
        m.insert("x", Value::from_json("1").unwrap());
        assert_eq!(
            (m.to_json(), a.to_json(), b.to_json()),
            (r#"{"x":1}"#.into(), r#"{"m":{}}"#.into(), r#"{"m":{}}"#.into())
        );
        // Shared into another value, it is still unparsed text.
        let mut list = Value::array();
        list.push_ref(payload);
        assert!(list.as_ref().index(0).unwrap().lazy_json().is_some());
        // Read inside: the same as a full parse, through every reader.
        assert_eq!(payload.get("content").unwrap().as_str(), Some("hi \u{e9}"));
        assert_eq!(payload.len(), 3);
        assert_eq!(payload.entry(2).unwrap().0, "n");
        assert_eq!(lazy, full);
        assert_eq!(lazy.to_json(), full.to_json());
        assert_eq!(lazy.deserialize::<serde_json::Value>().unwrap(), full.deserialize::<serde_json::Value>().unwrap());
        assert_eq!(lazy.as_ref().with("extra", 1).as_ref().get("payload").unwrap().get("n").unwrap().len(), 3);
        // Not a map at the top: parsed in full; bad JSON: an error.
        assert_eq!(Value::from_json_shallow("[1,[2]]").unwrap().to_json(), "[1,[2]]");
        assert!(Value::from_json_shallow(r#"{"a":[1,}"#).is_err());
        assert!(Value::from_json_shallow(r#"{"a":[1]} x"#).is_err());
        // Nested deeper than the parser allows: unreadable now, as a full
        // parse finds it, not a null later.
        let deep = format!(r#"{{"payload":{}{}}}"#, "[".repeat(200), "]".repeat(200));
        assert!(Value::from_json(&deep).is_err());
        assert!(Value::from_json_shallow(&deep).is_err());
        // Brackets counted wherever they are (in strings too), up to the
        // limit: fewer stay text and read back as parsed in full.
        for n in [1, 120] {
            let nested = format!(r#"{{"p":{}"{{["{}}}"#, "[".repeat(n), "]".repeat(n));
            let (lazy, full) = (Value::from_json_shallow(&nested).unwrap(), Value::from_json(&nested).unwrap());
            assert_eq!(lazy.to_json(), full.to_json(), "{n} deep");
        }
    }

    #[test]
    fn a_list_spliced_alone_changes_in_place_and_a_shared_one_on_a_copy() {
        let item = |s: &str| Value::from_json(&format!(r#"{{"m":"{s} {}"}}"#, "x".repeat(30))).unwrap();
        let (a, b, c, d, s) = (item("a"), item("b"), item("c"), item("d"), item("s"));
        let mut list = Value::array_with_capacity(8);
        for v in [&a, &b, &c] {
            list.push_ref(v.as_ref());
        }
        let items =
            |l: &Value| l.as_ref().items().map(|i| i.get("m").unwrap().as_str().unwrap().as_ptr()).collect::<Vec<_>>();
        let ptr = |v: &Value| v.as_ref().get("m").unwrap().as_str().unwrap().as_ptr();
        let first_node = |l: &Value| l.as_ref().index(0).unwrap().node;
        // Alone: in place (the list's items stay where they were), shared
        // items (the same strings).
        let before = list.as_ref().index(1).unwrap().node;
        assert!(list.splice_refs(2, Some(s.as_ref()), [d.as_ref()]));
        assert_eq!(items(&list), [ptr(&s), ptr(&b), ptr(&d)]);
        assert_eq!(list.as_ref().index(1).unwrap().node, before, "spliced in place");
        // Shared with another value: that one keeps its list.
        let other = list.clone();
        assert!(list.splice_refs(1, None, [a.as_ref(), c.as_ref()]));
        assert_eq!(items(&list), [ptr(&s), ptr(&a), ptr(&c)]);
        assert_eq!(items(&other), [ptr(&s), ptr(&b), ptr(&d)]);
        assert_ne!(first_node(&list), first_node(&other), "copied, not changed under the other");
        // Refused, unchanged: more kept than held, not a list.
        assert!(!list.splice_refs(4, None, [a.as_ref()]));
        assert_eq!(items(&list), [ptr(&s), ptr(&a), ptr(&c)]);
        let mut map = item("m");
        assert!(!map.splice_refs(0, None, [a.as_ref()]));
    }

    #[test]
    fn with_shares_and_does_not_change_the_original() {
        // Longer than the 23 bytes kept inline, so it lives on the heap once.
        let big = "x".repeat(40);
        let v = Value::from_json(&format!(r#"{{"big":"{big}","n":1}}"#)).unwrap();
        let w = v.as_ref().with("n", 2);
        assert_eq!(v.as_ref().to_json(), format!(r#"{{"big":"{big}","n":1}}"#));
        assert_eq!(w.as_ref().to_json(), format!(r#"{{"big":"{big}","n":2}}"#));
        // The string is shared, not copied.
        let p1 = v.as_ref().get("big").unwrap().as_str().unwrap().as_ptr();
        let p2 = w.as_ref().get("big").unwrap().as_str().unwrap().as_ptr();
        assert_eq!(p1, p2);
        assert_eq!(w.as_ref().without("big").as_ref().to_json(), r#"{"n":2}"#);
        // A key replaced keeps its place; a new one goes last.
        let abc = Value::from_json(r#"{"a":1,"b":2,"c":3}"#).unwrap();
        assert_eq!(abc.as_ref().with("b", "x").as_ref().to_json(), r#"{"a":1,"b":"x","c":3}"#);
        assert_eq!(abc.as_ref().with("a", 0).as_ref().to_json(), r#"{"a":0,"b":2,"c":3}"#);
        assert_eq!(abc.as_ref().with("d", 4).as_ref().to_json(), r#"{"a":1,"b":2,"c":3,"d":4}"#);
        // Past the inline size, by `with` too: the 17th key and beyond.
        let mut grown = Value::object();
        for i in 0..16 {
            grown.insert(&format!("k{i}"), i);
        }
        let grown = grown.as_ref().with("k16", 16);
        let grown = grown.as_ref().with("k3", "again").as_ref().with("k17", 17);
        assert_eq!(grown.as_ref().len(), 18);
        assert_eq!(grown.as_ref().entry(3).map(|(k, v)| (k, v.as_str())), Some(("k3", Some("again"))));
        assert_eq!(grown.as_ref().entry(17).map(|(k, v)| (k, v.as_i64())), Some(("k17", Some(17))));
        // A map past the inline size gets an index and keeps its order.
        let mut m = Value::object();
        for i in 0..40 {
            m.insert(&format!("k{i}"), i);
        }
        m.insert("k3", "again");
        assert_eq!(m.as_ref().len(), 40);
        assert_eq!(m.as_ref().entry(3).map(|(k, v)| (k, v.as_str())), Some(("k3", Some("again"))));
        assert_eq!(m.as_ref().get("k39").and_then(|v| v.as_i64()), Some(39));
    }

    #[test]
    fn builders() {
        let mut m = Value::object();
        m.insert("a", 1).insert("b", "two").insert("c", Value::null());
        let mut l = Value::array();
        l.push(true).push(2.5);
        m.insert("l", l);
        assert_eq!(m.to_string(), r#"{"a":1,"b":"two","c":null,"l":[true,2.5]}"#);
        // Inserting into a shared map copies on write: the other holder is unchanged.
        let shared = m.clone();
        m.insert("a", 9);
        assert_eq!(shared.as_ref().get("a").unwrap().as_i64(), Some(1));
        assert_eq!(m.as_ref().get("a").unwrap().as_i64(), Some(9));
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Call {
        run_id: String,
        tool: String,
        #[serde(default)]
        arguments: serde_json::Map<String, serde_json::Value>,
    }

    #[test]
    fn serde_both_ways() {
        let call = Call {
            run_id: "r".into(),
            tool: "t".into(),
            arguments: json!({"x": [1, 2]}).as_object().cloned().unwrap(),
        };
        let v = Value::from_serialize(&call).unwrap();
        assert_eq!(v.to_string(), r#"{"run_id":"r","tool":"t","arguments":{"x":[1,2]}}"#);
        let back: Call = v.deserialize().unwrap();
        assert_eq!(back, call);
        let j: serde_json::Value = v.deserialize().unwrap();
        assert_eq!(j, json!({"run_id": "r", "tool": "t", "arguments": {"x": [1, 2]}}));
        assert_eq!(Value::from(&j), v);
    }

    #[test]
    fn handles_inside_structs_are_not_copied() {
        let v = Value::from_json(r#"{"tool":"t","arguments":{"big":"yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"}}"#).unwrap();
        #[derive(Deserialize)]
        struct View<'a> {
            tool: &'a str,
            #[serde(borrow)]
            arguments: ValueRef<'a>,
        }
        let view: View<'_> = v.as_ref().deserialize().unwrap();
        assert_eq!(view.tool, "t");
        let big = |r: ValueRef<'_>| r.get("big").unwrap().as_str().unwrap().as_ptr();
        assert_eq!(big(view.arguments), big(v.as_ref().get("arguments").unwrap()));

        #[derive(Deserialize, Serialize)]
        struct Owned {
            arguments: Value,
        }
        let owned: Owned = v.deserialize().unwrap();
        assert_eq!(big(owned.arguments.as_ref()), big(v.as_ref().get("arguments").unwrap()));
        let again = Value::from_serialize(&owned).unwrap();
        assert_eq!(big(again.as_ref().get("arguments").unwrap()), big(v.as_ref().get("arguments").unwrap()));
        // Outside our own serializer a handle is ordinary JSON.
        assert_eq!(
            serde_json::to_string(&owned).unwrap(),
            r#"{"arguments":{"big":"yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"}}"#
        );
        let parsed: Owned = serde_json::from_str(r#"{"arguments":{"k":1}}"#).unwrap();
        assert_eq!(parsed.arguments.to_string(), r#"{"k":1}"#);
    }

    #[test]
    fn handles_in_lists_at_the_top_and_as_scalars_are_shared() {
        let v = Value::from_json(r#"{"a":{"big":"yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"},"n":null,"s":"x"}"#).unwrap();
        let big = |r: ValueRef<'_>| r.get("big").unwrap().as_str().unwrap().as_ptr();
        let a = v.as_ref().get("a").unwrap();
        let list =
            Value::from_serialize(&vec![a, a, v.as_ref().get("n").unwrap(), v.as_ref().get("s").unwrap()]).unwrap();
        assert_eq!(
            list.to_json(),
            r#"[{"big":"yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"},{"big":"yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"},null,"x"]"#
        );
        assert_eq!(big(list.as_ref().index(1).unwrap()), big(a));
        let top = Value::from_serialize(&a).unwrap();
        assert_eq!(big(top.as_ref()), big(a));
        let nested = Value::from_serialize(&Some(vec![Some(a)])).unwrap();
        assert_eq!(big(nested.as_ref().index(0).unwrap()), big(a));

        let mut built = Value::array();
        built.push_ref(a).push_ref(v.as_ref().get("s").unwrap());
        let shared = built.clone();
        // Shared now: the next push copies the list, never changes `shared`.
        built.push_ref(a);
        assert_eq!((shared.as_ref().len(), built.as_ref().len()), (2, 3));
        assert_eq!(big(built.as_ref().index(2).unwrap()), big(a));
        let mut map = Value::object();
        map.insert_ref("k", a).insert_ref("k", v.as_ref().get("s").unwrap());
        assert_eq!(map.to_json(), r#"{"k":"x"}"#);
    }

    #[test]
    fn unknown_and_wrong_fields() {
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct Want {
            n: u32,
        }
        let v = Value::from_json(r#"{"n":"not a number"}"#).unwrap();
        let e = v.deserialize::<Want>().unwrap_err();
        assert!(e.to_string().contains("invalid type"), "{e}");
        let e = Value::from_json("{}").unwrap().deserialize::<Want>().unwrap_err();
        assert!(e.to_string().contains("missing field `n`"), "{e}");
    }
}
