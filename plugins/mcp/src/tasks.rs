//! Tools that only run as MCP tasks.
//!
//! A server may mark a tool `execution: {taskSupport: "required"}` (the
//! tasks of MCP 2025-11-25, SEP-1686): called the usual way it always fails
//! with −32601. bub-rs does not run tasks, so such tools are left out with a
//! log line (issue 17.18). rmcp's `Tool` drops the `execution` field, so a
//! stdio server's output is read on its way to rmcp: [`TaskScan`] passes
//! every byte through unchanged and notes, from each `tools/list` result
//! line, the tools that require tasks — until the tools are listed, after
//! which it only passes bytes on (tool results are not copied again).

use std::{
    collections::HashSet,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    task::{Context, Poll},
};

use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};

/// Lines longer than this are passed on but not looked into (a tool list
/// is far smaller; a huge tool result must not be held twice).
const MAX_LINE: usize = 16 << 20;

/// The names of the tools a server said require task-based execution.
pub type TaskOnly = Arc<TaskList>;

/// What [`TaskScan`] found, taken once the tools are listed.
#[derive(Default)]
pub struct TaskList {
    names: Mutex<HashSet<String>>,
    listed: AtomicBool,
}

impl TaskList {
    /// The task-only tools found so far; scanning stops here.
    pub fn take(&self) -> HashSet<String> {
        self.listed.store(true, Ordering::Relaxed);
        std::mem::take(&mut *bub_abi::sync::lock(&self.names))
    }
}

/// A stdio server's output, read through (see the module docs).
pub struct TaskScan<R> {
    inner: R,
    line: Vec<u8>,
    too_long: bool,
    found: TaskOnly,
}

impl<R> TaskScan<R> {
    /// Reads `inner`, noting task-only tools into `found`.
    pub fn new(inner: R, found: TaskOnly) -> Self {
        TaskScan { inner, line: Vec::new(), too_long: false, found }
    }

    fn feed(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while !rest.is_empty() {
            let (part, ended) = match rest.iter().position(|b| *b == b'\n') {
                Some(at) => (&rest[..at], Some(at + 1)),
                None => (rest, None),
            };
            if !self.too_long {
                if self.line.len() + part.len() > MAX_LINE {
                    self.too_long = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(part);
                }
            }
            match ended {
                Some(at) => {
                    if !self.too_long {
                        note_task_only(&self.line, &self.found);
                    }
                    self.line.clear();
                    self.too_long = false;
                    rest = &rest[at..];
                }
                None => break,
            }
        }
    }
}

/// Notes the tools of a `tools/list` result line that require tasks.
fn note_task_only(line: &[u8], found: &TaskOnly) {
    // Cheap filter first: most lines are not tool lists.
    if !line.windows(b"taskSupport".len()).any(|w| w == b"taskSupport") {
        return;
    }
    let Ok(message) = serde_json::from_slice::<Value>(line) else { return };
    let tools = message["result"]["tools"].as_array().into_iter().flatten();
    let required = tools.filter(|t| t["execution"]["taskSupport"] == "required");
    let names: Vec<String> = required.filter_map(|t| t["name"].as_str().map(str::to_owned)).collect();
    if !names.is_empty() {
        bub_abi::sync::lock(&found.names).extend(names);
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for TaskScan<R> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            if this.found.listed.load(Ordering::Relaxed) {
                this.line = Vec::new();
            } else {
                this.feed(&buf.filled()[before..]);
            }
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_task_only_tools_across_reads() {
        let found = TaskOnly::default();
        let mut scan = TaskScan::new(tokio::io::empty(), found.clone());
        let list = br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","inputSchema":{}},{"name":"slow","execution":{"taskSupport":"required"}},{"name":"maybe","execution":{"taskSupport":"optional"}}]}}"#;
        let (one, two) = list.split_at(40);
        scan.feed(one);
        scan.feed(two);
        assert!(found.names.lock().unwrap().is_empty(), "noted before the line ended");
        scan.feed(b"\n{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n");
        assert_eq!(found.take(), HashSet::from(["slow".to_owned()]));
    }
}
