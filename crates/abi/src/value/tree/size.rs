//! How many bytes a value holds, roughly and bounded: what a cache weighs
//! an entry by and what the answer cap compares with, remembered for large
//! shared subtrees so a long session's context is not walked again.

use super::*;

/// Roughly the JSON size of a value made by this copy's table: string
/// bytes plus quotes, 8 per scalar, separators; counted up to just past
/// `cap` (the host's cap on a hook's answer), so an oversized answer is
/// not walked to its end.
///
/// Lists and maps of at least [`SIZE_MEMO_MIN`] entries remember their
/// size once counted in full, so a subtree shared by many answers — an
/// argument every plugin of a chain hands back unread — is walked once,
/// not once per plugin. The memo is per thread and weak: an entry holds
/// its node's allocation (not its contents) and is valid only while the
/// node lives, and a node is immutable once shared (a builder that holds
/// a remembered node alone gets a new allocation: `Arc::make_mut`).
pub(crate) fn approx_bytes(node: &Node, cap: usize) -> usize {
    match node {
        Node::Str(s) => s.len() + 2,
        Node::Array(items) => remembered(
            Arc::as_ptr(items) as usize,
            items.len(),
            || size_memo::Tree::Array(Arc::downgrade(items)),
            cap,
            || list_bytes(items, cap),
        ),
        Node::Object(map) => remembered(
            Arc::as_ptr(map) as usize,
            map.len(),
            || size_memo::Tree::Object(Arc::downgrade(map)),
            cap,
            || map_bytes(map, cap),
        ),
        Node::Handle(h) => map_bytes(&h.marker, cap),
        // Its text's length, not a walk: it may never be parsed.
        Node::Lazy(l) => l.text.len(),
        _ => 8,
    }
}

/// `count()`, from the memo for a list or map at `addr` of `len` entries
/// when it is large enough to be remembered; a full count (at most `cap`)
/// is remembered as `tree()`.
fn remembered(
    addr: usize,
    len: usize,
    tree: impl FnOnce() -> size_memo::Tree,
    cap: usize,
    count: impl FnOnce() -> usize,
) -> usize {
    if len < SIZE_MEMO_MIN {
        return count();
    }
    if let Some(size) = size_memo::get(addr) {
        return size;
    }
    let total = count();
    if total <= cap {
        size_memo::put(tree(), total);
    }
    total
}

fn list_bytes(items: &[Node], cap: usize) -> usize {
    let mut total = 2;
    for item in items {
        total += item_bytes(item, cap) + 1;
        if total > cap {
            break;
        }
    }
    total
}

/// [`approx_bytes`] of a list's or map's item: a scalar or a string counted
/// here, without the call (most of a small answer's items).
#[inline(always)]
fn item_bytes(node: &Node, cap: usize) -> usize {
    match node {
        Node::Str(s) => s.len() + 2,
        Node::Null | Node::Bool(_) | Node::Int(_) | Node::UInt(_) | Node::Float(_) => 8,
        other => approx_bytes(other, cap),
    }
}

fn map_bytes(map: &NodeMap, cap: usize) -> usize {
    let mut total = 2;
    // Each form walked as itself: the answer cap counts every small answer,
    // and the shared iterator's dispatch per entry was half of that.
    let mut add = |key: &str, item: &Node| {
        total += key.len() + 4 + item_bytes(item, cap);
        total > cap
    };
    match map {
        NodeMap::Small(v) => {
            for (key, item) in v {
                if add(key, item) {
                    break;
                }
            }
        }
        NodeMap::Static(keys, v) => {
            for (key, item) in keys.iter().zip(v) {
                if add(key, item) {
                    break;
                }
            }
        }
        NodeMap::Big(m) => {
            for (key, item) in m {
                if add(key, item) {
                    break;
                }
            }
        }
    }
    total
}

/// Lists and maps smaller than this are counted every time (cheaper than
/// a memo look-up).
const SIZE_MEMO_MIN: usize = 64;

