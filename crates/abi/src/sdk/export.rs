//! Builds a plugin's root module: the hook table, the constructor and the
//! exported symbol. Used through [`crate::export_plugin!`].

use abi_stable::std_types::{ROption, RResult, RString, RVec};
use serde_json::{Map, Value};

use crate::{
    abi::{
        ErrorKind, HookCall, HookError, HookReturn, HookSlot, HookTable, HostServicesRef, InitArgs, Instance,
        MemberHook, MemberPlugin,
    },
    hooks::{HookId, HOOK_COUNT},
    sdk::{guard, logging, plugin::PluginContext},
    Plugin,
};

/// Implemented by [`crate::export_plugin!`] for the exported type.
/// The constructor exported in the root module. `CDYLIB`: whether the
/// plugin is a separate library (then it forwards its logs and panics to the
/// host) or compiled into the host (the builtin, a plugin under test). A
/// parameter, not a trait of the type, so one type can be both: exported
/// from its `cdylib` and compiled into its own in-process tests.
pub extern "C" fn init<P: Plugin, const CDYLIB: bool>(
    host: HostServicesRef,
    args: &InitArgs<'_>,
) -> RResult<Instance, HookError> {
    let result = guard::guard(ErrorKind::INIT, || {
        let name = args.name.as_str();
        crate::sdk::host::install(host);
        if CDYLIB {
            logging::install(host, name);
            crate::sdk::bridge::mark_cdylib();
            // Every value this plugin builds belongs to the host.
            crate::value::adopt_host_table(host.values());
        }
        let config = match args.config.as_str().trim() {
            "" | "null" => Map::new(),
            text => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(m)) => m,
                Ok(other) => {
                    return Err(HookError::new(
                        ErrorKind::INIT,
                        format!("plugin config must be a JSON object, got {other}"),
                    ))
                }
                Err(e) => return Err(HookError::new(ErrorKind::INIT, format!("plugin config is not valid JSON: {e}"))),
            },
        };
        let ctx = PluginContext {
            name: name.to_owned(),
            config,
            home: args.home.as_str().into(),
            workspace: args.workspace.as_str().into(),
            data_dir: args.data_dir.as_str().into(),
        };
        let plugin = P::new(&ctx).map_err(|e| HookError::new(ErrorKind::INIT, e.to_string()))?;
        // Lives as long as the library, which is never unloaded: hooks get
        // `&'static self` and may hand it to spawned tasks.
        let plugin: &'static P = Box::leak(Box::new(plugin));
        Ok(Instance(plugin as *const P as *const std::ffi::c_void))
    });
    result.into()
}

/// The `members` of an ordinary plugin: none.
pub extern "C" fn no_members(_instance: Instance) -> RResult<RVec<MemberPlugin>, HookError> {
    RResult::ROk(RVec::new())
}

/// The `members` of a [`PluginSet`](crate::sdk::set::PluginSet): each
/// member's value leaked like an instance (it lives as long as the
/// library), its hooks the thunks of `P` with the member's markers.
pub extern "C" fn members<P: crate::sdk::set::PluginSet>(set: Instance) -> RResult<RVec<MemberPlugin>, HookError> {
    let result = guard::guard(ErrorKind::INIT, || {
        let plugin =
            instance::<P>(set).ok_or_else(|| HookError::new(ErrorKind::INIT, "the plugin set has no instance"))?;
        let members = plugin.members().map_err(|e| HookError::new(ErrorKind::INIT, e.to_string()))?;
        let mut out = RVec::new();
        for member in members {
            let mut hooks = RVec::new();
            for (id, marker) in member.hooks {
                match P::HOOKS.iter().find(|d| d.id == id) {
                    Some(decl) => hooks.push(MemberHook {
                        hook: RString::from(id.name()),
                        slot: HookSlot { call: ROption::RSome(thunk_for::<P>(id)), marker, is_async: decl.is_async },
                    }),
                    None => tracing::warn!(
                        "plugin set member {}: {} is not a hook this set implements; left out",
                        member.name,
                        id.name()
                    ),
                }
            }
            let value: &'static P = Box::leak(Box::new(member.plugin));
            out.push(MemberPlugin {
                name: RString::from(member.name),
                version: RString::from(member.version),
                description: RString::from(member.description),
                instance: Instance(value as *const P as *const std::ffi::c_void),
                hooks,
            });
        }
        Ok(out)
    });
    result.into()
}

