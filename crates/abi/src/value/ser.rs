//! Building a host value from any `Serialize`, through the host's functions.
//!
//! A [`Value`] or [`ValueRef`] inside the serialized data is taken as a
//! handle (a count bumped, nothing walked): it announces itself with a
//! private newtype name, and this serializer asks it to hand over its node
//! through a thread-local slot. Any other serializer (serde_json, say) sees
//! an ordinary newtype and gets the value's contents.

use std::{cell::Cell, ffi::c_void};

use serde::ser::{self, Serialize};

use super::{de::HANDLE_TOKEN, vtable, Value, ValueKind, ValueRef};
use crate::abi::ValueVTableRef;

thread_local! {
    /// Set by [`ValueSerializer`] just before a handle serializes itself.
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
    /// The handle's node, borrowed (valid while the handle serializes
    /// itself), as the handle leaves it for the serializer's
    /// `serialize_unit` to take.
    static CAPTURED: Cell<Option<(*const c_void, ValueVTableRef)>> = const { Cell::new(None) };
}

use super::Error;

/// Runs `serialize` (a handle serializing itself into one of ours) with
/// the handle asked to hand over its node.
fn capturing<R>(serialize: impl FnOnce() -> R) -> R {
    CAPTURING.with(|c| c.set(true));
    let r = serialize();
    CAPTURING.with(|c| c.set(false));
    // Taken by now; cleared in case a serializer did not (no count held).
    CAPTURED.with(|c| c.take());
    r
}

/// The node a handle just left (see [`Handle`]), borrowed for the
/// current `serialize_unit` call.
fn captured<'a>() -> Option<ValueRef<'a>> {
    CAPTURED.with(|c| c.take()).map(|(node, vt)| ValueRef { node, vt, _life: std::marker::PhantomData })
}

impl Serialize for ValueRef<'_> {
    fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_struct(HANDLE_TOKEN, &Handle(*self))
    }
}

impl Serialize for Value {
    fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_ref().serialize(s)
    }
}

/// A handle inside the newtype: captured by our serializer, walked by others.
struct Handle<'a>(ValueRef<'a>);

impl Serialize for Handle<'_> {
    fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if CAPTURING.with(|c| c.replace(false)) {
            // Our serializer takes the node in the `serialize_unit` below,
            // while `self.0` still lends it: shared where it lands, with no
            // owned handle in between.
            CAPTURED.with(|c| c.set(Some((self.0.node, self.0.vt))));
            return s.serialize_unit();
        }
        walk(self.0, s)
    }
}

/// The contents of a value, for serializers other than ours.
fn walk<S: ser::Serializer>(v: ValueRef<'_>, s: S) -> Result<S::Ok, S::Error> {
    use ser::{SerializeMap, SerializeSeq};
    match v.kind() {
        ValueKind::Null => s.serialize_unit(),
        ValueKind::Bool => s.serialize_bool(v.as_bool().unwrap_or(false)),
        ValueKind::Int => s.serialize_i64(v.as_i64().unwrap_or(0)),
        ValueKind::UInt => s.serialize_u64(v.as_u64().unwrap_or(0)),
        ValueKind::Float => s.serialize_f64(v.as_f64().unwrap_or(0.0)),
        ValueKind::Str => s.serialize_str(v.as_str().unwrap_or("")),
        ValueKind::Array => {
            let mut seq = s.serialize_seq(Some(v.len()))?;
            for item in v.items() {
                seq.serialize_element(&item)?;
            }
            seq.end()
        }
        ValueKind::Object => {
            let mut map = s.serialize_map(Some(v.len()))?;
            for (k, item) in v.entries() {
                map.serialize_entry(k, &item)?;
            }
            map.end()
        }
    }
}

/// Builds a host [`Value`] from any `Serialize`
/// (see [`Value::from_serialize`](super::Value::from_serialize)).
#[derive(Clone, Copy)]
pub struct ValueSerializer {
    vt: ValueVTableRef,
}

