//! [`TurnState`]: the live turn state handle, and the standard in-memory store.

use std::{
    any::Any,
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
};

use abi_stable::{
    sabi_trait::TD_CanDowncast,
    std_types::{RArc, ROption, RResult, RStr, RString, RVec},
};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::{Map, Value};

use crate::abi::{ErrorKind, HookError, StateHandle, StateStore, StateStore_TO};

/// The turn state shared by every hook of one turn (Bub's `TurnState`).
///
/// It is a handle: cloning it is cheap and every clone sees the same map, so
/// a value set by one hook is seen by later hooks, in this plugin or another.
#[derive(Clone)]
pub struct TurnState {
    handle: StateHandle,
}

impl std::fmt::Debug for TurnState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnState").field("keys", &self.keys()).finish()
    }
}

impl TurnState {
    /// Wraps an FFI handle.
    pub fn from_handle(handle: StateHandle) -> Self {
        TurnState { handle }
    }

    /// A new, empty in-memory state.
    pub fn new() -> Self {
        Self::from_map(Map::new())
    }

    /// A new in-memory state holding `map`.
    pub fn from_map(map: Map<String, Value>) -> Self {
        Self::shared(map).0
    }

    /// A state whose map the caller also holds: the host reads and merges
    /// its own turn state directly, without the JSON round trip plugins
    /// (other copies of this crate) need.
    pub fn shared(map: Map<String, Value>) -> (Self, SharedMap) {
        let map = SharedMap(Arc::new(Mutex::new(Entries {
            json: map,
            host: HostValues::with_capacity_and_hasher(8, Default::default()),
            revision: 0,
        })));
        let store = MemoryState { map: map.clone(), objects: Default::default(), owner: Default::default() };
        // Downcastable, so code of the binary that made the state finds its
        // owner (`attach`/`owner`); elsewhere the downcast fails, safely.
        (TurnState { handle: StateStore_TO::from_ptr(RArc::new(store), TD_CanDowncast) }, map)
    }

    /// Attaches `owner` (weakly) to this state: code of this same binary
    /// gets it back with [`owner`](Self::owner) for as long as the caller
    /// keeps the `Arc`. This is how a host's framework is found from the
    /// turn it runs (Bub keeps its agent in `state._runtime_agent`) without a
    /// process-wide registry. The owner never crosses the ABI: a plugin
    /// library holds a different copy of this type, so there the state is
    /// not downcastable and nothing is attached. Returns whether it was
    /// attached (false for a state made by another library).
    pub fn attach<T: Any + Send + Sync>(&self, owner: &Arc<T>) -> bool {
        let Some(store) = self.memory() else { return false };
        let weak: Weak<dyn Any + Send + Sync> = Arc::downgrade(owner) as Weak<dyn Any + Send + Sync>;
        *crate::sync::lock(&store.owner) = Some(weak);
        true
    }

