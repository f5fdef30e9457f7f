//! Tools that only run as MCP tasks.
//!
//! A server may mark a tool `execution: {taskSupport: "required"}` (the
//! tasks of MCP 2025-11-25, SEP-1686): called the usual way it always fails
//! with −32601. bub-rs does not run tasks, so such tools are left out with a
//! log line. rmcp's `Tool` drops the `execution` field, so a
//! stdio server's output is read on its way to rmcp (`output`), and each
//! line is shown to [`note_task_only`] until the tools are listed.

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
};

use serde_json::Value;

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

    /// Whether the tools were listed (lines need no scan any more).
    pub fn is_listed(&self) -> bool {
        self.listed.load(Ordering::Relaxed)
    }
}

/// Notes the tools of a `tools/list` result line that require tasks.
pub fn note_task_only(line: &[u8], found: &TaskOnly) {
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
