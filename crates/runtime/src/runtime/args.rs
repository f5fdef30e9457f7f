//! [`CallArgs`]: a hook's arguments, built once per dispatch as host values.
//!
//! Every implementation of one dispatch is lent the same values; a plugin
//! reads only what it declares, through the host's value functions. The
//! typed constructors below (one per hook, generated from the hook table)
//! are the host-side mirror of the SDK's argument views.

use abi_stable::std_types::{ROption, RSlice};
use bub_abi::{
    abi::{DispatchMode, HookCall},
    Object, TurnState, Value, ValueRef,
};
use serde::Serialize;

macro_rules! gen_max_args {
    ($( ($name:ident $Pascal:ident {
        kind: $kind:ident,
        args: [$($idx:literal $ak:ident $arg:ident : $aty:ty),* $(,)?],
        returns: $ret:ty,
        doc: $doc:literal $(,)?
    }) )*) => {
        /// The most arguments any hook takes (from the hook table).
        pub const MAX_ARGS: usize = {
            let counts: &[usize] = &[$((&[$(stringify!($arg)),*] as &[&str]).len()),*];
            let mut max = 0;
            let mut i = 0;
            while i < counts.len() {
                if counts[i] > max {
                    max = counts[i];
                }
                i += 1;
            }
            max
        };
    };
}
bub_abi::for_each_hook!(gen_max_args);

/// The arguments of one dispatch.
#[derive(Clone, Default)]
pub struct CallArgs {
    values: Vec<Value>,
    state: Option<TurnState>,
    object: Option<Object>,
}

impl std::fmt::Debug for CallArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallArgs").field("values", &self.values).field("state", &self.state.is_some()).finish()
    }
}

impl CallArgs {
    /// Arguments from values already in wire order (`state`/`object`
    /// positions hold `null`).
    pub fn from_values(values: Vec<Value>) -> Self {
        assert!(values.len() <= MAX_ARGS, "a hook takes at most {MAX_ARGS} arguments");
        CallArgs { values, state: None, object: None }
    }

    /// Attaches the live turn state.
    pub fn with_state(mut self, state: TurnState) -> Self {
        self.state = Some(state);
        self
    }

    /// Attaches a host object.
    pub fn with_object(mut self, object: Object) -> Self {
        self.object = Some(object);
        self
    }

    /// Replaces argument `index` (agent chains replace only the argument an
    /// implementation changed).
    pub fn set(&mut self, index: usize, value: Value) {
        self.values[index] = value;
    }

    /// Argument `index`.
    pub fn value(&self, index: usize) -> ValueRef<'_> {
        self.values[index].as_ref()
    }

    /// The turn state, if any.
    pub fn state(&self) -> Option<&TurnState> {
        self.state.as_ref()
    }

    pub(crate) fn push_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), serde_json::Error> {
        let v =
            Value::from_serialize(value).map_err(|e| <serde_json::Error as serde::ser::Error>::custom(e.message))?;
        self.values.push(v);
        Ok(())
    }

    pub(crate) fn push_state(&mut self, state: &TurnState) {
        self.values.push(Value::null());
        self.state = Some(state.clone());
    }

    pub(crate) fn push_object(&mut self, object: &impl ObjectArg) {
        self.values.push(Value::null());
        self.object = object.object().cloned();
    }

    /// Borrowed views of the values, for one FFI call.
    pub(crate) fn views(&self) -> [ValueRef<'_>; MAX_ARGS] {
        let mut out = [ValueRef::null(); MAX_ARGS];
        for (slot, v) in out.iter_mut().zip(&self.values) {
            *slot = v.as_ref();
        }
        out
    }

    /// The FFI call over `views` (from [`views`](Self::views)).
    pub(crate) fn call<'a>(&'a self, views: &'a [ValueRef<'a>; MAX_ARGS], mode: DispatchMode) -> HookCall<'a> {
        HookCall {
            args: RSlice::from_slice(&views[..self.values.len()]),
            state: match &self.state {
                Some(s) => ROption::RSome(s.handle()),
                None => ROption::RNone,
            },
            object: match &self.object {
                Some(o) => ROption::RSome(o.handle()),
                None => ROption::RNone,
            },
            mode,
            instance: bub_abi::abi::Instance::NONE,
            _payloads: std::marker::PhantomData,
        }
    }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __push_arg {
    ($args:ident, value, $arg:ident) => {
        $args.push_value($arg)?;
    };
    ($args:ident, state, $arg:ident) => {
        $args.push_state($arg);
    };
    ($args:ident, object, $arg:ident) => {
        $args.push_object($arg);
    };
}