    /// The owner [`attach`](Self::attach)ed to this state, if it is still
    /// alive, is a `T`, and the state was made by this binary.
    pub fn owner<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let store = self.memory()?;
        let owner = crate::sync::lock(&store.owner).as_ref()?.upgrade()?;
        owner.downcast::<T>().ok()
    }

    /// The standard store behind this handle, when this binary made it.
    fn memory(&self) -> Option<&MemoryState> {
        self.handle.obj.downcast_as::<MemoryState>().ok()
    }

    /// The FFI handle.
    pub fn handle(&self) -> &StateHandle {
        &self.handle
    }

    /// Reads `key` as `T`; `Ok(None)` when absent.
    pub fn get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, HookError> {
        match self.handle.get(RStr::from_str(key)) {
            ROption::RNone => Ok(None),
            ROption::RSome(value) => value
                .deserialize()
                .map(Some)
                .map_err(|e| HookError::new(ErrorKind::TYPE, format!("state[{key:?}] has an unexpected type: {e}"))),
        }
    }

    /// The host value stored under `key` (a handle; nothing is copied).
    pub fn get_raw(&self, key: &str) -> Option<crate::Value> {
        self.handle.get(RStr::from_str(key)).into_option()
    }

    /// Reads `key` as a JSON value.
    pub fn get_value(&self, key: &str) -> Option<Value> {
        self.get::<Value>(key).ok().flatten()
    }

    /// Stores `value` under `key`.
    pub fn set<T: Serialize + ?Sized>(&self, key: &str, value: &T) -> Result<(), HookError> {
        let value = crate::Value::from_serialize(value).map_err(|e| {
            HookError::new(ErrorKind::TYPE, format!("state[{key:?}] could not be stored: {}", e.message))
        })?;
        match self.handle.set(RStr::from_str(key), value) {
            RResult::ROk(()) => Ok(()),
            RResult::RErr(e) => Err(HookError::new(ErrorKind::TYPE, e.into_string())),
        }
    }

    /// Stores the JSON `value` under `key`. For a state this binary made
    /// (the host's own), the value goes into the map as it is, without the
    /// round trip through a host value that [`set`](Self::set) makes; the
    /// host value is made when a hook first reads the key.
    pub fn set_json(&self, key: &str, value: Value) -> Result<(), HookError> {
        match self.memory() {
            Some(store) => {
                store.lock().write(key, value, None);
                store.forget_object(key);
                Ok(())
            }
            None => self.set(key, &value),
        }
    }

    /// Removes `key`; returns whether it was present.
    pub fn remove(&self, key: &str) -> bool {
        self.handle.remove(RStr::from_str(key))
    }

    /// Whether `key` is present.
    pub fn contains(&self, key: &str) -> bool {
        self.handle.get(RStr::from_str(key)).is_some()
    }

    /// Every key, in insertion order.
    pub fn keys(&self) -> Vec<String> {
        self.handle.keys().into_iter().map(RString::into_string).collect()
    }

    /// The whole state as a JSON object.
    pub fn to_map(&self) -> Map<String, Value> {
        self.handle.snapshot().deserialize().unwrap_or_default()
    }

    /// Puts a live object (a scheduler, a client, the plugin itself made an
    /// [`Object`](crate::Object)) into the state under `key`, as Bub's
    /// plugins put Python objects into theirs: any plugin's later hook of
    /// this turn gets it with [`get_object`](Self::get_object) and calls its
    /// methods. The state's values show `{"$object": kind, "name": name}`
    /// under `key`; setting or removing `key` drops the object. Needs a
    /// host of ABI 2.2 or later.
    pub fn set_object(&self, key: &str, object: &crate::Object) -> Result<(), HookError> {
        self.objects_supported()?;
        match self.handle.set_object(RStr::from_str(key), object.handle().clone()) {
            RResult::ROk(()) => Ok(()),
            RResult::RErr(e) => Err(HookError::new(ErrorKind::TYPE, e.into_string())),
        }
    }

    /// The live object [`set_object`](Self::set_object) stored under `key`
    /// (None when there is none, or on a host older than ABI 2.2).
    pub fn get_object(&self, key: &str) -> Option<crate::Object> {
        self.objects_supported().ok()?;
        self.handle.get_object(RStr::from_str(key)).into_option().map(crate::Object::from_handle)
    }

    /// A number that changes whenever the state is written (by any plugin
    /// or the host): equal numbers mean the state is as it was. `None` on a
    /// host older than ABI 2.4, which does not count writes.
    pub fn revision(&self) -> Option<u64> {
        if self.memory().is_some() || matches!(crate::sdk::host::host_minor(), Some((2, minor)) if minor >= 4) {
            return Some(self.handle.revision());
        }
        None
    }

    /// Whether two handles are the same state (clones of one handle are).
    pub fn same_as(&self, other: &TurnState) -> bool {
        std::ptr::eq(self.handle.obj.sabi_erased_ref().as_ptr(), other.handle.obj.sabi_erased_ref().as_ptr())
    }

    /// Whether this state's store has the object methods: one this binary
    /// made does; one the host made does when the host is ABI 2.2 or later
    /// (an older host's vtable lacks them).
    fn objects_supported(&self) -> Result<(), HookError> {
        if self.memory().is_some() {
            return Ok(());
        }
        match crate::sdk::host::host_minor() {
            Some((2, minor)) if minor >= 2 => Ok(()),
            Some(_) | None => Err(HookError::new(
                ErrorKind::UNSUPPORTED,
                "live objects in the turn state need a host of ABI 2.2 or later; this bub is older: update it",
            )),
        }
    }

    /// Merges `map` into the state; existing keys are overwritten.
    pub fn extend(&self, map: Map<String, Value>) -> Result<(), HookError> {
        for (k, v) in map {
            self.set(&k, &v)?;
        }
        Ok(())
    }
}

