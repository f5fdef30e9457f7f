//! The Slack Web API calls the channel makes, with Slack's rate-limit rule
//! in one place: a `429` says how long to wait in `Retry-After` (capped);
//! a request that never reached Slack (connect error) is retried with
//! backoff. Every answer is read under a cap (`max_answer_bytes`). The bot
//! token goes only to the API and to Slack's file host over https: a file
//! URL is the event's word, and an event can name any host. Errors never
//! carry a token.

use std::time::Duration;

use serde_json::{json, Value};

/// What a Web API call can fail with.
#[derive(Debug)]
pub enum ApiError {
    /// Slack answered `ok: false` with this error code (`invalid_auth`, …).
    Slack(String),
    /// The request did not complete; `connect`: it never reached Slack.
    Network { message: String, connect: bool },
    /// Still rate limited after the retries.
    RateLimited(u64),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Slack(code) => write!(f, "Slack refused the request ({code})"),
            ApiError::Network { message, .. } => write!(f, "cannot reach the Slack API: {message}"),
            ApiError::RateLimited(s) => write!(f, "Slack keeps rate limiting (retry after {s} s)"),
        }
    }
}

impl std::error::Error for ApiError {}

const ATTEMPTS: u32 = 4;
const MAX_RETRY_AFTER: u64 = 60;

fn network(e: reqwest::Error) -> ApiError {
    let connect = e.is_connect();
    ApiError::Network { connect, message: bub_kit::channel::error_chain(&e.without_url()) }
}

/// The Web API with the two tokens.
#[derive(Clone)]
pub struct Api {
    client: reqwest::Client,
    base: String,
    bot_token: String,
    app_token: String,
    max_answer: u64,
}

/// Slack's file host: `url_private` of a workspace's files.
const FILE_HOST: &str = "files.slack.com";

/// Whether the bot token may be sent with a request for `url`: to Slack's
/// file host over https, or to the origin of the API the channel was
/// configured with (a self-hosted or test API serves its own files).
pub fn may_carry_token(url: &str, api_base: &str) -> bool {
    let (Ok(url), Ok(api)) = (reqwest::Url::parse(url), reqwest::Url::parse(api_base)) else { return false };
    let slack_files = url.scheme() == "https" && url.host_str() == Some(FILE_HOST) && url.port().is_none();
    let same_origin = url.scheme() == api.scheme()
        && url.host_str() == api.host_str()
        && url.port_or_known_default() == api.port_or_known_default();
    (slack_files || same_origin) && url.username().is_empty() && url.password().is_none()
}

