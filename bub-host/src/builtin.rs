//! The builtin plugin, registered first as `builtin` (like Bub's).
//!
//! It is compiled into the host and goes through the same ABI and registry as
//! every installed plugin. Its hook implementations arrive with the framework
//! (turn pipeline and runtime resources); until then it implements none.

use bub_abi::{abi::PluginModRef, BoxError, Plugin, PluginContext};

/// Bub's builtin behaviours.
pub struct Builtin;

#[bub_abi::plugin]
impl Plugin for Builtin {
    fn new(_ctx: &PluginContext) -> Result<Self, BoxError> {
        Ok(Builtin)
    }
}

bub_abi::static_plugin!(
    Builtin,
    fn builtin_module,
    name = "builtin",
    version = env!("CARGO_PKG_VERSION"),
    description = "Bub's builtin hooks"
);

/// The builtin's root module.
pub fn module() -> PluginModRef {
    builtin_module()
}
