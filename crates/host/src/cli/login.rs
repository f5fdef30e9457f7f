//! `bub login`: account logins, as Bub's `login` command group. `bub login
//! codex` runs the Codex CLI's own login with file credential storage (so
//! the tokens land in `$CODEX_HOME/auth.json`, where the `codex` provider
//! reads and refreshes them) and reports the ChatGPT account it found.
//! Plugins attach further `login` subcommands (`CommandSpec::group`).

use std::{path::PathBuf, process::Command};

use anyhow::Result;
use bub_agent::provider::codex;

use super::Context;

/// `bub login …`.
#[derive(Debug, clap::Subcommand)]
pub enum LoginCommand {
    /// Log in with the Codex CLI using file credential storage.
    Codex(CodexArgs),
}

/// `bub login codex`'s options (Bub's).
#[derive(Debug, clap::Args)]
pub struct CodexArgs {
    /// Codex CLI executable.
    #[arg(long, default_value = "codex")]
    executable: String,
    /// Use device authorization.
    #[arg(long)]
    device_auth: bool,
    /// Codex credential directory.
    #[arg(long, value_name = "PATH")]
    codex_home: Option<PathBuf>,
}

pub fn run(_ctx: &Context, cmd: &LoginCommand) -> Result<()> {
    match cmd {
        LoginCommand::Codex(args) => match login_codex(args) {
            Ok(account) => {
                println!("login: ok");
                println!("account_id: {account}");
                println!("Use BUB_MODEL=codex:<model> for ChatGPT plan access.");
                Ok(())
            }
            Err(why) => {
                let red =
                    std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
                let (on, off) = if red { ("\x1b[31m", "\x1b[0m") } else { ("", "") };
                eprintln!("{on}login: failed: {why}{off}");
                std::process::exit(1)
            }
        },
    }
}

/// Runs `codex login` in this terminal and reads the login it wrote; the
/// account id, or the error in Bub's words.
fn login_codex(args: &CodexArgs) -> Result<String, String> {
    let var = |k: &str| std::env::var(k).ok();
    let home = match &args.codex_home {
        // Bub: `codex_home.expanduser().resolve()`.
        Some(home) => {
            let home = codex::codex_home(|k| if k == "CODEX_HOME" { Some(home.display().to_string()) } else { var(k) });
            let absolute = bub_host::places::absolute(home);
            Some(std::fs::canonicalize(&absolute).unwrap_or(absolute))
        }
        None => None,
    };
    let mut command = Command::new(&args.executable);
    command.args(["login", "--config", "cli_auth_credentials_store=\"file\""]);
    if args.device_auth {
        command.arg("--device-auth");
    }
    if let Some(home) = &home {
        command.env("CODEX_HOME", home);
    }
    let exe = &args.executable;
    let status = command.status().map_err(|_| match home {
        Some(_) => format!("Cannot start {exe}; install the Codex CLI."),
        None => format!("Cannot start {exe}; install the CLI or set executable="),
    })?;
    if !status.success() {
        let code = status.code().map_or_else(|| "signal".to_owned(), |c| c.to_string());
        return Err(match home {
            Some(_) => format!("Codex login failed (exit {code})"),
            None => format!("{exe} login failed (exit {code})"),
        });
    }
    let file = match home {
        Some(home) => home.join("auth.json"),
        None => codex::codex_home(var).join("auth.json"),
    };
    codex::read_login(&file).map(|login| login.account_id).map_err(|e| e.to_string())
}
