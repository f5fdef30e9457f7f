//! Typed entry points, one per `first` / `many` hook, generated from the
//! hook table: `runtime.system_prompt(&prompt, &state)?` instead of a
//! hand-chosen `call_many_sync(HookId::SystemPrompt, …)` and a parse.
//!
//! Each entry point takes the hook's arguments by Bub's names, builds them
//! only when some plugin implements the hook, dispatches with the hook's
//! rule (async or sync, first or many), and hands back the non-None answers
//! as [`Answered<T>`], where `T` is the hook's return type in the table.
//! [`Answered::get`] reads the answer as `T` (a wrong type is a `TypeError`
//! naming plugin and hook); the raw reply stays available for the places
//! where Bub is lenient (`load_state` ignores a non-dict).

use std::{marker::PhantomData, sync::Arc};

use bub_abi::{
    types::{AdmitDecision, ModelOptions, StateMap},
    ErrorKind, HookError, HookId, Object, ValueKind,
};

use super::{Answer, CallArgs, Reply, Runtime};
use crate::error::HookFailure;

/// A value a hook's answer can be read as.
pub trait FromAnswer: Sized {
    /// Python's name of the type, for `TypeError` messages.
    const EXPECTED: &'static str;
    /// The answer as `Self`, or `None` when it is of another type.
    fn from_answer(answer: &Answer) -> Option<Self>;
}

/// What a hook returns, seen from the host: `Option<T>` answers `T`.
pub trait HookOutput {
    /// The type of one non-None answer.
    type Item;
}

impl<T> HookOutput for Option<T> {
    type Item = T;
}

impl HookOutput for () {
    type Item = ();
}

impl FromAnswer for () {
    const EXPECTED: &'static str = "None";
    fn from_answer(_: &Answer) -> Option<Self> {
        Some(())
    }
}

/// A string; a number or boolean reads as Python's `str()` of it (Bub
/// formats such answers into strings where it uses them).
impl FromAnswer for String {
    const EXPECTED: &'static str = "str";
    fn from_answer(answer: &Answer) -> Option<Self> {
        let Answer::Value(v) = answer else { return None };
        let v = v.as_ref();
        match v.kind() {
            ValueKind::Str => v.as_str().map(str::to_owned),
            ValueKind::Bool => Some(if v.as_bool()? { "True" } else { "False" }.to_owned()),
            ValueKind::Int | ValueKind::UInt | ValueKind::Float => Some(v.to_json()),
            _ => None,
        }
    }
}

macro_rules! serde_answers {
    ($($t:ty => $name:literal),* $(,)?) => {$(
        impl FromAnswer for $t {
            const EXPECTED: &'static str = $name;
            fn from_answer(answer: &Answer) -> Option<Self> {
                match answer {
                    Answer::Value(v) => v.deserialize().ok(),
                    _ => None,
                }
            }
        }
    )*};
}

serde_answers!(
    bool => "bool",
    serde_json::Value => "a JSON value",
    StateMap => "dict",
    ModelOptions => "ModelOptions",
    AdmitDecision => "AdmitDecision",
);

impl FromAnswer for Object {
    const EXPECTED: &'static str = "an object";
    fn from_answer(answer: &Answer) -> Option<Self> {
        match answer {
            Answer::Object(o) => Some(Object::from_handle(o.clone())),
            _ => None,
        }
    }
}

impl FromAnswer for Vec<Object> {
    const EXPECTED: &'static str = "a list of objects";
    fn from_answer(answer: &Answer) -> Option<Self> {
        match answer {
            Answer::Objects(v) => Some(v.iter().map(|o| Object::from_handle(o.clone())).collect()),
            _ => None,
        }
    }
}

/// One plugin's non-None answer to a typed entry point.
pub struct Answered<T> {
    hook: HookId,
    reply: Reply,
    _t: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for Answered<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {:?}", self.hook, self.reply)
    }
}

impl<T> Answered<T> {
    fn new(hook: HookId, reply: Reply) -> Self {
        Answered { hook, reply, _t: PhantomData }
    }

    /// The plugin that answered.
    pub fn plugin(&self) -> &Arc<str> {
        &self.reply.plugin
    }

    /// The raw reply.
    pub fn reply(&self) -> &Reply {
        &self.reply
    }
}

impl<T: FromAnswer> Answered<T> {
    /// The answer as the hook's return type; anything else is a `TypeError`
    /// naming the plugin and the hook.
    pub fn get(&self) -> Result<T, HookFailure> {
        T::from_answer(&self.reply.value).ok_or_else(|| {
            let message =
                format!("hook.{} must return {} or None, got {}", self.hook, T::EXPECTED, self.reply.type_name());
            HookFailure::new(&self.reply.plugin, self.hook, HookError::new(ErrorKind::TYPE, message))
        })
    }
}

