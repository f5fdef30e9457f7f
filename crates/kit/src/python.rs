//! Values as Python writes them: what the model, code or a channel's
//! reader sees must be Bub's text byte for byte, and Bub writes with
//! `json.dumps` (tool results, anchors in the context, the Telegram
//! channel's message payload), `repr` (pydantic's error inputs, the code
//! mode stub's defaults and literals, names in errors) and `OSError`'s
//! `str` (a file that is not there).

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

/// A string as Python's `repr` writes it (`'clip.qqq'`): how Bub names a
/// file or a value in an error (`f"{name!r}"`).
pub fn repr_str(s: &str) -> String {
    string_repr(s)
}

/// An I/O error on `path` as Python's `str(OSError)` writes it:
/// `[Errno 2] No such file or directory: '/ws/clip.png'` (Rust writes
/// `No such file or directory (os error 2)`).
pub fn os_error(e: &std::io::Error, path: &std::path::Path) -> String {
    let text = e.to_string();
    match e.raw_os_error() {
        Some(code) => {
            let strerror = text.strip_suffix(&format!(" (os error {code})")).unwrap_or(&text);
            format!("[Errno {code}] {strerror}: {}", string_repr(&path.to_string_lossy()))
        }
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_read_as_pythons() {
        let e = std::fs::read("/no/such/file").unwrap_err();
        assert_eq!(
            os_error(&e, std::path::Path::new("/no/such/file")),
            "[Errno 2] No such file or directory: '/no/such/file'"
        );
        assert_eq!(repr_str("clip.qqq"), "'clip.qqq'");
        assert_eq!(python_json(&serde_json::json!({"a": [1, "é"]})), "{\"a\": [1, \"é\"]}");
    }
}
