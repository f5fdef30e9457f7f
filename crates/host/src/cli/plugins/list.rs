//! `bub plugins list`: what was discovered, in registration order, and its status.

use std::io::Write;

use anyhow::Result;
use bub_host::{manifest::printable, PluginRecord, PluginStatus};
use serde_json::{json, Value};

use crate::cli::Context;

/// `bub plugins list`: every discovered plugin, in registration order.
pub fn run(ctx: &Context, as_json: bool) -> Result<()> {
    list(ctx, as_json)
}

pub(super) fn to_json(p: &PluginRecord) -> Value {
    let detail = match &p.status {
        PluginStatus::Failed { detail } => Value::String(detail.clone()),
        PluginStatus::Replaced { by } => Value::String(format!("replaced by {by}")),
        _ => Value::Null,
    };
    json!({
        "name": p.name,
        "version": p.version,
        "abi_version": p.abi_version,
        "path": p.path.as_ref().map(|p| p.display().to_string()),
        "status": p.status.as_str(),
        "detail": detail,
        "member_of": p.member_of,
        "isolated": p.isolated,
        "python": p.member_of.is_some() && p.description.starts_with("python: "),
    })
}

/// Files and folders under `home` that group or others can read or write:
/// `$BUB_HOME` holds secrets (tokens in manifests, conversations in tapes).
/// Bounded: the first 10,000 entries, four levels deep.
fn exposed(home: &std::path::Path) -> Vec<(std::path::PathBuf, u32)> {
    let mut found = Vec::new();
    let mut stack = vec![(home.to_path_buf(), 0)];
    let mut seen = 0;
    while let Some((dir, depth)) = stack.pop() {
        // The home itself may be the user's ordinary 0755 folder: what is in
        // it is what must be owner-only.
        if let Some(mode) = bub_kit::files::exposed(&dir).filter(|_| depth > 0) {
            found.push((dir.clone(), mode));
        }
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            seen += 1;
            if seen > 10_000 {
                return found;
            }
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() && depth < 4 => stack.push((path, depth + 1)),
                Ok(t) if t.is_file() => {
                    if let Some(mode) = bub_kit::files::exposed(&path) {
                        found.push((path, mode));
                    }
                }
                _ => {}
            }
        }
    }
    found
}

fn warn_exposed(home: &std::path::Path) {
    let found = exposed(home);
    if found.is_empty() {
        return;
    }
    let shown: Vec<String> = found
        .iter()
        .take(5)
        .map(|(p, mode)| format!("{} ({mode:o})", p.strip_prefix(home).unwrap_or(p).display()))
        .collect();
    let more = if found.len() > 5 { format!(" and {} more", found.len() - 5) } else { String::new() };
    eprintln!(
        "warning: {} path(s) in {} can be read by other users: {}{more}. They hold tokens and conversations; run \
         `chmod -R go-rwx {}`",
        found.len(),
        home.display(),
        shown.join(", "),
        home.display()
    );
}

fn list(ctx: &Context, as_json: bool) -> Result<()> {
    warn_exposed(&ctx.home);
    let host = ctx.host();
    let plugins = host.registry().plugins();
    let mut out = std::io::stdout().lock();
    if as_json {
        let all: Vec<Value> = plugins.iter().map(to_json).collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&all)?)?;
        return Ok(());
    }
    let rows: Vec<[String; 5]> = plugins
        .iter()
        .map(|p| {
            // Escaped and clipped: a manifest field can neither forge rows
            // nor make a column wider than a terminal.
            let cell = |s: &str| printable(s, 64);
            [
                cell(&p.name),
                cell(&or_dash(&p.version)),
                cell(&or_dash(&p.abi_version)),
                p.status.as_str().to_owned(),
                match (&p.member_of, &p.path) {
                    // A plugin set's member lives in the set's library.
                    (Some(set), _) if p.description.starts_with("python: ") => format!("(python, via {})", cell(set)),
                    (Some(set), _) => format!("(via {})", cell(set)),
                    (None, Some(path)) => printable(&path.display().to_string(), 4096),
                    (None, None) => "(built in)".to_owned(),
                },
            ]
        })
        .collect();
    let header = ["NAME", "VERSION", "ABI", "STATUS", "PATH"].map(str::to_owned);
    let mut widths = header.clone().map(|h| h.len());
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |r: &[String; 5]| {
        format!(
            "{:w0$}  {:w1$}  {:w2$}  {:w3$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3]
        )
    };
    writeln!(out, "{}", line(&header).trim_end())?;
    for (p, r) in plugins.iter().zip(&rows) {
        writeln!(out, "{}", line(r).trim_end())?;
        match &p.status {
            PluginStatus::Failed { detail } => writeln!(out, "    error: {}", printable(detail, 4096))?,
            PluginStatus::Replaced { by } => writeln!(out, "    replaced by {}", printable(by, 64))?,
            _ => {}
        }
        if p.isolated && p.member_of.is_none() {
            let status = bub_host::isolation::Status::read(&ctx.home, &p.name).and_then(|s| s.summary());
            let status = status.map(|s| format!("; {}", printable(&s, 4096))).unwrap_or_default();
            writeln!(out, "    isolated: runs in a process of its own{status}")?;
        }
    }
    Ok(())
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".to_owned()
    } else {
        s.to_owned()
    }
}
