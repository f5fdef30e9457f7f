//! Random-looking numbers for ids (shell ids, spill handles, temporary
//! sessions) and backoff jitter: std's per-process random hash keys over a
//! counter and the clock. Not for secrets; callers that need uniqueness
//! check for collisions where it matters.

use std::{
    hash::{BuildHasher, Hasher},
    sync::atomic::{AtomicU64, Ordering},
};

/// A new random-looking `u64` on every call.
pub fn u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    h.write_u128(now.as_nanos());
    h.finish()
}
