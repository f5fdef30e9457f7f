//! A tape store that decorates whatever store the rest of the chain
//! provides (`bub_abi::host::call_rest`), writing one line per operation to
//! the file in config `log`, and failing every append while the file in
//! config `fail_while` exists (a store out of descriptors); a
//! `build_prompt` that marks the rest's prompt (unless `mark_prompts` is
//! false); and a `system_prompt` that reports what the rest of that (broadcast) chain
//! answers, to prove both kinds of call.

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
    fail_while: Option<std::path::PathBuf>,
    // `build_prompt` marks the rest's prompt (config `mark_prompts`, default true).
    mark_prompts: bool,
}

#[derive(Clone)]
struct Logged {
    inner: Object,
    log: std::path::PathBuf,
    fail_while: Option<std::path::PathBuf>,
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
            if this.fail_while.as_ref().is_some_and(|f| f.exists()) {
                this.note(&format!("refused {}", entry.kind));
                return Err("Too many open files (os error 24)".into());
            }
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
        let fail_while = ctx.config.get("fail_while").and_then(Value::as_str).map(std::path::PathBuf::from);
        let mark_prompts = ctx.config.get("mark_prompts").and_then(Value::as_bool).unwrap_or(true);
        Ok(Wrapper { log: log.into(), fail_while, mark_prompts })
    }

    #[tryfirst]
    fn provide_tape_store(&self) -> Option<Object> {
        match call_rest(self, HookId::ProvideTapeStore, json!({})).now() {
            Ok(Rest::Object(inner)) => {
                Some(Object::tape_store(Logged { inner, log: self.log.clone(), fail_while: self.fail_while.clone() }))
            }
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
        if !self.mark_prompts {
            return Ok(None);
        }
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
