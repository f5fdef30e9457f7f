//! Webhook mode: Telegram posts each update to `webhook_url` instead of
//! the channel polling for it, so several gateways behind one load
//! balancer can share one bot (polling cannot: Telegram answers a second
//! poller with 409).
//!
//! Telegram's delivery rules, which this follows:
//! - `setWebhook` with `secret_token`: every request carries it in
//!   `X-Telegram-Bot-Api-Secret-Token`; a request without it, or with
//!   another, is answered 401 and runs nothing (anyone can post to a
//!   public URL).
//! - A non-2xx answer makes Telegram deliver the update again later. An
//!   update the gateway does not take (it is stopping) is answered 503, so
//!   it comes back, to this gateway or another.
//! - `max_connections` (`webhook_max_connections`, default 1) bounds the
//!   updates Telegram has in flight. With 1, it sends the next only after
//!   the last was answered. An update is answered when its turn has run,
//!   or after `webhook_answer_seconds` (5), the turn running on (the
//!   gateway's journal holds it): Telegram does not document how long it
//!   waits, delivers an update again when an answer is late (about ten
//!   seconds, as others observe), and holds the chat's next updates
//!   meanwhile, so an agent turn of half a minute must not be what the
//!   answer waits for. A chat's turns then run in the order Telegram sent
//!   them whichever gateway gets each, as long as a turn starts within
//!   that time: with `tape-postgres`, a running turn holds its session's
//!   lock, and the next update's turn on another gateway waits for it.
//!   More connections serve more chats at once and give up that order.
//! - A delivery repeated to the same gateway (an `update_id` taken in the
//!   last 4,096, its turn running or done) is answered 200 at once and
//!   runs nothing. A repeat that comes later, after a restart, or to
//!   another gateway runs nothing either: the message carries the
//!   update's key (`idempotency_keys`), kept with the session's tape
//!   (`bub_framework::repeats`), and is answered 200.

use std::{collections::VecDeque, net::SocketAddr, sync::Arc};

use axum::{
    body::Body,
    extract::State,
    http::{HeaderMap, StatusCode},
    routing::post,
    Router,
};
use bub_abi::BoxError;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::{api::Bot, Shared};

/// The webhook settings (`webhook_url` set: webhook mode).
#[derive(Clone, Debug)]
pub(crate) struct Webhook {
    /// The public URL Telegram posts to.
    pub url: String,
    /// Where this gateway listens (the load balancer's target).
    pub listen: String,
    /// The `secret_token` every delivery must carry.
    pub secret: String,
    /// Telegram's `max_connections`.
    pub max_connections: u64,
    /// How long a delivery waits for its turn before it is answered.
    pub answer_after: std::time::Duration,
    /// What the listener allows anyone who finds its URL.
    pub limits: bub_kit::server::Limits,
}

impl Webhook {
    /// From the channel's settings; None without `webhook_url`.
    pub(crate) fn from(s: &bub_kit::channel::Settings<'_>) -> Result<Option<Webhook>, BoxError> {
        let Some(url) = s.text("webhook_url") else { return Ok(None) };
        let secret = s.text("webhook_secret").ok_or(
            "telegram channel: webhook mode needs BUB_TELEGRAM_WEBHOOK_SECRET (1-256 of A-Z a-z 0-9 _ -): \
             the same in every gateway, so Telegram's deliveries can be told from anyone else's",
        )?;
        let valid = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if secret.len() > 256 || !secret.chars().all(valid) {
            return Err("telegram channel: webhook_secret must be 1-256 of A-Z a-z 0-9 _ - (Telegram's rule)".into());
        }
        let listen = s.text("webhook_listen").unwrap_or_else(|| "127.0.0.1:8443".into());
        listen.parse::<SocketAddr>().map_err(|e| {
            format!("telegram channel: webhook_listen={listen:?} is not an address like 0.0.0.0:8443 ({e})")
        })?;
        let max_connections = s.number("webhook_max_connections", 1)?.clamp(1, 100);
        let answer_after = std::time::Duration::from_secs(s.number("webhook_answer_seconds", 5)?.min(60));
        let seconds = |key: &str, default: u64| -> Result<std::time::Duration, String> {
            Ok(std::time::Duration::from_secs(s.number(key, default)?.clamp(1, 3600)))
        };
        let limits = bub_kit::server::Limits {
            max_connections: s.number("webhook_open_connections", 128)?.clamp(1, 100_000) as usize,
            header_timeout: seconds("webhook_header_timeout_seconds", 10)?,
            body_timeout: seconds("webhook_body_timeout_seconds", 10)?,
            max_body_bytes: 1 << 20,
            write_timeout: std::time::Duration::from_secs(30),
        };
        Ok(Some(Webhook { url, listen, secret, max_connections, answer_after, limits }))
    }
}

