//! Server-sent events (the WHATWG `text/event-stream` format) for model
//! streams: linear in the input and bounded.
//!
//! Why not the `eventsource-stream` crate, which bub-rs used before: it
//! scans its whole buffer again for a line end each time a chunk arrives, so
//! one long `data:` line costs time quadratic in its length (a 16 MB line
//! took 22 s of a core, 32 MB 89 s), and nothing bounds what it buffers. A
//! provider is a peer, not a friend. This parser looks at each byte once,
//! and refuses an event (its lines together) over [`Limits::max_event_bytes`]
//! and a stream over [`Limits::max_stream_bytes`] with an error that names
//! the limit, instead of growing until the process aborts.
//!
//! One departure from WHATWG, kept from Bub's own parser (Republic): the end
//! of the stream dispatches an event the server did not close with a blank
//! line ([`Parser::finish`]); the Anthropic SDK's recorded fixtures end
//! that way.
//!
//! ```
//! use bub_sse::{Limits, Parser};
//!
//! let mut parser = Parser::new(Limits::default());
//! let mut events = std::collections::VecDeque::new();
//! parser.feed(b"event: delta\ndata: {\"text\":", &mut events).unwrap();
//! parser.feed(b"\"hi\"}\r\n\r\n: a comment\ndata: [DONE]", &mut events).unwrap();
//! parser.finish(&mut events).unwrap();
//! assert_eq!(events[0].event, "delta");
//! assert_eq!(events[0].data, r#"{"text":"hi"}"#);
//! assert_eq!(events[1].event, "message");
//! assert_eq!(events[1].data, "[DONE]");
//! ```

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    /// The `event:` field; `"message"` when the event named none.
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
    /// The last `id:` seen in the stream (it carries over, as in WHATWG).
    pub id: String,
    /// A `retry:` given in this event.
    pub retry: Option<Duration>,
}

/// What the parser accepts before it refuses the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most bytes one event may hold: its current line plus the data
    /// gathered so far.
    pub max_event_bytes: usize,
    /// The most bytes the whole stream may carry.
    pub max_stream_bytes: u64,
}

impl Default for Limits {
    /// 8 MiB per event, 64 MiB per stream: far above any model's answer
    /// (a Responses API `response.completed` event repeats the whole answer
    /// with the instructions and tools, typically tens of kilobytes), far
    /// below what hurts the host.
    fn default() -> Self {
        Limits { max_event_bytes: 8 << 20, max_stream_bytes: 64 << 20 }
    }
}

/// A limit the stream went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitError {
    /// One event grew past [`Limits::max_event_bytes`].
    EventTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The stream carried more than [`Limits::max_stream_bytes`].
    StreamTooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
}

impl std::fmt::Display for LimitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitError::EventTooLarge { limit } => {
                write!(f, "one server-sent event grew past {limit} bytes; the stream was stopped")
            }
            LimitError::StreamTooLarge { limit } => {
                write!(f, "the event stream carried more than {limit} bytes; the stream was stopped")
            }
        }
    }
}

impl std::error::Error for LimitError {}

/// An incremental parser: feed it bytes as they arrive, take the events.
#[derive(Debug)]
pub struct Parser {
    limits: Limits,
    /// The current line's bytes, while it spans chunks.
    line: Vec<u8>,
    data: String,
    event: String,
    id: String,
    retry: Option<Duration>,
    /// The last chunk ended with `\r`: a `\n` starting the next one ends
    /// nothing more.
    skip_lf: bool,
    first_line: bool,
    seen: u64,
}

impl Parser {
    /// A parser with `limits`.
    pub fn new(limits: Limits) -> Self {
        Parser {
            limits,
            line: Vec::new(),
            data: String::new(),
            event: String::new(),
            id: String::new(),
            retry: None,
            skip_lf: false,
            first_line: true,
            seen: 0,
        }
    }

