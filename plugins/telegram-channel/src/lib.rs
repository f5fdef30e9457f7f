//! `telegram-channel`: Bub's Telegram channel for `bub gateway`.
//!
//! ```sh
//! bub plugins install target/release/libtelegram_channel.so
//! BUB_TELEGRAM_TOKEN=123:abc bub gateway --enable-channel telegram
//! ```
//!
//! It long-polls `getUpdates` and hands every message to the gateway as
//! Bub 0.6's `TelegramChannel` does: session `telegram:<chat_id>`; the
//! content a JSON object of the text (or a description of the media, such
//! as `[Photo message] Caption: …`) with the message's metadata and the
//! message it replies to; photos, stickers, voice, audio, video and
//! documents of at most `max_file_bytes` (2 MiB) fetched into the
//! message's `media` (base64 `data`); `,` commands and `/bub <text>` as
//! `kind: command`; in groups only messages that mention the bot (`@bot`,
//! a text mention, the word "bub") or reply to it are active (the gateway
//! counts the others only within its active window). Messages are
//! debounced per session. While a turn runs the chat shows "typing…".
//!
//! Differences from Bub, on purpose:
//! - **Replies come from the channel**: a turn's outbound is sent to the
//!   chat (split at Telegram's 4096-character limit, at a paragraph, line
//!   or word break). Bub marks Telegram messages `output_channel: null`
//!   and leaves replying to its Telegram skill.
//! - **Updates that arrived while the gateway was down are answered**
//!   (`drop_pending_updates=false`; Bub drops them at every start).
//! - `stream_output` (`BUB_STREAM_OUTPUT`, or `stream_output=true` here)
//!   shows the reply as it is written: one message, edited at most once a
//!   second (`edit_interval_ms`), completed by the outbound.
//!
//! Who may talk to it: `BUB_TELEGRAM_ALLOW_CHATS` (chat ids; other chats
//! are ignored, `/start` there answers that they have no access) and
//! `BUB_TELEGRAM_ALLOW_USERS` (user ids or usernames; others are told
//! "Access denied."). Both empty: everyone who finds the bot, so set them
//! for any bot whose tools reach your machine (see docs/gateway.md).
//!
//! Settings: Bub's environment variables `BUB_TELEGRAM_TOKEN`,
//! `BUB_TELEGRAM_ALLOW_USERS`, `BUB_TELEGRAM_ALLOW_CHATS`,
//! `BUB_TELEGRAM_PROXY` (`http://…` or `socks5://…`) and
//! `BUB_TELEGRAM_API_BASE` (a self-hosted Bot API server; default
//! `https://api.telegram.org`); or the plugin's config keys of the same
//! names in lower case (`bub plugins config telegram-channel token=…`,
//! the environment wins), with `name` (`telegram`), `command_prefix`
//! (`,`), `poll_timeout` (30 s), `drop_pending_updates`, `max_file_bytes`,
//! `stream_output` and `edit_interval_ms`. Webhook mode instead of polling
//! (several gateways sharing one bot; see `webhook.rs`):
//! `BUB_TELEGRAM_WEBHOOK_URL` (the public URL), `BUB_TELEGRAM_WEBHOOK_SECRET`
//! (required), `BUB_TELEGRAM_WEBHOOK_LISTEN` (`127.0.0.1:8443`),
//! `webhook_max_connections` (1), `webhook_answer_seconds` (5: a delivery
//! is answered when its turn has run or after this long, before Telegram
//! gives up waiting), and the listener's bounds `webhook_open_connections`
//! (128), `webhook_header_timeout_seconds` and
//! `webhook_body_timeout_seconds` (10 each; see `bub_kit::server`). The
//! token is never logged:
//! error messages leave out the URL that carries it.

mod api;
pub mod inbound;
pub mod outbound;
mod webhook;