struct Hook {
    shared: Arc<Shared>,
    bot: Bot,
    secret: String,
    answer_after: std::time::Duration,
    limits: bub_kit::server::Limits,
    // The update ids taken lately (turns running or done), oldest first.
    taken: std::sync::Mutex<VecDeque<i64>>,
    // Requests without the secret, logged once a minute at most.
    refused: bub_kit::channel::LogPace,
}

/// Registers the webhook with Telegram and serves it until `stopped`.
pub(crate) async fn start(
    shared: Arc<Shared>,
    bot: Bot,
    hook: &Webhook,
    mut stopped: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, BoxError> {
    let listener = tokio::net::TcpListener::bind(&hook.listen).await.map_err(|e| {
        format!("telegram channel: cannot listen on {} for the webhook: {e} (webhook_listen)", hook.listen)
    })?;
    let address = listener.local_addr()?;
    let body = json!({
        "url": hook.url,
        "secret_token": hook.secret,
        "allowed_updates": ["message"],
        "max_connections": hook.max_connections,
        "drop_pending_updates": shared.config.drop_pending_updates,
    })
    .to_string();
    bot.call::<frankenstein::response::MethodResponse<Value>>("setWebhook", Some(body))
        .await
        .map_err(|e| format!("telegram channel: setWebhook: {e}"))?;
    let data = &shared.config.data_dir;
    let written = bub_kit::files::create_private_dir(data)
        .and_then(|()| bub_kit::files::write_private(&data.join("webhook-address"), format!("{address}\n").as_bytes()));
    if let Err(e) = written {
        tracing::warn!("telegram: could not write {}/webhook-address: {e}", data.display());
    }
    tracing::info!("telegram webhook listening on {address} for {}", hook.url);
    let state = Arc::new(Hook {
        shared,
        bot,
        secret: hook.secret.clone(),
        answer_after: hook.answer_after,
        limits: hook.limits,
        taken: Default::default(),
        refused: bub_kit::channel::LogPace::new(std::time::Duration::from_secs(60)),
    });
    let app = Router::new().fallback(post(deliver)).with_state(state);
    let (stop, stop_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let _ = stopped.wait_for(|s| *s).await;
        let _ = stop.send(());
    });
    let named = bub_kit::server::Named { who: "telegram webhook", connections_setting: "webhook_open_connections" };
    Ok(tokio::spawn(bub_kit::server::serve(listener, app, hook.limits, stop_rx, named)))
}

/// One delivery: its secret checked on the headers (a stranger's body is
/// never read), its body read within the listener's bounds, then handed
/// to the gateway; answered when its turn has run (200), or 503 when the
/// gateway did not take it.
async fn deliver(State(hook): State<Arc<Hook>>, headers: HeaderMap, body: Body) -> StatusCode {
    let given = headers.get("x-telegram-bot-api-secret-token").map(|v| v.as_bytes()).unwrap_or_default();
    if !bub_kit::channel::same_secret(given, hook.secret.as_bytes()) {
        if let Some(n) = hook.refused.note() {
            tracing::warn!("telegram: {n} webhook request(s) without the secret token refused (their bodies unread)");
        }
        return StatusCode::UNAUTHORIZED;
    }
    let body = match bub_kit::server::read_body(&hook.limits, body).await {
        Ok(body) => body,
        Err(bub_kit::server::BodyError::TooLarge(_)) => return StatusCode::PAYLOAD_TOO_LARGE,
        Err(bub_kit::server::BodyError::TimedOut(_)) => return StatusCode::REQUEST_TIMEOUT,
        Err(bub_kit::server::BodyError::Failed(_)) => return StatusCode::BAD_REQUEST,
    };
    let Ok(raw) = serde_json::from_slice::<Value>(&body) else { return StatusCode::BAD_REQUEST };
    let Some(id) = raw.get("update_id").and_then(Value::as_i64) else { return StatusCode::BAD_REQUEST };
    {
        // Marked before its turn runs: a delivery repeated meanwhile
        // (Telegram found the answer late) runs nothing.
        let mut taken = bub_abi::sync::lock(&hook.taken);
        if taken.contains(&id) {
            return StatusCode::OK;
        }
        taken.push_back(id);
        if taken.len() > 4096 {
            taken.pop_front();
        }
    }
    if !super::take_update(&hook.shared, &hook.bot, id, raw, Some(hook.answer_after)).await {
        bub_abi::sync::lock(&hook.taken).retain(|t| *t != id);
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    StatusCode::OK
}
