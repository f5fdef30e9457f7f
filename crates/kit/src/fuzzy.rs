//! Fuzzy tape search: RapidFuzz's `WRatio` over the words of an entry, as
//! Bub's builtin store (`FuzzyFileTapeStore`) scores it, with two rules of
//! our own that keep it to the words a user meant.
//!
//! Bub matches a text query fuzzily when `process.extractOne(query, words,
//! scorer=WRatio, score_cutoff=80)` finds a word (or a run of as many words
//! as the query has) close enough. Here a word shorter than three
//! characters takes no part (on either side), and a candidate must share a
//! trigram with the query ([`FuzzyQuery`] says why). The edit metric is the
//! `rapidfuzz` crate's `fuzz::ratio` (the same normalized Indel similarity
//! RapidFuzz's Python package computes); `WRatio` and its partial/token
//! helpers are ported from RapidFuzz's pure-Python reference (`fuzz_py.py`,
//! MIT), score cutoffs left out as they only make it faster. The unit tests
//! hold scores computed by Python RapidFuzz 3 so the port cannot drift.

use std::collections::BTreeSet;

/// Bub's `MIN_FUZZY_QUERY_LENGTH`, here per word: a word shorter than
/// this (in the query or in an entry) never takes part in a fuzzy match.
/// One- and two-letter words are in nearly every text, and WRatio finds
/// them in nearly every query.
const MIN_WORD_CHARS: usize = 3;
/// Bub's `MIN_FUZZY_SCORE`.
pub const MIN_SCORE: f64 = 80.0;
/// Bub's `MAX_FUZZY_CANDIDATES`: the words (then runs of words) of an
/// entry a query is compared with.
const MAX_CANDIDATES: usize = 128;

/// Whether `query` (already trimmed and lower-cased) fuzzily matches `text`
/// (lower-cased).
pub fn is_fuzzy_match(query: &str, text: &str) -> bool {
    FuzzyQuery::new(query).is_some_and(|q| q.score(text).is_some())
}

/// A query prepared once for a search over many entries: its words of
/// three characters or more, joined as the phrase WRatio compares; how
/// many there are; and their trigrams.
///
/// A candidate (a word of an entry, or a run of as many words as the
/// query has) is compared only when it shares a trigram (three characters
/// in a row of one word) with the query. WRatio can pass a word that
/// shares none (`abcde` and `abxde` score 80), but such a match is a
/// coincidence of letters rather than the word the user meant, and the
/// rule is what lets a store's trigram index offer every entry a fuzzy
/// match can find: the index and a scan then answer alike.
pub struct FuzzyQuery {
    phrase: Vec<char>,
    window: usize,
    trigrams: std::collections::HashSet<[char; 3]>,
}

impl FuzzyQuery {
    /// `query` trimmed and lower-cased; `None` when it can never fuzzily
    /// match (no word of three characters or more).
    pub fn new(query: &str) -> Option<FuzzyQuery> {
        let query_words = long_words(query);
        if query_words.is_empty() {
            return None;
        }
        let trigrams = query_words.iter().flat_map(|w| trigrams_of(w)).collect();
        Some(FuzzyQuery { phrase: query_words.join(" ").chars().collect(), window: query_words.len(), trigrams })
    }

    /// The query's trigrams, each once, in the order of its words: what
    /// every fuzzy match shares with its entry, for a trigram index to
    /// offer candidates by.
    pub fn trigrams(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let phrase: String = self.phrase.iter().collect();
        for word in phrase.split(' ') {
            for t in trigrams_of(word) {
                let t: String = t.iter().collect();
                if !out.contains(&t) {
                    out.push(t);
                }
            }
        }
        out
    }

    /// The best WRatio (80 or more) of a candidate of lower-cased `text`,
    /// or None when none is close enough.
    pub fn score(&self, text: &str) -> Option<f64> {
        let source = long_words(text);
        let shares = |w: &str| trigrams_of(w).any(|t| self.trigrams.contains(&t));
        let mut candidates: Vec<String> =
            source.iter().take(MAX_CANDIDATES).filter(|w| shares(w)).map(|w| w.to_string()).collect();
        let mut considered = source.len().min(MAX_CANDIDATES);
        if self.window > 1 && considered < MAX_CANDIDATES {
            for run in source.windows(self.window) {
                if run.iter().any(|w| shares(w)) {
                    candidates.push(run.join(" "));
                }
                considered += 1;
                if considered >= MAX_CANDIDATES {
                    break;
                }
            }
        }
        let mut best: Option<f64> = None;
        for c in candidates {
            let score = wratio_chars(&self.phrase, &c.chars().collect::<Vec<_>>());
            if score >= MIN_SCORE && best.is_none_or(|b| score > b) {
                best = Some(score);
                if score >= 100.0 {
                    break;
                }
            }
        }
        best
    }
}

