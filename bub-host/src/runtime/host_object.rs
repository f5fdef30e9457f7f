//! The `framework` object handed to `on_error` implementations: the door
//! a plugin uses to call back into the host while handling an error.
//!
//! Bub's builtin reports a turn's failure to the user by dispatching an
//! error outbound; in Python it reaches the framework directly. Across the
//! ABI it gets this object. Methods: `dispatch_outbound {message}` (every
//! `dispatch_outbound` implementation, as a turn does; returns their answers).

use bub_abi::{HookError, HookId, Object, ObjectFuture, ObjectImpl};
use serde_json::Value;

use super::{CallArgs, Runtime};

pub(crate) struct FrameworkObject(pub(crate) Runtime);

impl FrameworkObject {
    pub(crate) fn object(runtime: &Runtime) -> Object {
        Object::new(FrameworkObject(runtime.clone()))
    }
}

impl ObjectImpl for FrameworkObject {
    fn kind(&self) -> &str {
        "framework"
    }

    fn invoke(&self, method: &str, args: Value) -> ObjectFuture {
        let rt = self.0.clone();
        match method {
            "dispatch_outbound" => Box::pin(async move {
                let message = args.get("message").cloned().unwrap_or(Value::Null);
                let call = CallArgs::dispatch_outbound(&message)
                    .map_err(|e| HookError::new(bub_abi::ErrorKind::ARGS, e.to_string()))?;
                let replies = rt
                    .call_many(HookId::DispatchOutbound, &call)
                    .await
                    .map_err(|f| HookError::new(f.error.kind, f.to_string()))?;
                Ok(Value::Array(
                    replies
                        .iter()
                        .map(|r| r.as_ref().and_then(|r| r.parse::<Value>().ok()).unwrap_or(Value::Null))
                        .collect(),
                ))
            }),
            other => bub_abi::resources::unsupported("framework", other, &["dispatch_outbound"]),
        }
    }
}
