//! A message a platform delivers twice runs once.
//!
//! Platforms deliver again when they are not sure a message arrived:
//! Telegram repeats an update whose webhook answer was late or that a
//! poller never confirmed (after a `kill -9`, or a restart), for up to 24
//! hours; Slack retries an event; Discord's read-back after a restart may
//! meet a message that was already taken. A channel names each delivery
//! it hands over in `idempotency_keys` (`["telegram:update:4711"]`; a
//! debounced batch carries every key of its messages), and a turn whose
//! keys were all delivered before runs nothing: no model call, no
//! outbound, `save_state` still told (a store's session lock is released
//! there).
//!
//! The keys are kept with the session's tape, in its sidecar
//! `<tape>__sidecar__delivered` (one event `delivered {keys}` a turn),
//! through the store: they survive a restart, and every gateway on one
//! PostgreSQL reads the same ones. The check runs after `load_state`,
//! where tape-postgres holds the session's lock, so two gateways given
//! the same update cannot both run it. The sidecar keeps two days of keys
//! (more than Telegram's 24 hours) and at most [`KEEP`] entries; older
//! ones are dropped when it grows past [`PRUNE_AT`].
//!
//! A key is recorded when its turn starts, so a gateway killed during the
//! turn does not run it again when the platform repeats it: the dead
//! gateway's journal keeps the message (`unprocessed.jsonl`).

use bub_abi::types::{Envelope, TapeEntry, TapeQuery};
use serde_json::{json, Map, Value};

use crate::Framework;

/// The envelope field naming a delivery.
pub const KEYS_FIELD: &str = "idempotency_keys";

/// The sidecar that keeps the delivered keys.
pub const SIDECAR: &str = "delivered";

/// Entries the sidecar may reach before old ones are dropped.
pub const PRUNE_AT: usize = 2048;

/// Entries kept at most when it is pruned (those of the last two days).
pub const KEEP: usize = 1024;

/// How long a key is kept at least: Telegram keeps an update 24 hours.
const WINDOW: std::time::Duration = std::time::Duration::from_secs(48 * 3600);

/// The keys `message` carries (none: the message is not deduplicated).
pub fn keys_of(message: &Envelope) -> Vec<String> {
    match message.get(KEYS_FIELD) {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        Some(Value::String(one)) => vec![one.clone()],
        _ => Vec::new(),
    }
}

fn entry_keys(entry: &TapeEntry) -> impl Iterator<Item = &str> {
    entry
        .payload
        .get("data")
        .and_then(|d| d.get("keys"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

impl Framework {
    /// Whether a turn of `session_id` with `keys` is a repeat (each key was
    /// delivered before); if not, the keys are recorded. Without a store,
    /// or when it fails, the turn runs (a repeat is better than a loss).
    pub(crate) async fn is_repeat(&self, session_id: &str, keys: &[String]) -> bool {
        let Some(store) = self.get_tape_store() else { return false };
        let tape = bub_agent::tape::sidecar_tape_name(
            &bub_agent::tape::session_tape_name(&self.workspace, session_id),
            SIDECAR,
        );
        let store = bub_agent::tape::Store::Host(store);
        let query = TapeQuery { tape: tape.clone(), kinds: vec!["event".into()], ..Default::default() };
        let entries = match store.fetch_all(&query).await {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(target: "bub::framework", "session {session_id}: cannot read its delivered messages ({e}); the turn runs");
                return false;
            }
        };
        let seen: std::collections::HashSet<&str> = entries.iter().flat_map(entry_keys).collect();
        if keys.iter().all(|k| seen.contains(k.as_str())) {
            tracing::info!(target: "bub::framework", "session {session_id}: {keys:?} delivered again; already run, so nothing runs");
            return true;
        }
        if entries.len() >= PRUNE_AT {
            prune(&store, &tape, entries).await;
        }
        let mut meta = Map::new();
        meta.insert("context".into(), Value::Bool(false));
        let record = bub_agent::tape::entry("event", json!({"name": "delivered", "data": {"keys": keys}}), meta);
        if let Err(e) = store.append(&tape, &record).await {
            tracing::warn!(target: "bub::framework", "session {session_id}: cannot record delivery {keys:?} ({e}); a repeat would run again");
        }
        false
    }
}

/// Keeps the entries of the last [`WINDOW`], at most [`KEEP`] of them.
async fn prune(store: &bub_agent::tape::Store, tape: &str, entries: Vec<TapeEntry>) {
    let cutoff = jiff::Timestamp::now() - jiff::SignedDuration::try_from(WINDOW).unwrap_or_default();
    let recent: Vec<TapeEntry> =
        entries.into_iter().filter(|e| e.date.parse::<jiff::Timestamp>().map_or(true, |t| t >= cutoff)).collect();
    let kept = recent[recent.len().saturating_sub(KEEP)..].to_vec();
    let reset = store.reset(tape).await;
    let appended = match reset {
        Ok(()) => store.append_many(tape, &kept).await.map(|_| ()),
        Err(e) => Err(e),
    };
    if let Err(e) = appended {
        tracing::warn!(target: "bub::framework", "pruning the delivered messages of {tape}: {e}");
    }
}