/// The plugin behind `instance`.
fn instance<P: Plugin>(instance: Instance) -> Option<&'static P> {
    // SAFETY: the host hands back exactly the pointer this library's
    // `init::<P>` returned for this registration (a leaked `Box<P>`, never
    // freed), and only to this library's thunks for `P`.
    (!instance.0.is_null()).then(|| unsafe { &*(instance.0 as *const P) })
}

fn not_initialised() -> HookReturn {
    HookReturn::error(HookError::new(ErrorKind::INIT, "hook called before the plugin was initialised"))
}

macro_rules! gen_thunks {
    ($( ($name:ident $Pascal:ident {
        kind: $kind:ident,
        args: [$($idx:literal $ak:ident $arg:ident : $aty:ty),* $(,)?],
        returns: $ret:ty,
        doc: $doc:literal $(,)?
    }) )*) => {
        /// One `extern "C"` entry point per hook, generic over the plugin type.
        pub mod thunks {
            use super::*;
            $(
                #[doc = concat!("Entry point of `", stringify!($name), "`.")]
                pub extern "C" fn $name<P: Plugin>(call: &HookCall<'_>) -> HookReturn {
                    guard::guard_hook(|| match instance::<P>(call.instance) {
                        Some(plugin) => {
                            let args = $crate::sdk::args::hook_args::$name::Args::__new(call);
                            Plugin::$name(plugin, args).into_return(call.mode)
                        }
                        None => not_initialised(),
                    })
                }
            )*
        }

        const fn thunk_for<P: Plugin>(id: HookId) -> extern "C" fn(&HookCall<'_>) -> HookReturn {
            match id {
                $(HookId::$Pascal => thunks::$name::<P>,)*
            }
        }
    };
}
for_each_hook!(gen_thunks);

/// The hook table of plugin `P`, built at compile time from `P::HOOKS`.
pub const fn hook_table<P: Plugin>() -> HookTable {
    let mut slots = [HookSlot::EMPTY; HOOK_COUNT];
    let decls = P::HOOKS;
    let mut i = 0;
    while i < decls.len() {
        let d = decls[i];
        slots[d.id as usize] =
            HookSlot { call: ROption::RSome(thunk_for::<P>(d.id)), marker: d.marker, is_async: d.is_async };
        i += 1;
    }
    HookTable::__from_slots(&slots)
}

/// Defines a function returning `$ty`'s root module.
#[doc(hidden)]
#[macro_export]
macro_rules! __plugin_module {
    ($ty:ty, $cdylib:expr, $fn_name:ident, $name:expr, $version:expr, $description:expr $(, [$($replaces:expr),*])?) => {
        $crate::__plugin_module!(@with $crate::sdk::export::no_members, $ty, $cdylib, $fn_name, $name, $version, $description $(, [$($replaces),*])?);
    };
    (@with $members:expr, $ty:ty, $cdylib:expr, $fn_name:ident, $name:expr, $version:expr, $description:expr $(, [$($replaces:expr),*])?) => {
        #[doc(hidden)]
        pub fn $fn_name() -> $crate::abi::PluginModRef {
            use $crate::__private::{RStr, WithMetadata};
            const HOOKS: &WithMetadata<$crate::abi::HookTable> =
                &WithMetadata::new($crate::sdk::export::hook_table::<$ty>());
            const MODULE: &WithMetadata<$crate::abi::PluginMod> = &WithMetadata::new($crate::abi::PluginMod::new(
                RStr::from_str($name),
                RStr::from_str($version),
                RStr::from_str($description),
                $crate::sdk::export::init::<$ty, $cdylib>,
                $crate::abi::HookTableRef(HOOKS.static_as_prefix()),
                $crate::__private::RSlice::from_slice(&[$($(RStr::from_str($replaces)),*)?]),
                $members,
            ));
            $crate::abi::PluginModRef(MODULE.static_as_prefix())
        }
    };
}