impl Default for TurnState {
    fn default() -> Self {
        Self::new()
    }
}

/// The map behind a state made with [`TurnState::shared`], held by its
/// maker (the host's framework) to merge `load_state` fragments and read
/// the final state directly. Writes go through its methods, so the host
/// values the store hands out stay in step with the map.
#[derive(Clone)]
pub struct SharedMap(Arc<Mutex<Entries>>);

/// A state's entries: the JSON map, and the host value handed out for each
/// key read since it was last written. A hook reading a key gets the same
/// value — the same node, without converting it again — until the key is
/// written, as Bub's hooks share one dict of the same objects for a turn.
struct Entries {
    json: Map<String, Value>,
    host: HostValues,
    /// Bumped by every write ([`StateStore::revision`]).
    revision: u64,
}

/// The host values handed out, by key: a handful per turn, so hashed with
/// foldhash (randomly seeded per map) rather than SipHash, and sized for a
/// turn's usual keys up front.
type HostValues = HashMap<String, crate::Value, foldhash::fast::RandomState>;

impl Entries {
    /// Writes `key`: its JSON, and the host value to hand out for it
    /// (`None`: made from the JSON when first read).
    fn write(&mut self, key: &str, json: Value, host: Option<crate::Value>) {
        self.revision = self.revision.wrapping_add(1);
        match host {
            Some(v) => self.host.insert(key.to_owned(), v),
            None => self.host.remove(key),
        };
        self.json.insert(key.to_owned(), json);
    }
}

impl SharedMap {
    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A panic while holding the lock cannot leave the map half-written
        // (every operation is a single map call), so poisoning is ignored.
        crate::sync::lock(&self.0)
    }

    /// Merges `map` in; existing keys are overwritten.
    pub fn extend(&self, map: Map<String, Value>) {
        let mut entries = self.lock();
        for (key, value) in map {
            entries.write(&key, value, None);
        }
    }

    /// The whole map, as JSON.
    pub fn to_map(&self) -> Map<String, Value> {
        self.lock().json.clone()
    }

    /// The whole map, as JSON, without a copy when nothing else holds it
    /// (the turn is over and no plugin kept its state).
    pub fn into_map(self) -> Map<String, Value> {
        match Arc::try_unwrap(self.0) {
            Ok(entries) => entries.into_inner().unwrap_or_else(|e| e.into_inner()).json,
            Err(shared) => SharedMap(shared).to_map(),
        }
    }
}

/// The standard state store: a JSON map behind a mutex, and the live
/// objects stored in it (each with the marker its key showed when it was
/// stored: a key overwritten since, by any path, no longer yields it).
#[derive(Clone)]
struct MemoryState {
    map: SharedMap,
    objects: Arc<Mutex<std::collections::HashMap<String, (Value, crate::abi::ObjectHandle)>>>,
    // Shared by every clone of the state; weak, so a state a plugin keeps
    // past its turn neither keeps the owner alive nor sees it.
    owner: Arc<Mutex<Option<Weak<dyn Any + Send + Sync>>>>,
}

impl MemoryState {
    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.map.lock()
    }
}

