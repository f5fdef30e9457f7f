//! Plugin subcommands (`register_cli_commands`).
//!
//! `bub` parses its own commands first, without loading plugins. Only when
//! it meets a subcommand (or `--help`) it does not know does it load the
//! plugins, ask each for its commands, and parse again with them added: a
//! plugin command then runs with its arguments parsed by clap (by argument
//! name) and its string result printed. A plugin command may not shadow a
//! builtin one.

use std::{ffi::OsString, path::PathBuf, process::ExitCode};

use anyhow::{Context as _, Result};
use bub_abi::{
    resources::{CliApp, Fut},
    types::{CommandArg, CommandSpec},
    Object,
};
use bub_host::resources::CliCommand;
use clap::{ArgAction, CommandFactory, FromArgMatches};
use serde_json::{Map, Value};

use super::{context, dispatch, init_logging, Cli};

/// Whether a parse error may be about a plugin's command.
pub fn may_be_plugin_command(e: &clap::Error) -> bool {
    use clap::error::ErrorKind::*;
    matches!(
        e.kind(),
        InvalidSubcommand
            | UnknownArgument
            | DisplayHelp
            | DisplayHelpOnMissingArgumentOrSubcommand
            | MissingSubcommand
    )
}

/// Whether clap is about to show help (which lists plugin commands).
pub fn is_help(e: &clap::Error) -> bool {
    use clap::error::ErrorKind::*;
    matches!(e.kind(), DisplayHelp | DisplayHelpOnMissingArgumentOrSubcommand | MissingSubcommand)
}

/// Help, with the plugins loaded in a guarded child (`probe`).
pub fn run_help() -> Result<()> {
    let args: Vec<OsString> = std::env::args_os().collect();
    let shared = SharedOptions::scan(&args);
    let ctx = context(shared.home, shared.workspace)?;
    super::probe::guarded(&ctx, run)
}

/// The `app` object handed to `register_cli_commands`.
struct App {
    workspace: PathBuf,
    home: PathBuf,
}

impl CliApp for App {
    fn workspace(&self) -> impl Fut<String> {
        let w = self.workspace.display().to_string();
        async { Ok(w) }
    }

    fn home(&self) -> impl Fut<String> {
        let h = self.home.display().to_string();
        async { Ok(h) }
    }

    fn commands(&self) -> impl Fut<Vec<String>> {
        let names = Cli::command().get_subcommands().map(|c| c.get_name().to_owned()).collect();
        async { Ok(names) }
    }
}

fn leak(s: &str) -> &'static str {
    // A one-shot process: clap wants 'static names, and there are a handful.
    Box::leak(s.to_owned().into_boxed_str())
}

fn to_clap(spec: &CommandSpec) -> clap::Command {
    let mut cmd = clap::Command::new(leak(&spec.name)).about(leak(&spec.about));
    if spec.args.iter().any(|a| a.trailing) {
        // The command parses its own words, `--help` included.
        cmd = cmd.disable_help_flag(true);
    }
    for a in &spec.args {
        cmd = cmd.arg(to_arg(a));
    }
    cmd
}

fn to_arg(a: &CommandArg) -> clap::Arg {
    let mut arg = clap::Arg::new(leak(&a.name)).help(leak(&a.help));
    if a.trailing {
        return arg.num_args(0..).trailing_var_arg(true).allow_hyphen_values(true).action(ArgAction::Append);
    }
    if a.flag {
        return arg.long(leak(&a.name)).action(ArgAction::SetTrue);
    }
    if a.option {
        arg = arg.long(leak(&a.name));
    }
    arg = arg.required(a.required && a.default.is_none());
    if let Some(d) = &a.default {
        arg = arg.default_value(leak(d));
    }
    arg
}

fn values(spec: &CommandSpec, m: &clap::ArgMatches) -> Map<String, Value> {
    spec.args
        .iter()
        .map(|a| {
            let v = if a.trailing {
                Value::Array(
                    m.get_many::<String>(&a.name).into_iter().flatten().map(|s| Value::String(s.clone())).collect(),
                )
            } else if a.flag {
                Value::Bool(m.get_flag(&a.name))
            } else {
                m.get_one::<String>(&a.name).map_or(Value::Null, |s| Value::String(s.clone()))
            };
            (a.name.clone(), v)
        })
        .collect()
}

/// The global options, read before the command line can be parsed (clap
/// stops at `--help` or an unknown command, and both need the plugins).
#[derive(Default)]
struct SharedOptions {
    home: Option<PathBuf>,
    workspace: Option<PathBuf>,
    verbose: u8,
}

