//! [`CallArgs`]: a hook's arguments, serialized once per dispatch.
//!
//! Every implementation of one dispatch receives the same JSON texts; a plugin
//! parses only the arguments it declares. The typed constructors below (one
//! per hook, generated from the hook table) are the host-side mirror of the
//! SDK's argument views.

use abi_stable::std_types::{ROption, RSlice, RStr};
use bub_abi::{
    abi::{DispatchMode, HookCall},
    Object, TurnState,
};
use serde::Serialize;

/// The most arguments any hook takes.
pub const MAX_ARGS: usize = 4;

/// The arguments of one dispatch.
#[derive(Clone, Default)]
pub struct CallArgs {
    json: Vec<String>,
    state: Option<TurnState>,
    object: Option<Object>,
}

impl std::fmt::Debug for CallArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallArgs").field("json", &self.json).field("state", &self.state.is_some()).finish()
    }
}

impl CallArgs {
    /// Arguments from JSON texts already in wire order (`state`/`object`
    /// positions hold `null`). The caller vouches that each is valid JSON.
    pub fn from_json(json: Vec<String>) -> Self {
        assert!(json.len() <= MAX_ARGS, "a hook takes at most {MAX_ARGS} arguments");
        CallArgs { json, state: None, object: None }
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

    /// Replaces the JSON text of argument `index` (agent chains re-serialize
    /// only the argument an implementation changed).
    pub fn set_json(&mut self, index: usize, json: String) {
        self.json[index] = json;
    }

    /// The JSON text of argument `index`.
    pub fn json(&self, index: usize) -> &str {
        &self.json[index]
    }

    /// The turn state, if any.
    pub fn state(&self) -> Option<&TurnState> {
        self.state.as_ref()
    }

    pub(crate) fn push_json<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), serde_json::Error> {
        self.json.push(serde_json::to_string(value)?);
        Ok(())
    }

    pub(crate) fn push_state(&mut self, state: &TurnState) {
        self.json.push("null".to_owned());
        self.state = Some(state.clone());
    }

    pub(crate) fn push_object(&mut self, object: &impl ObjectArg) {
        self.json.push("null".to_owned());
        self.object = object.object().cloned();
    }

    /// Borrowed FFI views of the JSON texts.
    pub(crate) fn views(&self) -> [RStr<'_>; MAX_ARGS] {
        let mut out = [RStr::from_str(""); MAX_ARGS];
        for (slot, s) in out.iter_mut().zip(&self.json) {
            *slot = RStr::from_str(s);
        }
        out
    }

    /// The FFI call over `views` (from [`views`](Self::views)).
    pub(crate) fn call<'a>(&'a self, views: &'a [RStr<'a>; MAX_ARGS], mode: DispatchMode) -> HookCall<'a> {
        HookCall {
            args: RSlice::from_slice(&views[..self.json.len()]),
            state: match &self.state {
                Some(s) => ROption::RSome(s.handle()),
                None => ROption::RNone,
            },
            object: match &self.object {
                Some(o) => ROption::RSome(o.handle()),
                None => ROption::RNone,
            },
            mode,
        }
    }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __push_arg {
    ($args:ident, json, $arg:ident) => {
        $args.push_json($arg)?;
    };
    ($args:ident, state, $arg:ident) => {
        $args.push_state($arg);
    };
    ($args:ident, object, $arg:ident) => {
        $args.push_object($arg);
    };
}

/// A constructor parameter: JSON arguments take anything that serializes
/// to the argument's shape (the typed value, or JSON already serialized
/// once for a whole turn as a `RawValue`); state and objects their handles.
#[doc(hidden)]
#[macro_export]
macro_rules! __arg_param {
    (json, $aty:ty) => { &(impl serde::Serialize + ?Sized) };
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
