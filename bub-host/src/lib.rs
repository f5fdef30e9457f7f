//! # bub-host — the Bub framework, agent and gateway over native plugins
//!
//! Data flows one way: **discover → load → register → dispatch**. The
//! first four live in [`bub_runtime`] (re-exported here under their old
//! paths): [`discovery`], [`manifest`], [`integrity`], [`install`],
//! [`loader`], [`registry`], [`runtime`] (Bub's dispatch semantics and the
//! typed entry point per hook), [`resources`], [`host`]. This crate adds:
//!
//! - [`framework`]: the turn pipeline (`process_inbound`), the `running()`
//!   scope and the app hooks;
//! - [`agent`]: Bub's agent (the loop, events, tools, tape fork, command
//!   mode, providers), which the builtin runs for every turn;
//! - [`gateway`]: `bub gateway` (channels, admission, per-session queues);
//! - [`builtin`]: Bub's builtin plugin, added to a host with
//!   [`WithBuiltin::builtin`] (or [`discover`]: the builtin, then every
//!   installed plugin).
//!
//! ```no_run
//! use bub_host::{discovery::SearchPath, HostBuilder, WithBuiltin};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // The builtin first, then every installed plugin; each is told the home
//! // and the workspace (no environment variables).
//! let host = HostBuilder::new().workspace("/srv/project").builtin().discovered(&SearchPath::from_env(None)).build();
//! for plugin in host.registry().plugins() {
//!     println!("{} {}", plugin.name, plugin.status.as_str());
//! }
//! let message = serde_json::json!({"channel": "cli", "chat_id": "42", "content": "hi"});
//! if let Some(answer) = host.runtime().resolve_session(&message).await? {
//!     println!("session {} (from {})", answer.get()?, answer.plugin());
//! }
//! # Ok(()) }
//! ```

#![warn(missing_docs)]
// No unsafe code above the runtime: the loader and the ABI hold it all.
#![forbid(unsafe_code)]

pub mod agent;
pub mod builtin;
pub mod framework;
pub mod gateway;
mod random;

// The lower layer, re-exported under its old paths (`bub_host::loader`, …).
pub use bub_runtime::{
    crash, discovery, error, host, install, integrity, loader, manifest, registry, resources, runtime, settings,
};
pub use bub_runtime::{
    CallArgs, HookFailure, Host, HostBuilder, LoadError, ModelSelection, OnboardError, Places, PluginRecord,
    PluginSource, PluginStatus, Registry, Reply, Runtime, RuntimeSettings,
};

/// The builtin on a [`HostBuilder`]: `HostBuilder::new().builtin()`.
pub trait WithBuiltin {
    /// Adds Bub's builtin plugin, registered as `builtin`, first.
    fn builtin(self) -> Self;
}

impl WithBuiltin for HostBuilder {
    fn builtin(self) -> Self {
        self.with_static("builtin", builtin::module())
    }
}

/// The usual host: `builtin`, then every plugin found on `search`.
pub fn discover(search: &discovery::SearchPath) -> Host {
    HostBuilder::new().builtin().discovered(search).build()
}
