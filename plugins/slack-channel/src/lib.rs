//! `slack-channel`: a Slack channel for `bub gateway`, over Socket Mode
//! (a WebSocket the app opens, so no public URL is needed).
//!
//! ```sh
//! bub plugins install target/release/libslack_channel.so
//! BUB_SLACK_BOT_TOKEN=xoxb-… BUB_SLACK_APP_TOKEN=xapp-… bub gateway --enable-channel slack
//! ```
//!
//! An envelope is acknowledged once its event is settled: handed to the
//! gateway (whose journal then holds it), or deliberately not handed over
//! (not a person's message, a stranger). One the gateway refuses (it is
//! stopping) is not acknowledged, so Slack sends it again, on this
//! connection or the next one after a restart; Slack retries an event
//! three times (at once, after a minute, after five), so a gateway down
//! longer than that loses what came meanwhile, as any Slack app does.
//! `message` events of people become gateway messages: session `slack:<channel>`, the content
//! a JSON object of the text and its metadata (as Bub's Telegram channel
//! makes it), images (at most `max_file_bytes`, 2 MiB) as media parts,
//! `,` commands (after an optional leading mention) as `kind: command`.
//! Direct messages are active; in channels a mention of the bot or a reply
//! in a thread it took part in is. Replies go to the conversation, in the
//! thread when the message was in one, split at `max_message_chars`
//! (4000); with `stream_output` the reply is one message updated as the
//! model writes (`chat.update`, at most once a second). A `disconnect`
//! envelope, a closed or broken connection: a new connection is opened,
//! at once after a connection that lived a while, else after a backoff
//! (doubling up to 30 s), so a peer that accepts and closes connections
//! cannot make the channel spin. Files are downloaded with the bot token
//! only from Slack's file host over https (`files.slack.com`) or the
//! origin of `api_base`; every answer is read under a cap
//! (`max_answer_bytes`, 16 MiB; WebSocket messages the same). Slack has no typing indicator for bots; none is
//! shown.
//!
//! Settings [inferred: Bub's own Slack plugin is not in the 0.6 sources we
//! follow]: `BUB_SLACK_BOT_TOKEN` (`xoxb-`), `BUB_SLACK_APP_TOKEN`
//! (`xapp-`, with `connections:write`), `BUB_SLACK_ALLOW_USERS` and
//! `BUB_SLACK_ALLOW_CHANNELS` (ids, comma separated; others are ignored,
//! a listed channel's unlisted user is told "Access denied."),
//! `BUB_SLACK_API_BASE` (`https://slack.com/api`); or the plugin config's
//! keys of the same names in lower case (the environment wins), with
//! `name` (`slack`), `command_prefix`, `max_file_bytes`,
//! `max_message_chars`, `stream_output`, `edit_interval_ms`,
//! `max_answer_bytes`.

mod api;
pub mod inbound;

use std::{
    collections::{HashSet, VecDeque},
    future::Future,
    sync::{Arc, Mutex},
    task::Poll,
    time::Duration,
};

use base64::Engine;
use bub_abi::{
    resources::{clients::MessageHandlerClient, Channel, Fut},
    types::{ChannelInfo, Envelope, StreamEvent},
    BoxError, Object, Plugin, PluginContext,
};
use bub_kit::channel::{reply_text, split_message, Backoff, Count, LiveReplies, Messenger, RefusalPace, Settings};
use bub_kit::lru::Lru;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Map, Value};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message as Frame;

use api::Api;

/// The plugin.
pub struct SlackPlugin {
    config: Config,
}

#[derive(Clone, Debug)]
struct Config {
    name: String,
    bot_token: Option<String>,
    app_token: Option<String>,
    allow_users: HashSet<String>,
    allow_channels: HashSet<String>,
    api_base: String,
    command_prefix: String,
    max_file_bytes: u64,
    max_message_chars: usize,
    stream_output: bool,
    edit_interval: Duration,
    max_answer_bytes: u64,
}