impl MemoryState {
    fn forget_object(&self, key: &str) {
        let mut objects = crate::sync::lock(&self.objects);
        if !objects.is_empty() {
            objects.remove(key);
        }
    }
}

impl StateStore for MemoryState {
    fn get(&self, key: RStr<'_>) -> ROption<crate::Value> {
        let mut entries = self.lock();
        if let Some(v) = entries.host.get(key.as_str()) {
            return ROption::RSome(v.clone());
        }
        let Some(v) = entries.json.get(key.as_str()).map(crate::Value::from) else { return ROption::RNone };
        entries.host.insert(key.as_str().to_owned(), v.clone());
        ROption::RSome(v)
    }

    fn set(&self, key: RStr<'_>, value: crate::Value) -> RResult<(), RString> {
        // A value holding a live object (`Value::from_live_object`) keeps it.
        if let Some(object) = value.as_ref().live_object() {
            return self.set_object(key, object.into_handle());
        }
        match value.deserialize::<Value>() {
            Ok(v) => {
                // Read back as the very value stored.
                self.lock().write(key.as_str(), v, Some(value));
                self.forget_object(key.as_str());
                RResult::ROk(())
            }
            Err(e) => {
                RResult::RErr(RString::from(format!("state[{:?}]: value could not be stored: {e}", key.as_str())))
            }
        }
    }

    fn remove(&self, key: RStr<'_>) -> bool {
        self.forget_object(key.as_str());
        let mut entries = self.lock();
        entries.host.remove(key.as_str());
        let removed = entries.json.shift_remove(key.as_str()).is_some();
        if removed {
            entries.revision = entries.revision.wrapping_add(1);
        }
        removed
    }

    fn keys(&self) -> RVec<RString> {
        self.lock().json.keys().map(|k| RString::from(k.as_str())).collect()
    }

    fn snapshot(&self) -> crate::Value {
        crate::Value::from_serialize(&self.lock().json).unwrap_or_default()
    }

    fn set_object(&self, key: RStr<'_>, object: crate::abi::ObjectHandle) -> RResult<(), RString> {
        let marker = serde_json::json!({"$object": object.kind().into_string(), "name": object.name().into_string()});
        // Map first, then the table: a reader sees the marker before the object.
        self.lock().write(key.as_str(), marker.clone(), None);
        crate::sync::lock(&self.objects).insert(key.as_str().to_owned(), (marker, object));
        RResult::ROk(())
    }

    fn get_object(&self, key: RStr<'_>) -> ROption<crate::abi::ObjectHandle> {
        let current = self.lock().json.get(key.as_str()).cloned();
        let mut objects = crate::sync::lock(&self.objects);
        match objects.get(key.as_str()) {
            Some((marker, object)) if current.as_ref() == Some(marker) => ROption::RSome(object.clone()),
            Some(_) => {
                // Overwritten or removed since: the object goes.
                objects.remove(key.as_str());
                ROption::RNone
            }
            None => ROption::RNone,
        }
    }

