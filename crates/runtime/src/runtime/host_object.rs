//! The `framework` object handed to `on_error` implementations: the door
//! a plugin uses to call back into the host while handling an error.
//!
//! Bub's builtin reports a turn's failure to the user by dispatching an
//! error outbound; in Python it reaches the framework directly. Across the
//! ABI it gets this object. Methods: `dispatch_outbound {message}` (every
//! `dispatch_outbound` implementation and the bound channel, as a turn
//! does; returns the implementations' answers).

use bub_abi::{
    resources::{FrameworkOps, Fut},
    types::Envelope,
    Object,
};
use serde_json::Value;

use super::Runtime;

pub(crate) struct FrameworkObject(pub(crate) Runtime);

impl FrameworkObject {
    pub(crate) fn object(runtime: &Runtime) -> Object {
        Object::framework(FrameworkObject(runtime.clone()))
    }
}

impl FrameworkOps for FrameworkObject {
    fn dispatch_outbound(&self, message: Envelope) -> impl Fut<Vec<Value>> {
        let rt = self.0.clone();
        async move {
            let answers = rt.deliver_outbound(&message).await?;
            Ok(answers.iter().map(|a| a.reply().parse::<Value>().unwrap_or(Value::Null)).collect())
        }
    }
}