impl Config {
    fn from(config: &Map<String, Value>) -> Result<Config, BoxError> {
        let s = Settings { config, env_prefix: "BUB_SLACK_", plugin: "slack-channel" };
        Ok(Config {
            name: s.text("name").unwrap_or_else(|| "slack".into()),
            bot_token: s.text("bot_token"),
            app_token: s.text("app_token"),
            allow_users: s.list("allow_users"),
            allow_channels: s.list("allow_channels"),
            api_base: s.text("api_base").unwrap_or_else(|| "https://slack.com/api".into()),
            command_prefix: s.text("command_prefix").unwrap_or_else(|| ",".into()),
            max_file_bytes: s.number("max_file_bytes", 2 * 1024 * 1024)?,
            max_message_chars: s.number("max_message_chars", 4000)?.max(1) as usize,
            stream_output: s.flag("stream_output"),
            edit_interval: Duration::from_millis(s.number("edit_interval_ms", 1000)?),
            max_answer_bytes: s.number("max_answer_bytes", 16 * 1024 * 1024)?,
        })
    }
}

#[bub_abi::plugin]
impl Plugin for SlackPlugin {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        Ok(SlackPlugin { config: Config::from(&ctx.config)? })
    }

    /// The `slack` channel (enabled when it has both tokens).
    fn provide_channels(&self, message_handler: Object) -> Option<Vec<Object>> {
        let shared = Shared {
            config: self.config.clone(),
            handler: message_handler,
            api: Mutex::new(None),
            bot_user: Mutex::new(String::new()),
            socket: Mutex::new(None),
            threads: Mutex::default(),
            bot_threads: Mutex::default(),
            seen: Mutex::new(VecDeque::new()),
            live: LiveReplies::default(),
            refusals: Mutex::new(RefusalPace::new(REFUSAL_INTERVAL, 4096)),
        };
        Some(vec![Object::channel(SlackChannel(Arc::new(shared)))])
    }
}

bub_abi::export_plugin!(SlackPlugin);

struct Shared {
    config: Config,
    handler: Object,
    api: Mutex<Option<Api>>,
    bot_user: Mutex<String>,
    socket: Mutex<Option<(watch::Sender<bool>, tokio::task::JoinHandle<()>)>>,
    // The thread a conversation's last message was in: replies go there.
    threads: Mutex<Lru<String, Option<String>>>,
    // Threads the bot posted in: replies there are for it.
    bot_threads: Mutex<Lru<(String, String), ()>>,
    // Recent message ids: a mention arrives as `message` and `app_mention`.
    seen: Mutex<VecDeque<(String, String)>>,
    live: LiveReplies,
    // When a conversation may next be told "Access denied.".
    refusals: Mutex<RefusalPace>,
}

/// How many conversations' threads, and threads the bot posted in, are
/// remembered (the most recently used): a gateway runs for months.
const REMEMBERED: usize = 16_384;

/// A conversation's stranger is told "Access denied." at most this often.
const REFUSAL_INTERVAL: Duration = Duration::from_secs(60);

impl Shared {
    fn api(&self) -> Result<Api, BoxError> {
        bub_abi::sync::lock(&self.api).clone().ok_or_else(|| "slack channel is not started".into())
    }

    fn thread_of(&self, channel: &str) -> Option<String> {
        bub_abi::sync::lock(&self.threads).get(channel).cloned().flatten()
    }

    fn split(&self, text: &str) -> Vec<String> {
        split_message(text, self.config.max_message_chars, Count::Chars)
    }
}

/// Replies go to the conversation's thread (a message's own, when it was
/// in one), and mark that thread as the bot's.
impl Messenger for Shared {
    async fn post(&self, channel: &str, text: &str) -> Result<String, String> {
        let thread = self.thread_of(channel);
        let api = self.api().map_err(|e| e.to_string())?;
        let ts = api.post(channel, text, thread.as_deref()).await.map_err(|e| format!("posting to {channel}: {e}"))?;
        let thread = thread.unwrap_or_else(|| ts.clone());
        Lru::keep_in(&self.bot_threads, (channel.to_owned(), thread), (), 0, REMEMBERED, u64::MAX);
        Ok(ts)
    }

