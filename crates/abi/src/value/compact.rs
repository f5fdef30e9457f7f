//! A strict scanner for compact JSON: where a value ends, checked as
//! serde_json checks it, without building anything.
//!
//! The builtin tape store writes each line as a compact map of five keys,
//! and a long session's first read scans every line to split it into its
//! fields and to check that the payload it keeps as text (see
//! [`Node::Lazy`](super::tree::Node)) is JSON. serde_json's scan of a
//! 260-byte line took ~2,900 instructions, half of the read; most of it
//! was its general machinery around each token. This scanner knows only
//! the grammar, and walks a string's bytes eight at a time.
//!
//! It is deliberately partial: it answers `None` for anything it is not
//! sure of — whitespace, a `\u` escape (surrogate pairs), nesting deeper
//! than [`MAX_DEPTH`], a control character — and the caller then reads the
//! text with serde_json, which gives the exact answer or error. So it may
//! refuse valid JSON, but never accepts invalid JSON (tested against
//! serde_json on every prefix of valid texts and on mutated ones).

/// Deeper than this, serde_json decides (its own limit is 128).
const MAX_DEPTH: u32 = 64;

/// The compact map `{"k0":v0,"k1":v1,…}` with exactly `keys`, in their
/// order, as the texts of its values (at most 8); `None` otherwise.
pub(crate) fn fields<'t>(keys: &[&str], text: &'t str) -> Option<([&'t str; 8], usize)> {
    let b = text.as_bytes();
    let mut out = [""; 8];
    if keys.len() > out.len() || b.first() != Some(&b'{') {
        return None;
    }
    let mut i = 1;
    for (n, key) in keys.iter().enumerate() {
        if n > 0 {
            i = expect(b, i, b",")?;
        }
        i = expect(b, i, b"\"")?;
        i = expect(b, i, key.as_bytes())?;
        i = expect(b, i, b"\":")?;
        let end = value_end(b, i, 1)?;
        out[n] = &text[i..end];
        i = end;
    }
    (expect(b, i, b"}")? == b.len()).then_some((out, keys.len()))
}

/// Where `want` ends if `b` holds it at `i`.
#[inline]
fn expect(b: &[u8], i: usize, want: &[u8]) -> Option<usize> {
    (b.get(i..i + want.len())? == want).then_some(i + want.len())
}

/// Where the JSON value starting at `b[i]` ends.
fn value_end(b: &[u8], i: usize, depth: u32) -> Option<usize> {
    match *b.get(i)? {
        b'"' => string_end(b, i),
        b'{' => members_end(b, i, depth, b'}', true),
        b'[' => members_end(b, i, depth, b']', false),
        b't' => expect(b, i, b"true"),
        b'f' => expect(b, i, b"false"),
        b'n' => expect(b, i, b"null"),
        b'-' | b'0'..=b'9' => number_end(b, i),
        _ => None,
    }
}

/// A string starting at the quote `b[i]`: no control characters, the
/// simple escapes only.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        // Eight bytes at a time up to the first quote, backslash or control
        // byte, as serde_json's own scan does (`memchr2` cost more for the
        // short strings most lines are made of).
        while let Some(chunk) = b.get(j..j + 8) {
            let found = special(u64::from_le_bytes(chunk.try_into().ok()?));
            if found != 0 {
                j += (found.trailing_zeros() / 8) as usize;
                break;
            }
            j += 8;
        }
        match *b.get(j)? {
            b'"' => return Some(j + 1),
            b'\\' => match b.get(j + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => j += 2,
                _ => return None,
            },
            c if c < 0x20 => return None,
            // One of the last seven bytes.
            _ => j += 1,
        }
    }
}

/// The high bit of each byte of `w` that is a quote, a backslash or below
/// 0x20. Exact up to the first such byte, which is all that is read of it:
/// a borrow may mark bytes after it.
#[inline]
fn special(w: u64) -> u64 {
    const ONES: u64 = u64::MAX / 255;
    let control = w.wrapping_sub(ONES * 0x20) & !w;
    let quote = w ^ (ONES * b'"' as u64);
    let quote = quote.wrapping_sub(ONES) & !quote;
    let backslash = w ^ (ONES * b'\\' as u64);
    let backslash = backslash.wrapping_sub(ONES) & !backslash;
    (control | quote | backslash) & (ONES << 7)
}

/// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
fn number_end(b: &[u8], mut i: usize) -> Option<usize> {
    if b[i] == b'-' {
        i += 1;
    }
    match b.get(i)? {
        b'0' => i += 1,
        b'1'..=b'9' => i = digits(b, i + 1),
        _ => return None,
    }
    if b.get(i) == Some(&b'.') {
        let j = digits(b, i + 1);
        if j == i + 1 {
            return None;
        }
        i = j;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let j = digits(b, i);
        if j == i {
            return None;
        }
        i = j;
    }
    Some(i)
}

fn digits(b: &[u8], i: usize) -> usize {
    i + b[i..].iter().take_while(|c| c.is_ascii_digit()).count()
}