    /// Parses `bytes`, appending the events they complete to `out`.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut VecDeque<Event>) -> Result<(), LimitError> {
        self.seen = self.seen.saturating_add(bytes.len() as u64);
        if self.seen > self.limits.max_stream_bytes {
            return Err(LimitError::StreamTooLarge { limit: self.limits.max_stream_bytes });
        }
        if std::mem::take(&mut self.skip_lf) && bytes.first() == Some(&b'\n') {
            bytes = &bytes[1..];
        }
        while let Some(end) = bytes.iter().position(|b| *b == b'\n' || *b == b'\r') {
            let (head, rest) = bytes.split_at(end);
            if self.line.is_empty() {
                self.check(head.len())?;
                self.line_done(head, out)?;
            } else {
                self.check(self.line.len() + head.len())?;
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(head);
                self.line_done(&line, out)?;
                line.clear();
                self.line = line; // keeps its capacity
            }
            bytes = &rest[1..];
            if rest[0] == b'\r' {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    None => self.skip_lf = true,
                    Some(_) => {}
                }
            }
        }
        self.check(self.line.len() + bytes.len())?;
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// The end of the stream: a line in progress ends, and an event the
    /// server did not close with a blank line is dispatched.
    pub fn finish(&mut self, out: &mut VecDeque<Event>) -> Result<(), LimitError> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out)?;
        }
        self.line_done(b"", out)
    }

    /// Refuses an event whose line of `line_len` bytes, with the data
    /// gathered so far, would pass the limit.
    fn check(&self, line_len: usize) -> Result<(), LimitError> {
        if line_len.saturating_add(self.data.len()) > self.limits.max_event_bytes {
            return Err(LimitError::EventTooLarge { limit: self.limits.max_event_bytes });
        }
        Ok(())
    }

    fn line_done(&mut self, mut line: &[u8], out: &mut VecDeque<Event>) -> Result<(), LimitError> {
        if std::mem::take(&mut self.first_line) {
            line = line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line);
        }
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(()); // a comment
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        // Lines end only at `\r`/`\n`, which never occur inside a UTF-8
        // sequence, so each line decodes on its own.
        let value = String::from_utf8_lossy(value);
        match field {
            b"event" => self.event = value.into_owned(),
            b"data" => {
                self.data.push_str(&value);
                self.data.push('\n');
            }
            b"id" if !value.contains('\0') => self.id = value.into_owned(),
            b"retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                self.retry = value.parse().ok().map(Duration::from_millis);
            }
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut VecDeque<Event>) {
        let retry = self.retry.take();
        if self.data.is_empty() {
            self.event.clear();
            return;
        }
        let mut data = std::mem::take(&mut self.data);
        data.pop(); // the last line's `\n`
        let event = match std::mem::take(&mut self.event) {
            e if e.is_empty() => "message".to_owned(),
            e => e,
        };
        out.push_back(Event { event, data, id: self.id.clone(), retry });
    }
}

/// Why an [`EventStream`] stopped.
#[derive(Debug)]
pub enum Error<E> {
    /// The byte stream failed.
    Transport(E),
    /// The stream went over a limit.
    Limit(LimitError),
}

