//! Reading a host value with serde, touching only what the target asks for.
//!
//! Structs look their fields up by name (the rest of the map is never
//! walked), ignored values are skipped without a host call, strings are
//! lent, and a [`Value`] / [`ValueRef`] field takes its subtree as a
//! handle: the deserializer parks the handle in a thread-local slot and the
//! handle's own `Deserialize` picks it up, the way `serde_json::RawValue`
//! recognises its own deserializer.

use std::{cell::Cell, ffi::c_void, fmt};

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};

use super::{Value, ValueKind, ValueRef};
use crate::abi::ValueVTableRef;

/// The newtype name by which [`Value`] and [`ValueRef`] ask a deserializer
/// for a handle.
pub(crate) const HANDLE_TOKEN: &str = "$bub_abi::private::ValueHandle";

thread_local! {
    static PARKED: Cell<Option<(*const c_void, ValueVTableRef)>> = const { Cell::new(None) };
}

use super::Error;

impl<'de> de::Deserializer<'de> for ValueRef<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.kind() {
            ValueKind::Null => visitor.visit_unit(),
            ValueKind::Bool => visitor.visit_bool(self.as_bool().unwrap_or(false)),
            ValueKind::Int => visitor.visit_i64(self.as_i64().unwrap_or(0)),
            ValueKind::UInt => visitor.visit_u64(self.as_u64().unwrap_or(0)),
            ValueKind::Float => visitor.visit_f64(self.as_f64().unwrap_or(0.0)),
            ValueKind::Str => visitor.visit_borrowed_str(self.as_str().unwrap_or("")),
            ValueKind::Array => visitor.visit_seq(Seq { v: self, i: 0, n: self.len() }),
            ValueKind::Object => visitor.visit_map(Entries { v: self, i: 0, n: self.len(), pending: None }),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        if self.is_null() {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        if self.is_object() {
            visitor.visit_map(Fields { v: self, fields, i: 0, pending: None })
        } else {
            self.deserialize_any(visitor)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, Error> {
        if name == HANDLE_TOKEN {
            PARKED.with(|p| p.set(Some((self.node, self.vt))));
            let r = visitor.visit_newtype_struct(().into_deserializer());
            PARKED.with(|p| p.set(None));
            return r;
        }
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.kind() {
            ValueKind::Str => visitor.visit_enum(self.as_str().unwrap_or("").into_deserializer()),
            ValueKind::Object if self.len() == 1 => {
                let (variant, content) = self.entry(0).expect("one entry");
                visitor.visit_enum(Enum { variant, content })
            }
            _ => Err(de::Error::custom(format!("expected an enum (a string or a one-key map), got {self}"))),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.as_str() {
            Some(s) => visitor.visit_borrowed_bytes(s.as_bytes()),
            None => self.deserialize_any(visitor),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        if self.is_null() {
            visitor.visit_unit()
        } else {
            self.deserialize_any(visitor)
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        unit_struct seq tuple tuple_struct map identifier
    }
}

struct Seq<'de> {
    v: ValueRef<'de>,
    i: usize,
    n: usize,
}

impl<'de> de::SeqAccess<'de> for Seq<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        if self.i >= self.n {
            return Ok(None);
        }
        let item = self.v.index(self.i).expect("index below len");
        self.i += 1;
        seed.deserialize(item).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.n - self.i)
    }
}

/// Every entry of a map, in order (for maps and `deserialize_any`).
struct Entries<'de> {
    v: ValueRef<'de>,
    i: usize,
    n: usize,
    pending: Option<ValueRef<'de>>,
}

impl<'de> de::MapAccess<'de> for Entries<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        if self.i >= self.n {
            return Ok(None);
        }
        let (k, v) = self.v.entry(self.i).expect("index below len");
        self.i += 1;
        self.pending = Some(v);
        seed.deserialize(de::value::BorrowedStrDeserializer::new(k)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        seed.deserialize(self.pending.take().expect("a key before its value"))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.n - self.i)
    }
}

/// The declared fields of a struct, looked up by name; absent ones are
/// left to the struct's defaults.
struct Fields<'de> {
    v: ValueRef<'de>,
    fields: &'static [&'static str],
    i: usize,
    pending: Option<ValueRef<'de>>,
}

impl<'de> de::MapAccess<'de> for Fields<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        while let Some(name) = self.fields.get(self.i) {
            self.i += 1;
            if let Some(v) = self.v.get(name) {
                self.pending = Some(v);
                return seed.deserialize(de::value::BorrowedStrDeserializer::new(name)).map(Some);
            }
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        seed.deserialize(self.pending.take().expect("a key before its value"))
    }
}

struct Enum<'de> {
    variant: &'de str,
    content: ValueRef<'de>,
}

impl<'de> de::EnumAccess<'de> for Enum<'de> {
    type Error = Error;
    type Variant = ValueRef<'de>;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, ValueRef<'de>), Error> {
        let v = seed.deserialize(de::value::BorrowedStrDeserializer::<Error>::new(self.variant))?;
        Ok((v, self.content))
    }
}

impl<'de> de::VariantAccess<'de> for ValueRef<'de> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_any(self, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(self, fields: &'static [&'static str], visitor: V) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_struct(self, "", fields, visitor)
    }
}

/// The handle our deserializer parked, if it is the one asking.
#[inline]
fn take_parked() -> Option<(*const c_void, ValueVTableRef)> {
    PARKED.with(|p| p.take())
}

impl<'de: 'a, 'a> de::Deserialize<'de> for ValueRef<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ValueRef<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a host value (a ValueRef can only be read from a host value; use Value elsewhere)")
            }
            fn visit_newtype_struct<D: de::Deserializer<'de>>(self, _d: D) -> Result<ValueRef<'de>, D::Error> {
                match take_parked() {
                    // The parked handle is the deserializer's own ValueRef<'de>.
                    Some((node, vt)) => Ok(ValueRef::from_raw(node, vt).expect("a parked handle is not null")),
                    None => Err(de::Error::custom(
                        "a ValueRef can only be read from a host value; use bub_abi::Value elsewhere",
                    )),
                }
            }
        }
        d.deserialize_newtype_struct(HANDLE_TOKEN, V)
    }
}

impl<'de> de::Deserialize<'de> for Value {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_newtype_struct(HANDLE_TOKEN, Build)
    }
}

/// Builds a [`Value`]: takes a parked handle, or builds from any other
/// deserializer's data through the host's functions.
struct Build;

impl<'de> Visitor<'de> for Build {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON-like value")
    }
    fn visit_newtype_struct<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        match take_parked() {
            Some((node, vt)) => Ok(ValueRef::from_raw(node, vt).expect("a parked handle is not null").to_owned()),
            None => d.deserialize_any(Build),
        }
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::null())
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::null())
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(Build)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::from(b))
    }
    fn visit_i64<E>(self, i: i64) -> Result<Value, E> {
        Ok(Value::from(i))
    }
    fn visit_u64<E>(self, u: u64) -> Result<Value, E> {
        Ok(Value::from(u))
    }
    fn visit_f64<E>(self, f: f64) -> Result<Value, E> {
        Ok(Value::from(f))
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::from(s))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Value::array();
        while let Some(v) = seq.next_element_seed(BuildSeed)? {
            out.push(v);
        }
        Ok(out)
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Value::object();
        while let Some(k) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let v = map.next_value_seed(BuildSeed)?;
            out.insert(&k, v);
        }
        Ok(out)
    }
}

struct BuildSeed;

impl<'de> DeserializeSeed<'de> for BuildSeed {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(Build)
    }
}