use std::{
    collections::HashSet,
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
use bub_kit::channel::{Backoff, LiveReplies, Messenger, RefusalPace, Settings, Typing};
use frankenstein::{
    methods::{
        DeleteWebhookParams, EditMessageTextParams, GetFileParams, GetUpdatesParams, SendChatActionParams,
        SendMessageParams,
    },
    types::{AllowedUpdate, ChatAction, ChatId, Message, User},
    updates::{Update, UpdateContent},
    AsyncTelegramApi,
};
use serde_json::{json, Map, Value};
use tokio::sync::watch;

use api::{ApiError, Bot};
use inbound::Me;

/// Bub's answer to `/start` from a chat outside the allow-list.
pub const NO_ACCESS_MESSAGE: &str = "You are not allowed to chat with me. Please deploy your own instance of Bub.";

/// The plugin.
pub struct TelegramPlugin {
    config: Config,
}

#[derive(Clone, Debug)]
struct Config {
    name: String,
    token: Option<String>,
    allow_users: HashSet<String>,
    allow_chats: HashSet<String>,
    proxy: Option<String>,
    api_base: String,
    command_prefix: String,
    poll_timeout: u32,
    drop_pending_updates: bool,
    max_file_bytes: u64,
    stream_output: bool,
    edit_interval: Duration,
    max_answer_bytes: u64,
    // Webhook mode (`webhook_url` set), else long polling.
    webhook: Option<webhook::Webhook>,
    // The plugin's data folder (the webhook's address file).
    data_dir: std::path::PathBuf,
}

impl Config {
    fn from(config: &Map<String, Value>, data_dir: std::path::PathBuf) -> Result<Config, BoxError> {
        let s = Settings { config, env_prefix: "BUB_TELEGRAM_", plugin: "telegram-channel" };
        Ok(Config {
            name: s.text("name").unwrap_or_else(|| "telegram".into()),
            token: s.text("token"),
            allow_users: s.list("allow_users"),
            allow_chats: s.list("allow_chats"),
            proxy: s.text("proxy"),
            api_base: s.text("api_base").unwrap_or_else(|| "https://api.telegram.org".into()),
            command_prefix: s.text("command_prefix").unwrap_or_else(|| ",".into()),
            poll_timeout: s.number("poll_timeout", 30)?.min(600) as u32,
            drop_pending_updates: s.flag("drop_pending_updates"),
            max_file_bytes: s.number("max_file_bytes", 2 * 1024 * 1024)?,
            stream_output: s.flag("stream_output"),
            edit_interval: Duration::from_millis(s.number("edit_interval_ms", 1000)?),
            max_answer_bytes: s.number("max_answer_bytes", 16 * 1024 * 1024)?,
            webhook: webhook::Webhook::from(&s)?,
            data_dir,
        })
    }
}

#[bub_abi::plugin]
impl Plugin for TelegramPlugin {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        Ok(TelegramPlugin { config: Config::from(&ctx.config, ctx.data_dir.clone())? })
    }

    /// The `telegram` channel (enabled when it has a token).
    fn provide_channels(&self, message_handler: Object) -> Option<Vec<Object>> {
        let shared = Shared {
            config: self.config.clone(),
            handler: message_handler,
            bot: Mutex::new(None),
            me: Mutex::new(Me::default()),
            poller: Mutex::new(None),
            typing: Typing::default(),
            live: LiveReplies::default(),
            refusals: Mutex::new(RefusalPace::new(REFUSAL_INTERVAL, 4096)),
        };
        Some(vec![Object::channel(TelegramChannel(Arc::new(shared)))])
    }
}

bub_abi::export_plugin!(TelegramPlugin);

struct Shared {
    config: Config,
    handler: Object,
    bot: Mutex<Option<Bot>>,
    me: Mutex<Me>,
    poller: Mutex<Option<Poller>>,
    // Chats showing "typing…": how many of their turns run, and the loop.
    typing: Typing<tokio::task::JoinHandle<()>>,
    // A chat's reply being streamed into one message.
    live: LiveReplies,
    // When a chat may next be told "Access denied.".
    refusals: Mutex<RefusalPace>,
}