/// A map (`keyed`, closed by `}`) or a list (closed by `]`) starting at
/// `b[i]`: its members, each a value after a string key and a colon in a
/// map, separated by commas.
fn members_end(b: &[u8], i: usize, depth: u32, close: u8, keyed: bool) -> Option<usize> {
    if depth >= MAX_DEPTH {
        return None;
    }
    let mut j = i + 1;
    if b.get(j) == Some(&close) {
        return Some(j + 1);
    }
    loop {
        if keyed {
            if b.get(j) != Some(&b'"') {
                return None;
            }
            j = expect(b, string_end(b, j)?, b":")?;
        }
        j = value_end(b, j, depth + 1)?;
        match *b.get(j)? {
            b',' => j += 1,
            c if c == close => return Some(j + 1),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the scanner says of `text` as a whole value.
    fn scans(text: &str) -> bool {
        value_end(text.as_bytes(), 0, 1) == Some(text.len())
    }

    fn is_json(text: &str) -> bool {
        serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
    }

    const VALID: &[&str] = &[
        r#"{"id":12,"kind":"message","payload":{"role":"user","content":"question 12: lorem ipsum"},"meta":{},"date":"2026-12-01T00:00:00+00:00"}"#,
        r#"{"a":[1,-2,3.5,-0.25e-3,6E+2,0,-0,true,false,null,"",{},[],[[]],{"b":{"c":[{}]}}]}"#,
        r#"["esc \" \\ \/ \b \f \n \r \t done","ünïcødé ✓ 🦀",12345678901234567890123]"#,
        r#"{"k":"a string longer than any SIMD block: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}"#,
    ];

    #[test]
    fn it_never_accepts_what_serde_json_refuses() {
        // Every prefix of valid texts, and each with one byte replaced by
        // every byte that matters to the grammar.
        let bytes: &[u8] = b"\"\\{}[],:-+.eE0123456789tfnulrs \t\n\x01\x1fxu/";
        for text in VALID {
            for end in 0..=text.len() {
                let Some(prefix) = text.get(..end) else { continue };
                if scans(prefix) {
                    assert!(is_json(prefix), "accepted {prefix:?}");
                }
            }
            for at in 0..text.len() {
                for &b in bytes {
                    let mut m = text.as_bytes().to_vec();
                    m[at] = b;
                    let Ok(m) = String::from_utf8(m) else { continue };
                    if scans(&m) {
                        assert!(is_json(&m), "accepted {m:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn random_texts_it_accepts_are_json() {
        // Short texts over the grammar's bytes, from a fixed seed: most are
        // invalid, many are valid; none accepted may be refused by serde_json.
        let alphabet: &[u8] = b"\"\\{}[],:-+.eE019tfnulr \t\x01a/";
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut accepted = 0;
        for _ in 0..300_000 {
            let mut text = Vec::new();
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 12) as usize + 1;
            for _ in 0..len {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                text.push(alphabet[(seed % alphabet.len() as u64) as usize]);
            }
            let text = String::from_utf8(text).unwrap();
            if scans(&text) {
                accepted += 1;
                assert!(is_json(&text), "accepted {text:?}");
            }
        }
        assert!(accepted > 1_000, "the test should reach valid texts ({accepted})");
    }

    #[test]
    fn it_accepts_compact_json_and_leaves_the_rest_to_serde_json() {
        for text in VALID {
            assert!(scans(text), "{text}");
        }
        // Valid JSON the scan leaves to serde_json.
        for text in [r#"{"a": 1}"#, r#"["\u00e9"]"#, " 1", &format!("{}{}", "[".repeat(70), "]".repeat(70))] {
            assert!(is_json(text) && !scans(text), "{text}");
        }
        // Invalid JSON it refuses.
        for text in [
            "01",
            "1.",
            "-",
            "1e",
            "[1,]",
            "{\"a\"}",
            "{\"a\":1,}",
            "tru",
            "\"x",
            "\"\\x\"",
            "[1 2]",
            "[\"tab\tin a string\"]",
        ] {
            assert!(!scans(text), "{text}");
        }
    }

    #[test]
    fn fields_are_the_keys_in_order_and_nothing_else() {
        let keys = ["id", "kind", "payload", "meta", "date"];
        let (f, n) = fields(&keys, VALID[0]).unwrap();
        assert_eq!(
            &f[..n],
            [
                "12",
                "\"message\"",
                r#"{"role":"user","content":"question 12: lorem ipsum"}"#,
                "{}",
                r#""2026-12-01T00:00:00+00:00""#
            ]
        );
        // Another order, a missing or an extra key, trailing bytes, spaces.
        for text in [
            r#"{"kind":"m","id":1,"payload":{},"meta":{},"date":"d"}"#,
            r#"{"id":1,"kind":"m","payload":{},"meta":{}}"#,
            r#"{"id":1,"kind":"m","payload":{},"meta":{},"date":"d","x":1}"#,
            r#"{"id":1,"kind":"m","payload":{},"meta":{},"date":"d"} "#,
            r#"{"id": 1,"kind":"m","payload":{},"meta":{},"date":"d"}"#,
        ] {
            assert!(fields(&keys, text).is_none(), "{text}");
        }
    }
}
