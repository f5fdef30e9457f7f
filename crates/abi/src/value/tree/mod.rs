//! The host's value tree and the function table through which everyone
//! else reads and builds it.
//!
//! A value is a tree of [`Node`]s whose strings, lists and maps are shared
//! (`Arc`): cloning a subtree bumps a count, so handing a plugin "these
//! arguments plus one key" copies the key list of one map, never a string.
//! The tree is immutable once built; builders mutate a node only while they
//! hold its one reference.
//!
//! Every copy of `bub-abi` compiles this file, but only the host's copy is
//! *used*: handles carry the host's [`ValueVTable`], and plugins build
//! through the table the host handed them at init, so the code that walks
//! and allocates values runs once, in the host, and stays hot in its cache.
//!
//! Pointers crossing the table are `*const Node`: *borrowed* ones point into
//! a tree someone else keeps alive; *owned* ones come from `Arc::into_raw`
//! and are given back with `release`.
//!
//! A list or map can be *lazy* ([`Node::Lazy`]): kept as its JSON text and
//! parsed the first time anything looks inside. The host's tape store reads
//! lines this way, because the agent passes most payloads on (to its
//! context, to the interception hooks) without any plugin reading them:
//! parsing each payload into nodes was most of a long session's first
//! read. Sharing, sizing and comparing two shares of one text do not parse
//! it; every other accessor reads the parsed form, so no reader can tell.

mod lazy;
mod size;

pub(crate) use lazy::{compact_fields, parse_shallow, shallow_fields};
pub(crate) use size::approx_bytes;

use std::{ffi::c_void, sync::Arc};

use abi_stable::{
    prefix_type::WithMetadata,
    std_types::{ROption, RStr, RString},
};
use indexmap::IndexMap;
use smol_str::SmolStr;

use crate::abi::{ValueVTable, ValueVTableRef};

/// Up to this many entries a map is a plain list searched in order: one
/// allocation, and faster than hashing for the handful of keys hook
/// payloads have. Larger maps get an index (no quadratic build).
const SMALL_MAP: usize = 16;

/// A short string without `SmolStr::new`'s whitespace special case.
#[inline]
fn small(s: &str) -> SmolStr {
    if s.len() <= 23 {
        SmolStr::new_inline(s)
    } else {
        SmolStr::new(s)
    }
}

/// A map node: insertion-ordered, like a Python dict and Bub's payloads.
#[derive(Debug, Clone)]
pub(crate) enum NodeMap {
    Small(Vec<(SmolStr, Node)>),
    Big(IndexMap<SmolStr, Node, foldhash::fast::RandomState>),
    /// Keys from a static list, values in their order: a tape line's five
    /// keys are named once for all lines, not once per line (24 bytes a
    /// value instead of 48; a long tape's first read keeps a map per
    /// line). A change makes it [`NodeMap::Small`] first.
    Static(&'static [&'static str], Vec<Node>),
}