/// A chat outside the allow-list is told it has no access at most this often.
const REFUSAL_INTERVAL: Duration = Duration::from_secs(60);

struct Poller {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Shared {
    fn bot(&self) -> Result<Bot, BoxError> {
        bub_abi::sync::lock(&self.bot).clone().ok_or_else(|| "telegram channel is not started".into())
    }

    fn chat_id(chat: &str) -> ChatId {
        chat.parse::<i64>().map(ChatId::Integer).unwrap_or_else(|_| ChatId::String(chat.to_owned()))
    }

    async fn say(&self, chat: &str, text: &str) -> Result<Option<Message>, ApiError> {
        let bot = bub_abi::sync::lock(&self.bot).clone();
        let Some(bot) = bot else { return Ok(None) };
        let params = SendMessageParams::builder().chat_id(Shared::chat_id(chat)).text(text).build();
        Ok(Some(bot.send_message(&params).await?.result))
    }

    /// Tells `chat` it is refused, off the receive loop, once: at most once
    /// a [`REFUSAL_INTERVAL`] per chat, and dropped when Telegram
    /// rate-limits, so strangers cannot delay the listed users' messages.
    fn refuse(&self, chat: &str, text: &'static str) {
        if !bub_abi::sync::lock(&self.refusals).allow(chat) {
            tracing::debug!("telegram: chat {chat} was refused recently; not telling it again");
            return;
        }
        let Some(bot) = bub_abi::sync::lock(&self.bot).clone() else { return };
        let params = SendMessageParams::builder().chat_id(Shared::chat_id(chat)).text(text).build();
        let body = serde_json::to_string(&params).unwrap_or_default();
        let chat = chat.to_owned();
        tokio::spawn(async move {
            if let Err(e) = bot.once::<Value>("sendMessage", Some(body)).await {
                tracing::info!("telegram: not telling chat {chat} it has no access: {e}");
            }
        });
    }
}

impl Messenger for Shared {
    async fn post(&self, chat: &str, text: &str) -> Result<String, String> {
        let sent = self.say(chat, text).await.map_err(|e| format!("sending to chat {chat}: {e}"))?;
        Ok(sent.map_or(0, |m| m.message_id).to_string())
    }

    async fn edit(&self, chat: &str, id: &str, text: &str) -> Result<(), String> {
        let id = id.parse::<i32>().map_err(|_| format!("{id:?} is no Telegram message id"))?;
        let bot = self.bot().map_err(|e| e.to_string())?;
        edit(&bot, chat, id, text).await.map_err(|e| format!("editing in chat {chat}: {e}"))
    }
}

struct TelegramChannel(Arc<Shared>);

impl Channel for TelegramChannel {
    fn name(&self) -> String {
        self.0.config.name.clone()
    }