impl ValueSerializer {
    /// A serializer building with the host's functions.
    #[inline]
    pub fn new() -> Self {
        ValueSerializer { vt: vtable() }
    }
}

impl Default for ValueSerializer {
    #[inline]
    fn default() -> Self {
        Self::new()
    }
}

fn map_of(vt: ValueVTableRef, key: &str, value: Value) -> Value {
    let mut m = Value::from_table(vt, (vt.object())(1));
    m.insert(key, value);
    m
}

impl ser::Serializer for ValueSerializer {
    type Ok = Value;
    type Error = Error;
    type SerializeSeq = SeqBuilder;
    type SerializeTuple = SeqBuilder;
    type SerializeTupleStruct = SeqBuilder;
    type SerializeTupleVariant = SeqBuilder;
    type SerializeMap = MapBuilder;
    type SerializeStruct = MapBuilder;
    type SerializeStructVariant = MapBuilder;

    #[inline]
    fn serialize_bool(self, v: bool) -> Result<Value, Error> {
        Ok(Value::from(v))
    }
    #[inline]
    fn serialize_i8(self, v: i8) -> Result<Value, Error> {
        Ok(Value::from(v as i64))
    }
    #[inline]
    fn serialize_i16(self, v: i16) -> Result<Value, Error> {
        Ok(Value::from(v as i64))
    }
    #[inline]
    fn serialize_i32(self, v: i32) -> Result<Value, Error> {
        Ok(Value::from(v as i64))
    }
    #[inline]
    fn serialize_i64(self, v: i64) -> Result<Value, Error> {
        Ok(Value::from(v))
    }
    #[inline]
    fn serialize_i128(self, v: i128) -> Result<Value, Error> {
        i64::try_from(v)
            .map(Value::from)
            .or_else(|_| u64::try_from(v).map(Value::from))
            .map_err(|_| Error(format!("integer {v} does not fit 64 bits")))
    }
    #[inline]
    fn serialize_u8(self, v: u8) -> Result<Value, Error> {
        Ok(Value::from(v as u64))
    }
    #[inline]
    fn serialize_u16(self, v: u16) -> Result<Value, Error> {
        Ok(Value::from(v as u64))
    }
    #[inline]
    fn serialize_u32(self, v: u32) -> Result<Value, Error> {
        Ok(Value::from(v as u64))
    }
    #[inline]
    fn serialize_u64(self, v: u64) -> Result<Value, Error> {
        Ok(Value::from(v))
    }
    #[inline]
    fn serialize_u128(self, v: u128) -> Result<Value, Error> {
        u64::try_from(v).map(Value::from).map_err(|_| Error(format!("integer {v} does not fit 64 bits")))
    }
    #[inline]
    fn serialize_f32(self, v: f32) -> Result<Value, Error> {
        Ok(Value::from(v as f64))
    }
    #[inline]
    fn serialize_f64(self, v: f64) -> Result<Value, Error> {
        Ok(Value::from(v))
    }
    #[inline]
    fn serialize_char(self, v: char) -> Result<Value, Error> {
        Ok(Value::from(v.encode_utf8(&mut [0; 4]) as &str))
    }
    #[inline]
    fn serialize_str(self, v: &str) -> Result<Value, Error> {
        Ok(Value::from(v))
    }
    #[inline]
    fn serialize_bytes(self, v: &[u8]) -> Result<Value, Error> {
        let mut a = Value::array();
        for b in v {
            a.push(*b as u64);
        }
        Ok(a)
    }
    #[inline]
    fn serialize_none(self) -> Result<Value, Error> {
        Ok(Value::null())
    }
    #[inline]
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<Value, Error> {
        value.serialize(self)
    }
    #[inline]
    fn serialize_unit(self) -> Result<Value, Error> {
        match captured() {
            Some(r) => Ok(r.to_owned().into_table(self.vt)),
            None => Ok(Value::null()),
        }
    }
    #[inline]
    fn serialize_unit_struct(self, _name: &'static str) -> Result<Value, Error> {
        Ok(Value::null())
    }
    #[inline]
    fn serialize_unit_variant(self, _name: &'static str, _i: u32, variant: &'static str) -> Result<Value, Error> {
        Ok(Value::from(variant))
    }
    #[inline]
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, name: &'static str, value: &T) -> Result<Value, Error> {
        if name != HANDLE_TOKEN {
            return value.serialize(self);
        }
        capturing(|| value.serialize(self))
    }
    #[inline]
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        _i: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<Value, Error> {
        Ok(map_of(self.vt, variant, value.serialize(self)?))
    }
    #[inline]
    fn serialize_seq(self, len: Option<usize>) -> Result<SeqBuilder, Error> {
        Ok(SeqBuilder {
            ser: self,
            out: Value::from_table(self.vt, (self.vt.array())(len.unwrap_or(0))),
            variant: None,
        })
    }
    #[inline]
    fn serialize_tuple(self, len: usize) -> Result<SeqBuilder, Error> {
        self.serialize_seq(Some(len))
    }
    #[inline]
    fn serialize_tuple_struct(self, _name: &'static str, len: usize) -> Result<SeqBuilder, Error> {
        self.serialize_seq(Some(len))
    }
    #[inline]
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _i: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<SeqBuilder, Error> {
        let mut b = self.serialize_seq(Some(len))?;
        b.variant = Some(variant);
        Ok(b)
    }
    #[inline]
    fn serialize_map(self, len: Option<usize>) -> Result<MapBuilder, Error> {
        Ok(MapBuilder {
            ser: self,
            out: Value::from_table(self.vt, (self.vt.object())(len.unwrap_or(0))),
            key: None,
            variant: None,
        })
    }
    #[inline]
    fn serialize_struct(self, _name: &'static str, len: usize) -> Result<MapBuilder, Error> {
        self.serialize_map(Some(len))
    }
    #[inline]
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _i: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<MapBuilder, Error> {
        let mut b = self.serialize_map(Some(len))?;
        b.variant = Some(variant);
        Ok(b)
    }
}