impl<E: std::fmt::Display> std::fmt::Display for Error<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Transport(e) => e.fmt(f),
            Error::Limit(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error> std::error::Error for Error<E> {}

/// The events of a stream of byte chunks. It ends after its first error.
pub struct EventStream<S> {
    inner: S,
    parser: Parser,
    ready: VecDeque<Event>,
    ended: bool,
}

impl<S> EventStream<S> {
    /// The events of `inner`, parsed with `limits`.
    pub fn new(inner: S, limits: Limits) -> Self {
        EventStream { inner, parser: Parser::new(limits), ready: VecDeque::new(), ended: false }
    }
}

impl<S, B, E> Stream for EventStream<S>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
{
    type Item = Result<Event, Error<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(event) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            let step = match Pin::new(&mut this.inner).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(chunk))) => this.parser.feed(chunk.as_ref(), &mut this.ready),
                Poll::Ready(Some(Err(e))) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(Error::Transport(e))));
                }
                Poll::Ready(None) => {
                    this.ended = true;
                    this.parser.finish(&mut this.ready)
                }
            };
            if let Err(e) = step {
                this.ended = true;
                this.ready.clear();
                return Poll::Ready(Some(Err(Error::Limit(e))));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_chunks(chunks: &[&[u8]], limits: Limits) -> Result<Vec<Event>, LimitError> {
        let mut parser = Parser::new(limits);
        let mut out = VecDeque::new();
        for c in chunks {
            parser.feed(c, &mut out)?;
        }
        parser.finish(&mut out)?;
        Ok(out.into())
    }

    fn parse(text: &str) -> Vec<Event> {
        parse_chunks(&[text.as_bytes()], Limits::default()).unwrap()
    }

    #[test]
    fn fields_comments_and_line_ends_follow_whatwg() {
        let events =
            parse("\u{feff}: hi\r\nevent: a\rdata: 1\ndata:2\r\nid: 7\nretry: 30\n\ndata\n\nevent: x\n\ndata: y\n\n");
        assert_eq!(
            events,
            vec![
                Event {
                    event: "a".into(),
                    data: "1\n2".into(),
                    id: "7".into(),
                    retry: Some(Duration::from_millis(30))
                },
                // `data` alone is an empty data line: dispatched, empty.
                Event { event: "message".into(), data: String::new(), id: "7".into(), retry: None },
                // `event: x` with no data dispatches nothing.
                Event { event: "message".into(), data: "y".into(), id: "7".into(), retry: None },
            ]
        );
    }

    /// The same events whatever the chunking, `\r\n` split between chunks
    /// included.
    #[test]
    fn any_chunking_gives_the_same_events() {
        let text = "event: delta\r\ndata: {\"a\": \"é\"}\r\n\r\ndata: two\rdata: lines\r\rdata: last";
        let whole = parse(text);
        assert_eq!(whole.len(), 3, "{whole:?}");
        assert_eq!(whole[1].data, "two\nlines");
        assert_eq!(whole[2].data, "last", "the end of the stream dispatches the open event");
        let bytes = text.as_bytes();
        let single: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(parse_chunks(&single, Limits::default()).unwrap(), whole);
        for cut in 0..bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(parse_chunks(&[a, b], Limits::default()).unwrap(), whole, "cut at {cut}");
        }
    }

    #[test]
    fn a_long_line_is_parsed_in_one_pass_and_an_oversized_one_refused() {
        let line = format!("data: {}\n\n", "x".repeat(16 << 20));
        let chunks: Vec<&[u8]> = line.as_bytes().chunks(16 << 10).collect();
        let big = Limits { max_event_bytes: 32 << 20, max_stream_bytes: 64 << 20 };
        assert_eq!(parse_chunks(&chunks, big).unwrap()[0].data.len(), 16 << 20);
        let small = Limits { max_event_bytes: 1 << 20, ..big };
        assert_eq!(parse_chunks(&chunks, small), Err(LimitError::EventTooLarge { limit: 1 << 20 }));
        // Many short data lines add up to the same event.
        let many = "data: 0123456789\n".repeat(200_000);
        assert_eq!(parse_chunks(&[many.as_bytes()], small), Err(LimitError::EventTooLarge { limit: 1 << 20 }));
    }

    #[test]
    fn a_stream_over_its_limit_is_refused() {
        let limits = Limits { max_event_bytes: 100, max_stream_bytes: 1000 };
        let chunk = b"data: 0123456789\n\n";
        let chunks: Vec<&[u8]> = std::iter::repeat_n(&chunk[..], 100).collect();
        assert_eq!(parse_chunks(&chunks, limits), Err(LimitError::StreamTooLarge { limit: 1000 }));
        assert_eq!(parse_chunks(&chunks[..50], limits).unwrap().len(), 50);
    }

    #[test]
    fn the_stream_adapter_ends_after_an_error() {
        use futures_util::StreamExt;
        let chunks: Vec<Result<&[u8], String>> =
            vec![Ok(b"data: a\n\ndata: b"), Err("reset".into()), Ok(b"\n\ndata: c\n\n")];
        let mut stream = EventStream::new(futures_util::stream::iter(chunks), Limits::default());
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut got = Vec::new();
        while let Poll::Ready(Some(item)) = stream.poll_next_unpin(&mut cx) {
            got.push(item);
        }
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].as_ref().unwrap().data, "a");
        assert!(matches!(&got[1], Err(Error::Transport(e)) if e == "reset"));
    }
}
