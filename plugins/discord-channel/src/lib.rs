//! `discord-channel`: a Discord channel for `bub gateway`, over Discord's
//! Gateway (a WebSocket the bot opens, so no public URL is needed) and
//! its REST API.
//!
//! ```sh
//! bub plugins install target/release/libdiscord_channel.so
//! BUB_DISCORD_TOKEN=… bub gateway --enable-channel discord
//! ```
//!
//! Messages are read as Bub's bub-discord reads them (`inbound.rs`):
//! session `discord:<channel_id>`; the content a JSON object of the text
//! and its metadata (`message_id`, `username`, `full_name`, `sender_id`,
//! `date`, `guild_id`, `reply_to_message`, attachments); `<prefix>bub `
//! (`!bub `) stripped, and what then starts with `,` a `kind: command`.
//! Direct messages, mentions of the bot, replies to it, text saying "bub"
//! and threads named "bub…" are active; other guild messages still reach
//! the gateway, which counts them only within its active window.
//! Images, audio and video of an active message, at most
//! `max_file_bytes` (2 MiB) each, are fetched (from Discord's CDN only,
//! without the token) into the message's `media`. While a turn runs the
//! channel shows "typing…".
//!
//! Replies go to the message's channel as a reply to its latest message
//! there (not pinging its author), split at Discord's 2,000-character
//! limit (counted in UTF-16 units, which is never fewer than Discord's
//! count). Replies never ping: mentions in a model's text (`@everyone`,
//! `<@id>`) are not parsed (`allowed_mentions`). With `stream_output` the
//! reply is one message edited as the model writes (at most once a
//! second, `edit_interval_ms`), completed by the outbound.
//!
//! Nothing lost at a stop or while down (see `cursors.rs`): the Gateway
//! never sends an event twice, so a message the gateway refuses while
//! stopping, or one that comes while it is down, is read back over REST
//! after the next start, each once, in order (`catch_up_hours`, 24).
//!
//! Who may talk to it: `BUB_DISCORD_ALLOW_CHANNELS` (channel ids; other
//! channels are ignored) and `BUB_DISCORD_ALLOW_USERS` (user ids, user
//! names or global names; others who address the bot are told "Access
//! denied.", at most once a minute per channel). Both empty: everyone who
//! can reach the bot, so set them for any bot whose tools reach your
//! machine (see docs/gateway.md).
//!
//! Settings: Bub's bub-discord variables `BUB_DISCORD_TOKEN`,
//! `BUB_DISCORD_ALLOW_USERS`, `BUB_DISCORD_ALLOW_CHANNELS`,
//! `BUB_DISCORD_COMMAND_PREFIX` (`!`) and `BUB_DISCORD_PROXY` (an
//! `http://` proxy, for the REST calls and the Gateway alike); or the
//! plugin config's keys of the same names in lower case (the environment
//! wins), with `name` (`discord`), `api_base`
//! (`https://discord.com/api/v10`), `max_file_bytes`,
//! `max_message_chars` (2000), `stream_output`, `edit_interval_ms`,
//! `max_answer_bytes` (16 MiB, every REST answer and Gateway message) and
//! `catch_up_hours`. The token is never logged.
//!
//! Differences from Bub's bub-discord, on purpose: a message with only
//! attachments or stickers counts (Bub's drops every message without
//! text); a leading mention of the bot before a `,` command is dropped
//! as Slack's channel does; strangers who address the bot are told so;
//! messages are read back after a stop.

mod cursors;
mod gateway;
pub mod inbound;
mod lanes;
mod rest;

