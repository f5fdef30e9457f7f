//! `bub run "<message>"`: one turn, in its own `running()` scope.

use anyhow::{Context as _, Result};
use serde_json::{json, Value};

use super::Context;
use bub_host::framework::envelope::complete_channel_message;

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
    runtime.block_on(async {
        let scope = framework.running().await.context("the turn failed")?;
        let turn = framework.process_inbound(&mut inbound, json).await;
        let printed = match &turn {
            Ok(result) => print_result(result, json),
            Err(_) => Ok(()),
        };
        let exited = scope.exit(turn.as_ref().err().map(|e| e.info()).as_ref()).await;
        turn.context("the turn failed")?;
        printed?;
        exited.context("leaving the running() scope failed")
    })?;
    Ok(())
}

fn print_result(result: &bub_host::framework::TurnResult, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(result)?);
        return Ok(());
    }
    for outbound in &result.outbounds {
        let field = |k: &str, default: &str| match outbound.get(k) {
            Some(Value::String(s)) => s.clone(),
            Some(v) if !v.is_null() => v.to_string(),
            _ => default.to_owned(),
        };
        println!("[{}:{}]\n{}", field("channel", "stdout"), field("chat_id", "local"), field("content", ""));
    }
    Ok(())
}