impl NodeMap {
    fn with_capacity(n: usize) -> Self {
        if n <= SMALL_MAP {
            NodeMap::Small(Vec::with_capacity(n))
        } else {
            NodeMap::Big(IndexMap::with_capacity_and_hasher(n, Default::default()))
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            NodeMap::Small(v) => v.len(),
            NodeMap::Big(m) => m.len(),
            NodeMap::Static(_, v) => v.len(),
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Node> {
        match self {
            NodeMap::Small(v) => v.iter().find(|(k, _)| k == key).map(|(_, n)| n),
            NodeMap::Big(m) => m.get(key),
            NodeMap::Static(keys, v) => keys.iter().position(|k| *k == key).map(|i| &v[i]),
        }
    }

    fn get_index(&self, i: usize) -> Option<(&str, &Node)> {
        match self {
            NodeMap::Small(v) => v.get(i).map(|(k, n)| (k.as_str(), n)),
            NodeMap::Big(m) => m.get_index(i).map(|(k, n)| (k.as_str(), n)),
            NodeMap::Static(keys, v) => v.get(i).map(|n| (keys[i], n)),
        }
    }

    /// A static-keys map as a small one (to change it), with room for
    /// `extra` more keys.
    fn owned_keys(keys: &[&str], values: &[Node], extra: usize) -> NodeMap {
        let mut v = Vec::with_capacity(values.len() + extra);
        v.extend(keys.iter().zip(values).map(|(k, n)| (small(k), n.clone())));
        NodeMap::Small(v)
    }

    fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key` (in place if present, else appended).
    fn insert(&mut self, key: &str, node: Node) {
        if let NodeMap::Static(keys, values) = self {
            match keys.iter().position(|k| *k == key) {
                Some(i) => return values[i] = node,
                None => *self = NodeMap::owned_keys(keys, values, 1),
            }
        }
        match self {
            NodeMap::Small(v) => {
                if let Some(slot) = v.iter_mut().find(|(k, _)| k == key) {
                    slot.1 = node;
                } else if v.len() < SMALL_MAP {
                    v.push((small(key), node));
                } else {
                    let mut m: IndexMap<SmolStr, Node, foldhash::fast::RandomState> =
                        IndexMap::with_capacity_and_hasher(v.len() * 2, Default::default());
                    m.extend(v.drain(..));
                    m.insert(small(key), node);
                    *self = NodeMap::Big(m);
                }
            }
            NodeMap::Big(m) => {
                m.insert(small(key), node);
            }
            NodeMap::Static(..) => unreachable!("made small above"),
        }
    }

    fn shift_remove(&mut self, key: &str) {
        if let NodeMap::Static(keys, values) = self {
            *self = NodeMap::owned_keys(keys, values, 0);
        }
        match self {
            NodeMap::Small(v) => v.retain(|(k, _)| k != key),
            NodeMap::Big(m) => {
                m.shift_remove(key);
            }
            NodeMap::Static(..) => unreachable!("made small above"),
        }
    }

    /// The entries in order. Not boxed: the answer cap walks every small
    /// answer's maps, and a boxed iterator was an allocation per map.
    pub(crate) fn iter(&self) -> MapIter<'_> {
        match self {
            NodeMap::Small(v) => MapIter::Small(v.iter()),
            NodeMap::Big(m) => MapIter::Big(m.iter()),
            NodeMap::Static(keys, v) => MapIter::Static(keys.iter().zip(v.iter())),
        }
    }

    /// A copy with `key` set to `node` (replaced in its place, else
    /// appended); the other values are shared (counts bumped), the replaced
    /// one is not touched. One pass: the key is looked up once, and a
    /// static-keys map stays one (a tape line with a new payload, say).
    fn with(&self, key: &str, node: Node) -> Self {
        match self {
            NodeMap::Small(v) => match v.iter().position(|(k, _)| k == key) {
                Some(i) => NodeMap::Small(replaced(v, i, (v[i].0.clone(), node))),
                None if v.len() >= SMALL_MAP => inserted(self.clone_for_insert(), key, node),
                None => {
                    let mut c = Vec::with_capacity(v.len() + 1);
                    c.extend(v.iter().cloned());
                    c.push((small(key), node));
                    NodeMap::Small(c)
                }
            },
            NodeMap::Static(keys, values) => match keys.iter().position(|k| *k == key) {
                Some(i) => NodeMap::Static(keys, replaced(values, i, node)),
                None => inserted(self.clone_for_insert(), key, node),
            },
            NodeMap::Big(_) => inserted(self.clone_for_insert(), key, node),
        }
    }

    /// A copy with one more room; values are shared (counts bumped).
    fn clone_for_insert(&self) -> Self {
        match self {
            NodeMap::Small(v) => {
                let mut c = Vec::with_capacity(v.len() + 1);
                c.extend(v.iter().cloned());
                NodeMap::Small(c)
            }
            NodeMap::Big(m) => NodeMap::Big(m.clone()),
            NodeMap::Static(keys, v) => NodeMap::owned_keys(keys, v, 1),
        }
    }
}

/// A copy of `items` with item `i` replaced by `item` (the old one is not
/// cloned).
fn replaced<T: Clone>(items: &[T], i: usize, item: T) -> Vec<T> {
    let mut c = Vec::with_capacity(items.len());
    c.extend(items[..i].iter().cloned());
    c.push(item);
    c.extend(items[i + 1..].iter().cloned());
    c
}

/// `map` with `key` set to `node`.
fn inserted(mut map: NodeMap, key: &str, node: Node) -> NodeMap {
    map.insert(key, node);
    map
}

/// The entries of a [`NodeMap`], in order.
pub(crate) enum MapIter<'a> {
    Small(std::slice::Iter<'a, (SmolStr, Node)>),
    Big(indexmap::map::Iter<'a, SmolStr, Node>),
    Static(std::iter::Zip<std::slice::Iter<'a, &'static str>, std::slice::Iter<'a, Node>>),
}

impl<'a> Iterator for MapIter<'a> {
    type Item = (&'a str, &'a Node);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            MapIter::Small(i) => i.next().map(|(k, n)| (k.as_str(), n)),
            MapIter::Big(i) => i.next().map(|(k, n)| (k.as_str(), n)),
            MapIter::Static(i) => i.next().map(|(k, n)| (*k, n)),
        }
    }
}

/// One node of a host value.
#[derive(Debug, Clone, Default)]
pub(crate) enum Node {
    #[default]
    Null,
    Bool(bool),
    Int(i64),
    /// Only for integers above `i64::MAX`.
    UInt(u64),
    Float(f64),
    /// Inline up to 23 bytes; longer strings are shared.
    Str(SmolStr),
    Array(Arc<Vec<Node>>),
    Object(Arc<NodeMap>),
    /// A live object (ABI 2.2): read as its marker map
    /// `{"$object": kind, "name": name}` by everything but `as_handle`, so
    /// older readers and JSON see the marker.
    Handle(Arc<HandleNode>),
    /// A list or map kept as its JSON text, parsed the first time anything
    /// looks inside (see [`parse_shallow`]). Never seen by readers: every
    /// accessor reads its [`Node::resolved`] form.
    Lazy(Arc<LazyNode>),
}

/// What a [`Node::Lazy`] holds: valid JSON text of a list or map, its
/// kind, and its nodes once parsed.
pub(crate) struct LazyNode {
    // A reader that keeps the text (a context message sent as its stored
    // text) keeps the node: a `Box` saves the `Arc`'s 16 bytes a line.
    text: Box<str>,
    kind: u8,
    parsed: std::sync::OnceLock<Node>,
}

impl std::fmt::Debug for LazyNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lazy({})", self.text)
    }
}

/// What a [`Node::Handle`] holds.
#[derive(Clone)]
pub(crate) struct HandleNode {
    marker: NodeMap,
    object: crate::abi::ObjectHandle,
}

impl std::fmt::Debug for HandleNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Handle({:?})", self.marker)
    }
}

/// Value kinds as they cross the table (`ValueKind`'s discriminants).
pub(crate) mod kind {
    pub const NULL: u8 = 0;
    pub const BOOL: u8 = 1;
    pub const INT: u8 = 2;
    pub const UINT: u8 = 3;
    pub const FLOAT: u8 = 4;
    pub const STR: u8 = 5;
    pub const ARRAY: u8 = 6;
    pub const OBJECT: u8 = 7;
}

/// The one `null` every borrowed absent argument points to.
pub(crate) static NULL: Node = Node::Null;

fn new_map(capacity: usize) -> NodeMap {
    NodeMap::with_capacity(capacity)
}

impl Node {
    /// The node as readers see it: a lazy one parsed (once; the text was
    /// checked when it was kept, valid JSON nested less deep than the
    /// parser's limit, so parsing cannot fail), any other itself.
    #[inline]
    pub(crate) fn resolved(&self) -> &Node {
        match self {
            Node::Lazy(l) => l.parsed.get_or_init(|| serde_json::from_str::<Node>(&l.text).unwrap_or_default()),
            other => other,
        }
    }

    /// A lazy node's JSON text.
    pub(crate) fn lazy_text(&self) -> Option<&str> {
        match self {
            Node::Lazy(l) => Some(&l.text),
            _ => None,
        }
    }

    /// The map this node reads as: an object's, or a handle's marker.
    fn map(&self) -> Option<&NodeMap> {
        match self.resolved() {
            Node::Object(o) => Some(o),
            Node::Handle(h) => Some(&h.marker),
            _ => None,
        }
    }

    fn eq_deep(&self, other: &Node) -> bool {
        // The same text shared: equal without parsing it.
        if let (Node::Lazy(a), Node::Lazy(b)) = (self, other) {
            if Arc::ptr_eq(a, b) {
                return true;
            }
        }
        let (this, other) = (self.resolved(), other.resolved());
        if matches!(this, Node::Handle(_)) || matches!(other, Node::Handle(_)) {
            return match (this.map(), other.map()) {
                (Some(a), Some(b)) => {
                    a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| v.eq_deep(w)))
                }
                _ => false,
            };
        }
        match (this, other) {
            (Node::Null, Node::Null) => true,
            (Node::Bool(a), Node::Bool(b)) => a == b,
            (Node::Str(a), Node::Str(b)) => a == b,
            (Node::Array(a), Node::Array(b)) => {
                Arc::ptr_eq(a, b) || (a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| x.eq_deep(y)))
            }
            (Node::Object(a), Node::Object(b)) => {
                Arc::ptr_eq(a, b)
                    || (a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| v.eq_deep(w))))
            }
            (a, b) => match (a.number(), b.number()) {
                (Some(x), Some(y)) => x == y,
                _ => false,
            },
        }
    }

    /// Numbers compare by value whatever their representation (`1 == 1.0`
    /// is false in JSON's data model as in serde_json, so keep kinds apart
    /// except for the two integer kinds).
    fn number(&self) -> Option<(u8, i128, u64)> {
        match *self {
            Node::Int(i) => Some((0, i as i128, 0)),
            Node::UInt(u) => Some((0, u as i128, 0)),
            Node::Float(f) => Some((1, 0, f.to_bits())),
            _ => None,
        }
    }
}

// SAFETY (for every function below): the host only hands out pointers it
// made from live nodes, and the SDK wrappers (`ValueRef`, `Value`) never
// outlive what they point into; owned pointers come from `Arc::into_raw`.
unsafe fn node<'a>(p: *const c_void) -> &'a Node {
    // SAFETY: see above.
    unsafe { raw_node(p) }.resolved()
}

/// The node itself, a lazy one unparsed: for what shares or sizes it
/// without looking inside.
unsafe fn raw_node<'a>(p: *const c_void) -> &'a Node {
    // SAFETY: see above.
    unsafe { &*(p as *const Node) }
}

pub(crate) fn into_raw(node: Node) -> *const c_void {
    Arc::into_raw(Arc::new(node)) as *const c_void
}

/// Takes an owned pointer back (the caller gives up its reference).
unsafe fn take(p: *const c_void) -> Node {
    // SAFETY: `p` came from `into_raw` and is given up by the caller.
    let arc = unsafe { Arc::from_raw(p as *const Node) };
    Arc::try_unwrap(arc).unwrap_or_else(|shared| (*shared).clone())
}

/// The inner value of a node a builder holds: in place when held alone
/// (which it is while being built), else a copy (`Arc::make_mut`). One
/// uniqueness check: `get_mut` first and then again to borrow was two
/// compare-exchanges per push or insert.
#[inline]
fn inner_mut<T: Clone>(arc: &mut Arc<T>) -> &mut T {
    Arc::make_mut(arc)
}

/// The node behind an owned pointer, for a builder that holds its only
/// reference; `None` if it is shared (then it must not change).
unsafe fn builder<'a>(p: *const c_void) -> Option<&'a mut Node> {
    // SAFETY: `p` came from `into_raw`; the ManuallyDrop keeps the count.
    let mut arc = std::mem::ManuallyDrop::new(unsafe { Arc::from_raw(p as *const Node) });
    // SAFETY: the reference lives as long as the caller's owned pointer.
    Arc::get_mut(&mut arc).map(|n| unsafe { &mut *(n as *mut Node) })
}

extern "C" fn v_kind(p: *const c_void) -> u8 {
    // SAFETY: see `node`.
    match unsafe { raw_node(p) } {
        Node::Lazy(l) => l.kind,
        Node::Null => kind::NULL,
        Node::Bool(_) => kind::BOOL,
        Node::Int(_) => kind::INT,
        Node::UInt(_) => kind::UINT,
        Node::Float(_) => kind::FLOAT,
        Node::Str(_) => kind::STR,
        Node::Array(_) => kind::ARRAY,
        Node::Object(_) | Node::Handle(_) => kind::OBJECT,
    }
}

extern "C" fn v_as_bool(p: *const c_void) -> bool {
    // SAFETY: see `node`.
    matches!(unsafe { node(p) }, Node::Bool(true))
}

extern "C" fn v_as_i64(p: *const c_void, out: &mut i64) -> bool {
    // SAFETY: see `node`.
    match *unsafe { node(p) } {
        Node::Int(i) => *out = i,
        Node::UInt(u) if u <= i64::MAX as u64 => *out = u as i64,
        _ => return false,
    }
    true
}

extern "C" fn v_as_u64(p: *const c_void, out: &mut u64) -> bool {
    // SAFETY: see `node`.
    match *unsafe { node(p) } {
        Node::Int(i) if i >= 0 => *out = i as u64,
        Node::UInt(u) => *out = u,
        _ => return false,
    }
    true
}

extern "C" fn v_as_f64(p: *const c_void, out: &mut f64) -> bool {
    // SAFETY: see `node`.
    match *unsafe { node(p) } {
        Node::Int(i) => *out = i as f64,
        Node::UInt(u) => *out = u as f64,
        Node::Float(f) => *out = f,
        _ => return false,
    }
    true
}

extern "C" fn v_as_str(p: *const c_void, out: &mut RStr<'static>) -> bool {
    // SAFETY: see `node`; the 'static is narrowed again by the caller's wrapper.
    match unsafe { node(p) } {
        Node::Str(s) => {
            // SAFETY: only the lifetime widens to 'static; the caller's
            // wrapper (`ValueRef::as_str`) narrows it back to the node's.
            let s = unsafe { &*(s.as_str() as *const str) };
            *out = RStr::from_str(s);
            true
        }
        _ => false,
    }
}

extern "C" fn v_len(p: *const c_void) -> usize {
    // SAFETY: see `node`.
    match unsafe { node(p) } {
        Node::Array(a) => a.len(),
        Node::Object(o) => o.len(),
        Node::Handle(h) => h.marker.len(),
        Node::Str(s) => s.len(),
        _ => 0,
    }
}

extern "C" fn v_get(p: *const c_void, key: RStr<'_>) -> *const c_void {
    // SAFETY: see `node`.
    match unsafe { node(p) }.map() {
        Some(o) => o.get(key.as_str()).map_or(std::ptr::null(), |n| n as *const Node as *const c_void),
        None => std::ptr::null(),
    }
}

extern "C" fn v_index(p: *const c_void, i: usize) -> *const c_void {
    // SAFETY: see `node`.
    match unsafe { node(p) } {
        Node::Array(a) => a.get(i).map_or(std::ptr::null(), |n| n as *const Node as *const c_void),
        _ => std::ptr::null(),
    }
}

extern "C" fn v_entry(p: *const c_void, i: usize, key: &mut RStr<'static>) -> *const c_void {
    // SAFETY: see `node` and `v_as_str`.
    match unsafe { node(p) }.map() {
        Some(o) => match o.get_index(i) {
            Some((k, n)) => {
                // SAFETY: as in `v_as_str`: 'static here, narrowed back to
                // the map's lifetime by `ValueRef::entry`.
                let k = unsafe { &*(k as *const str) };
                *key = RStr::from_str(k);
                n as *const Node as *const c_void
            }
            None => std::ptr::null(),
        },
        _ => std::ptr::null(),
    }
}

extern "C" fn v_retain(p: *const c_void) -> *const c_void {
    // SAFETY: see `node`. A subtree is shared, not copied (a lazy one
    // stays unparsed).
    into_raw(unsafe { raw_node(p) }.clone())
}

extern "C" fn v_release(p: *const c_void) {
    // SAFETY: `p` is an owned pointer its holder gives up.
    drop(unsafe { Arc::from_raw(p as *const Node) });
}

fn scalar(kind: u8, bits: u64) -> Node {
    match kind {
        kind::BOOL => Node::Bool(bits != 0),
        kind::INT => Node::Int(bits as i64),
        kind::UINT if bits > i64::MAX as u64 => Node::UInt(bits),
        kind::UINT => Node::Int(bits as i64),
        kind::FLOAT => Node::Float(f64::from_bits(bits)),
        _ => Node::Null,
    }
}

extern "C" fn v_scalar(kind: u8, bits: u64) -> *const c_void {
    into_raw(scalar(kind, bits))
}

/// Sets `key` of a map the caller is building to a scalar, without an
/// intermediate node; false if the map is shared or not a map.
extern "C" fn v_insert_scalar(object: *const c_void, key: RStr<'_>, kind: u8, bits: u64) -> bool {
    // SAFETY: `object` is the caller's builder.
    match unsafe { builder(object) } {
        Some(Node::Object(o)) => {
            inner_mut(o).insert(key.as_str(), scalar(kind, bits));
            true
        }
        _ => false,
    }
}

/// Sets `key` of a map the caller is building to a string.
extern "C" fn v_insert_string(object: *const c_void, key: RStr<'_>, s: RStr<'_>) -> bool {
    // SAFETY: `object` is the caller's builder.
    match unsafe { builder(object) } {
        Some(Node::Object(o)) => {
            inner_mut(o).insert(key.as_str(), Node::Str(small(s.as_str())));
            true
        }
        _ => false,
    }
}

/// Appends a scalar to a list the caller is building.
extern "C" fn v_push_scalar(array: *const c_void, kind: u8, bits: u64) -> bool {
    // SAFETY: `array` is the caller's builder.
    match unsafe { builder(array) } {
        Some(Node::Array(a)) => {
            inner_mut(a).push(scalar(kind, bits));
            true
        }
        _ => false,
    }
}

/// Appends a string to a list the caller is building.
extern "C" fn v_push_string(array: *const c_void, s: RStr<'_>) -> bool {
    // SAFETY: `array` is the caller's builder.
    match unsafe { builder(array) } {
        Some(Node::Array(a)) => {
            inner_mut(a).push(Node::Str(small(s.as_str())));
            true
        }
        _ => false,
    }
}

extern "C" fn v_string(s: RStr<'_>) -> *const c_void {
    into_raw(Node::Str(small(s.as_str())))
}

extern "C" fn v_array(capacity: usize) -> *const c_void {
    into_raw(Node::Array(Arc::new(Vec::with_capacity(capacity.min(1 << 16)))))
}

extern "C" fn v_object(capacity: usize) -> *const c_void {
    into_raw(Node::Object(Arc::new(new_map(capacity.min(1 << 16)))))
}

/// Appends `item` to a list built by the caller; gives the item back
/// (returns false, consuming nothing) if the list is shared or not a list.
extern "C" fn v_push(array: *const c_void, item: *const c_void) -> bool {
    // SAFETY: `array` is the caller's builder; `item` is given up on success.
    match unsafe { builder(array) } {
        Some(Node::Array(a)) => {
            // SAFETY: `item` came from `into_raw` and the caller gives it up now.
            let item = unsafe { take(item) };
            inner_mut(a).push(item);
            true
        }
        _ => false,
    }
}

/// Appends a borrowed `item` to a list built by the caller, sharing its
/// subtree (a count, no node of its own); false if the list is shared or
/// not a list.
extern "C" fn v_push_ref(array: *const c_void, item: *const c_void) -> bool {
    // SAFETY: `item` is a node the caller lends for the call (see `node`);
    // it is shared (cloned) before the list can change.
    let item = unsafe { raw_node(item) }.clone();
    // SAFETY: `array` is the caller's builder.
    match unsafe { builder(array) } {
        Some(Node::Array(a)) => {
            inner_mut(a).push(item);
            true
        }
        _ => false,
    }
}

/// The list behind the owned pointer `list`, its first `keep` items kept
/// (the first replaced by `first` when given) and `tail` appended, all
/// shared: in place when the caller's handle holds the list alone, else
/// on a copy of it. False (nothing changed) when `list` is shared at its
/// root, is not a list, or holds fewer than `keep` items. Host only: not
/// in the table, so no plugin can change a list it was lent.
///
/// # Safety
///
/// `list` came from [`into_raw`] and is the caller's; `first` and `tail`
/// are nodes of this table the caller lends for the call.
pub(crate) unsafe fn splice_refs(
    list: *const c_void,
    keep: usize,
    first: Option<*const c_void>,
    tail: &[*const c_void],
) -> bool {
    // SAFETY: the caller's builder (see `builder`).
    let Some(Node::Array(items)) = (unsafe { builder(list) }) else { return false };
    if items.len() < keep {
        return false;
    }
    let items = inner_mut(items);
    items.truncate(keep);
    if let (Some(first), Some(slot)) = (first, items.first_mut()) {
        // SAFETY: lent for the call; shared (cloned) here.
        *slot = unsafe { raw_node(first) }.clone();
    }
    // SAFETY: as `first`.
    items.extend(tail.iter().map(|&item| unsafe { raw_node(item) }.clone()));
    true
}

/// Sets `key` in a map built by the caller to a borrowed `item`, shared;
/// like [`v_push_ref`] on failure.
extern "C" fn v_insert_ref(object: *const c_void, key: RStr<'_>, item: *const c_void) -> bool {
    // SAFETY: as in `v_push_ref`.
    let item = unsafe { raw_node(item) }.clone();
    // SAFETY: `object` is the caller's builder.
    match unsafe { builder(object) } {
        Some(Node::Object(o)) => {
            inner_mut(o).insert(key.as_str(), item);
            true
        }
        _ => false,
    }
}

/// Sets `key` in a map built by the caller; like [`v_push`] on failure.
extern "C" fn v_insert(object: *const c_void, key: RStr<'_>, item: *const c_void) -> bool {
    // SAFETY: `object` is the caller's builder; `item` is given up on success.
    match unsafe { builder(object) } {
        Some(Node::Object(o)) => {
            // SAFETY: `item` came from `into_raw` and the caller gives it up now.
            let item = unsafe { take(item) };
            inner_mut(o).insert(key.as_str(), item);
            true
        }
        _ => false,
    }
}

extern "C" fn v_with_key(p: *const c_void, key: RStr<'_>, item: *const c_void) -> *const c_void {
    // SAFETY: see `node`; `item` is given up by the caller.
    let item = unsafe { take(item) };
    // SAFETY: `p` is a live node the host handed out (see `node`).
    let map = match unsafe { node(p) } {
        // Copies the key list and bumps a count per value; no value is copied.
        Node::Object(o) => o.with(key.as_str(), item),
        Node::Handle(h) => h.marker.with(key.as_str(), item),
        _ => inserted(new_map(1), key.as_str(), item),
    };
    into_raw(Node::Object(Arc::new(map)))
}

extern "C" fn v_without_key(p: *const c_void, key: RStr<'_>) -> *const c_void {
    // SAFETY: see `node`.
    match unsafe { node(p) } {
        Node::Object(o) if o.contains_key(key.as_str()) => {
            let mut map = (**o).clone();
            map.shift_remove(key.as_str());
            into_raw(Node::Object(Arc::new(map)))
        }
        other => into_raw(other.clone()),
    }
}

/// A node holding `object` (ABI 2.2).
extern "C" fn v_handle(object: crate::abi::ObjectHandle) -> *const c_void {
    let mut marker = new_map(2);
    marker.insert("$object", Node::Str(small(object.kind().as_str())));
    marker.insert("name", Node::Str(small(object.name().as_str())));
    into_raw(Node::Handle(Arc::new(HandleNode { marker, object })))
}

/// The object a handle node holds (ABI 2.2).
extern "C" fn v_as_handle(p: *const c_void) -> ROption<crate::abi::ObjectHandle> {
    // SAFETY: see `node`.
    match unsafe { node(p) } {
        Node::Handle(h) => ROption::RSome(h.object.clone()),
        _ => ROption::RNone,
    }
}

extern "C" fn v_eq(a: *const c_void, b: *const c_void) -> bool {
    // SAFETY: see `node`.
    // Unresolved: `eq_deep` tells two shares of one lazy text apart first.
    std::ptr::eq(a, b) || unsafe { raw_node(a) }.eq_deep(unsafe { raw_node(b) })
}

extern "C" fn v_parse_json(text: RStr<'_>, error: &mut RString) -> *const c_void {
    match serde_json::from_str::<Node>(text.as_str()) {
        Ok(n) => into_raw(n),
        Err(e) => {
            *error = RString::from(e.to_string());
            std::ptr::null()
        }
    }
}

extern "C" fn v_to_json(p: *const c_void, pretty: bool) -> RString {
    // A lazy node too is written out afresh, not as its kept text: that
    // text may differ (spacing, escapes, a repeated key), and readers
    // compare values by this text across tables.
    // SAFETY: see `node`.
    let n = unsafe { node(p) };
    let text = if pretty { serde_json::to_string_pretty(n) } else { serde_json::to_string(n) };
    // Non-finite floats are the only failure; JSON has no spelling for them.
    RString::from(text.unwrap_or_else(|_| "null".to_owned()))
}

// A `static`, not a `const`: a const's promoted referent may be duplicated
// per use site, and handles compare tables by address (`same_table`), so
// the table must have exactly one.
static TABLE: WithMetadata<ValueVTable> = WithMetadata::new(ValueVTable {
    kind: v_kind,
    as_bool: v_as_bool,
    as_i64: v_as_i64,
    as_u64: v_as_u64,
    as_f64: v_as_f64,
    as_str: v_as_str,
    len: v_len,
    get: v_get,
    index: v_index,
    entry: v_entry,
    retain: v_retain,
    release: v_release,
    scalar: v_scalar,
    string: v_string,
    array: v_array,
    object: v_object,
    push: v_push,
    insert: v_insert,
    insert_scalar: v_insert_scalar,
    insert_string: v_insert_string,
    push_scalar: v_push_scalar,
    push_string: v_push_string,
    with_key: v_with_key,
    without_key: v_without_key,
    eq: v_eq,
    parse_json: v_parse_json,
    write_json: v_to_json,
    handle: v_handle,
    as_handle: v_as_handle,
    push_ref: v_push_ref,
    insert_ref: v_insert_ref,
});

/// This copy's value table. In the host it is *the* table; a plugin uses
/// the host's (handed over at init) instead, see [`super::vtable`].
pub(crate) const fn own_vtable() -> ValueVTableRef {
    ValueVTableRef(TABLE.static_as_prefix())
}

// JSON text in and out, used by `parse_json` / `to_json` only.
impl serde::Serialize for Node {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Node::Lazy(_) => self.resolved().serialize(s),
            Node::Null => s.serialize_unit(),
            Node::Bool(b) => s.serialize_bool(*b),
            Node::Int(i) => s.serialize_i64(*i),
            Node::UInt(u) => s.serialize_u64(*u),
            Node::Float(f) if f.is_finite() => s.serialize_f64(*f),
            Node::Float(_) => s.serialize_unit(),
            Node::Str(t) => s.serialize_str(t.as_str()),
            Node::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for n in a.iter() {
                    seq.serialize_element(n)?;
                }
                seq.end()
            }
            Node::Object(o) => {
                let mut map = s.serialize_map(Some(o.len()))?;
                for (k, v) in o.iter() {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
            Node::Handle(h) => {
                let mut map = s.serialize_map(Some(h.marker.len()))?;
                for (k, v) in h.marker.iter() {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> serde::Deserialize<'de> for Node {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Node;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
                <Node as serde::Deserialize>::deserialize(d)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Node, E> {
                Ok(Node::Bool(b))
            }
            fn visit_i64<E>(self, i: i64) -> Result<Node, E> {
                Ok(Node::Int(i))
            }
            fn visit_u64<E>(self, u: u64) -> Result<Node, E> {
                Ok(if u <= i64::MAX as u64 { Node::Int(u as i64) } else { Node::UInt(u) })
            }
            fn visit_f64<E>(self, f: f64) -> Result<Node, E> {
                Ok(Node::Float(f))
            }
            fn visit_str<E>(self, s: &str) -> Result<Node, E> {
                Ok(Node::Str(small(s)))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 12));
                while let Some(n) = seq.next_element()? {
                    v.push(n);
                }
                Ok(Node::Array(Arc::new(v)))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut m = new_map(map.size_hint().unwrap_or(0).min(1 << 12));
                while let Some((k, v)) = map.next_entry::<std::borrow::Cow<'de, str>, Node>()? {
                    m.insert(&k, v);
                }
                Ok(Node::Object(Arc::new(m)))
            }
        }
        d.deserialize_any(V)
    }
}