use std::{
    collections::{HashMap, HashSet, VecDeque},
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
use bub_kit::channel::{reply_text, split_message, Count, LiveReplies, Messenger, RefusalPace, Settings, Typing};
use serde_json::{json, Map, Value};
use tokio::sync::watch;

use cursors::Cursors;
use inbound::Inbound;
use rest::Rest;

/// The plugin.
pub struct DiscordPlugin {
    config: Config,
    data_dir: std::path::PathBuf,
}

#[derive(Clone, Debug)]
struct Config {
    name: String,
    token: Option<String>,
    allow_users: HashSet<String>,
    allow_channels: HashSet<String>,
    command_prefix: String,
    proxy: Option<String>,
    api_base: String,
    max_file_bytes: u64,
    max_message_chars: usize,
    stream_output: bool,
    edit_interval: Duration,
    max_answer_bytes: u64,
    catch_up: Duration,
}

impl Config {
    fn from(config: &Map<String, Value>) -> Result<Config, BoxError> {
        let s = Settings { config, env_prefix: "BUB_DISCORD_", plugin: "discord-channel" };
        Ok(Config {
            name: s.text("name").unwrap_or_else(|| "discord".into()),
            token: s.text("token"),
            allow_users: s.list("allow_users"),
            allow_channels: s.list("allow_channels"),
            command_prefix: s.text("command_prefix").unwrap_or_else(|| "!".into()),
            proxy: s.text("proxy"),
            api_base: s.text("api_base").unwrap_or_else(|| "https://discord.com/api/v10".into()),
            max_file_bytes: s.number("max_file_bytes", 2 * 1024 * 1024)?,
            max_message_chars: s.number("max_message_chars", 2000)?.clamp(1, 2000) as usize,
            stream_output: s.flag("stream_output"),
            edit_interval: Duration::from_millis(s.number("edit_interval_ms", 1000)?),
            max_answer_bytes: s.number("max_answer_bytes", 16 * 1024 * 1024)?,
            catch_up: Duration::from_secs(s.number("catch_up_hours", 24)?.min(24 * 365) * 3600),
        })
    }
}

#[bub_abi::plugin]
impl Plugin for DiscordPlugin {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        Ok(DiscordPlugin { config: Config::from(&ctx.config)?, data_dir: ctx.data_dir.clone() })
    }

    /// The `discord` channel (enabled when it has a token).
    fn provide_channels(&self, message_handler: Object) -> Option<Vec<Object>> {
        let shared = Shared {
            config: self.config.clone(),
            handler: message_handler,
            rest: Mutex::new(None),
            me: Mutex::new(String::new()),
            socket: Mutex::new(None),
            latest: Mutex::default(),
            bub_threads: Mutex::new(HashMap::new()),
            seen: Mutex::new(VecDeque::new()),
            live: LiveReplies::default(),
            typing: Typing::default(),
            refusals: Mutex::new(RefusalPace::new(REFUSAL_INTERVAL, 4096)),
            cursors: Mutex::new(Cursors::load(self.data_dir.join("cursors.json"))),
            lanes: lanes::Lanes::default(),
        };
        Some(vec![Object::channel(DiscordChannel(Arc::new(shared)))])
    }
}

bub_abi::export_plugin!(DiscordPlugin);

/// What the channel's parts share.
pub(crate) struct Shared {
    config: Config,
    handler: Object,
    rest: Mutex<Option<Rest>>,
    /// The bot's user id (from READY).
    me: Mutex<String>,
    socket: Mutex<Option<(watch::Sender<bool>, tokio::task::JoinHandle<()>)>>,
    // A channel's latest inbound message: replies refer to it (the
    // [`CHANNELS`] most recently active channels).
    latest: Mutex<bub_kit::lru::Lru<String, String>>,
    // Whether a channel is a thread named "bub…" (asked once per channel).
    bub_threads: Mutex<HashMap<String, bool>>,
    // Recent message ids: a resumed session or a read-back can repeat one.
    seen: Mutex<VecDeque<String>>,
    live: LiveReplies,
    // Channels showing "typing…": how many of their turns run, and the loop.
    typing: Typing<tokio::task::JoinHandle<()>>,
    // When a channel may next be told "Access denied.".
    refusals: Mutex<RefusalPace>,
    cursors: Mutex<Cursors>,
    // Each channel's worker: its messages in Discord's order, apart from
    // the other channels' (see `lanes`).
    lanes: lanes::Lanes,
}

/// A channel's stranger is told "Access denied." at most this often.
const REFUSAL_INTERVAL: Duration = Duration::from_secs(60);

/// How many attachments of a message are fetched, at most.
const MAX_ATTACHMENTS: usize = 10;

/// How long a message's attachments may take in all: past it, the rest
/// stay in the metadata only.
const MEDIA_BUDGET: Duration = Duration::from_secs(30);

/// How long a channel lookup (is it a "bub" thread?) may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How many recent message ids are remembered.
const SEEN: usize = 2048;

/// How many channels' thread answers, and latest messages, are remembered.
const CHANNELS: usize = 4096;

impl Shared {
    fn rest(&self) -> Result<Rest, BoxError> {
        bub_abi::sync::lock(&self.rest).clone().ok_or_else(|| "discord channel is not started".into())
    }