    fn revision(&self) -> u64 {
        self.lock().revision
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::TurnState;

    #[test]
    fn values_read_back_follow_every_write_to_the_shared_map() {
        let (state, shared) = TurnState::shared(serde_json::Map::new());
        shared.extend(serde_json::json!({"k": 1}).as_object().unwrap().clone());
        assert_eq!(state.get::<i64>("k").unwrap(), Some(1));
        // Read again: served from the host values, still right.
        assert_eq!(state.get::<i64>("k").unwrap(), Some(1));
        // The maker's merge overwrites what was read before.
        shared.extend(serde_json::json!({"k": 2}).as_object().unwrap().clone());
        assert_eq!(state.get::<i64>("k").unwrap(), Some(2));
        state.set("k", &3).unwrap();
        assert_eq!(state.get::<i64>("k").unwrap(), Some(3));
        assert_eq!(shared.to_map()["k"], 3);
        assert!(state.remove("k"));
        assert_eq!(state.get::<i64>("k").unwrap(), None);
        assert!(shared.to_map().is_empty());
    }

    /// The state is a Python dict: removing a key keeps the others in
    /// their order (`del state[k]`), it does not move the last key into
    /// its place.
    #[test]
    fn removing_a_key_keeps_the_order_of_the_others() {
        let (state, shared) = TurnState::shared(serde_json::Map::new());
        for key in ["a", "b", "c", "d"] {
            state.set(key, &1).unwrap();
        }
        assert!(state.remove("b"));
        assert_eq!(state.keys(), ["a", "c", "d"]);
        assert_eq!(shared.to_map().keys().collect::<Vec<_>>(), ["a", "c", "d"]);
    }

    /// `set_json` stores as `set` does (read back, key order, a write the
    /// revision counts), without the round trip through a host value.
    #[test]
    fn set_json_stores_as_set_does() {
        let (state, shared) = TurnState::shared(serde_json::Map::new());
        state.set("a", &1).unwrap();
        let r0 = state.revision().unwrap();
        state.set_json("m", serde_json::json!({"$agent": "bub"})).unwrap();
        assert_ne!(state.revision(), Some(r0));
        assert_eq!(state.get_value("m"), Some(serde_json::json!({"$agent": "bub"})));
        // A key read (its host value handed out), then written: the new value.
        state.set_json("a", serde_json::json!(2)).unwrap();
        assert_eq!(state.get::<i64>("a").unwrap(), Some(2));
        assert_eq!(shared.to_map().keys().collect::<Vec<_>>(), ["a", "m"]);
    }

    /// The turn's result takes the map when nothing else holds it, and
    /// copies it when a plugin kept the state past the turn.
    #[test]
    fn into_map_takes_the_map_or_copies_it_while_shared() {
        let (state, shared) = TurnState::shared(serde_json::Map::new());
        state.set("k", &1).unwrap();
        let kept = state.clone();
        drop(state);
        let copy = shared.clone().into_map();
        assert_eq!(copy["k"], 1);
        kept.set("k", &2).unwrap();
        assert_eq!(copy["k"], 1, "a copy: later writes do not reach it");
        drop(kept);
        let taken = shared.into_map();
        assert_eq!(taken["k"], 2);
    }

    #[test]
    fn the_revision_changes_with_every_write_and_only_then() {
        let (state, shared) = TurnState::shared(serde_json::Map::new());
        let r0 = state.revision().expect("a store of this binary counts writes");
        assert_eq!(state.revision(), Some(r0), "reading changes nothing");
        let _ = state.get_raw("k");
        let _ = state.keys();
        assert_eq!(state.revision(), Some(r0));
        state.set("k", &1).unwrap();
        let r1 = state.revision().unwrap();
        assert_ne!(r1, r0);
        shared.extend(serde_json::json!({"j": 2}).as_object().unwrap().clone());
        let r2 = state.revision().unwrap();
        assert_ne!(r2, r1, "the maker's merge is a write");
        assert!(!state.remove("absent"));
        assert_eq!(state.revision(), Some(r2), "removing nothing writes nothing");
        assert!(state.remove("k"));
        assert_ne!(state.revision(), Some(r2));
        assert!(state.same_as(&state.clone()));
        assert!(!state.same_as(&TurnState::new()));
    }

    #[test]
    fn an_attached_owner_is_found_while_it_lives_and_only_as_its_type() {
        let state = TurnState::new();
        assert!(state.owner::<String>().is_none());
        let owner = Arc::new(String::from("framework"));
        assert!(state.attach(&owner));
        // Every clone of the handle sees it (a hook receives a clone).
        let seen = state.clone().owner::<String>().expect("attached");
        assert!(Arc::ptr_eq(&seen, &owner));
        assert!(state.owner::<u32>().is_none(), "another type is not the owner");
        drop(seen);
        drop(owner);
        assert!(state.owner::<String>().is_none(), "the owner is held weakly: gone with its last Arc");
    }
}