/// A constructor parameter: value arguments take anything that serializes
/// to the argument's shape (the typed value, or a host `Value` built once
/// for a whole turn, passed as a handle); state and objects their handles.
#[doc(hidden)]
#[macro_export]
macro_rules! __arg_param {
    (value, $aty:ty) => { &(impl serde::Serialize + ?Sized) };
    (state, $aty:ty) => { &$aty };
    (object, $aty:ty) => { &impl $crate::runtime::args::ObjectArg };
}

macro_rules! gen_call_args {
    ($( ($name:ident $Pascal:ident {
        kind: $kind:ident,
        args: [$($idx:literal $ak:ident $arg:ident : $aty:ty),* $(,)?],
        returns: $ret:ty,
        doc: $doc:literal $(,)?
    }) )*) => {
        impl CallArgs {
            $(
                #[doc = concat!("Arguments of `", stringify!($name), "`: ", $doc)]
                #[allow(clippy::ptr_arg, unused_mut)]
                pub fn $name($($arg: $crate::__arg_param!($ak, $aty)),*) -> Result<CallArgs, serde_json::Error> {
                    let mut args = CallArgs::default();
                    $( $crate::__push_arg!(args, $ak, $arg); )*
                    Ok(args)
                }
            )*
        }
    };
}
bub_abi::for_each_hook!(gen_call_args);

/// What an `object` argument may be given as: an [`Object`] or an optional one.
pub trait ObjectArg {
    /// The object, if any.
    fn object(&self) -> Option<&Object>;
}

impl ObjectArg for Object {
    fn object(&self) -> Option<&Object> {
        Some(self)
    }
}

impl ObjectArg for Option<Object> {
    fn object(&self) -> Option<&Object> {
        self.as_ref()
    }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __push_named {
    ($args:ident, $hook:ident, $named:ident, value, $arg:ident) => {
        $args
            .push_value($named.get(stringify!($arg)).unwrap_or(&serde_json::Value::Null))
            .map_err(|e| e.to_string())?;
    };
    ($args:ident, $hook:ident, $named:ident, state, $arg:ident) => {
        // A copy: what the rest of the chain writes stays in it.
        let map = match $named.get(stringify!($arg)) {
            Some(serde_json::Value::Object(m)) => m.clone(),
            _ => serde_json::Map::new(),
        };
        $args.push_state(&bub_abi::TurnState::from_map(map));
    };
    ($args:ident, $hook:ident, $named:ident, object, $arg:ident) => {
        return Err(format!(
            "call_rest: `{}` takes an object (`{}`), which cannot travel as JSON; it cannot be called this way",
            $hook.name(),
            stringify!($arg)
        ));
    };
}

macro_rules! gen_from_named {
    ($( ($name:ident $Pascal:ident {
        kind: $kind:ident,
        args: [$($idx:literal $ak:ident $arg:ident : $aty:ty),* $(,)?],
        returns: $ret:ty,
        doc: $doc:literal $(,)?
    }) )*) => {
        impl CallArgs {
            /// Arguments of `hook` from a map of argument names to JSON
            /// (`bub_abi::host::call_rest`): a missing one is `null`, a
            /// `state` is a copy made from a map; hooks taking an object
            /// cannot be called so.
            #[allow(unreachable_code, unused_mut, unused_variables)]
            pub fn from_named(hook: bub_abi::HookId, named: &serde_json::Map<String, serde_json::Value>) -> Result<CallArgs, String> {
                match hook {
                    $(bub_abi::HookId::$Pascal => {
                        let mut args = CallArgs::default();
                        $( $crate::__push_named!(args, hook, named, $ak, $arg); )*
                        Ok(args)
                    })*
                }
            }
        }
    };
}
bub_abi::for_each_hook!(gen_from_named);
