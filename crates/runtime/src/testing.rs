//! In-process plugin tests: a plugin type registered directly and called
//! through the real registry and runtime, with no library to build.
//!
//! nushell's `PluginTest` is the model. A plugin crate defines its root
//! module for tests with `bub_abi::static_plugin!` (the same module
//! `export_plugin!` exports from the `cdylib`), and a test loads it here:
//! the constructor, the hook table, the argument views, panics caught at
//! the boundary and Bub's dispatch rules are all the real ones. What this
//! leaves out is `dlopen` and the ABI checks of a built library: the
//! host's own tests cover those with real `cdylib` files.
//!
//! ```
//! use bub_abi::{types::Envelope, Plugin};
//! use bub_runtime::{testing::PluginTest, CallArgs};
//!
//! #[derive(Default)]
//! pub struct Router;
//!
//! #[bub_abi::plugin]
//! impl Plugin for Router {
//!     fn resolve_session(&self, message: Envelope) -> Option<String> {
//!         Some(format!("chat:{}", message.get("chat_id")?.as_str()?))
//!     }
//! }
//!
//! bub_abi::static_plugin!(Router, fn router_module, name = "router", version = "0.1.0", description = "test");
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let test = PluginTest::new("router", router_module());
//! let message = serde_json::json!({"channel": "cli", "chat_id": "42"});
//! let answer = test.runtime().resolve_session(&message).await.unwrap().unwrap();
//! assert_eq!(answer.get().unwrap(), "chat:42");
//! # });
//! ```

use bub_abi::abi::PluginModRef;
use serde_json::{Map, Value};

use crate::{Host, HostBuilder, PluginRecord, PluginStatus, Runtime};

/// One plugin, loaded in-process, in a throw-away home.
pub struct PluginTest {
    host: Host,
    name: String,
    // Kept for the test's life: the plugin's home and workspace.
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl PluginTest {
    /// Loads `module` as `name` with no config.
    pub fn new(name: &str, module: PluginModRef) -> Self {
        PluginTest::with_config(name, module, Map::new())
    }

    /// Loads `module` as `name`, constructed with `config`; its home and
    /// workspace are fresh temporary folders.
    pub fn with_config(name: &str, module: PluginModRef, config: Map<String, Value>) -> Self {
        let folder =
            || tempfile::Builder::new().prefix("bub-plugin-test-").tempdir().expect("create a temporary folder");
        let (home, workspace) = (folder(), folder());
        // Default settings: nothing from the process environment.
        let host = HostBuilder::new()
            .home(home.path())
            .workspace(workspace.path())
            .with_static_config(name, module, config)
            .build();
        PluginTest { host, name: name.to_owned(), _dirs: (home, workspace) }
    }

    /// The host (its registry and places).
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The dispatcher, with Bub's semantics and one typed entry point per
    /// hook (`runtime().resolve_session(&message)`).
    pub fn runtime(&self) -> Runtime {
        self.host.runtime()
    }

    /// The plugin's registry record (its status says whether `new` failed).
    pub fn record(&self) -> &PluginRecord {
        self.host.registry().plugin(&self.name).expect("the plugin under test is registered")
    }

    /// Whether it loaded (its constructor succeeded).
    pub fn loaded(&self) -> bool {
        self.record().status == PluginStatus::Loaded
    }
}
