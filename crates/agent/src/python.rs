//! JSON values as Python writes them: what the model or code reads must be
//! Bub's text byte for byte, and Bub writes with `json.dumps` (tool
//! results) and `repr` (pydantic's error inputs, the code mode stub's
//! defaults and literals).

use serde_json::Value;

/// JSON as Python's `json.dumps(value, ensure_ascii=False)` writes it
/// (`", "` and `": "` separators): what the model sees of a structured tool
/// result, byte for byte as under Bub.
pub fn python_json(value: &Value) -> String {
    struct Spaced;
    impl serde_json::ser::Formatter for Spaced {
        fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
            if first {
                Ok(())
            } else {
                w.write_all(b", ")
            }
        }
        fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
            if first {
                Ok(())
            } else {
                w.write_all(b", ")
            }
        }
        fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
            w.write_all(b": ")
        }
    }
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Spaced);
    serde::Serialize::serialize(value, &mut ser).expect("a JSON value always serializes");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// A JSON value as Python's `repr` writes the object `json.loads` makes.
pub fn python_repr(value: &Value) -> String {
    match value {
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if !(n.is_i64() || n.is_u64()) => {
                let text = format!("{f:?}");
                if text.contains('e') || text.contains('.') || text.contains("inf") || text.contains("NaN") {
                    text
                } else {
                    format!("{text}.0")
                }
            }
            _ => n.to_string(),
        },
        Value::String(s) => string_repr(s),
        Value::Array(a) => format!("[{}]", a.iter().map(python_repr).collect::<Vec<_>>().join(", ")),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter().map(|(k, v)| format!("{}: {}", string_repr(k), python_repr(v))).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// Python's `repr` of a `str`: single quotes unless the text has a single
/// quote and no double one.
fn string_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}
