//! The plugin-side engine behind the crate-root API: argument views, the
//! exported thunks and root module, the future bridge (plugin-local tokio),
//! panic guards and log forwarding. Plugin authors use the re-exports at
//! the crate root; these modules are public only for generated code and
//! hosts.

pub mod args;
pub mod bridge;
pub mod export;
pub mod guard;
pub mod hook;
pub mod host;
pub mod logging;
pub mod object;
pub mod plugin;
pub mod resources;
pub mod set;
pub mod state;
pub mod stream;
