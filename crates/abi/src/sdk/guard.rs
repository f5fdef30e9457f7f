//! Keeps panics on the plugin's side of the boundary.

use std::{
    any::Any,
    panic::{catch_unwind, AssertUnwindSafe},
};

use crate::abi::{ErrorKind, HookError, HookReturn};

/// The message of a panic payload.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_owned()
    }
}

/// Runs a hook body; a panic becomes a `panic` error value.
#[inline]
pub fn guard_hook(f: impl FnOnce() -> HookReturn) -> HookReturn {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => HookReturn::error(HookError::new(ErrorKind::PANIC, panic_message(&*payload))),
    }
}

/// Runs any closure; a panic becomes an error of `kind`.
pub fn guard<T>(kind: ErrorKind, f: impl FnOnce() -> Result<T, HookError>) -> Result<T, HookError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => Err(HookError::new(kind, panic_message(&*payload))),
    }
}
