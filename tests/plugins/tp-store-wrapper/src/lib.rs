//! A tape store that decorates whatever store the rest of the chain
//! provides (`bub_abi::host::call_rest`), writing one line per operation to
//! the file in config `log`; and a `system_prompt` that reports what the
//! rest of that (broadcast) chain answers, to prove both kinds of call.

use std::io::Write as _;

use bub_abi::{
    host::{call_rest, Rest},
    resources::{clients::TapeStoreClient, Fut, TapeStore},
    types::{TapeEntry, TapeQuery},
    BoxError, HookId, Object, Plugin, PluginContext,
};
use serde_json::{json, Value};

pub struct Wrapper {
    log: std::path::PathBuf,
}

#[derive(Clone)]
struct Logged {
    inner: Object,
    log: std::path::PathBuf,
}

impl Logged {
    fn note(&self, line: &str) {
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&self.log) {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

impl TapeStore for Logged {
    fn list_tapes(&self) -> impl Fut<Vec<String>> {
        let this = self.clone();
        async move { Ok(TapeStoreClient(&this.inner).list_tapes().await?) }
    }
    fn reset(&self, tape: String) -> impl Fut<()> {
        let this = self.clone();
        async move { Ok(TapeStoreClient(&this.inner).reset(&tape).await?) }
    }
    fn fetch_all(&self, query: TapeQuery) -> impl Fut<Vec<TapeEntry>> {
        let this = self.clone();
        async move { Ok(TapeStoreClient(&this.inner).fetch_all(&query).await?) }
    }
    fn append(&self, tape: String, entry: TapeEntry) -> impl Fut<TapeEntry> {
        let this = self.clone();
        async move {
            let stored = TapeStoreClient(&this.inner).append(&tape, &entry).await?;
            this.note(&format!("append {} {}", stored.kind, stored.id));
            Ok(stored)
        }
    }
}

#[bub_abi::plugin]
impl Plugin for Wrapper {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        let log = ctx.config.get("log").and_then(Value::as_str).ok_or("config `log` is required")?;
        Ok(Wrapper { log: log.into() })
    }

    #[tryfirst]
    fn provide_tape_store(&self) -> Option<Object> {
        match call_rest(self, HookId::ProvideTapeStore, json!({})).now() {
            Ok(Rest::Object(inner)) => Some(Object::tape_store(Logged { inner, log: self.log.clone() })),
            other => {
                tracing::warn!("nothing to wrap: {other:?}");
                None
            }
        }
    }

    /// A broadcast, sync: what the rest of the chain answers.
    #[tryfirst]
    fn system_prompt(&self) -> Option<String> {
        let count = match call_rest(self, HookId::SystemPrompt, json!({"prompt": "hi", "state": {}})).now() {
            Ok(Rest::Value(Value::Array(blocks))) => blocks.len(),
            _ => 0,
        };
        // A hook with an object argument cannot be called with JSON.
        let refused = call_rest(self, HookId::ProvideChannels, json!({})).now().is_err();
        Some(format!("[wrapper saw {count} other system prompt block(s); provide_channels refused: {refused}]"))
    }

    /// A first-result hook, async: the prompt the rest would build, marked.
    #[tryfirst]
    async fn build_prompt(&self, message: Value, session_id: String) -> Result<Option<Value>, BoxError> {
        let rest =
            call_rest(self, HookId::BuildPrompt, json!({"message": message, "session_id": session_id, "state": {}}));
        Ok(match rest.await? {
            Rest::Value(Value::String(text)) => Some(Value::String(format!("[wrapped] {text}"))),
            _ => None,
        })
    }
}

bub_abi::export_plugin!(Wrapper);

// A global allocator of its own, so the host_api tests also prove that what
// crosses call_rest is freed by its maker (see the included file).
include!("../../scripted/tagged_alloc.rs");
