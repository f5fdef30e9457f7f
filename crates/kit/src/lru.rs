//! A map bounded by its count and by a weight per entry, the least
//! recently kept entries dropped first.
//!
//! The host keeps per-session data between turns (the builtin store's
//! parsed tapes, the agent's context messages). A gateway serves many
//! sessions, so each such cache needs a bound in bytes, not only in
//! sessions; and dropping everything when full made every session read its
//! tape again at once. Both caches share this one mechanism.

use std::{borrow::Borrow, collections::HashMap, hash::Hash};

/// Entries with their weight, dropped least recently kept first (see
/// [`Lru::keep`]).
#[derive(Debug)]
pub struct Lru<K, V> {
    entries: HashMap<K, Slot<V>>,
    weight: u64,
    clock: u64,
}

#[derive(Debug)]
struct Slot<V> {
    value: V,
    weight: u64,
    used: u64,
}

impl<K, V> Default for Lru<K, V> {
    fn default() -> Self {
        Lru { entries: HashMap::new(), weight: 0, clock: 0 }
    }
}

impl<K: Eq + Hash + Clone, V> Lru<K, V> {
    /// The value kept for `key`.
    pub fn get<Q: Eq + Hash + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.entries.get(key).map(|s| &s.value)
    }

    /// Takes the value kept for `key` out.
    pub fn remove<Q: Eq + Hash + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        let slot = self.entries.remove(key)?;
        self.weight -= slot.weight;
        Some(slot.value)
    }

    /// The keys kept, in no order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.entries.keys()
    }

    /// The kept entries' weights, summed.
    pub fn weight(&self) -> u64 {
        self.weight
    }

    /// Keeps `value` (weighing `weight`) as the most recently kept, in
    /// place of any value kept for `key`, then drops the least recently
    /// kept others until at most `max_len` entries weigh at most
    /// `max_weight`. `value` itself stays, whatever it weighs.
    ///
    /// What it drops is handed back, for the caller to free once it has
    /// released the lock it keeps this map under: a parsed tape of 200 KB
    /// took over a millisecond to free, and other sessions' reads waited on
    /// that lock meanwhile.
    #[must_use = "the values dropped: free them outside the map's lock"]
    pub fn keep(&mut self, key: K, value: V, weight: u64, max_len: usize, max_weight: u64) -> Vec<V> {
        self.clock += 1;
        self.weight += weight;
        let mut dropped = Vec::new();
        if let Some(old) = self.entries.insert(key, Slot { value, weight, used: self.clock }) {
            self.weight -= old.weight;
            dropped.push(old.value);
        }
        while self.entries.len() > 1 && (self.entries.len() > max_len || self.weight > max_weight) {
            let Some(oldest) = self.entries.iter().min_by_key(|(_, s)| s.used).map(|(k, _)| k.clone()) else { break };
            dropped.extend(self.remove(&oldest));
        }
        dropped
    }

    /// [`keep`](Self::keep) in the map behind `lock`, what it drops freed
    /// after the lock is released: both caches keep their map under a lock
    /// every session's read takes.
    pub fn keep_in(lock: &std::sync::Mutex<Self>, key: K, value: V, weight: u64, max_len: usize, max_weight: u64) {
        // The guard goes with the statement, before `dropped` does.
        let dropped = bub_abi::sync::lock(lock).keep(key, value, weight, max_len, max_weight);
        drop(dropped);
    }
}

#[cfg(test)]
mod tests {
    use super::Lru;

    /// Bounded resources: the least recently kept go first past
    /// either bound, and what goes is handed back, not freed under the lock.
    #[test]
    fn the_least_recently_kept_go_first_past_either_bound() {
        let mut lru: Lru<&str, &str> = Lru::default();
        let names = |l: &Lru<&'static str, &'static str>| -> Vec<&'static str> {
            let mut n: Vec<&'static str> = l.keys().copied().collect();
            n.sort();
            n
        };
        for name in ["a", "b", "c"] {
            assert!(lru.keep(name, name, 10, 3, 100).is_empty());
        }
        // "a" kept again: "b" is now the least recently kept.
        assert_eq!(lru.keep("a", "a2", 10, 3, 100), ["a"]);
        assert_eq!(lru.keep("d", "d", 10, 3, 100), ["b"]);
        assert_eq!(names(&lru), ["a", "c", "d"]);
        assert_eq!(lru.weight(), 30);
        // Over the weight bound (110 > 100): the oldest go until it fits.
        assert_eq!(lru.keep("e", "e", 80, 3, 100), ["c"]);
        assert_eq!(names(&lru), ["a", "d", "e"]);
        assert_eq!(lru.weight(), 100);
        // One heavier than the bound alone stays.
        assert_eq!(lru.keep("f", "f", 500, 3, 100), ["a2", "d", "e"]);
        assert_eq!(names(&lru), ["f"]);
        assert_eq!(lru.weight(), 500);
        // Kept again under the same key: weighed once.
        assert_eq!(lru.keep("f", "f2", 40, 3, 100), ["f"]);
        assert_eq!(lru.weight(), 40);
        assert_eq!(lru.remove("f"), Some("f2"));
        assert_eq!(lru.weight(), 0);
    }
}
