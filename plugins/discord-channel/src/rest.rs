//! The Discord REST calls the channel makes, with Discord's rate-limit
//! rules in one place:
//! - a `429` says how long to wait in its body's `retry_after` (seconds,
//!   fractional; the `Retry-After` header otherwise), capped;
//! - a route whose `X-RateLimit-Remaining` reached 0 is not called again
//!   before its `X-RateLimit-Reset-After`, so the channel does not collect
//!   the 429s Discord counts against a bot (too many and its IP is banned
//!   for an hour);
//! - a request that never reached Discord (connect error) is retried with
//!   backoff; nothing else is retried blindly.
//!
//! Every answer is read under a cap (`max_answer_bytes`). The bot token
//! goes only to the API; attachments are fetched without it, and only
//! from Discord's CDN over https (or the configured API's origin): a URL
//! in a message is the message's word, and can name any host. Errors
//! never carry the token.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use reqwest::Method;
use serde_json::{json, Value};

/// What a REST call can fail with.
#[derive(Debug)]
pub enum RestError {
    /// Discord answered with an error status (its JSON `code` and `message`).
    Discord {
        /// The HTTP status.
        status: u16,
        /// Discord's explanation.
        message: String,
    },
    /// The request did not complete; `connect`: it never reached Discord.
    Network {
        /// What happened.
        message: String,
        /// Whether it failed before reaching the server.
        connect: bool,
    },
    /// Still rate limited after the retries.
    RateLimited(Duration),
}

impl std::fmt::Display for RestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RestError::Discord { status, message } => write!(f, "Discord refused the request ({status}: {message})"),
            RestError::Network { message, .. } => write!(f, "cannot reach the Discord API: {message}"),
            RestError::RateLimited(d) => {
                write!(f, "Discord keeps rate limiting (retry after {:.1} s)", d.as_secs_f64())
            }
        }
    }
}

impl std::error::Error for RestError {}

const ATTEMPTS: u32 = 4;
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Discord's CDN hosts, where attachments are.
const CDN_HOSTS: &[&str] = &["cdn.discordapp.com", "media.discordapp.net"];

fn network(e: reqwest::Error) -> RestError {
    let connect = e.is_connect();
    RestError::Network { connect, message: bub_kit::channel::error_chain(&e.without_url()) }
}

/// Whether an attachment at `url` may be fetched: from Discord's CDN over
/// https, or from the origin of the API the channel was configured with
/// (a test's or a self-hosted one's files).
pub fn may_fetch(url: &str, api_base: &str) -> bool {
    let (Ok(url), Ok(api)) = (reqwest::Url::parse(url), reqwest::Url::parse(api_base)) else { return false };
    let cdn = url.scheme() == "https" && url.host_str().is_some_and(|h| CDN_HOSTS.contains(&h)) && url.port().is_none();
    let same_origin = url.scheme() == api.scheme()
        && url.host_str() == api.host_str()
        && url.port_or_known_default() == api.port_or_known_default();
    (cdn || same_origin) && url.username().is_empty() && url.password().is_none()
}

/// The rate-limit bucket a request counts against, as Discord keys them:
/// the route with its major parameter (the channel), a message id not.
fn route(method: &Method, path: &str) -> String {
    let mut segments: Vec<&str> = path.split('?').next().unwrap_or("").split('/').collect();
    for i in 1..segments.len() {
        if segments[i - 1] == "messages" && segments[i].bytes().all(|b| b.is_ascii_digit()) {
            segments[i] = "{id}";
        }
    }
    format!("{method} {}", segments.join("/"))
}

/// `id` if it is a snowflake (1–20 ASCII digits), else the error to
/// answer: ids come from the Gateway, a message's fields and files, so
/// they are a peer's word, and one that is not digits (`../../users/@me`)
/// must never become part of a path the token is sent to.
pub fn snowflake(id: &str) -> Result<&str, RestError> {
    if !id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(id);
    }
    let shown: String = id.chars().take(40).collect();
    Err(RestError::Discord {
        status: 0,
        message: format!("{shown:?} is not a Discord id (a snowflake is digits); not requested"),
    })
}

