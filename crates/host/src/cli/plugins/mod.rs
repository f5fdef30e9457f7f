//! `bub plugins …`: one file per subcommand.

mod config;
mod info;
mod install;
mod list;
mod remove;
mod toggle;

use anyhow::Result;

use super::Context;

#[derive(Debug, clap::Subcommand)]
pub enum PluginsCommand {
    /// List every discovered plugin in registration order, with its status.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Install a plugin: a built library, a crate folder, a git repository or a crates.io crate.
    ///
    /// Git repositories (`https://…`, `ssh://…`, `git@host:path`, `file://…`, with `@<branch, tag or
    /// commit>`) are cloned, crates (`name` or `name@version`) fetched with cargo; both are built in
    /// release (running their build scripts as you, as any cargo build does) and checked like a
    /// local library. The source is recorded, for `bub plugins update`.
    ///
    /// With `--python`, SOURCE is a pip requirement (`bub-schedule`, `bub-mcp==0.3.1`, a path): it is
    /// installed into the python bridge's venv (with uv when on PATH, else pip; the venv is made when
    /// missing), and the Python plugins are shown.
    Install {
        /// A shared library (.so), a crate folder, a git URL[@ref] or a crate[@version]; with
        /// `--python`, a pip requirement.
        source: String,
        /// Install under this name (default: the plugin's own name).
        #[arg(long)]
        name: Option<String>,
        /// Install a Python Bub plugin into the python bridge's venv.
        #[arg(long, conflicts_with = "name")]
        python: bool,
        /// Run it in a process of its own: a crash or a hang in it fails only its calls in flight,
        /// and it is started again (see `bub plugins config NAME isolated.…` for its limits).
        #[arg(long, conflicts_with = "python")]
        isolated: bool,
    },
    /// Fetch, build and install plugins again from their recorded sources (all, or the one named).
    Update {
        /// The plugin's name (default: every plugin with a recorded source).
        name: Option<String>,
    },
    /// Remove an installed plugin.
    Remove {
        /// The plugin's name.
        name: String,
    },
    /// Enable an installed plugin.
    Enable {
        /// The plugin's name.
        name: String,
    },
    /// Disable an installed plugin (it stays installed and listed, but is not loaded).
    Disable {
        /// The plugin's name.
        name: String,
    },
    /// Show or change the configuration kept in a plugin's manifest
    /// (`$BUB_HOME/config.json` and `BUB_<NAME>__<KEY>` variables override it).
    ///
    /// `isolated=true` runs the plugin in a process of its own; `isolated.memory_mb=512`,
    /// `isolated.cpu_seconds`, `isolated.open_files`, `isolated.max_restarts`,
    /// `isolated.env=NAME,NAME` (variables it may see), `isolated.max_message_mb` and
    /// `isolated.ping_timeout_seconds` set its limits.
    Config {
        /// The plugin's name.
        name: String,
        /// Keys to set, as KEY=VALUE (a VALUE that parses as JSON is JSON).
        set: Vec<String>,
        /// Keys to remove.
        #[arg(long)]
        unset: Vec<String>,
    },
    /// Show a plugin's manifest, status and hooks.
    Info {
        /// The plugin's name.
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(ctx: &Context, cmd: &PluginsCommand) -> Result<()> {
    match cmd {
        PluginsCommand::List { json } => super::probe::guarded(ctx, || list::run(ctx, *json)),
        PluginsCommand::Install { source, python: true, .. } => install::python(ctx, source),
        PluginsCommand::Install { source, name, isolated, .. } => install::run(ctx, source, name.as_deref(), *isolated),
        PluginsCommand::Update { name } => install::update(ctx, name.as_deref()),
        PluginsCommand::Remove { name } => remove::run(ctx, name),
        PluginsCommand::Enable { name } => toggle::run(ctx, name, true),
        PluginsCommand::Disable { name } => toggle::run(ctx, name, false),
        PluginsCommand::Info { name, json } => super::probe::guarded(ctx, || info::run(ctx, name, *json)),
        PluginsCommand::Config { name, set, unset } => config::run(ctx, name, set, unset),
    }
}
