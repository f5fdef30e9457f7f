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
    })
}

fn list(ctx: &Context, as_json: bool) -> Result<()> {
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
                p.path.as_ref().map_or_else(|| "(built in)".to_owned(), |p| printable(&p.display().to_string(), 4096)),
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