mod size_memo {
    use std::{cell::RefCell, sync::Weak};

    use super::{Node, NodeMap};

    /// A remembered node, held weakly.
    pub(super) enum Tree {
        Array(Weak<Vec<Node>>),
        Object(Weak<NodeMap>),
    }

    impl Tree {
        fn addr(&self) -> usize {
            match self {
                Tree::Array(w) => w.as_ptr() as usize,
                Tree::Object(w) => w.as_ptr() as usize,
            }
        }

        fn alive(&self) -> bool {
            match self {
                Tree::Array(w) => w.strong_count() > 0,
                Tree::Object(w) => w.strong_count() > 0,
            }
        }
    }

    /// How many nodes a thread remembers (replaced round-robin).
    const ENTRIES: usize = 32;

    thread_local! {
        static MEMO: RefCell<(Vec<(Tree, usize)>, usize)> = const { RefCell::new((Vec::new(), 0)) };
    }

    /// The size remembered for the node at `addr`, if that node still lives.
    /// (While an entry's weak handle exists its allocation is not freed, so
    /// no other node can have that address.)
    pub(super) fn get(addr: usize) -> Option<usize> {
        MEMO.with(|m| {
            let m = m.borrow();
            m.0.iter().find(|(t, _)| t.addr() == addr).filter(|(t, _)| t.alive()).map(|(_, size)| *size)
        })
    }

    pub(super) fn put(tree: Tree, size: usize) {
        MEMO.with(|m| {
            let mut m = m.borrow_mut();
            let (entries, next) = &mut *m;
            if let Some(slot) = entries.iter_mut().find(|(t, _)| !t.alive() || t.addr() == tree.addr()) {
                *slot = (tree, size);
            } else if entries.len() < ENTRIES {
                entries.push((tree, size));
            } else {
                entries[*next] = (tree, size);
                *next = (*next + 1) % ENTRIES;
            }
        });
    }
}

#[cfg(test)]
mod size_tests {
    use crate::Value;

    fn generic(v: crate::ValueRef<'_>) -> usize {
        use crate::ValueKind;
        match v.kind() {
            ValueKind::Str => v.as_str().unwrap().len() + 2,
            ValueKind::Array => 2 + v.items().map(|i| generic(i) + 1).sum::<usize>(),
            ValueKind::Object => 2 + v.entries().map(|(k, i)| k.len() + 4 + generic(i)).sum::<usize>(),
            _ => 8,
        }
    }

    #[test]
    fn remembered_sizes_are_exact_and_die_with_their_node() {
        for round in 0..50usize {
            // A new list each round, often at a freed list's address: a
            // remembered size must never outlive its node.
            let list: Vec<serde_json::Value> = (0..(100 + round)).map(|i| serde_json::json!(i)).collect();
            let big = Value::from(&serde_json::json!({"list": list, "s": "x".repeat(round)}));
            let expected = generic(big.as_ref());
            assert_eq!(big.as_ref().approx_json_bytes(usize::MAX), expected);
            // Shared into another answer (as a chain's plugins hand it on):
            // counted from the memo, still exact.
            let mut answer = Value::object();
            answer.insert("arguments", big.clone());
            assert_eq!(answer.as_ref().approx_json_bytes(usize::MAX), expected + "arguments".len() + 4 + 2);
        }
    }

    #[test]
    fn an_answer_over_the_cap_is_counted_only_past_it() {
        let list: Vec<serde_json::Value> = (0..10_000).map(|i| serde_json::json!(i)).collect();
        let v = Value::from(&serde_json::json!(list));
        let partial = v.as_ref().approx_json_bytes(1000);
        assert!(partial > 1000 && partial < 1100, "{partial}");
        // Not remembered as if complete: a larger cap counts it all.
        assert_eq!(v.as_ref().approx_json_bytes(usize::MAX), generic(v.as_ref()));
    }
}
