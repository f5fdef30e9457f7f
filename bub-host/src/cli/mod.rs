//! `bub`: one file per subcommand; this file holds the shared options.

mod hooks;
mod onboard;
mod plugins;
mod run;

use std::{path::PathBuf, process::ExitCode};

use bub_host::{
    discovery::{absolute, bub_home, SearchPath},
    install::Installer,
    Host,
};
use clap::{Parser, Subcommand};

/// bub — Bub's hook host, with native plugins.
#[derive(Debug, Parser)]
#[command(name = "bub", version, about, propagate_version = true)]
struct Cli {
    /// Bub's home (plugins, config, tapes). Overrides BUB_HOME; default ~/.bub.
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,

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
    /// Collect the plugins' onboarding config and save it under BUB_HOME.
    Onboard(onboard::OnboardArgs),
    /// Show which plugins implement which hooks.
    Hooks(hooks::HooksArgs),
    /// List, install, remove, enable, disable and inspect plugins.
    #[command(subcommand)]
    Plugins(plugins::PluginsCommand),
}

/// Options every subcommand shares, resolved.
pub struct Context {
    /// Bub's home.
    pub home: PathBuf,
    /// The plugin search path.
    pub search: SearchPath,
}

impl Context {
    /// The installer of `<home>/plugins`.
    pub fn installer(&self) -> Installer {
        Installer::new(&self.home)
    }

    /// Discovers, loads and registers every plugin.
    pub fn host(&self) -> Host {
        Host::discover(&self.search)
    }
}

/// Parses the command line and runs the command.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let home = cli.home.map(absolute).unwrap_or_else(bub_home);
    let ctx = Context { search: SearchPath::from_env(Some(&home)), home };
    let result = match cli.command {
        Command::Run(args) => run::run(&ctx, &args),
        Command::Onboard(args) => onboard::run(&ctx, &args),
        Command::Hooks(args) => hooks::run(&ctx, &args),
        Command::Plugins(cmd) => plugins::run(&ctx, &cmd),
    };
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

fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(true).try_init();
}