    fn split(&self, text: &str) -> Vec<String> {
        split_message(text, self.config.max_message_chars, Count::Utf16)
    }

    /// Whether `channel` is a thread whose name starts with "bub" (Bub's
    /// bub-scoped threads), asked of Discord once per channel.
    async fn is_bub_thread(&self, channel: &str) -> bool {
        if let Some(known) = bub_abi::sync::lock(&self.bub_threads).get(channel) {
            return *known;
        }
        let Ok(rest) = self.rest() else { return false };
        // Bounded: a lookup Discord rate-limits for minutes must not hold
        // the channel's messages (unanswered: not a bub thread, asked again
        // next time).
        let answer = match tokio::time::timeout(LOOKUP_TIMEOUT, rest.channel(channel)).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                tracing::debug!("discord: cannot read channel {channel}: {e}");
                return false;
            }
            Err(_) => {
                tracing::info!(
                    "discord: looking up channel {channel} took over {LOOKUP_TIMEOUT:?}; taken as no bub thread"
                );
                return false;
            }
        };
        // Types 10, 11 and 12 are threads.
        let thread = matches!(answer["type"].as_u64(), Some(10..=12));
        let bub = thread && answer["name"].as_str().is_some_and(|n| n.to_lowercase().starts_with("bub"));
        let mut known = bub_abi::sync::lock(&self.bub_threads);
        if known.len() >= CHANNELS {
            known.clear();
        }
        known.insert(channel.to_owned(), bub);
        bub
    }
}

/// Replies answer the channel's latest message (a reply that pings nobody).
impl Messenger for Shared {
    async fn post(&self, channel: &str, text: &str) -> Result<String, String> {
        let reply_to = bub_abi::sync::lock(&self.latest).get(channel).cloned();
        let rest = self.rest().map_err(|e| e.to_string())?;
        rest.post(channel, text, reply_to.as_deref()).await.map_err(|e| format!("posting to {channel}: {e}"))
    }

    async fn edit(&self, channel: &str, id: &str, text: &str) -> Result<(), String> {
        let rest = self.rest().map_err(|e| e.to_string())?;
        rest.edit(channel, id, text).await.map_err(|e| format!("editing in {channel}: {e}"))
    }
}

struct DiscordChannel(Arc<Shared>);

fn chat_of(message: &Envelope) -> Option<String> {
    message.get("chat_id").and_then(Value::as_str).map(str::to_owned)
}

impl Channel for DiscordChannel {
    fn name(&self) -> String {
        self.0.config.name.clone()
    }

    /// Checks the token (`GET /gateway/bot`) and opens the Gateway.
    fn start(&self) -> impl Fut<()> {
        let shared = self.0.clone();
        async move {
            let config = &shared.config;
            let Some(token) = &config.token else {
                return Err("discord channel: set BUB_DISCORD_TOKEN (the bot's token, from the Developer Portal) \
                            or the plugin's token"
                    .into());
            };
            if let Some(proxy) = &config.proxy {
                bub_kit::websocket::parse_proxy(proxy)
                    .map_err(|e| format!("discord channel: BUB_DISCORD_PROXY: {e}"))?;
            }
            let rest = Rest::new(&config.api_base, token, config.proxy.as_deref(), config.max_answer_bytes)?;
            let url = rest.gateway_url().await.map_err(|e| {
                format!("discord channel: GET {}/gateway/bot: {e}; check BUB_DISCORD_TOKEN", config.api_base)
            })?;
            tracing::info!(
                "discord.start allow_users_count={} allow_channels_count={} proxy_enabled={}",
                config.allow_users.len(),
                config.allow_channels.len(),
                config.proxy.is_some()
            );
            if config.allow_users.is_empty() && config.allow_channels.is_empty() {
                tracing::warn!(
                    "discord channel: no BUB_DISCORD_ALLOW_USERS or BUB_DISCORD_ALLOW_CHANNELS: everyone who can \
                     reach the bot can run turns (and the tools they reach) as you"
                );
            }
            *bub_abi::sync::lock(&shared.rest) = Some(rest);
            let (stop, stopped) = watch::channel(false);
            let task = tokio::spawn(gateway::run(shared.clone(), url, stopped));
            *bub_abi::sync::lock(&shared.socket) = Some((stop, task));
            Ok(())
        }
    }

