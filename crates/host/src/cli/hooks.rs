//! `bub hooks`: Bub's hook report.
//!
//! By default it prints pluggy's stored order, exactly as Bub does (read it
//! right to left for the call order). `--call-order` prints the order hooks
//! actually run in, with each implementation's marker and sync/async.

use std::io::Write;

use anyhow::Result;
use bub_abi::HookId;
use serde_json::{json, Map, Value};

use super::Context;

#[derive(Debug, clap::Args)]
pub struct HooksArgs {
    /// Print JSON: {"<hook>": ["<plugin>", …]}.
    #[arg(long)]
    json: bool,
    /// Show call order, with markers and sync/async, instead of pluggy's stored order.
    #[arg(long)]
    call_order: bool,
}

pub fn run(ctx: &Context, args: &HooksArgs) -> Result<()> {
    let host = ctx.host();
    let registry = host.registry();
    let mut out = std::io::stdout().lock();
    if args.call_order {
        let mut hooks: Vec<HookId> = HookId::ALL.iter().copied().filter(|h| !registry.impls(*h).is_empty()).collect();
        hooks.sort_by_key(|h| h.name());
        if args.json {
            let map: Map<String, Value> = hooks
                .iter()
                .map(|h| {
                    let impls = registry
                        .impls(*h)
                        .iter()
                        .map(|i| json!({"plugin": &*i.plugin, "marker": i.marker.as_str(), "async": i.is_async}))
                        .collect();
                    (h.name().to_owned(), Value::Array(impls))
                })
                .collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&map)?)?;
        } else if hooks.is_empty() {
            writeln!(out, "(no hook implementations)")?;
        } else {
            for h in hooks {
                let parts: Vec<String> = registry
                    .impls(h)
                    .iter()
                    .map(|i| {
                        format!("{} [{}, {}]", i.plugin, i.marker.as_str(), if i.is_async { "async" } else { "sync" })
                    })
                    .collect();
                writeln!(out, "{h}: {}", parts.join(" -> "))?;
            }
        }
        return Ok(());
    }
    let report = registry.hook_report();
    if args.json {
        let map: Map<String, Value> =
            report.iter().map(|(hook, plugins)| ((*hook).to_owned(), json!(plugins))).collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&map)?)?;
    } else if report.is_empty() {
        writeln!(out, "(no hook implementations)")?;
    } else {
        for (hook, plugins) in report {
            writeln!(out, "{hook}: {}", plugins.join(", "))?;
        }
    }
    Ok(())
}
