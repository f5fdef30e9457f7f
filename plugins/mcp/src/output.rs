//! A stdio server's output on its way to rmcp, line by line and bounded.
//!
//! rmcp drops a message line longer than its limit and keeps the connection
//! open, so the call that line answered waits until the tool deadline (600
//! s) and then reports a timeout. Here a line is held until it ends (at
//! most `max` bytes); a longer one is dropped as it arrives, and in its
//! place rmcp gets an error answer for the same request id (found at the
//! line's start, as rmcp and Python servers write it, or at its end, as the
//! TypeScript SDK does), so that call fails at once and says why. Each line
//! is also shown to the task scan (`tasks`) until the tools are listed.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use tokio::io::{AsyncRead, ReadBuf};

use crate::tasks::{note_task_only, TaskOnly};

/// How much of an oversized line's start and end is kept to find its id.
const EDGE: usize = 512;

/// A stdio server's output, read through (see the module docs).
pub struct ServerOutput<R> {
    inner: R,
    max: usize,
    /// The line being read.
    line: Vec<u8>,
    /// Whole lines (or a replacement) ready for rmcp, from `sent` on.
    ready: Vec<u8>,
    sent: usize,
    /// The current line passed `max`: its start and its latest end.
    oversized: Option<(Vec<u8>, Vec<u8>)>,
    found: TaskOnly,
    server: String,
}

impl<R> ServerOutput<R> {
    /// Reads `inner` for `server`, lines up to `max` bytes, noting task-only
    /// tools into `found`.
    pub fn new(inner: R, max: usize, found: TaskOnly, server: &str) -> Self {
        ServerOutput {
            inner,
            max,
            line: Vec::new(),
            ready: Vec::new(),
            sent: 0,
            oversized: None,
            found,
            server: server.to_owned(),
        }
    }

    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let (part, ended) = match bytes.iter().position(|b| *b == b'\n') {
                Some(at) => (&bytes[..at], Some(at + 1)),
                None => (bytes, None),
            };
            match &mut self.oversized {
                None if self.line.len() + part.len() > self.max => {
                    let mut head = self.line[..self.line.len().min(EDGE)].to_vec();
                    head.extend_from_slice(&part[..part.len().min(EDGE - head.len())]);
                    let mut tail = self.line[self.line.len().saturating_sub(EDGE)..].to_vec();
                    tail.extend_from_slice(&part[part.len().saturating_sub(EDGE)..]);
                    self.line = Vec::new(); // what it held goes now
                    self.oversized = Some((head, tail));
                }
                None => self.line.extend_from_slice(part),
                Some((_, tail)) => {
                    tail.extend_from_slice(&part[part.len().saturating_sub(EDGE)..]);
                    if tail.len() > 2 * EDGE {
                        tail.drain(..tail.len() - EDGE);
                    }
                }
            }
            let Some(at) = ended else { break };
            match self.oversized.take() {
                Some((head, tail)) => self.replace(&head, &tail),
                None => {
                    if !self.found.is_listed() {
                        note_task_only(&self.line, &self.found);
                    }
                    self.ready.extend_from_slice(&self.line);
                    self.ready.push(b'\n');
                    self.line.clear();
                }
            }
            bytes = &bytes[at..];
        }
    }

    /// An error answer for the dropped line's request, if it named one.
    fn replace(&mut self, head: &[u8], tail: &[u8]) {
        let max = self.max;
        let Some(id) = request_id(head, tail) else {
            tracing::warn!(
                "mcp: server '{}' sent a message of more than {max} bytes with no request id; it was dropped",
                self.server
            );
            return;
        };
        tracing::warn!(
            "mcp: server '{}' answered request {id} with more than {max} bytes; it was dropped",
            self.server
        );
        let message = format!(
            "the answer was larger than {max} bytes, the most bub-rs reads from an MCP server \
             (the mcp plugin's max_message_bytes setting); it was dropped"
        );
        let error = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": message}});
        self.ready.extend_from_slice(error.to_string().as_bytes());
        self.ready.push(b'\n');
    }
}