    /// Closes the Gateway connection.
    fn stop(&self) -> impl Fut<()> {
        let socket = bub_abi::sync::lock(&self.0.socket).take();
        let shared = self.0.clone();
        async move {
            if let Some((stop, task)) = socket {
                let _ = stop.send(true);
                let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
            }
            for task in shared.typing.drain() {
                task.abort();
            }
            tracing::info!("discord.stopped");
            Ok(())
        }
    }

    /// An outbound to its channel, as a reply to the latest message there.
    fn send(&self, message: Envelope) -> impl Fut<()> {
        let shared = self.0.clone();
        async move {
            let chat = chat_of(&message).ok_or("discord: an outbound without chat_id")?;
            let text = reply_text(message.get("content").and_then(Value::as_str).unwrap_or(""));
            shared.live.complete(&*shared, &chat, shared.split(&text)).await.map_err(|e| format!("discord: {e}"))?;
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
                tracing::debug!("discord: streaming to {chat}: {e}");
            }
            Ok(())
        }
    }

    /// Enabled with a token; debounced, as Bub's bub-discord is.
    fn info(&self) -> impl Fut<ChannelInfo> {
        let enabled = self.0.config.token.is_some();
        let info = ChannelInfo { enabled, needs_debounce: true, ..Default::default() };
        async move { Ok(info) }
    }
}

/// One message from the Gateway or a read-back, taken by its channel's
/// worker (see `lanes`): handed to the gateway unless seen already;
/// whether it is settled (taken, passed over, or a repeat). `false`: the
/// gateway refused it (it is stopping), so the channel's cursor stays
/// before it.
pub(crate) async fn take(shared: &Arc<Shared>, message: &Value) -> bool {
    let me = bub_abi::sync::lock(&shared.me).clone();
    let id = inbound::snowflake(&message["id"]);
    let channel = message["channel_id"].as_str().unwrap_or_default().to_owned();
    let guild = message["guild_id"].as_str().map(str::to_owned);
    let Some(inbound) = inbound::parse(message, &me) else {
        bub_abi::sync::lock(&shared.cursors).settled(&channel, id, guild.as_deref(), false);
        return true;
    };
    // Listed channels and people keep their cursors whatever strangers do.
    let config = &shared.config;
    let keep = config.allow_channels.contains(&inbound.channel)
        || (!config.allow_users.is_empty() && inbound.sender_names().iter().any(|n| config.allow_users.contains(*n)));
    {
        let mut seen = bub_abi::sync::lock(&shared.seen);
        if seen.contains(&inbound.id) {
            return true;
        }
        seen.push_back(inbound.id.clone());
        if seen.len() > SEEN {
            seen.pop_front();
        }
    }
    let taken = hand_over(shared, &me, inbound.clone()).await;
    let mut cursors = bub_abi::sync::lock(&shared.cursors);
    if taken {
        cursors.settled(&channel, id, guild.as_deref(), keep);
    } else {
        cursors.refused(&channel, id, guild.as_deref(), keep);
        // Not seen after all: the read-back after the next start must take it.
        bub_abi::sync::lock(&shared.seen).retain(|k| *k != inbound.id);
    }
    taken
}

/// Reads back, after a new session's READY, what each known channel got
/// since its cursor (see `cursors.rs`), oldest first.
pub(crate) async fn catch_up(shared: &Arc<Shared>) {
    let Ok(rest) = shared.rest() else { return };
    let oldest = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|now| now.saturating_sub(shared.config.catch_up).as_secs_f64())
        .unwrap_or(0.0);
    find_listed_dms(shared, &rest, oldest).await;
    let due = bub_abi::sync::lock(&shared.cursors).due();
    let mut read = 0;
    for channel in due {
        let mut after = channel.after;
        // At most ten pages of a hundred a channel.
        for _ in 0..10 {
            let page = match rest.messages_after(&channel.channel, after, 100).await {
                Ok(page) => page,
                Err(rest::RestError::Discord { status: status @ (403 | 404), message }) => {
                    // Gone, or the bot was removed: nothing to read there again.
                    tracing::info!(
                        "discord: channel {} cannot be read back ({status}: {message}); forgetting it",
                        channel.channel
                    );
                    bub_abi::sync::lock(&shared.cursors).forget(&channel.channel);
                    break;
                }
                Err(e) => {
                    tracing::warn!(
                        "discord: cannot read back channel {}: {e}; tried again at the next start",
                        channel.channel
                    );
                    break;
                }
            };
            let full = page.len() == 100;
            for mut message in page {
                let id = inbound::snowflake(&message["id"]);
                after = after.max(id);
                if inbound::created_at(id) < oldest {
                    bub_abi::sync::lock(&shared.cursors).settled(&channel.channel, id, channel.guild.as_deref(), false);
                    continue;
                }
                if let Some(guild) = &channel.guild {
                    message["guild_id"] = json!(guild);
                }
                read += 1;
                // Queued on the channel's worker before the Gateway's own
                // events are read: a channel's order holds.
                shared.lanes.dispatch(shared, message).await;
            }
            if !full {
                break;
            }
        }
    }
    if read > 0 {
        tracing::info!("discord: read back {read} messages that came while the gateway was stopping or down");
    }
}