    async fn edit(&self, channel: &str, ts: &str, text: &str) -> Result<(), String> {
        let api = self.api().map_err(|e| e.to_string())?;
        api.update(channel, ts, text).await.map_err(|e| format!("editing in {channel}: {e}"))
    }
}

struct SlackChannel(Arc<Shared>);

fn chat_of(message: &Envelope) -> Option<String> {
    message.get("chat_id").and_then(Value::as_str).map(str::to_owned)
}

impl Channel for SlackChannel {
    fn name(&self) -> String {
        self.0.config.name.clone()
    }

    /// Checks the bot token (`auth.test`) and opens the Socket Mode connection.
    fn start(&self) -> impl Fut<()> {
        let shared = self.0.clone();
        async move {
            let config = &shared.config;
            let (Some(bot), Some(app)) = (&config.bot_token, &config.app_token) else {
                return Err("slack channel: set BUB_SLACK_BOT_TOKEN (xoxb-…) and BUB_SLACK_APP_TOKEN (xapp-…, \
                            Socket Mode) or the plugin's bot_token and app_token"
                    .into());
            };
            let api = Api::new(&config.api_base, bot, app, config.max_answer_bytes)?;
            let (user, team) = api.auth_test().await.map_err(|e| {
                format!("slack channel: auth.test at {}: {e}; check BUB_SLACK_BOT_TOKEN", config.api_base)
            })?;
            // The first connection now, so a wrong app token fails the start.
            let url = api
                .open_connection()
                .await
                .map_err(|e| format!("slack channel: apps.connections.open: {e}; check BUB_SLACK_APP_TOKEN"))?;
            tracing::info!(
                "slack.start bot={user} team={team} allow_users_count={} allow_channels_count={}",
                config.allow_users.len(),
                config.allow_channels.len()
            );
            if config.allow_users.is_empty() && config.allow_channels.is_empty() {
                tracing::warn!(
                    "slack channel: no BUB_SLACK_ALLOW_USERS or BUB_SLACK_ALLOW_CHANNELS: everyone in the workspace \
                     can run turns (and the tools they reach) as you"
                );
            }
            *bub_abi::sync::lock(&shared.bot_user) = user;
            *bub_abi::sync::lock(&shared.api) = Some(api);
            let (stop, stopped) = watch::channel(false);
            let task = tokio::spawn(socket(shared.clone(), Some(url), stopped));
            *bub_abi::sync::lock(&shared.socket) = Some((stop, task));
            Ok(())
        }
    }

    /// Closes the connection.
    fn stop(&self) -> impl Fut<()> {
        let socket = bub_abi::sync::lock(&self.0.socket).take();
        async move {
            if let Some((stop, task)) = socket {
                let _ = stop.send(true);
                let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
            }
            tracing::info!("slack.stopped");
            Ok(())
        }
    }

    /// An outbound to its conversation (and thread).
    fn send(&self, message: Envelope) -> impl Fut<()> {
        let shared = self.0.clone();
        async move {
            let chat = chat_of(&message).ok_or("slack: an outbound without chat_id")?;
            let text = reply_text(message.get("content").and_then(Value::as_str).unwrap_or(""));
            shared.live.complete(&*shared, &chat, shared.split(&text)).await.map_err(|e| format!("slack: {e}"))?;
            Ok(())
        }
    }

    /// Text deltas of a streamed turn grow one message.
    fn stream_event(&self, message: Envelope, event: StreamEvent) -> impl Fut<()> {
        let shared = self.0.clone();
        async move {
            let delta = bub_kit::envelope::text_delta(&event);
            let (Some(delta), Some(chat)) = (delta, chat_of(&message)) else { return Ok(()) };
            let interval = shared.config.edit_interval;
            if let Err(e) = shared.live.delta(&*shared, &chat, delta, interval, |t| shared.split(t)).await {
                tracing::debug!("slack: streaming to {chat}: {e}");
            }
            Ok(())
        }
    }

    /// Enabled with both tokens; debounced, as Bub's IM channels are.
    fn info(&self) -> impl Fut<ChannelInfo> {
        let enabled = self.0.config.bot_token.is_some() && self.0.config.app_token.is_some();
        let info = ChannelInfo { enabled, needs_debounce: true, ..Default::default() };
        async move { Ok(info) }
    }
}

