//! `bub run "<message>"`: one turn, in its own `running()` scope.

use anyhow::{Context as _, Result};
use serde_json::{json, Value};

use super::Context;
use bub_host::kit::envelope::complete_channel_message;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The message to process; `-` reads it from standard input.
    message: String,
    /// The channel the message comes from.
    #[arg(long, default_value = "cli")]
    channel: String,
    /// The chat the message comes from.
    #[arg(long, default_value = "local")]
    chat_id: String,
    /// Who sent it (`context.sender_id`).
    #[arg(long, default_value = "human")]
    sender_id: String,
    /// The session (default: "<channel>:<chat_id>").
    #[arg(long)]
    session_id: Option<String>,
    /// Print the whole turn result as JSON, with every event of the model's
    /// stream (text, tool calls and results, usage, errors).
    #[arg(long)]
    json: bool,
}

pub fn run(ctx: &Context, args: &RunArgs) -> Result<()> {
    // Plugins share this process's standard output: from here on what they
    // print goes to standard error, and the host's answer (`--json` above
    // all) alone to standard output. Before loading them: constructors print too.
    let mut out = keep_stdout_for_host()?;
    let framework = ctx.framework();
    let session = args.session_id.clone().unwrap_or_else(|| format!("{}:{}", args.channel, args.chat_id));
    // `-`: the message from standard input (any size; an argument is capped by the OS).
    let message = if args.message == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("cannot read the message from standard input")?;
        text
    } else {
        args.message.clone()
    };
    let mut inbound = json!({
        "content": message,
        "channel": args.channel,
        "chat_id": args.chat_id,
        "session_id": session,
        "context": {"sender_id": args.sender_id},
    });
    if let Value::Object(m) = &mut inbound {
        complete_channel_message(m);
    }
    // With --json the model streams, so that its events can be shown.
    let json = args.json;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // The answer is printed as soon as the turn is done, before the scope
    // exits (a slow lifespan exit must not hold it back).
    // Ctrl-C or SIGTERM cancels the turn instead of killing bub: the run is
    // recorded as cancelled and merged into the session's tape, the scope's
    // exit stops the session's shells, and bub exits 130. A second signal
    // exits at once.
    let interrupted = super::interrupt::watch(true)?;
    let mut cancelled = false;
    runtime.block_on(async {
        let scope = tokio::select! {
            scope = framework.running() => scope.context("the turn failed")?,
            _ = interrupted.notified() => anyhow::bail!("interrupted while opening the session"),
        };
        let turn = tokio::select! {
            turn = framework.process_inbound(&mut inbound, json) => Some(turn),
            _ = interrupted.notified() => None,
        };
        let Some(turn) = turn else {
            cancelled = true;
            super::interrupt::turn_cancelled().await;
            let error = bub_abi::types::ErrorInfo {
                kind: "CancelledError".into(),
                message: "the turn was cancelled".into(),
                details: None,
            };
            return tokio::select! {
                exit = scope.exit(Some(&error)) => exit.context("leaving the running() scope failed"),
                _ = interrupted.notified() => anyhow::bail!("interrupted while closing the session"),
            };
        };
        let printed = match &turn {
            Ok(result) => print_result(&mut out, result, json),
            Err(_) => Ok(()),
        };
        let exited = scope.exit(turn.as_ref().err().map(|e| e.info()).as_ref()).await;
        turn.context("the turn failed")?;
        printed?;
        exited.context("leaving the running() scope failed")
    })?;
    if cancelled {
        bub_host::crash::disarm();
        std::process::exit(130);
    }
    Ok(())
}

/// Standard output for the host alone: a duplicate of it, kept; the
/// original descriptor then points at standard error.
fn keep_stdout_for_host() -> Result<std::fs::File> {
    use std::os::fd::AsFd;
    let host = std::io::stdout().as_fd().try_clone_to_owned().context("cannot duplicate standard output")?;
    rustix::stdio::dup2_stdout(std::io::stderr().as_fd()).context("cannot send plugin output to standard error")?;
    Ok(std::fs::File::from(host))
}

fn print_result(out: &mut std::fs::File, result: &bub_host::framework::TurnResult, json: bool) -> Result<()> {
    use std::{borrow::Cow, io::Write};
    let write = |out: &mut std::fs::File| -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(out);
        if json {
            serde_json::to_writer_pretty(&mut out, result)?;
            out.write_all(b"\n")?;
            return out.flush();
        }
        for outbound in &result.outbounds {
            // Written from where they are: a big answer is not copied again.
            let field = |k: &str, default: &'static str| -> Cow<'_, str> {
                match outbound.get(k) {
                    Some(Value::String(s)) => Cow::Borrowed(s),
                    Some(v) if !v.is_null() => Cow::Owned(v.to_string()),
                    _ => Cow::Borrowed(default),
                }
            };
            writeln!(out, "[{}:{}]", field("channel", "stdout"), field("chat_id", "local"))?;
            // The content is the model's or a plugin's: shown, not obeyed.
            out.write_all(bub_kit::terminal::shown(&field("content", "")).as_bytes())?;
            out.write_all(b"\n")?;
        }
        out.flush()
    };
    write(out).map_err(|e| match e.kind() {
        // A reader that went away is not an error (`bub run … | head`).
        std::io::ErrorKind::BrokenPipe => anyhow::Error::new(e),
        _ => anyhow::Error::new(e).context("cannot write the output"),
    })
}
