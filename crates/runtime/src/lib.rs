//! # bub-runtime — load and dispatch native Bub plugins
//!
//! The lowest layer of the host, on `bub-abi` only: everything needed to
//! find installed plugins, load them safely and call their hooks with Bub's
//! semantics — no CLI, no terminal, no HTTP client, no agent. An embedder
//! or a plugin's tests that only load and dispatch depend on this crate;
//! the framework (`bub_host::framework`), the builtin and the `bub` binary
//! sit above it.
//!
//! Data flows one way: **discover → load → register → dispatch**.
//!
//! - [`discovery`]: where installed plugins are looked for, in which order;
//! - [`manifest`]: what an installed plugin folder declares;
//! - [`integrity`]: trust and sha256 checks before a library is opened;
//! - [`install`]: installing, replacing, removing, enabling plugins, and
//!   the settings file they are configured from;
//! - [`loader`]: opening a library and checking its ABI before running it;
//! - [`registry`]: registration order and pluggy's per-hook ordering;
//! - [`runtime`]: dispatch with Bub's semantics (`call_first`, `call_many`,
//!   sync variants, `notify_error`, the agent interception chains), and one
//!   typed entry point per hook generated from the hook table
//!   (`runtime.resolve_session(&message)`);
//! - [`resources`]: typed handles over the objects app hooks return;
//! - [`host`]: the assembly of all of the above; [`crash`]: the breadcrumb
//!   that names the plugin a fatal signal came from.
//!
//! ```no_run
//! use bub_runtime::{discovery::SearchPath, HostBuilder};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // Every installed plugin (no builtin here: `bub_host` adds it); each is
//! // told the home and the workspace (no environment variables).
//! let host = HostBuilder::new().workspace("/srv/project").discovered(&SearchPath::from_env(None)).build();
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
// Unsafe code lives only where it must (the loader, the crash handler, the
// watchdog's label reads), each block with its `// SAFETY:` reasoning.
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod config;
#[allow(unsafe_code)]
pub mod crash;
pub mod discovery;
pub mod error;
pub mod files;
pub mod host;
mod host_services;
pub mod install;
pub mod integrity;
pub mod isolation;
mod load;
#[allow(unsafe_code)]
pub mod loader;
pub mod manifest;
mod members;
pub mod places;
pub mod registry;
pub mod resources;
pub mod runtime;
pub mod settings;
pub mod source;
pub mod testing;

pub use error::{HookFailure, LoadError};
pub use host::{Host, HostBuilder, Places, PluginSource};
pub use registry::{PluginRecord, PluginStatus, Registry};
pub use runtime::{CallArgs, ModelSelection, OnboardError, Reply, Runtime};
pub use settings::RuntimeSettings;
