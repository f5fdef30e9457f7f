//! Folds over a session tape kept between steps and turns.
//!
//! The agent's context and the session's settings are both folds over the
//! session tape: re-reading the tape for them every step made a step's cost
//! grow with the tape. A [`Folds`] keeps each tape's fold with the last
//! entry folded; the next read asks the store only for the entries from
//! that one (`TapeQuery::after_id`), checks that it is still there
//! unchanged (same id, kind and date: a tape reset or rewritten by another
//! process shows there, and the fold starts over from a full read), and
//! folds the new ones.

use bub_abi::types::{TapeEntry, TapeQuery};
use bub_kit::lru::Lru;

use super::{
    tape::{FetchedEntry, Store},
    AgentError,
};

/// An entry as a later read recognizes it.
#[derive(Debug, Clone, PartialEq)]
struct Stamp {
    id: u64,
    kind: String,
    date: String,
}

impl Stamp {
    fn of(e: &TapeEntry) -> Stamp {
        Stamp { id: e.id, kind: e.kind.clone(), date: e.date.clone() }
    }
}

struct Kept<S> {
    last: Stamp,
    state: S,
}

/// One fold per key (a tape, and what is read of it), bounded: past `tapes`
/// folds, or `weight` over `budget` in all, the least recently used are
/// dropped, so a gateway serving many long sessions re-reads the oldest
/// rather than grows (or drops them all at once and re-reads every one).
pub(crate) struct Folds<S> {
    kept: std::sync::Mutex<Lru<String, Kept<S>>>,
    tapes: usize,
    budget: usize,
    weight: fn(&S) -> usize,
}

/// How a fold treats one entry.
pub(crate) enum Step {
    /// Fold it in.
    Push,
    /// Start the fold afresh after it (an anchor the context starts after).
    Restart,
}

impl<S: Clone + Default> Folds<S> {
    pub(crate) fn new(tapes: usize, budget: usize, weight: fn(&S) -> usize) -> Folds<S> {
        Folds { kept: Default::default(), tapes, budget, weight }
    }

    /// The fold of `full`'s entries: kept and brought up to date (the
    /// entries after the last one folded, of `full`'s kinds, each through
    /// `step` then `push`), or folded afresh from `full` (which leaves out
    /// what precedes a restart itself).
    pub(crate) async fn follow(
        &self,
        store: &Store,
        key: String,
        full: &TapeQuery,
        step: impl Fn(&TapeEntry) -> Step,
        push: impl Fn(&mut S, &FetchedEntry),
    ) -> Result<S, AgentError> {
        // Taken out while it is brought up to date: a concurrent read of
        // the same tape (two runs of one session) reads in full instead.
        let taken = bub_abi::sync::lock(&self.kept).remove(&key);
        if let Some(mut kept) = taken {
            let since = TapeQuery {
                tape: full.tape.clone(),
                kinds: full.kinds.clone(),
                after_id: Some(kept.last.id.saturating_sub(1)),
                ..Default::default()
            };
            if let Ok(mut entries) = store.fetch_all_hosted(&since).await {
                // A store built before ABI 2.5 answers the whole tape.
                entries.retain(|e| e.entry.id >= kept.last.id);
                if entries.first().map(|e| Stamp::of(&e.entry)).as_ref() == Some(&kept.last) {
                    for e in &entries[1..] {
                        match step(&e.entry) {
                            Step::Push => push(&mut kept.state, e),
                            Step::Restart => kept.state = S::default(),
                        }
                    }
                    kept.last = Stamp::of(&entries.last().expect("the first entry is there").entry);
                    let state = kept.state.clone();
                    self.put(key, kept);
                    return Ok(state);
                }
            }
        }
        let entries = store.fetch_all_hosted(full).await?;
        let mut state = S::default();
        for e in &entries {
            push(&mut state, e);
        }
        // Empty (the tape ends with the anchor, or holds nothing): nothing
        // to resume from, so the next read is a full one again.
        if let Some(last) = entries.last() {
            self.put(key, Kept { last: Stamp::of(&last.entry), state: state.clone() });
        }
        Ok(state)
    }

    fn put(&self, key: String, kept: Kept<S>) {
        let weight = (self.weight)(&kept.state);
        if weight > self.budget {
            return;
        }
        Lru::keep_in(&self.kept, key, kept, weight as u64, self.tapes, self.budget as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bounded resources: folds past the tape count or the
    /// weight budget drop the least recently used first, not all at once.
    #[tokio::test]
    async fn folds_drop_the_least_recently_used_past_their_bounds() {
        let store = Store::memory();
        for tape in ["a", "b", "c", "d"] {
            let entry = TapeEntry { kind: "message".into(), ..Default::default() };
            store.append(tape, &entry).await.unwrap();
        }
        // Each fold weighs 10 per entry folded: the budget holds 3 of them.
        let folds: Folds<usize> = Folds::new(3, 30, |n| n * 10);
        let follow = |tape: &'static str| {
            let (folds, store) = (&folds, &store);
            async move {
                let full = TapeQuery { tape: tape.into(), ..Default::default() };
                folds.follow(store, tape.into(), &full, |_| Step::Push, |n, _| *n += 1).await.unwrap()
            }
        };
        let kept = |folds: &Folds<usize>| {
            let mut k: Vec<String> = bub_abi::sync::lock(&folds.kept).keys().cloned().collect();
            k.sort();
            k
        };
        for tape in ["a", "b", "c"] {
            assert_eq!(follow(tape).await, 1);
        }
        assert_eq!(kept(&folds), ["a", "b", "c"]);
        // "a" read again: "b" is the least recently used when "d" comes.
        follow("a").await;
        follow("d").await;
        assert_eq!(kept(&folds), ["a", "c", "d"]);
    }
}
