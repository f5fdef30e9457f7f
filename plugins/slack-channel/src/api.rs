//! The Slack Web API calls the channel makes, with Slack's rate-limit rule
//! in one place: a `429` says how long to wait in `Retry-After` (capped);
//! a request that never reached Slack (connect error) is retried with
//! backoff. Errors never carry a token.

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
    ApiError::Network { connect, message: bub_abi::channel::error_chain(&e.without_url()) }
}

/// The Web API with the two tokens.
#[derive(Clone)]
pub struct Api {
    client: reqwest::Client,
    base: String,
    bot_token: String,
    app_token: String,
}

impl Api {
    /// A client for `base` (`https://slack.com/api`).
    pub fn new(base: &str, bot_token: &str, app_token: &str) -> Result<Api, String> {
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
        let answer: Value = response.json().await.map_err(network)?;
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
        let mut response = self.client.get(url).bearer_auth(&self.bot_token).send().await.map_err(network)?;
        if !response.status().is_success() {
            return Err(ApiError::Slack(format!("file download answered {}", response.status())));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(network)? {
            body.extend_from_slice(&chunk);
            if body.len() as u64 > limit {
                return Err(ApiError::Slack(format!("file larger than {limit} bytes")));
            }
        }
        Ok(body)
    }
}