    /// Checks the token (`getMe`) and starts polling in the background.
    fn start(&self) -> impl Fut<()> {
        let shared = self.0.clone();
        async move {
            let config = &shared.config;
            let token = config.token.clone().ok_or(
                "telegram channel: no token; set BUB_TELEGRAM_TOKEN (from @BotFather) or \
                 `bub plugins config telegram-channel token=...`",
            )?;
            let read_timeout = Duration::from_secs(u64::from(config.poll_timeout) + 30);
            let bot =
                Bot::new(&config.api_base, &token, config.proxy.as_deref(), read_timeout, config.max_answer_bytes)?;
            let me: User = match bot.get_me().await {
                Ok(me) => me.result,
                Err(e) if e.code() == Some(401) || e.code() == Some(404) => {
                    return Err(format!(
                        "telegram channel: {} refused the token ({e}); check BUB_TELEGRAM_TOKEN",
                        config.api_base
                    )
                    .into())
                }
                Err(e) => return Err(format!("telegram channel: getMe at {}: {e}", config.api_base).into()),
            };
            if config.webhook.is_none() {
                let webhook = DeleteWebhookParams::builder().drop_pending_updates(config.drop_pending_updates).build();
                bot.delete_webhook(&webhook).await.map_err(|e| format!("telegram channel: deleteWebhook: {e}"))?;
            }
            *bub_abi::sync::lock(&shared.me) =
                Me { id: me.id, username: me.username.clone().unwrap_or_default().to_lowercase() };
            *bub_abi::sync::lock(&shared.bot) = Some(bot.clone());
            tracing::info!(
                "telegram.start bot=@{} allow_users_count={} allow_chats_count={} proxy_enabled={}",
                me.username.as_deref().unwrap_or("?"),
                config.allow_users.len(),
                config.allow_chats.len(),
                config.proxy.is_some()
            );
            if config.allow_users.is_empty() && config.allow_chats.is_empty() {
                tracing::warn!(
                    "telegram channel: no BUB_TELEGRAM_ALLOW_USERS or BUB_TELEGRAM_ALLOW_CHATS: anyone who finds \
                     the bot can run turns (and the tools they reach) as you"
                );
            }
            let (stop, stopped) = watch::channel(false);
            let task = match &config.webhook {
                Some(hook) => webhook::start(shared.clone(), bot, hook, stopped).await?,
                None => tokio::spawn(poll(shared.clone(), bot, stopped)),
            };
            *bub_abi::sync::lock(&shared.poller) = Some(Poller { stop, task });
            Ok(())
        }
    }

    /// Stops polling after the update in hand and confirms what was handed
    /// over, so a restart does not see it again.
    fn stop(&self) -> impl Fut<()> {
        let poller = bub_abi::sync::lock(&self.0.poller).take();
        let shared = self.0.clone();
        async move {
            if let Some(poller) = poller {
                let _ = poller.stop.send(true);
                let _ = tokio::time::timeout(Duration::from_secs(10), poller.task).await;
            }
            for task in shared.typing.drain() {
                task.abort();
            }
            tracing::info!("telegram.stopped");
            Ok(())
        }
    }

    /// An outbound to its chat: the streamed message completed, or new
    /// messages split at the length limit.
    fn send(&self, message: Envelope) -> impl Fut<()> {
        let shared = self.0.clone();
        async move {
            let chat = chat_of(&message).ok_or("telegram: an outbound without chat_id")?;
            let text = outbound::reply_text(message.get("content").and_then(Value::as_str).unwrap_or(""));
            shared
                .live
                .complete(&*shared, &chat, outbound::split(&text))
                .await
                .map_err(|e| format!("telegram: {e}"))?;
            Ok(())
        }
    }

    /// A model event of a streamed turn: text deltas grow one message.
    fn stream_event(&self, message: Envelope, event: StreamEvent) -> impl Fut<()> {
        let shared = self.0.clone();
        async move {
            let delta = bub_kit::envelope::text_delta(&event);
            let (Some(delta), Some(chat)) = (delta, chat_of(&message)) else { return Ok(()) };
            let interval = shared.config.edit_interval;
            if let Err(e) = shared.live.delta(&*shared, &chat, delta, interval, outbound::split).await {
                tracing::debug!("telegram: streaming to chat {chat}: {e}");
            }
            Ok(())
        }
    }