/// The Socket Mode loop: a connection at a time, reopened when Slack asks
/// (`disconnect`) or it breaks.
async fn socket(shared: Arc<Shared>, mut url: Option<String>, mut stopped: watch::Receiver<bool>) {
    let mut backoff = Backoff::default();
    loop {
        if *stopped.borrow() {
            return;
        }
        let api = match shared.api() {
            Ok(api) => api,
            Err(_) => return,
        };
        let next = match url.take() {
            Some(url) => Ok(url),
            None => api.open_connection().await.map_err(|e| e.to_string()),
        };
        let connected = match next {
            Ok(url) => bub_kit::websocket::connect(&url, None, shared.config.max_answer_bytes).await,
            Err(e) => Err(e),
        };
        let mut ws = match connected {
            Ok(ws) => ws,
            Err(e) => {
                let wait = backoff.failed();
                tracing::warn!("slack: cannot open the Socket Mode connection: {e}; retrying in {} s", wait.as_secs());
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stopped.changed() => return,
                }
                continue;
            }
        };
        let opened = std::time::Instant::now();
        loop {
            let frame = tokio::select! {
                frame = ws.next() => frame,
                _ = stopped.changed() => {
                    let _ = ws.close(None).await;
                    return;
                }
            };
            match frame {
                Some(Ok(Frame::Text(text))) => {
                    let Ok(envelope) = serde_json::from_str::<Value>(&text) else { continue };
                    // Settled first: an event the gateway did not take
                    // stays unacknowledged, and Slack sends it again.
                    let settled = match envelope["type"].as_str() {
                        Some("events_api") => on_event(&shared, &envelope["payload"]["event"]).await,
                        _ => true,
                    };
                    if let Some(id) = envelope["envelope_id"].as_str().filter(|_| settled) {
                        if let Err(e) = ws.send(Frame::text(json!({"envelope_id": id}).to_string())).await {
                            tracing::warn!("slack: acknowledging an envelope: {e}");
                            break;
                        }
                    }
                    match envelope["type"].as_str() {
                        Some("hello") => tracing::info!("slack: connected (Socket Mode)"),
                        Some("disconnect") => {
                            tracing::info!("slack: Slack asks to reconnect ({})", envelope["reason"]);
                            break;
                        }
                        _ => {}
                    }
                }
                Some(Ok(Frame::Close(_))) | None => {
                    tracing::info!("slack: the connection closed; reconnecting");
                    break;
                }
                Some(Ok(_)) => {
                    // Pings are answered by the library on the next write.
                    let _ = ws.flush().await;
                }
                Some(Err(e)) => {
                    tracing::warn!("slack: the connection broke ({e}); reconnecting");
                    break;
                }
            }
        }
        let Some(wait) = backoff.after_connection(opened.elapsed()) else { continue };
        tracing::info!(
            "slack: the connection lasted {:.1} s; reconnecting in {} s",
            opened.elapsed().as_secs_f64(),
            wait.as_secs()
        );
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stopped.changed() => return,
        }
    }
}

/// Hands one event to the gateway; whether it is settled: taken, a
/// duplicate of one taken, or deliberately not handed over (no person's
/// message, a stranger). `false`: the gateway refused it, so it must not
/// be acknowledged.
async fn on_event(shared: &Arc<Shared>, event: &Value) -> bool {
    let bot_user = bub_abi::sync::lock(&shared.bot_user).clone();
    let Some(message) = inbound::parse(event, &bot_user) else { return true };
    let key = (message.channel.clone(), message.ts.clone());
    {
        let mut seen = bub_abi::sync::lock(&shared.seen);
        if seen.contains(&key) {
            return true;
        }
        seen.push_back(key.clone());
        if seen.len() > 256 {
            seen.pop_front();
        }
    }
    let taken = hand_over(shared, &bot_user, message).await;
    if !taken {
        // Not seen after all: Slack's redelivery must be handled.
        bub_abi::sync::lock(&shared.seen).retain(|k| *k != key);
    }
    taken
}

