//! Lazily parsed views of a hook's arguments.
//!
//! Each hook has a module under [`crate::args`] with an `Args` view and its
//! `Return` type. An argument is parsed only when the plugin reads it, so a
//! plugin that declares no parameters pays nothing for them.

use std::marker::PhantomData;

use abi_stable::std_types::ROption;
use serde::Deserialize;

use crate::{
    abi::{ErrorKind, HookCall, HookError},
    Object, TurnState, ValueRef,
};

/// A value argument; `S` is its standard type.
pub struct ValueArg<'a, S> {
    value: Option<ValueRef<'a>>,
    hook: &'static str,
    name: &'static str,
    _s: PhantomData<fn() -> S>,
}

impl<'a, S> ValueArg<'a, S> {
    #[doc(hidden)]
    pub fn __new(call: &'a HookCall<'a>, index: usize, hook: &'static str, name: &'static str) -> Self {
        ValueArg { value: call.args.get(index).copied(), hook, name, _s: PhantomData }
    }

    /// The host value itself (nothing read yet).
    pub fn value(&self) -> Result<ValueRef<'a>, HookError> {
        self.value.ok_or_else(|| {
            HookError::new(ErrorKind::ARGS, format!("the host passed no argument `{}` to `{}`", self.name, self.hook))
        })
    }

    /// Reads the argument as its standard type.
    pub fn get(self) -> Result<S, HookError>
    where
        S: Deserialize<'a>,
    {
        self.parse()
    }

    /// Reads the argument as any deserializable type, touching only what
    /// the type asks for ([`ValueRef::deserialize`]).
    pub fn parse<T: Deserialize<'a>>(self) -> Result<T, HookError> {
        self.value()?.deserialize().map_err(|e| {
            HookError::new(
                ErrorKind::ARGS,
                format!("argument `{}` of `{}` could not be read: {e}", self.name, self.hook),
            )
        })
    }

    /// The argument as JSON text (written by the host).
    pub fn json(&self) -> Result<String, HookError> {
        self.value().map(ValueRef::to_json)
    }
}

/// The `state` argument: the live [`TurnState`].
pub struct StateArg<'a> {
    call: &'a HookCall<'a>,
    hook: &'static str,
}

impl<'a> StateArg<'a> {
    #[doc(hidden)]
    pub fn __new(call: &'a HookCall<'a>, hook: &'static str) -> Self {
        StateArg { call, hook }
    }

    /// The state handle.
    pub fn get(self) -> Result<TurnState, HookError> {
        match self.call.state {
            ROption::RSome(h) => Ok(TurnState::from_handle(h.clone())),
            ROption::RNone => {
                Err(HookError::new(ErrorKind::ARGS, format!("the host passed no state to `{}`", self.hook)))
            }
        }
    }

    /// Same as [`get`](Self::get); lets generated code treat every argument alike.
    pub fn parse<T: From<TurnState>>(self) -> Result<T, HookError> {
        self.get().map(T::from)
    }
}

/// An object argument (the CLI app, a message handler).
pub struct ObjectArg<'a> {
    call: &'a HookCall<'a>,
    hook: &'static str,
}

impl<'a> ObjectArg<'a> {
    #[doc(hidden)]
    pub fn __new(call: &'a HookCall<'a>, hook: &'static str) -> Self {
        ObjectArg { call, hook }
    }

    /// The object.
    pub fn get(self) -> Result<Object, HookError> {
        match self.call.object {
            ROption::RSome(h) => Ok(Object::from_handle(h.clone())),
            ROption::RNone => {
                Err(HookError::new(ErrorKind::ARGS, format!("the host passed no object to `{}`", self.hook)))
            }
        }
    }