    /// Enabled with a token; debounced, as in Bub.
    fn info(&self) -> impl Fut<ChannelInfo> {
        let info = ChannelInfo { enabled: self.0.config.token.is_some(), needs_debounce: true, ..Default::default() };
        async move { Ok(info) }
    }
}

fn chat_of(message: &Envelope) -> Option<String> {
    match message.get("chat_id")? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

async fn edit(bot: &Bot, chat: &str, message_id: i32, text: &str) -> Result<(), ApiError> {
    let params =
        EditMessageTextParams::builder().chat_id(Shared::chat_id(chat)).message_id(message_id).text(text).build();
    match bot.edit_message_text(&params).await {
        Ok(_) => Ok(()),
        // Telegram refuses an edit that changes nothing; that is done.
        Err(ApiError::Api(e)) if e.description.contains("message is not modified") => Ok(()),
        Err(e) => Err(e),
    }
}

/// The polling loop: one `getUpdates` at a time, each update handed to the
/// gateway in order; network trouble and `429`s wait and retry.
///
/// Telegram confirms an update when `getUpdates` is next called with an
/// `offset` above its `update_id`, and then never sends it again. So the
/// offset moves past an update only once the gateway has taken it (its
/// journal holds it) or the channel settled it (ignored, refused); an
/// update the gateway does not take (it is stopping) is left
/// unconfirmed, with the rest of its batch, and Telegram sends them again
/// after the next start.
async fn poll(shared: Arc<Shared>, bot: Bot, mut stopped: watch::Receiver<bool>) {
    let mut confirmed = Confirmed::default();
    let implausible = bub_kit::channel::LogPace::new(Duration::from_secs(60));
    let mut backoff = Backoff::default();
    let mut held = Duration::from_secs(1);
    loop {
        if *stopped.borrow() {
            break;
        }
        let params = GetUpdatesParams::builder()
            .maybe_offset(confirmed.offset())
            .timeout(shared.config.poll_timeout)
            .allowed_updates(vec![AllowedUpdate::Message])
            .build();
        let body = serde_json::to_string(&params).unwrap_or_default();
        // Raw updates, so that one this crate cannot read is skipped
        // rather than failing (and repeating) the whole batch.
        let answer = tokio::select! {
            answer = bot.call::<frankenstein::response::MethodResponse<Vec<Value>>>("getUpdates", Some(body)) => answer,
            _ = stopped.changed() => break,
        };
        let updates = match answer {
            Ok(answer) => {
                backoff.succeeded();
                answer.result
            }
            Err(e) => {
                let wait = match (e.retry_after(), e.code()) {
                    (Some(seconds), _) => Duration::from_secs(seconds.min(300)),
                    // Another process polls the same bot (or a webhook is set).
                    (None, Some(409)) => Duration::from_secs(5),
                    _ => backoff.failed(),
                };
                tracing::warn!("telegram: getUpdates: {e}; retrying in {} s", wait.as_secs());
                tokio::select! {
                    _ = tokio::time::sleep(wait) => continue,
                    _ = stopped.changed() => break,
                }
            }
        };
        let mut refused = false;
        for raw in updates {
            let Some(id) = raw.get("update_id").and_then(Value::as_i64) else { continue };
            if !Confirmed::plausible(id) {
                if implausible.note().is_some() {
                    tracing::warn!(
                        "telegram: skipping update_id {id}, which Telegram cannot have sent (ids are positive and \
                         below 2^53); its offset would confirm every later update unseen"
                    );
                }
                continue;
            }
            if !confirmed.is_new(id) {
                continue;
            }
            if !take_update(&shared, &bot, id, raw, None).await {
                refused = true;
                break;
            }
            confirmed.settle(id);
        }
        if refused {
            // Not confirmed: asked again after a pause (the gateway may
            // take it then), or after the next start when it is stopping.
            tracing::info!(
                "telegram: the gateway takes no messages now; updates from here stay with Telegram \
                 (asked again in {} s)",
                held.as_secs()
            );
            tokio::select! {
                _ = tokio::time::sleep(held) => {}
                _ = stopped.changed() => break,
            }
            held = (held * 2).min(Duration::from_secs(30));
        } else {
            held = Duration::from_secs(1);
        }
    }
    // Confirm what was taken (the next getUpdates would have).
    if let Some(offset) = confirmed.offset() {
        let params = GetUpdatesParams::builder().offset(offset).timeout(0).limit(1).build();
        let body = serde_json::to_string(&params).unwrap_or_default();
        let confirm = bot.call::<frankenstein::response::MethodResponse<Vec<Value>>>("getUpdates", Some(body));
        let _ = tokio::time::timeout(Duration::from_secs(5), confirm).await;
    }
}

/// The updates settled so far: the highest `update_id`, and the `offset`
/// that confirms it.
///
/// By Telegram's rule an `offset` confirms every update below it, sent or
/// not. So an id a broken or hostile server sends far past any real one
/// (Telegram's are positive and grow by one; none comes near 2^53, the
/// largest integer a JSON reader keeps exactly) is not settled: moving the
/// offset past it would confirm every later real update unseen. Such an
/// update is skipped and said once; the offset never passes the last
/// plausible update seen.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Confirmed(Option<i64>);

/// The largest `update_id` taken as Telegram's (2^53 - 1).
const MAX_UPDATE_ID: i64 = (1 << 53) - 1;

impl Confirmed {
    /// The `offset` for the next `getUpdates`.
    fn offset(self) -> Option<i64> {
        self.0.map(|id| id + 1)
    }

    /// Whether `id` is one Telegram could have sent.
    fn plausible(id: i64) -> bool {
        (1..=MAX_UPDATE_ID).contains(&id)
    }

    /// Whether update `id` was not settled yet (an implausible one never is new).
    fn is_new(self, id: i64) -> bool {
        Self::plausible(id) && self.0.is_none_or(|last| id > last)
    }

    /// Update `id` is settled (an implausible one is not: see above).
    fn settle(&mut self, id: i64) {
        if Self::plausible(id) {
            self.0 = Some(self.0.map_or(id, |last| last.max(id)));
        }
    }
}

/// Hands update `id` (as Telegram sent it) to the gateway; whether it was
/// taken or settled here (see [`on_message`]). An update that is not a
/// message, or one this version cannot read, is settled (skipped).
async fn take_update(shared: &Arc<Shared>, bot: &Bot, id: i64, raw: Value, patience: Option<Duration>) -> bool {
    match serde_json::from_value::<Update>(raw) {
        Ok(Update { content: UpdateContent::Message(message), .. }) => {
            on_message(shared, bot, id, *message, patience).await
        }
        Ok(_) => true,
        Err(e) => {
            tracing::warn!("telegram: skipping update {id} this version cannot read: {e}");
            true
        }
    }
}

/// Hands one message to the gateway; whether it is settled: taken, or
/// deliberately not handed over (a stranger, a bot command). `false`: the
/// gateway refused it, and it must stay unconfirmed. With `patience`
/// (webhook mode) it returns when the message's turn has run (a turn
/// cancelled before it ran counts as not taken), or once `patience` has
/// passed, the turn running on.
async fn on_message(
    shared: &Arc<Shared>,
    bot: &Bot,
    update: i64,
    message: Message,
    patience: Option<Duration>,
) -> bool {
    let config = &shared.config;
    let chat = message.chat.id.to_string();
    let allowed_chat = config.allow_chats.is_empty() || config.allow_chats.contains(&chat);
    let command = inbound::bot_command(&message);
    if command.as_deref() == Some("start") {
        if allowed_chat {
            if let Err(e) = shared.say(&chat, "Bub is online. Send text to start.").await {
                tracing::warn!("telegram: answering /start in chat {chat}: {e}");
            }
        } else {
            shared.refuse(&chat, NO_ACCESS_MESSAGE);
        }
        return true;
    }
    if !allowed_chat {
        return true;
    }
    // Bot commands are not messages, `/bub <text>` aside.
    let text = message.text.clone().unwrap_or_default();
    let bub_command = command.as_deref() == Some("bub") && text.split_whitespace().nth(1).is_some();
    if command.is_some() && !bub_command {
        return true;
    }
    let Some(user) = message.from.as_deref() else { return true };
    let me = bub_abi::sync::lock(&shared.me).clone();
    if !config.allow_users.is_empty() {
        let id = user.id.to_string();
        let known = config.allow_users.contains(&id)
            || user.username.as_ref().is_some_and(|name| config.allow_users.contains(name));
        if !known {
            // Told only when the message was for the bot: a group's
            // chatter that addresses nobody gets no answer.
            if inbound::is_active(&message, &me) {
                shared.refuse(&chat, "Access denied.");
            }
            return true;
        }
    }
    let mut envelope = build_message(shared, bot, &message, &me).await;
    // Telegram delivers an update again when unsure it arrived (a late
    // webhook answer, an offset a killed poller never confirmed): the
    // update's key makes the repeat run nothing (bub_framework::repeats).
    envelope["idempotency_keys"] = json!([format!("{}:update:{update}", config.name)]);
    let active = envelope["is_active"] == json!(true) || envelope["kind"] == json!("command");
    let client = MessageHandlerClient(&shared.handler);
    if !active {
        return match client.handle(&envelope).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("telegram: the gateway did not take a message of chat {chat}: {e}");
                false
            }
        };
    }
    // `submit` answers when the turn ends: "typing…" until then. Polled once
    // here, which queues the message, so a chat's messages reach the
    // gateway in the order Telegram sent them; the rest waits apart.
    let handler = shared.handler.clone();
    let mut submitted = Box::pin(async move { MessageHandlerClient(&handler).submit(&envelope).await });
    let first = std::future::poll_fn(|cx| Poll::Ready(submitted.as_mut().poll(cx))).await;
    if let Poll::Ready(outcome) = first {
        return match outcome {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!("telegram: the gateway did not take a message of chat {chat}: {e}");
                false
            }
        };
    }
    typing_begin(shared, &chat);
    let shared = shared.clone();
    let finished = async move {
        let outcome = submitted.await;
        if let Err(e) = &outcome {
            tracing::warn!("telegram: a message of chat {chat} got no answer: {e}");
        }
        typing_end(&shared, &chat);
        // A streamed reply the turn did not complete (it failed) ends here.
        shared.live.end(&chat);
        outcome.is_ok_and(|d| d.status != "cancelled")
    };
    let Some(patience) = patience else {
        tokio::spawn(finished);
        return true;
    };
    let mut finished = Box::pin(finished);
    match tokio::time::timeout(patience, &mut finished).await {
        Ok(ran) => ran,
        Err(_) => {
            tokio::spawn(finished);
            true
        }
    }
}

