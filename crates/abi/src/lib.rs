//! # bub-abi — the stable plugin ABI and SDK of bub-rs
//!
//! [Bub](https://pypi.org/project/bub/) grows everything from hooks. bub-rs
//! hosts those hooks in Rust, with plugins as native `cdylib` libraries
//! loaded at run time. This crate is the contract between the two sides:
//!
//! What a plugin author uses is at the crate root:
//!
//! - [`Plugin`], [`#[plugin]`](plugin), [`export_plugin!`], [`PluginContext`],
//!   [`BoxError`]: writing and exporting a plugin;
//! - [`types`]: Bub's payloads (envelopes, prompts, LLM and tool calls,
//!   decisions, model options, …), read from the host's values;
//! - [`Value`], [`ValueRef`] ([`value`]): host-owned values, for reading an
//!   argument without copying it and building results from it;
//! - [`TurnState`]: the live turn state;
//! - [`resources`]: the object kinds a plugin provides (tape store, channel,
//!   tool, …) and the clients that call the host's objects;
//! - [`Hook`], [`HookError`], [`ErrorKind`]: for hand-written hooks;
//! - [`hooks`]: the hook table, the single list from which the ABI slots,
//!   the [`Plugin`] trait, the argument views, the host's entry points and
//!   `bub hooks` are generated.
//!
//! The FFI types (`abi`) and the engine (`sdk`: thunks, future bridge, panic
//! guards, log forwarding) are for hosts and generated code; they are public
//! only because hosts and macros need them, and hidden from these docs.
//!
//! What is not part of the contract lives in `bub-kit`, versioned on its
//! own: reading envelopes and prompts as Bub does, tape selection and fuzzy
//! search, channel helpers, private files under `$BUB_HOME`, durations from
//! untrusted numbers. A plugin that needs none of it compiles none of it.
//!
//! The crate version is the ABI version ([`ABI_VERSION`], 2.9.0), separate
//! from the host's version: a plugin built against `bub-abi 2.x` loads in
//! every host speaking ABI 2.y; hooks added in a later minor are simply
//! absent from it. `docs/plugin-guide.md` says what changed from ABI 1 and
//! how to port a plugin.
//!
//! ## A complete plugin
//!
//! `Cargo.toml`: `crate-type = ["cdylib"]`, with `bub-abi` (and `tokio` 1.x
//! if the plugin awaits timers or sockets) as dependencies. Then:
//!
//! ```
//! use bub_abi::{types::{Envelope, Prompt}, BoxError, Plugin, PluginContext, TurnState};
//!
//! pub struct Greeter {
//!     greeting: String,
//! }
//!
//! #[bub_abi::plugin]
//! impl Plugin for Greeter {
//!     fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
//!         let greeting = ctx.config.get("greeting").and_then(|v| v.as_str()).unwrap_or("hello");
//!         Ok(Greeter { greeting: greeting.to_owned() })
//!     }
//!
//!     /// One session per chat. A hook declares only the arguments it reads.
//!     #[tryfirst]
//!     fn resolve_session(&self, message: Envelope) -> Option<String> {
//!         let chat = message.get("chat_id")?.as_str()?;
//!         Some(format!("greeter:{chat}"))
//!     }
//!
//!     /// An `async fn` hook may use tokio freely; `tracing` reaches the host.
//!     async fn run_model(&self, prompt: Prompt, state: TurnState) -> Result<Option<String>, BoxError> {
//!         tokio::time::sleep(std::time::Duration::from_millis(1)).await;
//!         state.set("greeted", &true)?;
//!         tracing::info!(%prompt, "answering");
//!         Ok(Some(format!("{}: {prompt}", self.greeting)))
//!     }
//! }
//!
//! bub_abi::export_plugin!(Greeter);
//! # fn main() {}
//! ```
//!
//! The smallest plugin: a `Default` type needs no `new` (it reads no config).
//!
//! ```
//! #[derive(Default)]
//! pub struct Hello;
//!
//! #[bub_abi::plugin]
//! impl bub_abi::Plugin for Hello {
//!     fn system_prompt(&self) -> Option<String> {
//!         Some("Greet the user first.".into())
//!     }
//! }
//!
//! bub_abi::export_plugin!(Hello);
//! # fn main() {}
//! ```
//!
//! Without a `new`, the type must be `Default`:
//!
//! ```compile_fail
//! pub struct Configured(String);
//!
//! #[bub_abi::plugin]
//! impl bub_abi::Plugin for Configured {
//!     fn system_prompt(&self) -> Option<String> {
//!         Some(self.0.clone())
//!     }
//! }
//! # fn main() {}
//! ```
//!
//! Panics in a hook, a constructor or a future never cross the boundary:
//! they become errors naming the plugin and hook on the host's side.
//!
//! A hook parameter must be one of the hook's arguments (spec behaviour 14:
//! an unknown parameter is refused at registration — here, at compile time):
//!
//! ```compile_fail
//! use bub_abi::{BoxError, Plugin, PluginContext};
//!
//! pub struct Typo;
//!
//! #[bub_abi::plugin]
//! impl Plugin for Typo {
//!     fn new(_ctx: &PluginContext) -> Result<Self, BoxError> {
//!         Ok(Typo)
//!     }
//!
//!     fn resolve_session(&self, mesage: String) -> Option<String> {
//!         Some(mesage)
//!     }
//! }
//! # fn main() {}
//! ```