/// Bub's `WORD_PATTERN` (`[a-z0-9_/-]+`): the words of lower-cased text.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '/' | '-')))
        .filter(|w| !w.is_empty())
}

/// The words a fuzzy match compares: those of three characters or more.
fn long_words(text: &str) -> Vec<&str> {
    words(text).filter(|w| w.len() >= MIN_WORD_CHARS).collect()
}

/// A word's trigrams (its characters are ASCII: see [`words`]).
fn trigrams_of(word: &str) -> impl Iterator<Item = [char; 3]> + '_ {
    let chars: Vec<char> = word.chars().collect();
    (0..chars.len().saturating_sub(2)).map(move |i| [chars[i], chars[i + 1], chars[i + 2]])
}

/// RapidFuzz `fuzz.ratio`, 0–100.
fn ratio(a: &[char], b: &[char]) -> f64 {
    rapidfuzz::fuzz::ratio(a.iter().copied(), b.iter().copied()) * 100.0
}

/// RapidFuzz `fuzz.WRatio`, 0–100.
pub fn wratio(a: &str, b: &str) -> f64 {
    wratio_chars(&a.chars().collect::<Vec<_>>(), &b.chars().collect::<Vec<_>>())
}

fn wratio_chars(a: &[char], b: &[char]) -> f64 {
    const UNBASE_SCALE: f64 = 0.95;
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let (l1, l2) = (a.len() as f64, b.len() as f64);
    let len_ratio = if l1 > l2 { l1 / l2 } else { l2 / l1 };
    let end = ratio(a, b);
    if len_ratio < 1.5 {
        return end.max(token_ratio(a, b) * UNBASE_SCALE);
    }
    let partial_scale = if len_ratio <= 8.0 { 0.9 } else { 0.6 };
    let end = end.max(partial_ratio(a, b) * partial_scale);
    end.max(partial_token_ratio(a, b) * UNBASE_SCALE * partial_scale)
}

/// RapidFuzz `fuzz.partial_ratio`: the best ratio of the shorter string
/// against any alignment in the longer one.
fn partial_ratio(s1: &[char], s2: &[char]) -> f64 {
    if s1.is_empty() && s2.is_empty() {
        return 100.0;
    }
    let (shorter, longer) = if s1.len() <= s2.len() { (s1, s2) } else { (s2, s1) };
    let mut best = partial_impl(shorter, longer);
    if best != 100.0 && s1.len() == s2.len() {
        best = best.max(partial_impl(longer, shorter));
    }
    best
}

/// `_partial_ratio_impl` (`s1` no longer than `s2`): prefixes, full
/// windows, then suffixes of `s2`, skipping windows whose edge character
/// `s1` lacks.
fn partial_impl(s1: &[char], s2: &[char]) -> f64 {
    let (len1, len2) = (s1.len(), s2.len());
    let chars: BTreeSet<char> = s1.iter().copied().collect();
    let mut best: f64 = 0.0;
    let windows = (1..len1)
        .map(|i| (i - 1, 0, i))
        .chain((0..len2 - len1).map(|i| (i + len1 - 1, i, i + len1)))
        .chain((len2 - len1..len2).map(|i| (i, i, len2)));
    for (edge, start, end) in windows {
        if !chars.contains(&s2[edge]) {
            continue;
        }
        let score = ratio(s1, &s2[start..end]);
        if score > best {
            best = score;
            if best >= 100.0 {
                return 100.0;
            }
        }
    }
    best
}

/// Whitespace-separated tokens, as `str.split()`.
fn tokens(s: &[char]) -> Vec<String> {
    s.iter().collect::<String>().split_whitespace().map(str::to_owned).collect()
}

fn joined<'a>(tokens: impl IntoIterator<Item = &'a String>) -> Vec<char> {
    tokens.into_iter().map(String::as_str).collect::<Vec<_>>().join(" ").chars().collect()
}

fn sorted_joined(s: &[char]) -> Vec<char> {
    let mut t = tokens(s);
    t.sort();
    joined(&t)
}

/// `max(token_set_ratio, token_sort_ratio)`.
fn token_ratio(a: &[char], b: &[char]) -> f64 {
    token_set_ratio(a, b).max(ratio(&sorted_joined(a), &sorted_joined(b)))
}

