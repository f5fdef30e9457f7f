//! # bub-host — the `bub` binary, and one facade over the bub-rs crates
//!
//! The crates are layered; each depends only on the ones below it:
//!
//! - [`bub_abi`]: the stable ABI and the plugin SDK;
//! - [`bub_kit`]: Bub's shared readings (envelopes, prompts, tape
//!   selection) and the helpers plugins share;
//! - [`bub_runtime`]: discover → load → register → dispatch
//!   ([`discovery`], [`manifest`], [`integrity`], [`install`], [`loader`],
//!   [`registry`], [`runtime`], [`resources`], [`host`]);
//! - [`bub_agent`]: Bub's agent as a library ([`agent`]);
//! - [`bub_framework`]: the turn pipeline and `running()` ([`framework`]);
//! - [`bub_gateway`]: `bub gateway` ([`gateway`]);
//! - [`bub_builtin`]: Bub's builtin plugin ([`builtin`]), added to a host
//!   with [`WithBuiltin::builtin`] (or [`discover`]: the builtin, then every
//!   installed plugin);
//! - this crate: the `bub` command line on top, and these re-exports, so
//!   an embedder can depend on one crate and keep the paths the docs use.
//!
//! ```no_run
//! use bub_host::{discovery::SearchPath, HostBuilder, RuntimeSettings, WithBuiltin};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // The builtin first, then every installed plugin; each is told the home
//! // and the workspace (no environment variables).
//! // Settings from the process's variables (a library reads none itself).
//! let host = HostBuilder::new()
//!     .settings(RuntimeSettings::from_env())
//!     .workspace("/srv/project")
//!     .builtin()
//!     .discovered(&SearchPath::from_env(None))
//!     .build();
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

pub use bub_agent as agent;
pub use bub_builtin as builtin;
pub use bub_framework as framework;
pub use bub_gateway as gateway;
pub use bub_kit as kit;
// The lower layer, re-exported under its old paths (`bub_host::loader`, …).
pub use bub_builtin::{discover, WithBuiltin};
pub use bub_runtime::{
    config, crash, discovery, error, files, host, install, integrity, isolation, loader, manifest, places, registry,
    resources, runtime, settings, source,
};
pub use bub_runtime::{
    CallArgs, HookFailure, Host, HostBuilder, LoadError, ModelSelection, OnboardError, Places, PluginRecord,
    PluginSource, PluginStatus, Registry, Reply, Runtime, RuntimeSettings,
};
