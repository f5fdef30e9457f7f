//! The services the host hands every plugin at initialisation.
//!
//! A log sink: a plugin's `tracing` events and panic messages arrive here
//! and are re-emitted on the host's subscriber under the target
//! `bub::plugin`, with the plugin's name as a field. And the host's value
//! functions, with which plugins read their arguments and build results.

use std::panic::{catch_unwind, AssertUnwindSafe};

use abi_stable::{prefix_type::WithMetadata, std_types::RStr};
use bub_abi::abi::{HostServices, HostServicesRef, LogLevel};
use tracing::Level;

const SERVICES: &WithMetadata<HostServices> = &WithMetadata::new(HostServices {
    abi_version: RStr::from_str(bub_abi::ABI_VERSION),
    log_enabled,
    log,
    values: bub_abi::value::own_table(),
    call_rest: crate::runtime::rest::call_rest,
});

/// The host services handed to plugins.
pub fn host_services() -> HostServicesRef {
    HostServicesRef(SERVICES.static_as_prefix())
}

extern "C" fn log_enabled(level: LogLevel) -> bool {
    // No unwinding into plugin frames, whatever the subscriber does.
    catch_unwind(|| match level {
        LogLevel::Error => tracing::enabled!(target: "bub::plugin", Level::ERROR),
        LogLevel::Warn => tracing::enabled!(target: "bub::plugin", Level::WARN),
        LogLevel::Info => tracing::enabled!(target: "bub::plugin", Level::INFO),
        LogLevel::Debug => tracing::enabled!(target: "bub::plugin", Level::DEBUG),
        LogLevel::Trace => tracing::enabled!(target: "bub::plugin", Level::TRACE),
    })
    .unwrap_or(false)
}

extern "C" fn log(plugin: RStr<'_>, level: LogLevel, target: RStr<'_>, message: RStr<'_>) {
    let (plugin, target, message) = (plugin.as_str(), target.as_str(), message.as_str());
    let _ = catch_unwind(AssertUnwindSafe(|| match level {
        LogLevel::Error => tracing::error!(target: "bub::plugin", plugin, source = target, "{message}"),
        LogLevel::Warn => tracing::warn!(target: "bub::plugin", plugin, source = target, "{message}"),
        LogLevel::Info => tracing::info!(target: "bub::plugin", plugin, source = target, "{message}"),
        LogLevel::Debug => tracing::debug!(target: "bub::plugin", plugin, source = target, "{message}"),
        LogLevel::Trace => tracing::trace!(target: "bub::plugin", plugin, source = target, "{message}"),
    }));
}