fn typing_begin(shared: &Arc<Shared>, chat: &str) {
    shared.typing.begin(chat, || {
        let bot = bub_abi::sync::lock(&shared.bot).clone()?;
        let chat_id = Shared::chat_id(chat);
        Some(tokio::spawn(async move {
            loop {
                let params =
                    SendChatActionParams::builder().chat_id(chat_id.clone()).action(ChatAction::Typing).build();
                if let Err(e) = bot.send_chat_action(&params).await {
                    tracing::debug!("telegram: typing indicator: {e}");
                }
                // The indicator lasts five seconds.
                tokio::time::sleep(Duration::from_secs(4)).await;
            }
        }))
    });
}

fn typing_end(shared: &Shared, chat: &str) {
    if let Some(task) = shared.typing.end(chat) {
        task.abort();
    }
}

/// Bub's `_build_message`.
async fn build_message(shared: &Shared, bot: &Bot, message: &Message, me: &Me) -> Value {
    let config = &shared.config;
    let chat = message.chat.id.to_string();
    let session_id = format!("{}:{chat}", config.name);
    let mut parsed = inbound::parse(message);
    if let Some(rest) = parsed.content.strip_prefix("/bub ") {
        parsed.content = rest.to_owned();
    }
    let mut envelope = json!({
        "channel": config.name,
        "chat_id": chat,
        "session_id": session_id,
    });
    if parsed.content.trim_start().starts_with(config.command_prefix.as_str()) {
        envelope["content"] = json!(parsed.content.trim());
        envelope["kind"] = json!("command");
        return envelope;
    }
    // Files only of messages for the bot: a group's other photos are not
    // downloaded (Bub fetches lazily, when a turn reads them).
    let active = inbound::is_active(message, me);
    let mut media = Vec::new();
    if let Some(file) = parsed.file.as_ref().filter(|_| active) {
        media.extend(fetch(bot, file, config.max_file_bytes).await);
    }
    let mut metadata = parsed.metadata;
    if let Some(reply) = message.reply_to_message.as_deref().filter(|r| r.from.is_some()) {
        let reply = inbound::parse(reply);
        if let Some(file) = reply.file.as_ref().filter(|_| active) {
            media.extend(fetch(bot, file, config.max_file_bytes).await);
        }
        let mut meta = Map::new();
        meta.insert("message".into(), json!(reply.content));
        meta.extend(reply.metadata);
        metadata.insert("reply_to_message".into(), Value::Object(meta));
    }
    let mut content = Map::new();
    content.insert("message".into(), json!(parsed.content));
    content.extend(metadata);
    // Bub: `json.dumps({"message": content, **metadata}, ensure_ascii=False)`.
    envelope["content"] = json!(bub_kit::python::python_json(&Value::Object(content)));
    envelope["kind"] = json!("normal");
    envelope["is_active"] = json!(active);
    if !media.is_empty() {
        envelope["media"] = Value::Array(media);
    }
    if config.stream_output {
        envelope["stream_output"] = json!(true);
    }
    envelope
}