/// Exports a [`Plugin`] type as the root module of this `cdylib`.
///
/// `export_plugin!(MyPlugin);` takes name, version and description from
/// `Cargo.toml`; override them with
/// `export_plugin!(MyPlugin, name = "x", version = "1.0.0", description = "…")`
/// (a plugin set: `export_plugin!(MySet, set, description = "…")`).
///
/// A plugin that takes over another one's job declares it with
/// `export_plugin!(MyPlugin, replaces = ["audit-log"])` (also after
/// `description = …`): `bub plugins install` records it, and the host lists
/// the replaced plugin as `replaced` instead of loading it.
#[macro_export]
macro_rules! export_plugin {
    ($ty:ty, set $(,)?) => {
        $crate::export_plugin!($ty, set, description = env!("CARGO_PKG_DESCRIPTION"));
    };
    ($ty:ty, set, description = $description:expr $(,)?) => {
        $crate::__plugin_module!(
            @with $crate::sdk::export::members::<$ty>,
            $ty,
            true,
            __bub_plugin_module,
            env!("CARGO_PKG_NAME"),
            env!("CARGO_PKG_VERSION"),
            $description
        );
        $crate::__root_symbol!($crate, __bub_plugin_module);

        /// The ABI layout fingerprint this plugin was built with (see
        /// `bub_abi::abi::LAYOUT_FINGERPRINT`).
        #[doc(hidden)]
        #[unsafe(no_mangle)]
        pub static BUB_ABI_LAYOUT_FINGERPRINT: u64 = $crate::abi::LAYOUT_FINGERPRINT;
    };
    ($ty:ty $(,)?) => {
        $crate::export_plugin!(
            $ty,
            name = env!("CARGO_PKG_NAME"),
            version = env!("CARGO_PKG_VERSION"),
            description = env!("CARGO_PKG_DESCRIPTION")
        );
    };
    ($ty:ty, replaces = [$($replaces:expr),* $(,)?] $(,)?) => {
        $crate::export_plugin!(
            $ty,
            name = env!("CARGO_PKG_NAME"),
            version = env!("CARGO_PKG_VERSION"),
            description = env!("CARGO_PKG_DESCRIPTION"),
            replaces = [$($replaces),*]
        );
    };
    ($ty:ty, name = $name:expr, version = $version:expr, description = $description:expr
     $(, replaces = [$($replaces:expr),* $(,)?])? $(,)?) => {
        $crate::__plugin_module!($ty, true, __bub_plugin_module, $name, $version, $description $(, [$($replaces),*])?);
        $crate::__root_symbol!($crate, __bub_plugin_module);

        /// The ABI layout fingerprint this plugin was built with (see
        /// `bub_abi::abi::LAYOUT_FINGERPRINT`).
        #[doc(hidden)]
        #[unsafe(no_mangle)]
        pub static BUB_ABI_LAYOUT_FINGERPRINT: u64 = $crate::abi::LAYOUT_FINGERPRINT;
    };
}

/// A plugin compiled into the host (like Bub's builtin): defines
/// `pub fn $fn_name() -> PluginModRef`, with no library and no exported symbol.
#[macro_export]
macro_rules! static_plugin {
    ($ty:ty, fn $fn_name:ident, name = $name:expr, version = $version:expr, description = $description:expr $(,)?) => {
        $crate::__plugin_module!($ty, false, $fn_name, $name, $version, $description);
    };
}