/// The JSON-RPC id of a message from its first and last bytes: `"id":` right
/// after `{"jsonrpc":"2.0",` at the start, else the last one near the end,
/// else the first one at the start.
fn request_id(head: &[u8], tail: &[u8]) -> Option<serde_json::Value> {
    let after = |text: &[u8], at: usize| -> Option<serde_json::Value> {
        let rest = std::str::from_utf8(&text[at + 5..]).ok().or_else(|| {
            // An edge cut inside a character: the id is ASCII anyway.
            std::str::from_utf8(&text[at + 5..text.len().min(at + 5 + 64)]).ok()
        })?;
        let rest = rest.trim_start();
        let end = if let Some(s) = rest.strip_prefix('"') {
            s.find('"')? + 2
        } else {
            rest.find(|c: char| !(c.is_ascii_digit() || c == '-')).unwrap_or(rest.len())
        };
        serde_json::from_str(&rest[..end]).ok()
    };
    let find = |text: &[u8]| -> Vec<usize> {
        text.windows(5).enumerate().filter(|(_, w)| *w == b"\"id\":").map(|(i, _)| i).collect()
    };
    let compact: Vec<u8> = head.iter().copied().filter(|b| !b.is_ascii_whitespace()).take(40).collect();
    if compact.starts_with(br#"{"jsonrpc":"2.0","id":"#) {
        if let Some(id) = find(head).first().and_then(|at| after(head, *at)) {
            return Some(id);
        }
    }
    if let Some(id) = find(tail).last().and_then(|at| after(tail, *at)) {
        return Some(id);
    }
    find(head).first().and_then(|at| after(head, *at))
}

impl<R: AsyncRead + Unpin> AsyncRead for ServerOutput<R> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.sent < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.sent);
                buf.put_slice(&this.ready[this.sent..this.sent + n]);
                this.sent += n;
                if this.sent == this.ready.len() {
                    this.ready.clear();
                    this.sent = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 16 << 10];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) if read.filled().is_empty() => {
                    // The end: a last line without its newline goes as it is.
                    if this.oversized.take().is_none() && !this.line.is_empty() {
                        this.ready = std::mem::take(&mut this.line);
                        continue;
                    }
                    return Poll::Ready(Ok(()));
                }
                Poll::Ready(Ok(())) => {
                    let filled = read.filled().to_vec();
                    this.feed(&filled);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &[&[u8]], max: usize) -> String {
        let mut out = ServerOutput::new(tokio::io::empty(), max, TaskOnly::default(), "s");
        let mut all = Vec::new();
        for chunk in input {
            out.feed(chunk);
            all.append(&mut out.ready);
        }
        String::from_utf8(all).unwrap()
    }

    #[test]
    fn short_lines_pass_whole_and_long_ones_become_errors_for_their_id() {
        let ok = br#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        let got = run(&[ok, b"\n", &ok[..10], &ok[10..], b"\n"], 100);
        assert_eq!(got, format!("{0}\n{0}\n", std::str::from_utf8(ok).unwrap()));

        let big = "x".repeat(1000);
        // rmcp / Python order: the id first.
        let first = format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"content":[{{"type":"text","text":"{big}"}}]}}}}"#);
        // TypeScript order: the id last, and an "id" key inside the result.
        let last =
            format!(r#"{{"result":{{"structuredContent":{{"id":99,"t":"{big}"}}}},"jsonrpc":"2.0","id":"req-8"}}"#);
        let input = format!("{first}\n{ok}\n{last}\n", ok = std::str::from_utf8(ok).unwrap());
        let chunks: Vec<&[u8]> = input.as_bytes().chunks(100).collect();
        let got = run(&chunks, 200);
        let lines: Vec<serde_json::Value> = got.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 3, "{got}");
        assert_eq!(lines[0]["id"], 7);
        assert!(lines[0]["error"]["message"].as_str().unwrap().contains("larger than 200 bytes"), "{got}");
        assert_eq!(lines[1]["result"], serde_json::json!({}));
        assert_eq!(lines[2]["id"], "req-8");
        assert_eq!(lines[2]["error"]["code"], -32603);
    }

    #[test]
    fn notes_task_only_tools_across_reads() {
        let found = TaskOnly::default();
        let mut out = ServerOutput::new(tokio::io::empty(), 1 << 20, found.clone(), "s");
        let list = br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","inputSchema":{}},{"name":"slow","execution":{"taskSupport":"required"}},{"name":"maybe","execution":{"taskSupport":"optional"}}]}}"#;
        let (one, two) = list.split_at(40);
        out.feed(one);
        out.feed(two);
        assert!(out.ready.is_empty(), "passed on before the line ended");
        out.feed(b"\n{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n");
        assert_eq!(found.take(), std::collections::HashSet::from(["slow".to_owned()]));
    }
}
