//! "Did you mean": Python's `difflib.get_close_matches` (Ratcliff/Obershelp
//! similarity), which Bub's builtin uses to answer a call to a tool that
//! does not exist (behaviour 140).

/// `SequenceMatcher(None, a, b).ratio()`: `2·M / (|a| + |b|)`, M the
/// characters of the longest common block and, recursively, of the blocks
/// left and right of it.
pub fn ratio(a: &str, b: &str) -> f64 {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let total = a.len() + b.len();
    if total == 0 {
        return 1.0;
    }
    2.0 * matches(&a, &b) as f64 / total as f64
}

fn matches(a: &[char], b: &[char]) -> usize {
    let (mut best, mut at_a, mut at_b) = (0, 0, 0);
    // The longest block, earliest in `a`, then earliest in `b` (difflib's tie rule).
    let mut prev = vec![0usize; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        let mut row = vec![0usize; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            if ca == cb {
                row[j + 1] = prev[j] + 1;
                if row[j + 1] > best {
                    best = row[j + 1];
                    at_a = i + 1 - best;
                    at_b = j + 1 - best;
                }
            }
        }
        prev = row;
    }
    if best == 0 {
        return 0;
    }
    best + matches(&a[..at_a], &b[..at_b]) + matches(&a[at_a + best..], &b[at_b + best..])
}

/// Up to `n` of `candidates` with a ratio ≥ `cutoff`, best first (ties: the
/// greater string first, as `heapq.nlargest` over `(score, string)` does).
pub fn close_matches<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    n: usize,
    cutoff: f64,
) -> Vec<String> {
    let mut scored: Vec<(f64, &str)> =
        candidates.into_iter().map(|c| (ratio(word, c), c)).filter(|(s, _)| *s >= cutoff).collect();
    scored.sort_by(|x, y| y.0.total_cmp(&x.0).then_with(|| y.1.cmp(x.1)));
    scored.into_iter().take(n).map(|(_, c)| c.to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_difflib_behaviour_140() {
        assert!((ratio("abcd", "bcde") - 0.75).abs() < 1e-9);
        let tools = ["bash", "fs_read", "fs_write", "fs_edit", "tape_info", "web_fetch"];
        assert_eq!(close_matches("fs_reed", tools, 3, 0.6), ["fs_read", "fs_edit", "fs_write"]);
        assert!(close_matches("zzz", tools, 3, 0.6).is_empty());
    }
}