/// The REST API with the bot token.
#[derive(Clone)]
pub struct Rest {
    client: reqwest::Client,
    base: String,
    token: String,
    max_answer: u64,
    // Routes that used their bucket up, and when it refills.
    exhausted: Arc<Mutex<HashMap<String, Instant>>>,
}

impl Rest {
    /// A client for `base` (`https://discord.com/api/v10`), through `proxy`
    /// when given, whose answers may be `max_answer` bytes long at most.
    pub fn new(base: &str, token: &str, proxy: Option<&str>, max_answer: u64) -> Result<Rest, String> {
        let mut client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(30))
            // Discord asks for this shape and refuses requests without one.
            .user_agent(concat!("DiscordBot (https://example.invalid/bub-rs, ", env!("CARGO_PKG_VERSION"), ")"));
        if let Some(proxy) = proxy {
            client = client.proxy(reqwest::Proxy::all(proxy).map_err(|e| format!("the proxy {proxy:?}: {e}"))?);
        }
        Ok(Rest {
            client: client.build().map_err(|e| format!("cannot build the HTTP client: {e}"))?,
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            max_answer,
            exhausted: Arc::default(),
        })
    }

    async fn once(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Result<Value, Duration>, RestError> {
        let bucket = route(&method, path);
        let refill = bub_abi::sync::lock(&self.exhausted).get(&bucket).copied();
        if let Some(at) = refill.filter(|at| *at > Instant::now()) {
            tokio::time::sleep_until(at.into()).await;
        }
        let mut request = self
            .client
            .request(method.clone(), format!("{}{path}", self.base))
            .header("authorization", format!("Bot {}", self.token));
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body.to_string());
        }
        let mut response = request.send().await.map_err(network)?;
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        if header("x-ratelimit-remaining").as_deref() == Some("0") {
            if let Some(after) = header("x-ratelimit-reset-after").and_then(|v| v.parse::<f64>().ok()) {
                let wait = bub_kit::time::seconds_or_zero(after).min(MAX_RETRY_AFTER);
                bub_abi::sync::lock(&self.exhausted).insert(bucket, Instant::now() + wait);
            }
        }
        let status = response.status().as_u16();
        let retry_header = header("retry-after").and_then(|v| v.trim().parse::<f64>().ok());
        let bytes = read_capped(&mut response, self.max_answer, |e| RestError::Network {
            message: format!(
                "{path}: {e}; an API or proxy sending this much is refused \
                 (raise BUB_DISCORD_MAX_ANSWER_BYTES if it is right)"
            ),
            connect: false,
        })
        .await?;
        let answer: Value =
            if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap_or(Value::Null) };
        if status == 429 {
            let seconds = answer["retry_after"].as_f64().or(retry_header).unwrap_or(1.0);
            if answer["global"] == json!(true) {
                tracing::warn!("discord: the bot is rate limited globally for {seconds:.1} s");
            }
            return Ok(Err(bub_kit::time::seconds_or_zero(seconds)));
        }
        if !(200..300).contains(&status) {
            let message = answer["message"].as_str().map(str::to_owned).unwrap_or_else(|| format!("status {status}"));
            return Err(RestError::Discord { status, message });
        }
        Ok(Ok(answer))
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Result<Value, RestError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let wait = match self.once(method.clone(), path, body.as_ref()).await {
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(wait)) if attempt < ATTEMPTS => wait.min(MAX_RETRY_AFTER),
                Ok(Err(wait)) => return Err(RestError::RateLimited(wait)),
                Err(RestError::Network { connect: true, .. }) if attempt < ATTEMPTS => {
                    Duration::from_millis(500 << attempt)
                }
                Err(e) => return Err(e),
            };
            tracing::warn!(
                "discord: {method} {}: rate limited or unreachable; retrying in {:.1} s",
                route(&method, path),
                wait.as_secs_f64()
            );
            tokio::time::sleep(wait).await;
        }
    }

    /// `GET /gateway/bot`: the Gateway's URL (checks the token too).
    pub async fn gateway_url(&self) -> Result<String, RestError> {
        let answer = self.call(Method::GET, "/gateway/bot", None).await?;
        answer["url"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| RestError::Discord { status: 200, message: "the answer to /gateway/bot has no url".into() })
    }

    /// A new message's body: its text, as a reply to `reply_to` when
    /// given (without pinging its author), and mentions not parsed, so a
    /// model's `@everyone` or `<@id>` pings nobody.
    fn message_body(content: &str, reply_to: Option<&str>) -> Value {
        let mut body = json!({"content": content, "allowed_mentions": {"parse": [], "replied_user": false}});
        if let Some(id) = reply_to {
            body["message_reference"] = json!({"message_id": id, "fail_if_not_exists": false});
        }
        body
    }

    /// `POST /channels/{channel}/messages`: the new message's id.
    pub async fn post(&self, channel: &str, content: &str, reply_to: Option<&str>) -> Result<String, RestError> {
        let channel = snowflake(channel)?;
        let body = Self::message_body(content, reply_to.map(snowflake).transpose()?);
        let answer = self.call(Method::POST, &format!("/channels/{channel}/messages"), Some(body)).await?;
        Ok(answer["id"].as_str().unwrap_or_default().to_owned())
    }

    /// A message posted once, with no retry: for what is dropped rather
    /// than waited for (a refusal to a stranger under a rate limit).
    pub async fn post_once(&self, channel: &str, content: &str, reply_to: Option<&str>) -> Result<(), RestError> {
        let channel = snowflake(channel)?;
        let body = Self::message_body(content, reply_to.map(snowflake).transpose()?);
        match self.once(Method::POST, &format!("/channels/{channel}/messages"), Some(&body)).await? {
            Ok(_) => Ok(()),
            Err(wait) => Err(RestError::RateLimited(wait)),
        }
    }

    /// `PATCH /channels/{channel}/messages/{id}`, once: a failed edit is
    /// made good by the next.
    pub async fn edit(&self, channel: &str, id: &str, content: &str) -> Result<(), RestError> {
        let (channel, id) = (snowflake(channel)?, snowflake(id)?);
        let body = json!({"content": content, "allowed_mentions": {"parse": []}});
        match self.once(Method::PATCH, &format!("/channels/{channel}/messages/{id}"), Some(&body)).await? {
            Ok(_) => Ok(()),
            Err(wait) => Err(RestError::RateLimited(wait)),
        }
    }

    /// `POST /channels/{channel}/typing`, once (it shows for ten seconds).
    pub async fn typing(&self, channel: &str) -> Result<(), RestError> {
        let channel = snowflake(channel)?;
        match self.once(Method::POST, &format!("/channels/{channel}/typing"), None).await? {
            Ok(_) => Ok(()),
            Err(wait) => Err(RestError::RateLimited(wait)),
        }
    }

    /// `GET /channels/{channel}`: its type and name (is it a thread?).
    pub async fn channel(&self, channel: &str) -> Result<Value, RestError> {
        let channel = snowflake(channel)?;
        self.call(Method::GET, &format!("/channels/{channel}"), None).await
    }

    /// `POST /users/@me/channels`: the id of the bot's direct-message
    /// channel with `user` (Discord answers the existing one).
    pub async fn dm_channel(&self, user: &str) -> Result<String, RestError> {
        let user = snowflake(user)?;
        let answer = self.call(Method::POST, "/users/@me/channels", Some(json!({"recipient_id": user}))).await?;
        let id = answer["id"].as_str().unwrap_or_default();
        Ok(snowflake(id)?.to_owned())
    }

    /// `GET /channels/{channel}/messages?after=…`: up to `limit` messages
    /// newer than `after`, oldest first.
    pub async fn messages_after(&self, channel: &str, after: u64, limit: u32) -> Result<Vec<Value>, RestError> {
        let channel = snowflake(channel)?;
        let path = format!("/channels/{channel}/messages?after={after}&limit={limit}");
        let answer = self.call(Method::GET, &path, None).await?;
        let mut messages = match answer {
            Value::Array(messages) => messages,
            _ => Vec::new(),
        };
        messages.sort_by_key(|m| crate::inbound::snowflake(&m["id"]));
        Ok(messages)
    }

    /// An attachment, at most `limit` bytes, fetched without the token.
    pub async fn download(&self, url: &str, limit: u64) -> Result<Vec<u8>, RestError> {
        if !may_fetch(url, &self.base) {
            return Err(RestError::Discord {
                status: 0,
                message: format!(
                    "an attachment at {} is not on Discord's CDN over https; not fetched",
                    reqwest::Url::parse(url).map(|u| u.origin().ascii_serialization()).unwrap_or_else(|_| "?".into())
                ),
            });
        }
        let mut response = self.client.get(url).timeout(Duration::from_secs(15)).send().await.map_err(network)?;
        if !response.status().is_success() {
            return Err(RestError::Discord {
                status: response.status().as_u16(),
                message: "the attachment download failed".into(),
            });
        }
        read_capped(&mut response, limit, |e| RestError::Network {
            message: format!("the attachment: {e}"),
            connect: false,
        })
        .await
    }
}

