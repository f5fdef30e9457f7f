//! `bub onboard [PLUGIN]`: collect every plugin's `onboard_config` fragment
//! (low priority first, each seeing the config so far) and save the result
//! as `$BUB_HOME/config.json`.

use std::path::Path;

use anyhow::{bail, Context as _, Result};
use bub_abi::types::StateMap;
use bub_host::files::write_atomically;
use serde_json::Value;

use super::Context;

#[derive(Debug, clap::Args)]
pub struct OnboardArgs {
    /// Only this plugin's onboarding.
    plugin: Option<String>,
}

/// Where the config lives.
pub fn config_path(home: &Path) -> std::path::PathBuf {
    bub_runtime::places::config_file(home)
}

pub fn run(ctx: &Context, args: &OnboardArgs) -> Result<()> {
    let path = config_path(&ctx.home);
    // Read, merged and written under a lock: parallel onboardings keep both.
    let lock = ctx.home.join(".config.lock");
    let _lock = bub_host::files::lock_file(&lock).with_context(|| format!("cannot lock {}", lock.display()))?;
    let current: StateMap = match bub_host::files::read_settings_file(&path) {
        Ok(text) => match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(m)) => m,
            _ => bail!("Onboarding failed: {} is not a JSON object; fix or remove it", path.display()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => StateMap::new(),
        Err(e) => bail!("Onboarding failed: cannot read {}: {e}", path.display()),
    };
    let host = ctx.host();
    let config = match host.runtime().onboard_config(&current, args.plugin.as_deref()) {
        Ok(c) => c,
        Err(e) => bail!("Onboarding failed: {e}"),
    };
    bub_kit::files::create_private_dir(&ctx.home).with_context(|| format!("cannot create {}", ctx.home.display()))?;
    let text = serde_json::to_string_pretty(&Value::Object(config))? + "\n";
    write_atomically(&path, &text).with_context(|| format!("cannot write {}", path.display()))?;
    println!("Saved config to {}", path.display());
    Ok(())
}