impl Api {
    /// A client for `base` (`https://slack.com/api`) whose answers may be
    /// `max_answer` bytes long at most.
    pub fn new(base: &str, bot_token: &str, app_token: &str, max_answer: u64) -> Result<Api, String> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Api {
            client,
            base: base.trim_end_matches('/').to_owned(),
            bot_token: bot_token.to_owned(),
            app_token: app_token.to_owned(),
            max_answer,
        })
    }

    async fn once(&self, method: &str, token: &str, body: &Value) -> Result<Result<Value, u64>, ApiError> {
        let response = self
            .client
            .post(format!("{}/{method}", self.base))
            .bearer_auth(token)
            .header("content-type", "application/json; charset=utf-8")
            .body(body.to_string())
            .send()
            .await
            .map_err(network)?;
        if response.status().as_u16() == 429 {
            let wait = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(1);
            return Ok(Err(wait));
        }
        let mut response = response;
        let bytes = read_capped(&mut response, self.max_answer, |e| ApiError::Network {
            message: format!(
                "{method}: {e}; an API or proxy sending this much is refused \
                 (raise BUB_SLACK_MAX_ANSWER_BYTES if it is right)"
            ),
            connect: false,
        })
        .await?;
        let answer: Value = serde_json::from_slice(&bytes).map_err(|e| ApiError::Network {
            message: format!("{method}: the answer is not JSON ({e})"),
            connect: false,
        })?;
        if answer["ok"] == json!(true) {
            Ok(Ok(answer))
        } else {
            Err(ApiError::Slack(answer["error"].as_str().unwrap_or("unknown_error").to_owned()))
        }
    }

    async fn call(&self, method: &str, token: &str, body: Value) -> Result<Value, ApiError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let wait = match self.once(method, token, &body).await {
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(seconds)) if attempt < ATTEMPTS => Duration::from_secs(seconds.min(MAX_RETRY_AFTER)),
                Ok(Err(seconds)) => return Err(ApiError::RateLimited(seconds)),
                Err(ApiError::Network { connect: true, .. }) if attempt < ATTEMPTS => {
                    Duration::from_millis(500 << attempt)
                }
                Err(e) => return Err(e),
            };
            tracing::warn!("slack: {method}: rate limited or unreachable; retrying in {:.1} s", wait.as_secs_f64());
            tokio::time::sleep(wait).await;
        }
    }

    /// `apps.connections.open`: a Socket Mode WebSocket URL (app token).
    pub async fn open_connection(&self) -> Result<String, ApiError> {
        let answer = self.call("apps.connections.open", &self.app_token, json!({})).await?;
        answer["url"].as_str().map(str::to_owned).ok_or_else(|| ApiError::Slack("no_url".into()))
    }

    /// `auth.test`: the bot's user id and team (bot token).
    pub async fn auth_test(&self) -> Result<(String, String), ApiError> {
        let answer = self.call("auth.test", &self.bot_token, json!({})).await?;
        let user = answer["user_id"].as_str().unwrap_or_default().to_owned();
        Ok((user, answer["team"].as_str().unwrap_or_default().to_owned()))
    }

    /// `chat.postMessage`: the new message's `ts`.
    pub async fn post(&self, channel: &str, text: &str, thread_ts: Option<&str>) -> Result<String, ApiError> {
        let mut body = json!({"channel": channel, "text": text});
        if let Some(ts) = thread_ts {
            body["thread_ts"] = json!(ts);
        }
        let answer = self.call("chat.postMessage", &self.bot_token, body).await?;
        Ok(answer["ts"].as_str().unwrap_or_default().to_owned())
    }

    /// `chat.postMessage` once, with no retry: for what is dropped rather
    /// than waited for (a refusal to a stranger under a rate limit).
    pub async fn post_once(&self, channel: &str, text: &str, thread_ts: Option<&str>) -> Result<(), ApiError> {
        let mut body = json!({"channel": channel, "text": text});
        if let Some(ts) = thread_ts {
            body["thread_ts"] = json!(ts);
        }
        match self.once("chat.postMessage", &self.bot_token, &body).await? {
            Ok(_) => Ok(()),
            Err(seconds) => Err(ApiError::RateLimited(seconds)),
        }
    }

    /// `chat.update` of message `ts`, once: a failed edit is made good by
    /// the next.
    pub async fn update(&self, channel: &str, ts: &str, text: &str) -> Result<(), ApiError> {
        let body = json!({"channel": channel, "ts": ts, "text": text});
        match self.once("chat.update", &self.bot_token, &body).await? {
            Ok(_) => Ok(()),
            Err(seconds) => Err(ApiError::RateLimited(seconds)),
        }
    }

    /// A file of the workspace (`url_private`, bot token), at most `limit` bytes.
    pub async fn download(&self, url: &str, limit: u64) -> Result<Vec<u8>, ApiError> {
        if !may_carry_token(url, &self.base) {
            return Err(ApiError::Slack(format!(
                "a file at {} is not on {FILE_HOST} over https; not sending the bot token there",
                reqwest::Url::parse(url).map(|u| u.origin().ascii_serialization()).unwrap_or_else(|_| "?".into())
            )));
        }
        let mut response = self.client.get(url).bearer_auth(&self.bot_token).send().await.map_err(network)?;
        if !response.status().is_success() {
            return Err(ApiError::Slack(format!("file download answered {}", response.status())));
        }
        read_capped(&mut response, limit, |e| ApiError::Slack(format!("the file: {e} (max_file_bytes)"))).await
    }
}

/// `response`'s body, refused with `too_large` once it passes `limit` bytes.
async fn read_capped(
    response: &mut reqwest::Response,
    limit: u64,
    too_large: impl FnOnce(String) -> ApiError,
) -> Result<Vec<u8>, ApiError> {
    bub_kit::http::read_capped(response, limit).await.map_err(|e| match e {
        bub_kit::http::ReadError::TooLarge(why) => too_large(why),
        bub_kit::http::ReadError::Network(e) => network(e),
    })
}

#[cfg(test)]
mod tests {
    use super::may_carry_token;

    #[test]
    fn the_bot_token_goes_only_to_slacks_file_host_over_https_or_the_apis_origin() {
        let api = "https://slack.com/api";
        assert!(may_carry_token("https://files.slack.com/files-pri/T1-F1/a.png", api));
        assert!(!may_carry_token("http://files.slack.com/files-pri/T1-F1/a.png", api), "plain http");
        assert!(!may_carry_token("https://files.slack.com.evil.example/a.png", api));
        assert!(!may_carry_token("https://evil.example/a.png", api));
        assert!(!may_carry_token("https://files.slack.com:8443/a.png", api), "another port");
        assert!(!may_carry_token("https://user@files.slack.com/a.png", api), "credentials in the URL");
        assert!(!may_carry_token("not a url", api));
        let local = "http://127.0.0.1:4000/api";
        assert!(may_carry_token("http://127.0.0.1:4000/files/a.png", local), "the configured API's origin");
        assert!(!may_carry_token("http://127.0.0.1:4001/files/a.png", local), "another local port");
    }
}