fn unbuildable(hook: HookId, e: serde_json::Error) -> HookFailure {
    HookFailure::new("host", hook, HookError::new(ErrorKind::ARGS, format!("the arguments could not be built: {e}")))
}

#[doc(hidden)]
#[macro_export]
macro_rules! __typed_entry {
    (first, $name:ident, $Pascal:ident, $ret:ty, $doc:literal, [$($ak:ident $arg:ident : $aty:ty),*]) => {
        #[doc = concat!("`call_first(\"", stringify!($name), "\")`: ", $doc)]
        #[allow(clippy::ptr_arg)]
        pub async fn $name(
            &self,
            $($arg: $crate::__arg_param!($ak, $aty)),*
        ) -> Result<Option<Answered<<$ret as HookOutput>::Item>>, HookFailure> {
            const HOOK: HookId = HookId::$Pascal;
            if !self.has(HOOK) {
                return Ok(None);
            }
            let args = CallArgs::$name($($arg),*).map_err(|e| unbuildable(HOOK, e))?;
            Ok(self.call_first(HOOK, &args).await?.map(|r| Answered::new(HOOK, r)))
        }
    };
    (many, $name:ident, $Pascal:ident, $ret:ty, $doc:literal, [$($ak:ident $arg:ident : $aty:ty),*]) => {
        #[doc = concat!("`call_many(\"", stringify!($name), "\")`: ", $doc, " Non-None answers, in call order.")]
        #[allow(clippy::ptr_arg)]
        pub async fn $name(
            &self,
            $($arg: $crate::__arg_param!($ak, $aty)),*
        ) -> Result<Vec<Answered<<$ret as HookOutput>::Item>>, HookFailure> {
            const HOOK: HookId = HookId::$Pascal;
            if !self.has(HOOK) {
                return Ok(Vec::new());
            }
            let args = CallArgs::$name($($arg),*).map_err(|e| unbuildable(HOOK, e))?;
            Ok(self.call_many(HOOK, &args).await?.into_iter().flatten().map(|r| Answered::new(HOOK, r)).collect())
        }
    };
    (first_sync, $name:ident, $Pascal:ident, $ret:ty, $doc:literal, [$($ak:ident $arg:ident : $aty:ty),*]) => {
        #[doc = concat!("`call_first_sync(\"", stringify!($name), "\")`: ", $doc)]
        #[allow(clippy::ptr_arg)]
        pub fn $name(
            &self,
            $($arg: $crate::__arg_param!($ak, $aty)),*
        ) -> Result<Option<Answered<<$ret as HookOutput>::Item>>, HookFailure> {
            const HOOK: HookId = HookId::$Pascal;
            if !self.has(HOOK) {
                return Ok(None);
            }
            let args = CallArgs::$name($($arg),*).map_err(|e| unbuildable(HOOK, e))?;
            Ok(self.call_first_sync(HOOK, &args)?.map(|r| Answered::new(HOOK, r)))
        }
    };
    (many_sync, $name:ident, $Pascal:ident, $ret:ty, $doc:literal, [$($ak:ident $arg:ident : $aty:ty),*]) => {
        #[doc = concat!("`call_many_sync(\"", stringify!($name), "\")`: ", $doc, " Non-None answers, in call order.")]
        #[allow(clippy::ptr_arg)]
        pub fn $name(
            &self,
            $($arg: $crate::__arg_param!($ak, $aty)),*
        ) -> Result<Vec<Answered<<$ret as HookOutput>::Item>>, HookFailure> {
            const HOOK: HookId = HookId::$Pascal;
            if !self.has(HOOK) {
                return Ok(Vec::new());
            }
            let args = CallArgs::$name($($arg),*).map_err(|e| unbuildable(HOOK, e))?;
            Ok(self.call_many_sync(HOOK, &args)?.into_iter().flatten().map(|r| Answered::new(HOOK, r)).collect())
        }
    };
    // The other kinds have entry points of their own (`run_model_stream`,
    // `before_tool_call`, `notify_error`, `onboard_config`, …).
    ($other:ident, $name:ident, $Pascal:ident, $ret:ty, $doc:literal, [$($t:tt)*]) => {};
}

macro_rules! gen_typed_entries {
    ($( ($name:ident $Pascal:ident {
        kind: $kind:ident,
        args: [$($idx:literal $ak:ident $arg:ident : $aty:ty),* $(,)?],
        returns: $ret:ty,
        doc: $doc:literal $(,)?
    }) )*) => {
        impl Runtime {
            $( $crate::__typed_entry!($kind, $name, $Pascal, $ret, $doc, [$($ak $arg : $aty),*]); )*
        }
    };
}
bub_abi::for_each_hook!(gen_typed_entries);