fn token_set_ratio(a: &[char], b: &[char]) -> f64 {
    let ta: BTreeSet<String> = tokens(a).into_iter().collect();
    let tb: BTreeSet<String> = tokens(b).into_iter().collect();
    if ta.is_empty() || tb.is_empty() {
        return 0.0;
    }
    let sect: Vec<&String> = ta.intersection(&tb).collect();
    let ab: Vec<&String> = ta.difference(&tb).collect();
    let ba: Vec<&String> = tb.difference(&ta).collect();
    if !sect.is_empty() && (ab.is_empty() || ba.is_empty()) {
        return 100.0;
    }
    let (ab, ba) = (joined(ab), joined(ba));
    let sect_len = joined(sect.iter().copied()).len();
    let sep = usize::from(sect_len != 0);
    let sect_ab = sect_len + sep + ab.len();
    let sect_ba = sect_len + sep + ba.len();
    let norm = |dist: usize, total: usize| if total == 0 { 100.0 } else { 100.0 - 100.0 * dist as f64 / total as f64 };
    // The Indel distance of the differences, from their ratio.
    let lens = ab.len() + ba.len();
    let dist = ((1.0 - ratio(&ab, &ba) / 100.0) * lens as f64).round() as usize;
    let result = norm(dist, sect_ab + sect_ba);
    if sect_len == 0 {
        return result;
    }
    let with_ab = norm(sep + ab.len(), sect_len + sect_ab);
    let with_ba = norm(sep + ba.len(), sect_len + sect_ba);
    result.max(with_ab).max(with_ba)
}

fn partial_token_ratio(a: &[char], b: &[char]) -> f64 {
    let split_a = tokens(a);
    let split_b = tokens(b);
    let ta: BTreeSet<String> = split_a.iter().cloned().collect();
    let tb: BTreeSet<String> = split_b.iter().cloned().collect();
    if ta.intersection(&tb).next().is_some() {
        return 100.0;
    }
    let ab: Vec<&String> = ta.difference(&tb).collect();
    let ba: Vec<&String> = tb.difference(&ta).collect();
    let result = partial_ratio(&sorted_joined(a), &sorted_joined(b));
    if split_a.len() == ab.len() && split_b.len() == ba.len() {
        return result;
    }
    result.max(partial_ratio(&joined(ab), &joined(ba)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scores from Python RapidFuzz 3 (`fuzz.WRatio`), Bub 0.6.0a3's venv.
    #[test]
    fn wratio_matches_python_rapidfuzz() {
        let cases: &[(&str, &str, f64)] = &[
            ("this is a test", "this is a test!", 96.55172),
            ("fuzzy wuzzy was a bear", "wuzzy fuzzy was a bear", 95.0),
            ("deploy", "deployment", 90.0),
            ("kubernetes", "kubernets", 94.73684),
            ("postgres", "postgresql", 88.88889),
            ("hello world", "world", 90.0),
            ("abc", "xyz", 0.0),
            ("new york mets", "new york mets vs atlanta braves", 90.0),
            ("release notes", "notes release", 95.0),
            ("tape", "tapes", 88.88889),
            ("zebra", "deploy", 18.18182),
            ("release note", "release notes", 96.0),
            ("abcd efgh", "efgh xbcd", 84.44444),
            ("quick brown", "the quick brown fox jumps over the lazy dog", 90.0),
            ("xyzzy", "xyz zy plugh", 72.0),
            ("hello", "help", 66.66667),
            ("aaaaab", "ab", 90.0),
        ];
        for (a, b, want) in cases {
            let got = wratio(a, b);
            assert!((got - want).abs() < 1e-3, "WRatio({a:?}, {b:?}) = {got}, Python says {want}");
        }
    }

    #[test]
    fn fuzzy_match_follows_bubs_rules() {
        // A typo in one word matches; a short query never fuzzes.
        assert!(is_fuzzy_match("kubernets", "content: deploy to kubernetes\nrole: user\n"));
        assert!(!is_fuzzy_match("kb", "content: kubernetes\n"));
        // Two-word queries compare against runs of two words.
        assert!(is_fuzzy_match("release note", "content: the release notes are out\n"));
        assert!(!is_fuzzy_match("zebra", "content: deploy to kubernetes\n"));
    }

    #[test]
    fn short_words_and_words_sharing_no_trigram_never_match() {
        // WRatio("abcde", "abxde") is 80, but they share no three letters.
        assert!(!is_fuzzy_match("abcde", "content: abxde\n"));
        assert!(is_fuzzy_match("abcde", "content: abcdx\n"));
        // "at" would pass WRatio through "a"/"at" words; short words sit out.
        assert!(!is_fuzzy_match("cat", "content: a cot at\n"));
        assert!(FuzzyQuery::new("to a").is_none(), "no word of three letters");
        let q = FuzzyQuery::new("go to prod").unwrap();
        assert_eq!(q.trigrams(), ["pro", "rod"]);
        assert_eq!(q.score("content: deploy prod now\n"), Some(100.0));
    }
}
