//! # bub-host — discovers, loads and dispatches native Bub plugins
//!
//! Data flows one way: **discover → load → register → dispatch**.
//!
//! - [`discovery`]: where installed plugins are looked for, in which order;
//! - [`manifest`]: what an installed plugin folder declares;
//! - [`integrity`]: trust and sha256 checks before a library is opened;
//! - [`install`]: installing, replacing, removing, enabling plugins;
//! - [`loader`]: opening a library and checking its ABI before running it;
//! - [`registry`]: registration order and pluggy's per-hook ordering;
//! - [`runtime`]: dispatch with Bub's semantics (`call_first`, `call_many`,
//!   sync variants, `notify_error`, the agent interception chains), and one
//!   typed entry point per hook generated from the hook table
//!   (`runtime.resolve_session(&message)`);
//! - [`framework`]: the turn pipeline (`process_inbound`), the `running()`
//!   scope and the app hooks; [`resources`]: typed handles over the objects
//!   app hooks return;
//! - [`agent`]: Bub's agent (the loop, events, tools, tape fork, command
//!   mode, providers), which the builtin runs for every turn;
//! - [`host`]: the assembly of all of the above; [`builtin`]: Bub's builtin plugin.
//!
//! ```no_run
//! use bub_host::{discovery::SearchPath, HostBuilder};
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

pub mod agent;
pub mod builtin;
pub mod crash;
pub mod discovery;
pub mod error;
pub mod framework;
pub mod gateway;
pub mod host;
mod host_services;
pub mod install;
pub mod integrity;
pub mod loader;
pub mod manifest;
mod random;
pub mod registry;
pub mod resources;
pub mod runtime;

pub use error::{HookFailure, LoadError};
pub use host::{Host, HostBuilder, Places, PluginSource};
pub use registry::{PluginRecord, PluginStatus, Registry};
pub use runtime::{CallArgs, ModelSelection, OnboardError, Reply, Runtime};
