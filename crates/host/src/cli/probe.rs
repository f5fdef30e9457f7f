//! Management commands survive a plugin that kills the process.
//!
//! `bub plugins list`, `bub plugins info` and `bub --help` load every
//! plugin, and loading runs plugin code (constructors, library
//! initialisers): one that aborts or segfaults would make the very commands
//! a user needs to get rid of it unusable. So they do their work in a child
//! `bub`. If the child dies in plugin code (its crash breadcrumb says which
//! plugin), the command runs again with that plugin listed as crashed and
//! not loaded, until it completes. (`disable`, `remove`, `config` and
//! `enable` never load plugins.)

use std::{collections::BTreeMap, process::Command};

use anyhow::{Context as _, Result};

use super::Context;

const IN_CHILD: &str = "BUB_PROBE_CHILD";
const SKIP: &str = "BUB_PROBE_SKIP";

/// Runs `here` in a child `bub` (the same arguments), retrying around
/// plugins that crash it; in the child, runs `here`.
pub fn guarded(ctx: &Context, here: impl FnOnce() -> Result<()>) -> Result<()> {
    if std::env::var_os(IN_CHILD).is_some() {
        return here();
    }
    let exe = std::env::current_exe().context("cannot find the bub executable to probe plugins safely")?;
    let mut skip: BTreeMap<String, String> = BTreeMap::new();
    loop {
        let status = Command::new(&exe)
            .args(std::env::args_os().skip(1))
            .env(IN_CHILD, "1")
            .env(SKIP, serde_json::to_string(&skip)?)
            .status()
            .with_context(|| format!("cannot run {}", exe.display()))?;
        let crashed = bub_host::crash::take_report(&ctx.home).filter(|r| !skip.contains_key(&r.plugin));
        match crashed {
            Some(report) if skip.len() < 16 => {
                eprintln!("warning: {report}");
                let reason = format!(
                    "{} bub while {} (not loaded here); disable it with `bub plugins disable {}`",
                    report.how,
                    if report.activity == "loading" {
                        "loading".to_owned()
                    } else {
                        format!("in hook '{}'", report.activity)
                    },
                    report.plugin
                );
                skip.insert(report.plugin, reason);
            }
            _ if status.success() => return Ok(()),
            // The child said what failed; pass its status on.
            _ => std::process::exit(status.code().unwrap_or(1)),
        }
    }
}

/// The plugins a probing parent asked this child not to load.
pub fn skipped() -> BTreeMap<String, String> {
    std::env::var(SKIP).ok().and_then(|s| serde_json::from_str(&s).ok()).unwrap_or_default()
}
