//! Lazy lists and maps: a tape line parsed for its id, kind and date,
//! with the payload's lists and maps kept as their JSON text
//! ([`Node::Lazy`]) until something looks inside.

use super::*;

/// Parses `text` with its top-level map's lists and maps kept as text
/// ([`Node::Lazy`]), parsed only when something looks inside: a tape line
/// read whole for its id, kind and date, whose payload may only be passed
/// on. Any other top level is parsed in full.
pub(crate) fn parse_shallow(text: &str) -> Result<Node, serde_json::Error> {
    struct Top;
    impl<'de> serde::de::Visitor<'de> for Top {
        type Value = Node;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON map")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
            // Room for a tape entry's five keys: one allocation, not two.
            let mut m = new_map(map.size_hint().unwrap_or(5));
            while let Some((k, raw)) =
                map.next_entry::<std::borrow::Cow<'de, str>, &'de serde_json::value::RawValue>()?
            {
                m.insert(&k, shallow_node(raw.get()).map_err(serde::de::Error::custom)?);
            }
            Ok(Node::Object(Arc::new(m)))
        }
    }
    let top = text.trim_start().as_bytes().first();
    if top != Some(&b'{') {
        return serde_json::from_str::<Node>(text);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let node = serde::Deserializer::deserialize_map(&mut de, Top)?;
    de.end()?;
    Ok(node)
}

/// A top-level value of [`parse_shallow`] from its raw JSON text (checked
/// by the scanner): a list or map kept as text, a scalar read at once.
fn shallow_node(text: &str) -> Result<Node, serde_json::Error> {
    let kind = match text.as_bytes().first() {
        Some(b'{') => kind::OBJECT,
        Some(b'[') => kind::ARRAY,
        _ => kind::NULL,
    };
    // Fewer brackets than serde_json's nesting limit (128): the text will
    // parse when read (the raw scan does not count nesting). More are
    // parsed now, so a line nested too deep is unreadable here, as a full
    // parse would find it.
    let deep = || text.len() >= 128 && memchr::memchr2_iter(b'{', b'[', text.as_bytes()).nth(127).is_some();
    Ok(match plain_scalar(text) {
        Some(node) => node,
        // (`{}` and `[]` are scalars above.)
        None if kind == kind::NULL || deep() => serde_json::from_str::<Node>(text)?,
        None => Node::Lazy(Arc::new(LazyNode { text: text.into(), kind, parsed: std::sync::OnceLock::new() })),
    })
}

/// A map of `keys` to `values`, each read by [`shallow_node`], kept as a
/// [`NodeMap::Static`].
pub(crate) fn shallow_fields(
    keys: &'static [&'static str],
    values: &[&serde_json::value::RawValue],
) -> Result<Node, serde_json::Error> {
    fields_of(keys, values.iter().map(|raw| raw.get()))
}

/// As [`shallow_fields`], for `text` written as the compact map of exactly
/// `keys` in their order, split and checked by [`compact`](super::super::compact); `accept`
/// sees the values' texts first. `None` when the scan leaves `text` to
/// serde_json or `accept` refuses it.
pub(crate) fn compact_fields(
    keys: &'static [&'static str],
    text: &str,
    accept: impl FnOnce(&[&str]) -> bool,
) -> Option<Node> {
    let (values, n) = super::super::compact::fields(keys, text)?;
    let values = &values[..n];
    // The scan checked the texts are JSON: `shallow_node` cannot fail on
    // them, but an error is still an answer of `None`, not a panic.
    accept(values).then(|| fields_of(keys, values.iter().copied()).ok())?
}

/// A [`NodeMap::Static`] of `keys` to the [`shallow_node`]s of `texts`.
fn fields_of<'t>(
    keys: &'static [&'static str],
    texts: impl ExactSizeIterator<Item = &'t str>,
) -> Result<Node, serde_json::Error> {
    // Sized up front: collecting `Result`s cannot know the count, so the
    // list started at four and was grown for a tape line's fifth field.
    let mut nodes = Vec::with_capacity(texts.len());
    for text in texts {
        nodes.push(shallow_node(text)?);
    }
    Ok(Node::Object(Arc::new(NodeMap::Static(keys, nodes))))
}

/// The node of a value's raw JSON text (already checked by the parser)
/// when reading it needs no parser: a string without escapes, a
/// non-negative integer, `true`, `false`, `null`, `{}` or `[]` — a tape
/// line's id, kind, date and empty meta, read again by serde_json before
/// (a fifth of a line's parse). `None` for anything else.
fn plain_scalar(text: &str) -> Option<Node> {
    Some(match text.as_bytes() {
        [b'"', inner @ .., b'"'] if !inner.contains(&b'\\') => Node::Str(small(&text[1..text.len() - 1])),
        [b'0'..=b'9', ..] => Node::Int(text.parse::<i64>().ok()?),
        b"true" => Node::Bool(true),
        b"false" => Node::Bool(false),
        b"null" => Node::Null,
        // One empty map for all (a tape line's `meta`): a builder that
        // adds to it gets its own copy (`Arc::make_mut`).
        b"{}" => {
            static EMPTY: std::sync::LazyLock<Arc<NodeMap>> = std::sync::LazyLock::new(|| Arc::new(new_map(0)));
            Node::Object(EMPTY.clone())
        }
        b"[]" => Node::Array(Arc::new(Vec::new())),
        _ => return None,
    })
}