impl SharedOptions {
    fn scan(args: &[OsString]) -> Self {
        let mut out = SharedOptions::default();
        let mut it = args.iter().skip(1).map(|a| a.to_string_lossy().into_owned());
        while let Some(arg) = it.next() {
            let (key, inline) = match arg.split_once('=') {
                Some((k, v)) if k.starts_with("--") => (k.to_owned(), Some(v.to_owned())),
                _ => (arg.clone(), None),
            };
            match key.as_str() {
                "--" => break,
                "--home" => out.home = inline.or_else(|| it.next()).map(PathBuf::from),
                "-w" | "--workspace" => out.workspace = inline.or_else(|| it.next()).map(PathBuf::from),
                "--verbose" => out.verbose += 1,
                v if v.len() > 1 && v.starts_with('-') && v[1..].chars().all(|c| c == 'v') => {
                    out.verbose += (v.len() - 1) as u8
                }
                _ => {}
            }
        }
        out
    }
}

/// Loads the plugins and parses the command line again with their commands.
pub fn run() -> Result<()> {
    let args: Vec<OsString> = std::env::args_os().collect();
    let shared = SharedOptions::scan(&args);
    init_logging(shared.verbose);
    let ctx = context(shared.home, shared.workspace)?;
    super::arm_crash_report(&ctx.home);
    let framework = ctx.framework();
    let app = Object::cli_app(App { workspace: ctx.workspace.clone(), home: ctx.home.clone() });
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let builtin: Vec<String> = Cli::command().get_subcommands().map(|c| c.get_name().to_owned()).collect();

    let mut commands: Vec<(CliCommand, CommandSpec)> = Vec::new();
    for command in framework.get_cli_commands(&app).context("collecting plugin commands")? {
        let spec = runtime.block_on(command.spec())?;
        // A subcommand and its arguments are plain words: `-x` would read as
        // an option of bub, `a b` could never be typed.
        let word = |w: &str| {
            w.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
                && w.len() <= 64
                && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        };
        if let Some(bad) = std::iter::once(&spec.name).chain(spec.args.iter().map(|a| &a.name)).find(|w| !word(w)) {
            tracing::warn!(
                target: "bub::cli",
                "plugin '{}' registers command `{}` with the name {:?}: names are letters, digits, '-' and '_' (not starting with '-'); ignored",
                command.resource().plugin(),
                bub_host::manifest::printable(&spec.name, 64),
                bub_host::manifest::printable(bad, 64),
            );
            continue;
        }
        if let Some(group) = &spec.group {
            // Bub's plugins attach logins to its `login` group; no other
            // group exists.
            if group != "login" {
                tracing::warn!(
                    target: "bub::cli",
                    "plugin '{}' puts command `{}` in the group `{}`: the only group is `login`; ignored",
                    command.resource().plugin(),
                    spec.name,
                    bub_host::manifest::printable(group, 64),
                );
                continue;
            }
            let taken = Cli::command()
                .find_subcommand("login")
                .is_some_and(|login| login.get_subcommands().any(|c| c.get_name() == spec.name));
            if taken || commands.iter().any(|(_, s)| s.group == spec.group && s.name == spec.name) {
                tracing::warn!(
                    target: "bub::cli",
                    "plugin '{}' registers `bub login {}`, which is taken; ignored",
                    command.resource().plugin(),
                    spec.name
                );
                continue;
            }
            commands.push((command, spec));
            continue;
        }
        if builtin.contains(&spec.name) {
            tracing::warn!(
                target: "bub::cli",
                "plugin '{}' registers command `{}`, which is a builtin command; ignored",
                command.resource().plugin(),
                spec.name
            );
            continue;
        }
        commands.push((command, spec));
    }
    let mut cli = Cli::command();
    for (_, spec) in commands.iter().filter(|(_, s)| s.group.is_none()) {
        cli = cli.subcommand(to_clap(spec));
    }
    let logins: Vec<clap::Command> =
        commands.iter().filter(|(_, s)| s.group.is_some()).map(|(_, spec)| to_clap(spec)).collect();
    if !logins.is_empty() {
        cli = cli.mut_subcommand("login", |login| login.subcommands(logins));
    }
    let matches = cli.try_get_matches_from(&args).unwrap_or_else(|e| e.exit());
    // A plugin's login: `bub login <name> …`.
    let chosen = match matches.subcommand() {
        Some(("login", login)) => login.subcommand().map(|(name, sub)| (Some("login"), name, sub)),
        Some((name, sub)) => Some((None, name, sub)),
        None => None,
    };
    if let Some((group, name, sub)) = chosen {
        if let Some((command, spec)) = commands.iter().find(|(_, s)| s.name == name && s.group.as_deref() == group) {
            let output = runtime
                .block_on(command.run(&values(spec, sub)))
                .with_context(|| format!("command `{name}` of plugin '{}' failed", command.resource().plugin()))?;
            match output {
                Value::Null => {}
                Value::String(s) => println!("{s}"),
                other => println!("{}", serde_json::to_string_pretty(&other)?),
            }
            return Ok(());
        }
    }
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match dispatch(cli) {
        code if code == ExitCode::SUCCESS => Ok(()),
        _ => std::process::exit(1),
    }
}
