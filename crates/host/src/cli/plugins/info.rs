//! `bub plugins info <name>`: manifest, status, and every hook implemented.

use std::io::Write;

use anyhow::{bail, Result};
use bub_host::manifest::printable;
use serde_json::{json, Value};

use crate::cli::Context;

pub fn run(ctx: &Context, name: &str, as_json: bool) -> Result<()> {
    let host = ctx.host();
    let Some(record) = host.registry().plugin(name) else {
        bail!("no plugin named '{name}' was discovered. See `bub plugins list`");
    };
    let manifest = if record.path.is_some() { ctx.installer().manifest(name).ok() } else { None };
    let hooks: Vec<Value> = record
        .implementations()
        .into_iter()
        .map(|(h, marker, is_async)| json!({"hook": h.name(), "marker": marker.as_str(), "async": is_async}))
        .collect();
    let mut info = super::list::to_json(record);
    info["description"] = json!(record.description);
    info["manifest"] = json!(manifest);
    info["hooks"] = Value::Array(hooks.clone());

    let mut out = std::io::stdout().lock();
    if as_json {
        writeln!(out, "{}", serde_json::to_string_pretty(&info)?)?;
        return Ok(());
    }
    // Escaped: what a manifest or library says cannot forge lines.
    let field = |v: &Value| v.as_str().map(|s| printable(s, 4096)).unwrap_or_else(|| "-".into());
    writeln!(out, "name:         {}", printable(&record.name, 4096))?;
    writeln!(out, "version:      {}", field(&info["version"]))?;
    writeln!(out, "ABI:          {}", field(&info["abi_version"]))?;
    let description = if record.description.is_empty() { "-".to_owned() } else { printable(&record.description, 4096) };
    writeln!(out, "description:  {description}")?;
    writeln!(out, "status:       {}", record.status.as_str())?;
    if let bub_host::registry::PluginStatus::Replaced { by } = &record.status {
        writeln!(out, "replaced by:  {}", bub_host::manifest::printable(by, 64))?;
    }
    if let Some(detail) = info["detail"].as_str() {
        writeln!(out, "error:        {}", printable(detail, 4096))?;
    }
    writeln!(out, "path:         {}", field(&info["path"]))?;
    if let Some(m) = &manifest {
        writeln!(out, "sha256:       {}", m.sha256.as_deref().unwrap_or("-"))?;
        writeln!(out, "installed at: {}", m.installed_at.as_deref().unwrap_or("-"))?;
        if let Some(source) = &m.source {
            writeln!(out, "source:       {}", printable(&source.to_string(), 4096))?;
        }
        writeln!(out, "enabled:      {}", m.enabled)?;
        if !m.config.is_empty() {
            writeln!(out, "config:       {}", Value::Object(m.config.clone()))?;
        }
        if let Some(iso) = m.isolated() {
            let limits = iso_limits(iso);
            writeln!(out, "isolated:     in a process of its own ({limits})")?;
            if let Some(status) = bub_host::isolation::Status::read(&ctx.home, name).and_then(|s| s.summary()) {
                writeln!(out, "              {}", printable(&status, 4096))?;
            }
        }
    }
    if hooks.is_empty() {
        writeln!(out, "hooks:        (none loaded)")?;
    } else {
        writeln!(out, "hooks:")?;
        for h in hooks {
            writeln!(
                out,
                "  {} [{}, {}]",
                field(&h["hook"]),
                field(&h["marker"]),
                if h["async"] == true { "async" } else { "sync" }
            )?;
        }
    }
    Ok(())
}

/// An isolated plugin's limits in words, defaults filled in.
fn iso_limits(iso: &bub_host::isolation::Isolation) -> String {
    use bub_host::isolation::{DEFAULT_MAX_RESTARTS, DEFAULT_MEMORY_MB};
    let memory = match iso.memory_mb.unwrap_or(DEFAULT_MEMORY_MB) {
        0 => "no memory limit".to_owned(),
        mb => format!("memory {mb} MiB"),
    };
    let cpu = match iso.cpu_seconds.unwrap_or(0) {
        0 => String::new(),
        s => format!(", cpu {s} s"),
    };
    let env = if iso.env.is_empty() { String::new() } else { format!(", env {}", iso.env.join(" ")) };
    format!("{memory}{cpu}, at most {} restarts in 10 min{env}", iso.max_restarts.unwrap_or(DEFAULT_MAX_RESTARTS))
}