    /// The object, or `None` for an optional object the host did not pass
    /// (`Option<Object>`); lets generated code treat every argument alike.
    pub fn parse<T: FromObjectArg>(self) -> Result<T, HookError> {
        match self.call.object {
            ROption::RSome(h) => Ok(T::from_object(Object::from_handle(h.clone()))),
            ROption::RNone => T::absent(self.hook),
        }
    }
}

/// Types an object argument can be read as: [`Object`] (required) or
/// `Option<Object>` (optional: hosts of an earlier ABI minor may not pass it).
pub trait FromObjectArg: Sized {
    #[doc(hidden)]
    fn from_object(object: Object) -> Self;
    #[doc(hidden)]
    fn absent(hook: &'static str) -> Result<Self, HookError>;
}

impl FromObjectArg for Object {
    fn from_object(object: Object) -> Self {
        object
    }
    fn absent(hook: &'static str) -> Result<Self, HookError> {
        Err(HookError::new(ErrorKind::ARGS, format!("the host passed no object to `{hook}`")))
    }
}

impl FromObjectArg for Option<Object> {
    fn from_object(object: Object) -> Self {
        Some(object)
    }
    fn absent(_hook: &'static str) -> Result<Self, HookError> {
        Ok(None)
    }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __arg_accessor {
    ($hook:ident, value $idx:literal $arg:ident : $aty:ty) => {
        #[doc = concat!("Argument `", stringify!($arg), "` (a host value, read on demand).")]
        pub fn $arg(&self) -> $crate::sdk::args::ValueArg<'a, $aty> {
            $crate::sdk::args::ValueArg::__new(self.call, $idx, stringify!($hook), stringify!($arg))
        }
    };
    ($hook:ident, state $idx:literal $arg:ident : $aty:ty) => {
        #[doc = concat!("Argument `", stringify!($arg), "`: the live turn state.")]
        pub fn $arg(&self) -> $crate::sdk::args::StateArg<'a> {
            $crate::sdk::args::StateArg::__new(self.call, stringify!($hook))
        }
    };
    ($hook:ident, object $idx:literal $arg:ident : $aty:ty) => {
        #[doc = concat!("Argument `", stringify!($arg), "`: a host object.")]
        pub fn $arg(&self) -> $crate::sdk::args::ObjectArg<'a> {
            $crate::sdk::args::ObjectArg::__new(self.call, stringify!($hook))
        }
    };
}

macro_rules! gen_arg_views {
    ($( ($name:ident $Pascal:ident {
        kind: $kind:ident,
        args: [$($idx:literal $ak:ident $arg:ident : $aty:ty),* $(,)?],
        returns: $ret:ty,
        doc: $doc:literal $(,)?
    }) )*) => {
        /// Argument views and return types, one module per hook.
        pub mod hook_args {
            $(
                #[doc = $doc]
                pub mod $name {
                    #[allow(unused_imports)]
                    use super::super::*;

                    /// What the hook's SDK method returns.
                    pub type Return = $ret;

                    /// The wire index of each argument (from the hook table).
                    #[allow(non_upper_case_globals)]
                    pub mod index {
                        $(
                            #[doc = concat!("Index of `", stringify!($arg), "`.")]
                            pub const $arg: usize = $idx;
                        )*
                    }

                    #[doc = concat!("The arguments of `", stringify!($name), "`.")]
                    #[derive(Clone, Copy)]
                    pub struct Args<'a> {
                        #[allow(dead_code)]
                        call: &'a $crate::abi::HookCall<'a>,
                    }

                    impl<'a> Args<'a> {
                        #[doc(hidden)]
                        pub fn __new(call: &'a $crate::abi::HookCall<'a>) -> Self {
                            Args { call }
                        }

                        /// The raw call, for plugins that read arguments themselves.
                        pub fn raw(&self) -> &'a $crate::abi::HookCall<'a> {
                            self.call
                        }

                        $( $crate::__arg_accessor!($name, $ak $idx $arg : $aty); )*
                    }
                }
            )*
        }
    };
}
for_each_hook!(gen_arg_views);