/// The direct-message channels of the people `allow_users` names by id
/// that have no cursor yet: read back from `oldest` (seconds since the
/// epoch), so the first message of a conversation that began while the
/// gateway was down is answered. (Discord gives a bot no list of its
/// direct messages; people named by user name cannot be looked up.)
async fn find_listed_dms(shared: &Arc<Shared>, rest: &Rest, oldest: f64) {
    let users: Vec<&String> =
        shared.config.allow_users.iter().filter(|u| rest::snowflake(u).is_ok()).take(MAX_LISTED_DMS).collect();
    let after = inbound::snowflake_at(oldest);
    for user in users {
        match tokio::time::timeout(LOOKUP_TIMEOUT, rest.dm_channel(user)).await {
            Ok(Ok(channel)) => {
                if bub_abi::sync::lock(&shared.cursors).found_dm(&channel, after) {
                    tracing::info!("discord: reading back the direct messages of listed user {user} ({channel})");
                }
            }
            Ok(Err(e)) => tracing::debug!("discord: no direct-message channel with listed user {user}: {e}"),
            Err(_) => tracing::debug!("discord: looking up the direct messages of {user} took too long"),
        }
    }
}

/// How many listed users' direct-message channels are looked up at READY.
const MAX_LISTED_DMS: usize = 100;

async fn hand_over(shared: &Arc<Shared>, me: &str, message: Inbound) -> bool {
    let config = &shared.config;
    if !config.allow_channels.is_empty() && !config.allow_channels.contains(&message.channel) {
        return true;
    }
    let prefix = &config.command_prefix;
    if !config.allow_users.is_empty() && message.sender_names().iter().all(|n| !config.allow_users.contains(*n)) {
        tracing::warn!(
            "discord.inbound.denied channel_id={} sender_id={} reason=allow_users",
            message.channel,
            message.author
        );
        // Told only when the message was for the bot: a guild's chatter
        // that addresses nobody gets no answer. Paced, and dropped when
        // rate-limited.
        if message.is_active(me, prefix) && bub_abi::sync::lock(&shared.refusals).allow(&message.channel) {
            if let Ok(rest) = shared.rest() {
                let (channel, id) = (message.channel.clone(), message.id.clone());
                tokio::spawn(async move {
                    if let Err(e) = rest.post_once(&channel, "Access denied.", Some(&id)).await {
                        tracing::info!("discord: not telling {channel} it has no access: {e}");
                    }
                });
            }
        }
        return true;
    }
    bub_kit::lru::Lru::keep_in(&shared.latest, message.channel.clone(), message.id.clone(), 0, CHANNELS, u64::MAX);
    let mut envelope = json!({
        "channel": config.name,
        "chat_id": message.channel,
        "session_id": format!("{}:{}", config.name, message.channel),
        // A message taken, then read back after a kill before its cursor
        // moved, runs once (bub_framework::repeats).
        "idempotency_keys": [format!("{}:message:{}", config.name, message.id)],
    });
    let command = message.command(me, prefix);
    // A command always runs; other messages are asked whether they
    // address the bot, a guild's thread name last (it costs a request).
    let active = command.is_some()
        || message.is_active(me, prefix)
        || (message.guild.is_some() && shared.is_bub_thread(&message.channel).await);
    if let Some(command) = command {
        envelope["content"] = json!(command);
        envelope["kind"] = json!("command");
    } else {
        envelope["content"] = json!(message.content(prefix));
        envelope["kind"] = json!("normal");
        envelope["is_active"] = json!(active);
        if active {
            let media = fetch_media(shared, &message).await;
            if !media.is_empty() {
                envelope["media"] = Value::Array(media);
            }
        }
        if config.stream_output {
            envelope["stream_output"] = json!(true);
        }
    }
    let client = MessageHandlerClient(&shared.handler);
    if !active {
        return match client.handle(&envelope).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("discord: the gateway did not take a message of {}: {e}", message.channel);
                false
            }
        };
    }
    // `submit` answers when the turn ends: "typing…" until then. Polled
    // once here, which queues the message, so a channel's messages reach
    // the gateway in Discord's order; the rest waits apart.
    let handler = shared.handler.clone();
    let chat = message.channel.clone();
    let mut submitted = Box::pin(async move { MessageHandlerClient(&handler).submit(&envelope).await });
    let first = std::future::poll_fn(|cx| Poll::Ready(submitted.as_mut().poll(cx))).await;
    match first {
        Poll::Ready(Err(e)) => {
            tracing::warn!(
                "discord: the gateway did not take a message of {chat}: {e}; it is read back after the next start"
            );
            false
        }
        Poll::Ready(Ok(_)) => true,
        Poll::Pending => {
            typing_begin(shared, &chat);
            let shared = shared.clone();
            tokio::spawn(async move {
                if let Err(e) = submitted.await {
                    tracing::warn!("discord: a message of {chat} got no answer: {e}");
                }
                typing_end(&shared, &chat);
                // A streamed reply the turn did not complete (it failed) ends here.
                shared.live.end(&chat);
            });
            true
        }
    }
}

