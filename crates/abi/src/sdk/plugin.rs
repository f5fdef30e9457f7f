//! The [`Plugin`] trait: one default method per hook.

use serde_json::{Map, Value};

use crate::{
    abi::HookMarker,
    hooks::HookId,
    sdk::{args::hook_args, hook::Hook},
};

/// One implemented hook, as declared by `#[bub_abi::plugin]`.
#[derive(Debug, Clone, Copy)]
pub struct HookDecl {
    /// Which hook.
    pub id: HookId,
    /// Its priority marker.
    pub marker: HookMarker,
    /// Whether it is an `async fn`.
    pub is_async: bool,
}

impl HookDecl {
    /// A declaration.
    pub const fn new(id: HookId, marker: HookMarker, is_async: bool) -> Self {
        HookDecl { id, marker, is_async }
    }
}

/// What a plugin receives when it is created.
#[derive(Debug, Clone)]
pub struct PluginContext {
    /// The name the plugin is registered under (its install folder's name).
    pub name: String,
    /// The plugin's configuration (from its manifest); `{}` when none.
    pub config: Map<String, Value>,
    /// The host's home folder (`$BUB_HOME`, `~/.bub` by default).
    pub home: std::path::PathBuf,
    /// The workspace the host works in (`bub -w`, else the launch folder).
    pub workspace: std::path::PathBuf,
    /// This plugin's own data folder, inside the home (not created: create
    /// it when you first write there).
    pub data_dir: std::path::PathBuf,
}

/// Any error a constructor may return.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

macro_rules! gen_plugin_trait {
    ($( ($name:ident $Pascal:ident {
        kind: $kind:ident,
        args: [$($idx:literal $ak:ident $arg:ident : $aty:ty),* $(,)?],
        returns: $ret:ty,
        doc: $doc:literal $(,)?
    }) )*) => {
        /// A Bub plugin: implement the hooks you need.
        ///
        /// Write the impl block with [`#[bub_abi::plugin]`](crate::plugin):
        /// each hook is then a plain `fn` or an `async fn` that declares only
        /// the parameters it reads, by name (as with pluggy), and may carry
        /// `#[tryfirst]` or `#[trylast]`. The attribute generates these
        /// trait methods and [`HOOKS`](Plugin::HOOKS).
        pub trait Plugin: Sized + Send + Sync + 'static {
            /// The hooks this plugin implements, with their markers.
            const HOOKS: &'static [HookDecl] = &[];

            /// Creates the plugin. Called once, before any hook.
            fn new(ctx: &PluginContext) -> Result<Self, BoxError>;

            $(
                #[doc = $doc]
                fn $name(&'static self, args: hook_args::$name::Args<'_>) -> Hook<hook_args::$name::Return> {
                    let _ = args;
                    Hook::not_implemented()
                }
            )*
        }
    };
}
for_each_hook!(gen_plugin_trait);