/// A list under construction.
pub struct SeqBuilder {
    ser: ValueSerializer,
    out: Value,
    variant: Option<&'static str>,
}

impl SeqBuilder {
    #[inline]
    fn add<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        value.serialize(SlotSerializer { ser: self.ser, target: &mut self.out, key: None })
    }
    #[inline]
    fn done(self) -> Result<Value, Error> {
        Ok(match self.variant {
            Some(v) => map_of(self.ser.vt, v, self.out),
            None => self.out,
        })
    }
}

impl ser::SerializeSeq for SeqBuilder {
    type Ok = Value;
    type Error = Error;
    #[inline]
    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        self.add(value)
    }
    #[inline]
    fn end(self) -> Result<Value, Error> {
        self.done()
    }
}

impl ser::SerializeTuple for SeqBuilder {
    type Ok = Value;
    type Error = Error;
    #[inline]
    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        self.add(value)
    }
    #[inline]
    fn end(self) -> Result<Value, Error> {
        self.done()
    }
}

impl ser::SerializeTupleStruct for SeqBuilder {
    type Ok = Value;
    type Error = Error;
    #[inline]
    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        self.add(value)
    }
    #[inline]
    fn end(self) -> Result<Value, Error> {
        self.done()
    }
}

impl ser::SerializeTupleVariant for SeqBuilder {
    type Ok = Value;
    type Error = Error;
    #[inline]
    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        self.add(value)
    }
    #[inline]
    fn end(self) -> Result<Value, Error> {
        self.done()
    }
}

/// A map under construction.
pub struct MapBuilder {
    ser: ValueSerializer,
    out: Value,
    key: Option<String>,
    variant: Option<&'static str>,
}