/// The message's images, audio and video within `max_file_bytes`, as
/// media parts; others (and failed downloads) stay in the metadata only.
async fn fetch_media(shared: &Arc<Shared>, message: &Inbound) -> Vec<Value> {
    let Ok(rest) = shared.rest() else { return Vec::new() };
    let mut media = Vec::new();
    let deadline = tokio::time::Instant::now() + MEDIA_BUDGET;
    // Discord allows ten attachments a message; a peer sending more gets ten fetched.
    for attachment in message.attachments.iter().take(MAX_ATTACHMENTS) {
        let Some(mime) = attachment.content_type.as_deref() else { continue };
        let kind = match mime.split('/').next() {
            Some("image") => "image",
            Some("audio") => "audio",
            Some("video") => "video",
            _ => continue,
        };
        if attachment.size.is_some_and(|s| s > shared.config.max_file_bytes) {
            tracing::info!(
                "discord: {} of {} is over max_file_bytes ({} bytes); not fetched",
                attachment.filename,
                message.channel,
                shared.config.max_file_bytes
            );
            continue;
        }
        match tokio::time::timeout_at(deadline, rest.download(&attachment.url, shared.config.max_file_bytes)).await {
            Ok(Ok(bytes)) => media.push(json!({"type": kind, "media_type": mime,
                "data": base64::engine::general_purpose::STANDARD.encode(bytes)})),
            Ok(Err(e)) => tracing::warn!("discord: cannot fetch {} of {}: {e}", attachment.filename, message.channel),
            Err(_) => {
                tracing::warn!(
                    "discord: the attachments of a message in {} took over {MEDIA_BUDGET:?}; the rest are not fetched",
                    message.channel
                );
                break;
            }
        }
    }
    media
}

fn typing_begin(shared: &Arc<Shared>, chat: &str) {
    shared.typing.begin(chat, || {
        let rest = shared.rest().ok()?;
        let channel = chat.to_owned();
        Some(tokio::spawn(async move {
            loop {
                if let Err(e) = rest.typing(&channel).await {
                    tracing::debug!("discord: typing indicator: {e}");
                }
                // The indicator lasts ten seconds.
                tokio::time::sleep(Duration::from_secs(8)).await;
            }
        }))
    });
}

fn typing_end(shared: &Shared, chat: &str) {
    if let Some(task) = shared.typing.end(chat) {
        task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_read_bubs_names_and_cap_the_message_length_at_discords() {
        let config = json!({"token": "t", "allow_users": ["U1", "ann"], "max_message_chars": 5000});
        let config = Config::from(config.as_object().unwrap()).unwrap();
        assert_eq!(config.allow_users.len(), 2);
        assert_eq!(config.max_message_chars, 2000, "Discord refuses longer messages");
        assert_eq!(config.command_prefix, "!");
        assert!(Config::from(json!({"max_file_bytes": "big"}).as_object().unwrap()).is_err());
    }
}