/// `response`'s body, refused with `too_large` once it passes `limit` bytes.
async fn read_capped(
    response: &mut reqwest::Response,
    limit: u64,
    too_large: impl FnOnce(String) -> RestError,
) -> Result<Vec<u8>, RestError> {
    bub_kit::http::read_capped(response, limit).await.map_err(|e| match e {
        bub_kit::http::ReadError::TooLarge(why) => too_large(why),
        bub_kit::http::ReadError::Network(e) => network(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachments_are_fetched_only_from_discords_cdn_over_https_or_the_apis_origin() {
        let api = "https://discord.com/api/v10";
        assert!(may_fetch("https://cdn.discordapp.com/attachments/1/2/a.png?ex=1", api));
        assert!(may_fetch("https://media.discordapp.net/attachments/1/2/a.png", api));
        assert!(!may_fetch("http://cdn.discordapp.com/attachments/1/2/a.png", api), "plain http");
        assert!(!may_fetch("https://cdn.discordapp.com.evil.example/a.png", api));
        assert!(!may_fetch("https://169.254.169.254/latest/meta-data", api), "anything else");
        assert!(!may_fetch("https://u:p@cdn.discordapp.com/a.png", api), "credentials in the URL");
        let local = "http://127.0.0.1:4000/api/v10";
        assert!(may_fetch("http://127.0.0.1:4000/cdn/a.png", local));
        assert!(!may_fetch("http://127.0.0.1:4001/cdn/a.png", local));
    }

    #[test]
    fn only_snowflakes_go_into_paths() {
        assert_eq!(snowflake("1234567890123456789").unwrap(), "1234567890123456789");
        for bad in ["", "../../users/@me", "12/34", "12a", "123456789012345678901", " 1", "１２"] {
            assert!(snowflake(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_route_is_keyed_by_its_channel_not_its_message() {
        assert_eq!(route(&Method::PATCH, "/channels/5/messages/99"), "PATCH /channels/5/messages/{id}");
        assert_eq!(route(&Method::GET, "/channels/5/messages?after=1&limit=100"), "GET /channels/5/messages");
        assert_ne!(route(&Method::POST, "/channels/5/messages"), route(&Method::POST, "/channels/6/messages"));
    }
}
