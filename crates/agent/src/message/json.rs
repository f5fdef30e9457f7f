//! Writing JSON without building it twice: an array spliced from parts
//! that are already text (a kept message's wire form) and parts written on
//! demand, into a scratch buffer reused per thread.

/// A JSON list whose items are `parts` (each zero or more comma-separated
/// JSON values, as [`Message::wire`](super::Message::wire) keeps them), written straight into the
/// request body: the parts are never joined into a string of their own, so
/// a long context is copied once, not twice.
pub struct JsonArray<'a>(pub(super) Vec<Part<'a>>);

/// One part of a [`JsonArray`]: zero or more comma-separated JSON values.
pub enum Part<'a> {
    /// Text (a kept wire form, or one made for this request).
    Text(std::borrow::Cow<'a, str>),
    /// Written into the body when it is encoded, `len` bytes.
    Direct {
        /// The length it writes.
        len: usize,
        /// Writes it.
        write: WritePart<'a>,
    },
}

/// What writes a [`Part::Direct`].
pub type WritePart<'a> = Box<dyn Fn(&mut dyn std::io::Write) -> std::io::Result<()> + 'a>;

impl Part<'_> {
    fn len(&self) -> usize {
        match self {
            Part::Text(t) => t.len(),
            Part::Direct { len, .. } => *len,
        }
    }
}

impl<'a> From<std::borrow::Cow<'a, str>> for Part<'a> {
    fn from(text: std::borrow::Cow<'a, str>) -> Part<'a> {
        Part::Text(text)
    }
}

impl<'a> JsonArray<'a> {
    /// The list of `parts` (empty parts are skipped).
    pub fn new<P: Into<Part<'a>>>(parts: impl IntoIterator<Item = P>) -> JsonArray<'a> {
        let parts = parts.into_iter();
        // Sized up front: a 1,000-message request grew it ten times.
        let mut kept = Vec::with_capacity(parts.size_hint().0);
        kept.extend(parts.map(Into::into).filter(|p| p.len() > 0));
        JsonArray(kept)
    }

    /// The length of its JSON text.
    pub fn len(&self) -> usize {
        2 + self.0.iter().map(|p| p.len() + 1).sum::<usize>().saturating_sub(1)
    }

    /// Whether it has no items.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Appends its JSON text to `out`.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.push(b'[');
        for (i, part) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            match part {
                Part::Text(t) => out.extend_from_slice(t.as_bytes()),
                Part::Direct { len, write } => {
                    let start = out.len();
                    write(out).expect("writing into memory never fails");
                    debug_assert_eq!(out.len() - start, *len, "a part wrote another length than it measured");
                }
            }
        }
        out.push(b']');
    }
}

impl std::fmt::Display for JsonArray<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = Vec::with_capacity(self.len());
        self.write_to(&mut out);
        f.write_str(std::str::from_utf8(&out).expect("the parts are text"))
    }
}

/// `value`'s JSON text in a string of exactly its size. A string grown as
/// it is written ends up to twice the text's size, and holds the old and
/// the new buffer at each doubling: for a message of tens of megabytes
/// that is the turn's peak. Counting first costs a second walk of the
/// value, once per message (its wire form is kept).
pub fn json_text(value: &impl serde::Serialize) -> String {
    written(|out| serde_json::to_writer(out, value).map_err(std::io::Error::other))
}

/// What `write` writes, in a string of exactly its size (see
/// [`json_text`]); `write` writes JSON (UTF-8), and may run twice.
///
/// A text of up to [`SCRATCH_BYTES`] (nearly every message) is written once
/// into a buffer the thread reuses and copied out at its size; a longer one
/// is counted first and then written at its size, as growing a buffer by
/// doubling held up to three times a big text.
pub fn written(write: impl Fn(&mut dyn std::io::Write) -> std::io::Result<()>) -> String {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let small = SCRATCH.with(|scratch| {
        let mut scratch = scratch.try_borrow_mut().ok()?;
        scratch.clear();
        write(&mut Capped(&mut scratch)).ok()?;
        Some(std::str::from_utf8(&scratch).expect("JSON is UTF-8").to_owned())
    });
    if let Some(text) = small {
        return text;
    }
    let mut count = Count(0);
    write(&mut count).expect("counting never fails");
    let mut out = Vec::with_capacity(count.0);
    write(&mut out).expect("writing into memory never fails");
    String::from_utf8(out).expect("JSON is UTF-8")
}

/// How long a text [`written`] writes once into its reused buffer.
pub(super) const SCRATCH_BYTES: usize = 64 * 1024;

/// A writer into the reused buffer that refuses to grow it past
/// [`SCRATCH_BYTES`].
struct Capped<'a>(&'a mut Vec<u8>);

impl std::io::Write for Capped<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > SCRATCH_BYTES {
            return Err(std::io::Error::other("longer than the scratch buffer"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A writer that only counts.
pub(super) struct Count(pub(super) usize);

impl std::io::Write for Count {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