/// A file as a media part (`{type, media_type, data: base64, filename?}`),
/// or nothing when it is too large or cannot be fetched (logged).
async fn fetch(bot: &Bot, file: &inbound::FileRef, limit: u64) -> Option<Value> {
    if file.file_size.is_some_and(|size| size > limit) {
        tracing::info!("telegram: not fetching {} ({} bytes > max_file_bytes {limit})", file.file_id, file.file_size?);
        return None;
    }
    let fetched = async {
        let info = bot.get_file(&GetFileParams::builder().file_id(file.file_id.clone()).build()).await?.result;
        let path = info.file_path.ok_or_else(|| ApiError::Decode("getFile gave no file_path".into()))?;
        bot.download(&path, limit).await
    };
    match fetched.await {
        Ok(bytes) => {
            let mut part = json!({
                "type": file.kind,
                "media_type": file.mime_type,
                "data": base64::engine::general_purpose::STANDARD.encode(bytes),
            });
            if let Some(name) = &file.file_name {
                part["filename"] = json!(name);
            }
            Some(part)
        }
        Err(e) => {
            tracing::warn!("telegram: cannot fetch file {}: {e}", file.file_id);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_read_bubs_names_and_lists() {
        let config = json!({"allow_users": "1, ann ,", "allow_chats": ["-100", 5], "poll_timeout": 2});
        let config = Config::from(config.as_object().unwrap(), Default::default()).unwrap();
        assert_eq!(config.allow_users, HashSet::from(["1".to_owned(), "ann".to_owned()]));
        assert_eq!(config.allow_chats, HashSet::from(["-100".to_owned(), "5".to_owned()]));
        assert_eq!(config.poll_timeout, 2);
        assert_eq!(config.api_base, "https://api.telegram.org");
        let bad = json!({"poll_timeout": "soon"});
        assert!(Config::from(bad.as_object().unwrap(), Default::default()).is_err());
    }

    #[test]
    fn the_offset_confirms_settled_updates_and_never_passes_a_plausible_one() {
        let mut confirmed = Confirmed::default();
        assert_eq!(confirmed.offset(), None, "nothing settled: no offset, Telegram sends from the oldest");
        assert!(confirmed.is_new(7));
        confirmed.settle(7);
        assert_eq!(confirmed.offset(), Some(8));
        assert!(!confirmed.is_new(7) && confirmed.is_new(8));
        // A hostile id would confirm every later real update unseen: it is
        // not settled, and never new (skipped each time it is sent).
        for absurd in [i64::MAX, MAX_UPDATE_ID + 1, 0, -5] {
            assert!(!confirmed.is_new(absurd), "{absurd}");
            confirmed.settle(absurd);
            assert_eq!(confirmed.offset(), Some(8), "{absurd} moved the offset");
        }
        confirmed.settle(9);
        assert_eq!(confirmed.offset(), Some(10), "the next real update still moves it");
    }
}
