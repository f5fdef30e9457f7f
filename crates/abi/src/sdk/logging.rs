//! Forwards a plugin's `tracing` events and panic messages to the host.
//!
//! A cdylib has its own copy of `tracing`'s global dispatcher, so without this
//! a plugin's `tracing::info!` would vanish. At init the SDK installs a small
//! subscriber that hands each event to the host's log callback, and a panic
//! hook that reports panics (with their location) the same way.

use std::fmt::Write as _;

use abi_stable::std_types::RStr;
use tracing::{
    field::{Field, Visit},
    span, Event, Level, Metadata, Subscriber,
};

use crate::abi::{HostServicesRef, LogLevel};

struct HostLog {
    host: HostServicesRef,
    plugin: String,
}

static HOST_LOG: crate::sync::SetOnce<HostLog> = crate::sync::SetOnce::new();

/// Installs the forwarding subscriber and panic hook (once per library).
pub fn install(host: HostServicesRef, plugin: &str) {
    if !HOST_LOG.set(HostLog { host, plugin: plugin.to_owned() }) {
        return;
    }
    let _ = tracing::subscriber::set_global_default(Forwarder);
    std::panic::set_hook(Box::new(|info| {
        emit(LogLevel::Error, "panic", &format!("plugin panicked: {info}"));
    }));
}

/// Sends one record to the host, if the SDK was initialised by a host.
pub fn emit(level: LogLevel, target: &str, message: &str) {
    if let Some(h) = HOST_LOG.get() {
        (h.host.log())(RStr::from_str(&h.plugin), level, RStr::from_str(target), RStr::from_str(message));
    }
}

fn to_level(level: &Level) -> LogLevel {
    match *level {
        Level::ERROR => LogLevel::Error,
        Level::WARN => LogLevel::Warn,
        Level::INFO => LogLevel::Info,
        Level::DEBUG => LogLevel::Debug,
        Level::TRACE => LogLevel::Trace,
    }
}

struct Forwarder;

impl Subscriber for Forwarder {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        match HOST_LOG.get() {
            Some(h) => (h.host.log_enabled())(to_level(metadata.level())),
            None => false,
        }
    }

    fn register_callsite(&self, _metadata: &'static Metadata<'static>) -> tracing::subscriber::Interest {
        // Ask the host each time: its filter may differ per thread (a test's
        // scoped subscriber) and may change after this callsite registers.
        tracing::subscriber::Interest::sometimes()
    }

    fn new_span(&self, _span: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _span: &span::Id, _values: &span::Record<'_>) {}

    fn record_follows_from(&self, _span: &span::Id, _follows: &span::Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut v = Collect::default();
        event.record(&mut v);
        let meta = event.metadata();
        emit(to_level(meta.level()), meta.target(), &v.finish());
    }

    fn enter(&self, _span: &span::Id) {}

    fn exit(&self, _span: &span::Id) {}
}

#[derive(Default)]
struct Collect {
    message: String,
    fields: String,
}

impl Collect {
    fn finish(self) -> String {
        if self.fields.is_empty() {
            self.message
        } else if self.message.is_empty() {
            self.fields.trim_start().to_owned()
        } else {
            format!("{}{}", self.message, self.fields)
        }
    }
}

impl Visit for Collect {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }
}