impl MapBuilder {
    #[inline]
    fn field<T: ?Sized + Serialize>(&mut self, key: &str, value: &T) -> Result<(), Error> {
        value.serialize(SlotSerializer { ser: self.ser, target: &mut self.out, key: Some(key) })
    }
    #[inline]
    fn done(self) -> Result<Value, Error> {
        Ok(match self.variant {
            Some(v) => map_of(self.ser.vt, v, self.out),
            None => self.out,
        })
    }
}

impl ser::SerializeMap for MapBuilder {
    type Ok = Value;
    type Error = Error;
    #[inline]
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), Error> {
        self.key = Some(key.serialize(KeySerializer)?);
        Ok(())
    }
    #[inline]
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        let key = self.key.take().ok_or_else(|| Error("a map value without a key".into()))?;
        self.field(&key, value)
    }
    #[inline]
    fn end(self) -> Result<Value, Error> {
        self.done()
    }
}

impl ser::SerializeStruct for MapBuilder {
    type Ok = Value;
    type Error = Error;
    #[inline]
    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        self.field(key, value)
    }
    #[inline]
    fn end(self) -> Result<Value, Error> {
        self.done()
    }
}

impl ser::SerializeStructVariant for MapBuilder {
    type Ok = Value;
    type Error = Error;
    #[inline]
    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        self.field(key, value)
    }
    #[inline]
    fn end(self) -> Result<Value, Error> {
        self.done()
    }
}

/// Map keys: strings, and numbers or booleans written as strings (as
/// serde_json does).
struct KeySerializer;

fn key_error() -> Error {
    Error("a map key must be a string, a number or a boolean".into())
}

impl ser::Serializer for KeySerializer {
    type Ok = String;
    type Error = Error;
    type SerializeSeq = ser::Impossible<String, Error>;
    type SerializeTuple = ser::Impossible<String, Error>;
    type SerializeTupleStruct = ser::Impossible<String, Error>;
    type SerializeTupleVariant = ser::Impossible<String, Error>;
    type SerializeMap = ser::Impossible<String, Error>;
    type SerializeStruct = ser::Impossible<String, Error>;
    type SerializeStructVariant = ser::Impossible<String, Error>;

