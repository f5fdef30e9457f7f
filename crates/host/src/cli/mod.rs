//! `bub`: one file per subcommand; this file holds the shared options.

mod chat;
pub mod dotenv;
mod extensions;
mod gateway;
mod hooks;
mod interrupt;
mod login;
mod onboard;
mod plugins;
mod probe;
mod run;
mod service;

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use bub_host::{
    discovery::{bub_home, SearchPath},
    framework::Framework,
    install::Installer,
    places::absolute,
    Host, HostBuilder, RuntimeSettings, WithBuiltin,
};
use clap::{Parser, Subcommand};

/// bub — Bub's hook host, with native plugins.
#[derive(Debug, Parser)]
#[command(name = "bub", version, about, propagate_version = true)]
struct Cli {
    /// Bub's home (plugins, config, tapes). Overrides BUB_HOME; default ~/.bub.
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,

    /// The workspace the framework works in (default: the current directory).
    #[arg(short, long, global = true, value_name = "PATH")]
    workspace: Option<PathBuf>,

    /// More logs (-v info, -vv debug, -vvv trace). RUST_LOG takes precedence.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Process one message through the plugins (one turn) and print the outbounds.
    Run(run::RunArgs),
    /// Chat in the terminal through the `cli` channel (Ctrl-C cancels a turn, Ctrl-D quits).
    Chat(chat::ChatArgs),
    /// Run the enabled channels (HTTP, …) until SIGINT/SIGTERM; each message is a turn.
    Gateway(gateway::GatewayArgs),
    /// Collect the plugins' onboarding config and save it under BUB_HOME.
    Onboard(onboard::OnboardArgs),
    /// Show which plugins implement which hooks.
    #[command(hide = true)]
    Hooks(hooks::HooksArgs),
    /// List, install, remove, enable, disable and inspect plugins.
    #[command(subcommand)]
    Plugins(plugins::PluginsCommand),
    /// Account authentication.
    #[command(subcommand)]
    Login(login::LoginCommand),
}

/// Options every subcommand shares, resolved.
pub struct Context {
    /// Bub's home.
    pub home: PathBuf,
    /// The plugin search path.
    pub search: SearchPath,
    /// The workspace (`-w`), resolved.
    pub workspace: PathBuf,
    /// The settings every layer follows, from the environment, read once.
    pub settings: RuntimeSettings,
}

impl Context {
    /// The installer of `<home>/plugins`.
    pub fn installer(&self) -> Installer {
        Installer::new(&self.home)
    }

    /// Discovers, loads and registers every plugin, telling each where
    /// the home and the workspace are.
    pub fn host(&self) -> Host {
        let mut builder = HostBuilder::new()
            .settings(self.settings.clone())
            .home(&self.home)
            .workspace(&self.workspace)
            .builtin()
            .discovered(&self.search);
        for (name, reason) in probe::skipped() {
            builder = builder.skip(name, reason);
        }
        builder.build()
    }

    /// A framework over every plugin, in the workspace.
    pub fn framework(&self) -> Framework {
        Framework::new(&self.host(), &self.workspace)
    }
}

/// Resolves the shared options. Plugins learn the home and the workspace
/// from their `PluginContext` (no environment variable is set).
fn context(home: Option<PathBuf>, workspace: Option<PathBuf>) -> anyhow::Result<Context> {
    let home = home.map(absolute).unwrap_or_else(bub_home);
    if let Err(e) = bub_host::integrity::check_home(&home) {
        anyhow::bail!("refusing the home {}: {e}", home.display());
    }
    let workspace = match workspace {
        Some(w) => std::fs::canonicalize(&w)
            .with_context(|| format!("workspace {} not found (-w/--workspace)", w.display()))?,
        None => std::env::current_dir().context("the current directory is not accessible")?,
    };
    Ok(Context { search: SearchPath::from_env(Some(&home)), home, workspace, settings: RuntimeSettings::from_env() })
}

/// Parses the command line and runs the command. A subcommand `bub` does
/// not know may be a plugin's (`register_cli_commands`): then the plugins
/// are loaded and the command line is parsed again with theirs.
pub fn run() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help lists plugin commands, which loads plugins: in a guarded child.
        Err(e) if extensions::is_help(&e) => return finish(extensions::run_help()),
        Err(e) if extensions::may_be_plugin_command(&e) => return finish(extensions::run()),
        Err(e) => e.exit(),
    };
    dispatch(cli)
}

/// Runs a parsed builtin command.
fn dispatch(cli: Cli) -> ExitCode {
    init_logging(cli.verbose);
    let ctx = match context(cli.home, cli.workspace) {
        Ok(ctx) => ctx,
        Err(e) => return finish(Err(e)),
    };
    arm_crash_report(&ctx.home);
    finish(match cli.command {
        Command::Run(args) => run::run(&ctx, &args),
        Command::Chat(args) => chat::run(&ctx, &args),
        Command::Gateway(args) => gateway::run(&ctx, &args),
        Command::Onboard(args) => onboard::run(&ctx, &args),
        Command::Hooks(args) => hooks::run(&ctx, &args),
        Command::Plugins(cmd) => plugins::run(&ctx, &cmd),
        Command::Login(cmd) => login::run(&ctx, &cmd),
    })
}

fn finish(result: anyhow::Result<()>) -> ExitCode {
    // Traces still in the exporter's batch are sent before the process ends.
    bub_builtin::otel::shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `bub hooks | head` closes stdout early; that is not an error.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

pub(crate) fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // Colour only for a terminal: no escape codes in files and pipes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(true)
        .try_init();
}

/// Says so if the last run died in a plugin, and arms the breadcrumb for
/// this one (`bub_host::crash`).
pub(crate) fn arm_crash_report(home: &std::path::Path) {
    if let Some(report) = bub_host::crash::take_report(home) {
        eprintln!("warning: {report}");
    }
    bub_host::crash::install(home);
}
