//! `bub gateway [--enable-channel NAME]…`: runs the enabled channels until
//! SIGINT or SIGTERM (see `bub_host::gateway` for what stopping does);
//! `--install`, `--uninstall` and `--status` manage it as a per-user
//! service (`service.rs`).
//!
//! Turns run on a multi-threaded runtime, so one blocking plugin hook holds
//! a worker, not the gateway. A second signal skips the grace period; a
//! third exits at once.

use std::sync::Arc;

use anyhow::{Context as _, Result};
use bub_host::gateway::{Gateway, GatewaySettings};
use tokio::{
    signal::unix::{signal, SignalKind},
    sync::Notify,
};

use super::Context;

#[derive(Debug, clap::Args)]
pub struct GatewayArgs {
    /// A channel to run (repeatable; `all`, or `!name` to exclude). Default:
    /// BUB_ENABLED_CHANNELS, else `all` (every channel but interfaces like `cli`).
    #[arg(long = "enable-channel", value_name = "NAME")]
    enable_channel: Vec<String>,

    /// Install the gateway as a systemd user service (restarted on failure)
    /// with these channels, this home and this workspace, and start it.
    #[arg(long, conflicts_with_all = ["uninstall", "status"])]
    install: bool,

    /// Stop and remove the installed service.
    #[arg(long, conflicts_with = "status")]
    uninstall: bool,

    /// Whether the service is installed and which gateways of this home run.
    #[arg(long)]
    status: bool,
}

pub fn run(ctx: &Context, args: &GatewayArgs) -> Result<()> {
    if args.uninstall {
        return super::service::uninstall(&ctx.home);
    }
    if args.status {
        return super::service::status(&ctx.home);
    }
    // config.json's channels and stream output (what `bub onboard` writes),
    // under the BUB_* variables; an unreadable file counts as none.
    let config = bub_host::files::read_settings_file(&bub_runtime::places::config_file(&ctx.home))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default();
    let mut settings = GatewaySettings::from_sources(&config, &ctx.settings.environment);
    if !args.enable_channel.is_empty() {
        settings.enabled_channels = args.enable_channel.clone();
    }
    if args.install {
        let executable = std::env::current_exe().context("cannot tell where the bub binary is")?;
        let executable = std::fs::canonicalize(&executable).unwrap_or(executable);
        return super::service::install(&super::service::Service {
            executable: &executable,
            home: &ctx.home,
            workspace: &ctx.workspace,
            channels: &args.enable_channel,
            grace: settings.shutdown_grace,
        });
    }
    let framework = ctx.framework();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("bub-gateway")
        .build()
        .context("could not start the gateway's runtime")?;
    let result = runtime.block_on(async {
        let gateway = Gateway::new(framework, settings.clone()).await?;
        let (stop, hurry) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let signals = watch_signals(stop.clone(), hurry.clone(), settings.shutdown_grace)?;
        let report = gateway.run(async move { stop.notified().await }, async move { hurry.notified().await }).await;
        signals.abort();
        let report = report?;
        if let Some(path) = &report.unprocessed_file {
            eprintln!("{} message(s) did not get their turn; saved in {}", report.unprocessed, path.display());
        }
        anyhow::Ok(())
    });
    // A plugin blocking a worker forever must not keep bub alive.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    result
}

/// SIGINT/SIGTERM: the first starts the graceful stop; the second ends the
/// grace period at once (running turns cancelled, everything that did not
/// run saved to unprocessed.jsonl); a third exits on the spot (status 130),
/// and the journal still holds what was accepted for the next start.
fn watch_signals(
    stop: Arc<Notify>,
    hurry: Arc<Notify>,
    grace: std::time::Duration,
) -> Result<tokio::task::JoinHandle<()>> {
    let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    Ok(tokio::spawn(async move {
        let mut seen = 0;
        loop {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            seen += 1;
            if seen == 2 {
                eprintln!(
                    "second signal: cancelling running turns now; what did not run is saved (again to exit at once)"
                );
                hurry.notify_one();
                continue;
            }
            if seen > 2 {
                eprintln!("third signal: bub gateway exits now (accepted messages stay in its journal)");
                bub_host::crash::disarm();
                std::process::exit(130);
            }
            eprintln!(
                "stopping: finishing running turns (up to {}s; BUB_SHUTDOWN_GRACE_SECONDS); signal again to exit now",
                grace.as_secs_f64()
            );
            stop.notify_one();
        }
    }))
}