    fn serialize_str(self, v: &str) -> Result<String, Error> {
        Ok(v.to_owned())
    }
    fn serialize_char(self, v: char) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_bool(self, v: bool) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_i8(self, v: i8) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_i16(self, v: i16) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_i32(self, v: i32) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_i64(self, v: i64) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_u16(self, v: u16) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_u32(self, v: u32) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_u64(self, v: u64) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_f32(self, _v: f32) -> Result<String, Error> {
        Err(key_error())
    }
    fn serialize_f64(self, _v: f64) -> Result<String, Error> {
        Err(key_error())
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<String, Error> {
        Err(key_error())
    }
    fn serialize_none(self) -> Result<String, Error> {
        Err(key_error())
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<String, Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<String, Error> {
        Err(key_error())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<String, Error> {
        Err(key_error())
    }
    fn serialize_unit_variant(self, _n: &'static str, _i: u32, variant: &'static str) -> Result<String, Error> {
        Ok(variant.to_owned())
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _n: &'static str, value: &T) -> Result<String, Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _n: &'static str,
        _i: u32,
        _v: &'static str,
        _value: &T,
    ) -> Result<String, Error> {
        Err(key_error())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, Error> {
        Err(key_error())
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, Error> {
        Err(key_error())
    }
    fn serialize_tuple_struct(self, _n: &'static str, _len: usize) -> Result<Self::SerializeTupleStruct, Error> {
        Err(key_error())
    }
    fn serialize_tuple_variant(
        self,
        _n: &'static str,
        _i: u32,
        _v: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        Err(key_error())
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, Error> {
        Err(key_error())
    }
    fn serialize_struct(self, _n: &'static str, _len: usize) -> Result<Self::SerializeStruct, Error> {
        Err(key_error())
    }
    fn serialize_struct_variant(
        self,
        _n: &'static str,
        _i: u32,
        _v: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        Err(key_error())
    }
}

/// Serializes one entry straight into the map (`key`) or list (no key)
/// being built: scalars and strings go in without a node of their own (no
/// allocation for the value itself); anything else is built, then put in.
struct SlotSerializer<'a> {
    ser: ValueSerializer,
    target: &'a mut Value,
    key: Option<&'a str>,
}

impl SlotSerializer<'_> {
    #[inline]
    fn scalar(self, kind: u8, bits: u64) -> Result<(), Error> {
        let vt = self.target.vt;
        let done = match self.key {
            Some(k) => (vt.insert_scalar())(self.target.node, abi_stable::std_types::RStr::from_str(k), kind, bits),
            None => (vt.push_scalar())(self.target.node, kind, bits),
        };
        if !done {
            self.put(Value::from_table(vt, (vt.scalar())(kind, bits)));
        }
        Ok(())
    }

    #[inline]
    fn string(self, s: &str) -> Result<(), Error> {
        let vt = self.target.vt;
        let text = abi_stable::std_types::RStr::from_str(s);
        let done = match self.key {
            Some(k) => (vt.insert_string())(self.target.node, abi_stable::std_types::RStr::from_str(k), text),
            None => (vt.push_string())(self.target.node, text),
        };
        if !done {
            self.put(Value::from_table(vt, (vt.string())(text)));
        }
        Ok(())
    }

    #[inline]
    fn put(self, value: Value) {
        match self.key {
            Some(k) => {
                self.target.insert(k, value);
            }
            None => {
                self.target.push(value);
            }
        }
    }

    #[inline]
    fn built(self, value: Result<Value, Error>) -> Result<(), Error> {
        self.put(value?);
        Ok(())
    }
}

use super::tree::kind;

impl<'a> ser::Serializer for SlotSerializer<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Slotted<'a, SeqBuilder>;
    type SerializeTuple = Slotted<'a, SeqBuilder>;
    type SerializeTupleStruct = Slotted<'a, SeqBuilder>;
    type SerializeTupleVariant = Slotted<'a, SeqBuilder>;
    type SerializeMap = Slotted<'a, MapBuilder>;
    type SerializeStruct = Slotted<'a, MapBuilder>;
    type SerializeStructVariant = Slotted<'a, MapBuilder>;

    #[inline]
    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.scalar(kind::BOOL, v as u64)
    }
    #[inline]
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.scalar(kind::INT, v as i64 as u64)
    }
    #[inline]
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.scalar(kind::INT, v as i64 as u64)
    }
    #[inline]
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.scalar(kind::INT, v as i64 as u64)
    }
    #[inline]
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        self.scalar(kind::INT, v as u64)
    }
    #[inline]
    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        let ser = self.ser;
        self.built(ser.serialize_i128(v))
    }
    #[inline]
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.scalar(kind::UINT, v as u64)
    }
    #[inline]
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.scalar(kind::UINT, v as u64)
    }
    #[inline]
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.scalar(kind::UINT, v as u64)
    }
    #[inline]
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.scalar(kind::UINT, v)
    }
    #[inline]
    fn serialize_u128(self, v: u128) -> Result<(), Error> {
        let ser = self.ser;
        self.built(ser.serialize_u128(v))
    }
    #[inline]
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.scalar(kind::FLOAT, (v as f64).to_bits())
    }
    #[inline]
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        self.scalar(kind::FLOAT, v.to_bits())
    }
    #[inline]
    fn serialize_char(self, v: char) -> Result<(), Error> {
        self.string(v.encode_utf8(&mut [0; 4]))
    }
    #[inline]
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        self.string(v)
    }
    #[inline]
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
        let ser = self.ser;
        self.built(ser.serialize_bytes(v))
    }
    #[inline]
    fn serialize_none(self) -> Result<(), Error> {
        self.scalar(kind::NULL, 0)
    }
    #[inline]
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    #[inline]
    fn serialize_unit(self) -> Result<(), Error> {
        match captured() {
            Some(r) => {
                match self.key {
                    Some(k) => self.target.insert_ref(k, r),
                    None => self.target.push_ref(r),
                };
                Ok(())
            }
            None => self.scalar(kind::NULL, 0),
        }
    }
    #[inline]
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Error> {
        self.scalar(kind::NULL, 0)
    }
    #[inline]
    fn serialize_unit_variant(self, _name: &'static str, _i: u32, variant: &'static str) -> Result<(), Error> {
        self.string(variant)
    }
    #[inline]
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, name: &'static str, value: &T) -> Result<(), Error> {
        if name == HANDLE_TOKEN {
            return capturing(|| value.serialize(self));
        }
        value.serialize(self)
    }
    #[inline]
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        name: &'static str,
        i: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        let ser = self.ser;
        self.built(ser.serialize_newtype_variant(name, i, variant, value))
    }
    #[inline]
    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, Error> {
        let inner = self.ser.serialize_seq(len)?;
        Ok(Slotted { slot: self, inner })
    }
    #[inline]
    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, Error> {
        let inner = self.ser.serialize_tuple(len)?;
        Ok(Slotted { slot: self, inner })
    }
    #[inline]
    fn serialize_tuple_struct(self, name: &'static str, len: usize) -> Result<Self::SerializeTupleStruct, Error> {
        let inner = self.ser.serialize_tuple_struct(name, len)?;
        Ok(Slotted { slot: self, inner })
    }
    #[inline]
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        i: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        let inner = self.ser.serialize_tuple_variant(name, i, variant, len)?;
        Ok(Slotted { slot: self, inner })
    }
    #[inline]
    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, Error> {
        let inner = self.ser.serialize_map(len)?;
        Ok(Slotted { slot: self, inner })
    }
    #[inline]
    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Self::SerializeStruct, Error> {
        let inner = self.ser.serialize_struct(name, len)?;
        Ok(Slotted { slot: self, inner })
    }
    #[inline]
    fn serialize_struct_variant(
        self,
        name: &'static str,
        i: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        let inner = self.ser.serialize_struct_variant(name, i, variant, len)?;
        Ok(Slotted { slot: self, inner })
    }
}

