//! Host values ↔ Python objects, without a JSON text round trip.
//!
//! Host → Python: maps become dicts whose keys also read as attributes
//! (`AttrDict`, so `message.content` and `message["content"]` both work,
//! as Bub's `field_of` and plugins that use attribute access expect), lists
//! become lists, a live object a Python plugin put into the state becomes
//! that very Python object again.
//!
//! Python → host: None, bools, ints, floats, strings, lists, tuples and
//! dicts map directly; pydantic models, dataclasses, paths and dates through
//! the JSON form Bub would write (`bridge.jsonable`); anything else stays a
//! live object (a scheduler, a client) the host carries in the state and
//! hands back to Python unchanged.

use std::sync::{Mutex, OnceLock};

use bub_abi::{value::ValueKind, Value, ValueRef};
use pyo3::{
    prelude::*,
    types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple},
};

use crate::{interp::Interp, objects, FastMap};

/// How deep a value may nest before it is refused (a cycle in Python data).
const MAX_DEPTH: usize = 128;

/// Map keys made into Python strings once: the same few keys (`content`,
/// `session_id`, …) cross on every call, and a cached, interned string
/// costs neither a UTF-8 decode nor an allocation, and makes Python's dict
/// lookups pointer comparisons. Bounded: keys past the bound, or long
/// ones, are made per call.
struct KeyCache(Mutex<FastMap<Box<str>, Py<PyString>>>);

const KEY_CACHE_ENTRIES: usize = 4096;
const KEY_CACHE_LEN: usize = 64;

static KEYS: OnceLock<KeyCache> = OnceLock::new();

/// `key` as a Python string, from the cache when it is there.
pub fn key<'py>(py: Python<'py>, key: &str) -> Bound<'py, PyString> {
    if key.len() > KEY_CACHE_LEN {
        return PyString::new(py, key);
    }
    let cache = KEYS.get_or_init(|| KeyCache(Mutex::new(FastMap::default())));
    let mut map = bub_abi::sync::lock(&cache.0);
    if let Some(s) = map.get(key) {
        return s.bind(py).clone();
    }
    let s = PyString::intern(py, key);
    if map.len() < KEY_CACHE_ENTRIES {
        map.insert(key.into(), s.clone().unbind());
    }
    s
}

/// A host value as a Python object.
pub fn to_py<'py>(py: Python<'py>, interp: &'static Interp, value: ValueRef<'_>) -> PyResult<Bound<'py, PyAny>> {
    to_py_at(py, interp, value, 0)
}

fn to_py_at<'py>(
    py: Python<'py>,
    interp: &'static Interp,
    value: ValueRef<'_>,
    depth: usize,
) -> PyResult<Bound<'py, PyAny>> {
    if depth > MAX_DEPTH {
        return Err(pyo3::exceptions::PyValueError::new_err("value nests too deeply"));
    }
    Ok(match value.kind() {
        ValueKind::Null => py.None().into_bound(py),
        ValueKind::Bool => PyBool::new(py, value.as_bool().unwrap_or(false)).to_owned().into_any(),
        ValueKind::Int => value.as_i64().unwrap_or_default().into_pyobject(py)?.into_any(),
        ValueKind::UInt => value.as_u64().unwrap_or_default().into_pyobject(py)?.into_any(),
        ValueKind::Float => PyFloat::new(py, value.as_f64().unwrap_or(f64::NAN)).into_any(),
        ValueKind::Str => PyString::new(py, value.as_str().unwrap_or_default()).into_any(),
        ValueKind::Array => {
            let list = PyList::empty(py);
            for item in value.items() {
                list.append(to_py_at(py, interp, item, depth + 1)?)?;
            }
            list.into_any()
        }
        ValueKind::Object => {
            if let Some(object) = value.live_object() {
                return objects::object_to_py(py, interp, &object);
            }
            if let Some(live) = objects::marker_to_py(py, value) {
                return Ok(live);
            }
            if let Some(agent) = objects::agent_marker_to_py(py, interp, value) {
                return agent;
            }
            let dict = interp.attr_dict(py)?;
            for (k, v) in value.entries() {
                dict.set_item(key(py, k), to_py_at(py, interp, v, depth + 1)?)?;
            }
            dict.into_any()
        }
    })
}

/// A JSON value as a Python object (for values the bridge builds itself).
pub fn json_to_py<'py>(
    py: Python<'py>,
    interp: &'static Interp,
    value: &serde_json::Value,
) -> PyResult<Bound<'py, PyAny>> {
    to_py(py, interp, Value::from(value).as_ref())
}

/// A Python object as a host value.
pub fn from_py(obj: &Bound<'_, PyAny>, interp: &'static Interp) -> PyResult<Value> {
    from_py_at(obj, interp, 0)
}

fn from_py_at(obj: &Bound<'_, PyAny>, interp: &'static Interp, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(pyo3::exceptions::PyValueError::new_err("value nests too deeply (a cycle?) to cross into bub-rs"));
    }
    if obj.is_none() {
        return Ok(Value::null());
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::from(b.is_true()));
    }
    if let Ok(i) = obj.cast::<PyInt>() {
        if let Ok(v) = i.extract::<i64>() {
            return Ok(Value::from(v));
        }
        if let Ok(v) = i.extract::<u64>() {
            return Ok(Value::from(v));
        }
        // Beyond 64 bits: a float, as json.dumps would lose nothing Bub reads.
        return Ok(Value::from(i.extract::<f64>()?));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(Value::from(f.value()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::from(s.to_str()?));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut out = Value::object();
        for (k, v) in d.iter() {
            let item = from_py_at(&v, interp, depth + 1)?;
            match k.cast::<PyString>() {
                // Borrowed: the host copies the key into its node.
                Ok(s) => out.insert(s.to_str()?, item),
                Err(_) => out.insert(k.str()?.to_str()?, item),
            };
        }
        return Ok(out);
    }
    if obj.cast::<PyList>().is_ok() || obj.cast::<PyTuple>().is_ok() {
        let mut out = Value::array();
        for item in obj.try_iter()? {
            out.push(from_py_at(&item?, interp, depth + 1)?);
        }
        return Ok(out);
    }
    if let Some(raw) = objects::py_to_host_object(obj) {
        return Value::from_live_object(&raw)
            .map_err(|e| pyo3::exceptions::PyTypeError::new_err(e.message.to_string()));
    }
    let (ok, form): (bool, Bound<'_, PyAny>) = interp.jsonable(obj)?;
    if ok {
        return from_py_at(&form, interp, depth + 1);
    }
    let object = objects::live(obj, interp);
    Value::from_live_object(&object).map_err(|e| pyo3::exceptions::PyTypeError::new_err(e.message.to_string()))
}