async fn hand_over(shared: &Arc<Shared>, bot_user: &str, message: inbound::Inbound) -> bool {
    let config = &shared.config;
    if !config.allow_channels.is_empty() && !config.allow_channels.contains(&message.channel) {
        return true;
    }
    if !config.allow_users.is_empty() && !config.allow_users.contains(&message.user) {
        // Told only when the message was for the bot, not for every line
        // of a channel; off this loop, paced, and dropped when rate-limited.
        if message.is_active(bot_user, false) && bub_abi::sync::lock(&shared.refusals).allow(&message.channel) {
            if let Ok(api) = shared.api() {
                let (channel, thread) = (message.channel.clone(), message.thread_ts.clone());
                tokio::spawn(async move {
                    if let Err(e) = api.post_once(&channel, "Access denied.", thread.as_deref()).await {
                        tracing::info!("slack: not telling {channel} it has no access: {e}");
                    }
                });
            }
        }
        return true;
    }
    let in_thread = message
        .thread_ts
        .as_ref()
        .is_some_and(|t| bub_abi::sync::lock(&shared.bot_threads).get(&(message.channel.clone(), t.clone())).is_some());
    let active = message.is_active(bot_user, in_thread);
    Lru::keep_in(&shared.threads, message.channel.clone(), message.thread_ts.clone(), 0, REMEMBERED, u64::MAX);
    let text = message.text_without_mention(bot_user);
    let mut envelope = json!({
        "channel": config.name,
        "chat_id": message.channel,
        "session_id": format!("{}:{}", config.name, message.channel),
    });
    if text.starts_with(config.command_prefix.as_str()) {
        envelope["content"] = json!(text.trim());
        envelope["kind"] = json!("command");
    } else {
        envelope["content"] = json!(message.content());
        envelope["kind"] = json!("normal");
        envelope["is_active"] = json!(active);
        let mut media = Vec::new();
        if active {
            // Slack allows ten files a message; an event naming more gets ten fetched.
            for (url, mime, size) in message.images.iter().take(10) {
                if size.is_some_and(|s| s > config.max_file_bytes) {
                    continue;
                }
                let Ok(api) = shared.api() else { return true };
                match api.download(url, config.max_file_bytes).await {
                    Ok(bytes) => media.push(json!({"type": "image", "media_type": mime,
                        "data": base64::engine::general_purpose::STANDARD.encode(bytes)})),
                    Err(e) => tracing::warn!("slack: cannot fetch a file of {}: {e}", message.channel),
                }
            }
        }
        if !media.is_empty() {
            envelope["media"] = Value::Array(media);
        }
        if config.stream_output {
            envelope["stream_output"] = json!(true);
        }
    }
    // `submit` answers when the turn ends; polled once here, which queues
    // the message, so a conversation's messages keep Slack's order.
    let handler = shared.handler.clone();
    let chat = message.channel.clone();
    let mut submitted = Box::pin(async move { MessageHandlerClient(&handler).submit(&envelope).await });
    let first = std::future::poll_fn(|cx| Poll::Ready(submitted.as_mut().poll(cx))).await;
    let shared = shared.clone();
    let finish = async move {
        if let Err(e) = submitted.await {
            tracing::warn!("slack: a message of {chat} got no answer: {e}");
        }
        // A streamed reply the turn did not complete (it failed) ends here.
        shared.live.end(&chat);
    };
    match first {
        Poll::Ready(Err(e)) => {
            tracing::warn!(
                "slack: the gateway did not take a message of {}: {e}; Slack will send it again",
                message.channel
            );
            false
        }
        Poll::Ready(Ok(_)) => true,
        Poll::Pending => {
            tokio::spawn(finish);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_read_lists_and_numbers() {
        let config = json!({"bot_token": "xoxb-1", "allow_users": ["U1", "U2"], "max_message_chars": 100});
        let config = Config::from(config.as_object().unwrap()).unwrap();
        assert_eq!(config.allow_users.len(), 2);
        assert_eq!(config.max_message_chars, 100);
        assert!(config.app_token.is_none());
        assert!(Config::from(json!({"max_file_bytes": "big"}).as_object().unwrap()).is_err());
    }
}