/// A compound value built for a slot, put there when it ends.
struct Slotted<'a, B> {
    slot: SlotSerializer<'a>,
    inner: B,
}

macro_rules! slotted {
    ($Trait:ident, $method:ident $(, $key:ident: $kty:ty)?) => {
        impl<'a, B: ser::$Trait<Ok = Value, Error = Error>> ser::$Trait for Slotted<'a, B> {
            type Ok = ();
            type Error = Error;
            fn $method<T: ?Sized + Serialize>(&mut self, $($key: $kty,)? value: &T) -> Result<(), Error> {
                self.inner.$method($($key,)? value)
            }
            fn end(self) -> Result<(), Error> {
                let value = self.inner.end();
                self.slot.built(value)
            }
        }
    };
}

slotted!(SerializeSeq, serialize_element);
slotted!(SerializeTuple, serialize_element);
slotted!(SerializeTupleStruct, serialize_field);
slotted!(SerializeTupleVariant, serialize_field);
slotted!(SerializeStruct, serialize_field, key: &'static str);
slotted!(SerializeStructVariant, serialize_field, key: &'static str);

impl<'a, B: ser::SerializeMap<Ok = Value, Error = Error>> ser::SerializeMap for Slotted<'a, B> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), Error> {
        self.inner.serialize_key(key)
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        self.inner.serialize_value(value)
    }
    fn end(self) -> Result<(), Error> {
        let value = self.inner.end();
        self.slot.built(value)
    }
}