//! A sync-only hook (Bub's `call_*_sync`: `system_prompt`, the `provide_*`
//! resource hooks, `register_cli_commands`, `onboard_config`) is never
//! awaited, so an `async fn` there is refused at compile time:
//!
//! ```compile_fail
//! use bub_abi::{BoxError, Plugin, PluginContext};
//!
//! pub struct Slow;
//!
//! #[bub_abi::plugin]
//! impl Plugin for Slow {
//!     fn new(_ctx: &PluginContext) -> Result<Self, BoxError> {
//!         Ok(Slow)
//!     }
//!
//!     async fn system_prompt(&self) -> Option<String> {
//!         Some("never awaited".into())
//!     }
//! }
//! # fn main() {}
//! ```

#![warn(missing_docs)]
// Unsafe code lives only at the FFI boundary (`abi`, `value`, the export
// thunks in `sdk`), each block with its `// SAFETY:` reasoning.
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[macro_use]
pub mod hooks;
#[doc(hidden)]
#[allow(unsafe_code)]
pub mod abi;
#[doc(hidden)]
#[allow(unsafe_code)]
pub mod sdk;
pub mod sync;
pub mod types;
#[allow(unsafe_code)]
pub mod value;

pub use abi::{ErrorKind, HookError, HookMarker, ABI_VERSION};
pub use hooks::{HookId, HookKind, HOOK_COUNT};
pub use sdk::host;
pub use sdk::resources;
pub use sdk::{
    args::hook_args as args,
    hook::{Hook, IntoHookValue, RawJson, ToHookValue},
    object::{Object, ObjectFuture, ObjectImpl, ValueFuture},
    plugin::{BoxError, HookDecl, Plugin, PluginContext},
    state::TurnState,
    stream::{EventSender, ModelStream, StreamClosed},
};
pub use value::{Value, ValueKind, ValueRef};

#[doc(hidden)]
pub use bub_abi_macros::__root_symbol;
pub use bub_abi_macros::plugin;

#[doc(hidden)]
pub use abi_stable;
#[doc(hidden)]
pub use async_ffi;
pub use serde_json;
pub use tokio;
pub use tracing;

#[doc(hidden)]
pub mod __private {
    pub use abi_stable::{
        library::{__call_root_module_loader, CheckTypeLayout, LibHeader, RootModuleResult},
        prefix_type::WithMetadata,
        std_types::{RSlice, RStr},
    };
}
