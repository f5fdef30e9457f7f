//! The turn state as Python sees it: one dict for as long as the state is
//! unchanged.
//!
//! Bub hands every hook of a turn the same `state` dict. The bridge builds
//! a dict from the host's state for a Python hook and writes back what the
//! hook set, replaced or removed. Building it converted every entry again
//! on every call — most of a call's argument cost — so the dict is kept
//! after the call, with the state's revision (ABI 2.4): the next hook of
//! the turn gets the very same dict when nobody else wrote the state in
//! between, as under Bub (a value a Python hook changed in place is then
//! seen by the next Python hook too). Any other write — by the host, a
//! Rust plugin, or a concurrent call — changes the revision, and the dict
//! is built again. On a host older than 2.4 it is built for every call.

use std::sync::Mutex;

use bub_abi::{
    abi_stable::std_types::{RResult, RStr},
    TurnState,
};
use pyo3::{prelude::*, types::PyDict};

use crate::{convert, interp::Interp, objects};

/// The dict handed to a Python hook, and what it held when handed over,
/// so that what the hook changed is written back to the host's state.
pub struct StateDict {
    dict: Py<PyDict>,
    /// Key and value objects as handed over, in the dict's order.
    originals: Vec<(Py<PyAny>, Py<PyAny>)>,
}

/// A dict kept for a state, valid while the state's revision is `revision`.
struct Kept {
    state: TurnState,
    revision: u64,
    dict: StateDict,
}

/// The dicts of the last few states (a gateway runs several turns at once).
/// Each holds a clone of its state's handle, so the store cannot be freed
/// and its address reused while it is kept; a state thus outlives its turn
/// until [`KEPT_STATES`] newer ones replace it.
static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

/// How many states' dicts are kept.
const KEPT_STATES: usize = 8;

impl StateDict {
    /// The dict for `state`: the one kept for it when the state is
    /// unchanged since, else a new one. Taken out while a call holds it:
    /// a concurrent call on the same state builds its own.
    pub fn for_state(py: Python<'_>, interp: &'static Interp, state: &TurnState) -> PyResult<StateDict> {
        if let Some(revision) = state.revision() {
            let mut kept = bub_abi::sync::lock(&KEPT);
            if let Some(i) = kept.iter().position(|k| k.state.same_as(state)) {
                let k = kept.swap_remove(i);
                if k.revision == revision {
                    return Ok(k.dict);
                }
            }
        }
        Self::build(py, interp, state)
    }

    /// The dict itself.
    pub fn dict<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.dict.bind(py).clone().into_any()
    }

    fn build(py: Python<'_>, interp: &'static Interp, state: &TurnState) -> PyResult<StateDict> {
        let dict = PyDict::new(py);
        let mut originals = Vec::new();
        for key in state.keys() {
            let Some(raw) = state.get_raw(&key) else { continue };
            // A live object shows as its `{"$object": …}` marker: only then
            // is the object itself asked for.
            let object = if raw.as_ref().get("$object").is_some() { state.get_object(&key) } else { None };
            let value = match object {
                Some(object) => objects::object_to_py(py, interp, &object)?,
                None => convert::to_py(py, interp, raw.as_ref())?,
            };
            let key = convert::key(py, &key);
            dict.set_item(&key, &value)?;
            originals.push((key.into_any().unbind(), value.unbind()));
        }
        Ok(StateDict { dict: dict.unbind(), originals })
    }

    /// Writes back the keys the hook set, replaced or removed (changes
    /// inside a value it kept are not seen: documented), then keeps the
    /// dict for the state's next hook when only these writes happened.
    pub fn write_back(mut self, py: Python<'_>, interp: &'static Interp, state: &TurnState) {
        let before = state.revision();
        let mut writes = 0u64;
        let dict = self.dict.bind(py).clone();
        let mut now = Vec::with_capacity(self.originals.len());
        for (i, (k, v)) in dict.iter().enumerate() {
            // The common case: the same key and value at the same place.
            let unchanged = match self.originals.get(i) {
                Some((ok, ov)) if ok.bind(py).is(&k) && ov.bind(py).is(&v) => true,
                _ => self.originals.iter().any(|(ok, ov)| ov.bind(py).is(&v) && ok.bind(py).eq(&k).unwrap_or(false)),
            };
            if !unchanged {
                match k.extract::<String>() {
                    Ok(key) => match convert::from_py(&v, interp) {
                        Ok(value) => match state.handle().set(RStr::from_str(&key), value) {
                            RResult::ROk(()) => writes += 1,
                            RResult::RErr(e) => {
                                tracing::warn!("python bridge: state[{key:?}] could not be stored: {e}")
                            }
                        },
                        Err(e) => tracing::warn!("python bridge: state[{key:?}] could not be stored: {e}"),
                    },
                    // A key that is not a string cannot be a state key.
                    Err(_) => continue,
                }
            }
            now.push((k.unbind(), v.unbind()));
        }
        for (key, _) in &self.originals {
            let key = key.bind(py);
            if !dict.contains(key).unwrap_or(true) {
                if let Ok(key) = key.extract::<String>() {
                    if state.remove(&key) {
                        writes += 1;
                    }
                }
            }
        }
        self.originals = now;
        // Kept only when the state moved by exactly our writes: any other
        // writer in between makes the dict stale.
        let (Some(before), Some(after)) = (before, state.revision()) else { return };
        if after != before.wrapping_add(writes) {
            return;
        }
        let mut kept = bub_abi::sync::lock(&KEPT);
        kept.retain(|k| !k.state.same_as(state));
        if kept.len() >= KEPT_STATES {
            kept.remove(0);
        }
        kept.push(Kept { state: state.clone(), revision: after, dict: self });
    }
}
