//! Plugin sets (ABI 2.3): one library contributing several plugins, each
//! registered under its own name with its own hooks and markers — what a
//! bridge to plugins of another language needs (a Python venv's Bub
//! plugins, a wasm runtime's modules, an out-of-process runner's).
//!
//! A set is an ordinary [`Plugin`] type `P` that implements every hook it
//! may forward; [`PluginSet::members`] then says, once the library's own
//! instance exists, which plugins it contributes: for each a name, its own
//! `P` value (the instance its hooks receive) and the hooks it implements
//! with their markers. The host registers the members right after the
//! library, in the order given, as plugins of their own: `bub plugins
//! list`, `bub hooks` and the call order show them by name, and a member's
//! `tryfirst` outranks a normal implementation of any other plugin.
//! Export a set with `export_plugin!(P, set)`. A set that has members
//! registers no hooks under its own name (its table holds every hook it
//! can forward, for its members); give it a member for hooks of its own.
//!
//! ```no_run
//! use bub_abi::{sdk::set::{Member, PluginSet}, BoxError, HookMarker, Plugin, PluginContext, hooks::HookId};
//!
//! pub struct Bridge { answer: Option<String> }
//!
//! #[bub_abi::plugin]
//! impl Plugin for Bridge {
//!     fn new(_ctx: &PluginContext) -> Result<Self, BoxError> {
//!         Ok(Bridge { answer: None })
//!     }
//!     fn resolve_session(&self) -> Option<String> {
//!         self.answer.clone()
//!     }
//! }
//!
//! impl PluginSet for Bridge {
//!     fn members(&self) -> Result<Vec<Member<Self>>, BoxError> {
//!         Ok(vec![Member {
//!             name: "first-guest".into(),
//!             version: "1.0.0".into(),
//!             description: "a guest plugin".into(),
//!             plugin: Bridge { answer: Some("guest:1".into()) },
//!             hooks: vec![(HookId::ResolveSession, HookMarker::TryFirst)],
//!         }])
//!     }
//! }
//!
//! bub_abi::export_plugin!(Bridge, set);
//! ```

use crate::{hooks::HookId, BoxError, HookMarker, Plugin};

/// One plugin a set contributes.
pub struct Member<P> {
    /// The name it registers under (letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// Its version.
    pub version: String,
    /// One-line description.
    pub description: String,
    /// The value its hooks are called on.
    pub plugin: P,
    /// The hooks it implements, each with its marker. A hook `P` does not
    /// implement is left out (and logged).
    pub hooks: Vec<(HookId, HookMarker)>,
}

/// A [`Plugin`] that contributes more plugins (see the module docs).
pub trait PluginSet: Plugin {
    /// The members, once: right after the library's own instance is made.
    fn members(&self) -> Result<Vec<Member<Self>>, BoxError>;
}
