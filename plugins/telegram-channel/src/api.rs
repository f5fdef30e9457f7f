//! The Bot API client: frankenstein's typed methods over our reqwest client.
//!
//! Why our own transport: every request goes to `<api_base>/bot<token>/`,
//! so a self-hosted Bot API server (or the tests' fake) is one setting; a
//! proxy is one reqwest option; and the retry rules live here, in one place:
//! a `429` waits the `retry_after` Telegram names (capped), a request that
//! never reached the server (connect error) is retried with backoff. Other
//! failures return to the caller, which knows whether repeating is safe.
//! Errors never carry the URL, which holds the token.

use std::time::Duration;

use frankenstein::response::ErrorResponse;
use serde::de::DeserializeOwned;

/// What a Bot API call can fail with.
#[derive(Debug)]
pub enum ApiError {
    /// Telegram answered `ok: false`.
    Api(ErrorResponse),
    /// The request did not complete (connect, timeout, a dropped
    /// connection); `connect`: it never reached the server.
    Network { message: String, connect: bool },
    /// The answer was not the JSON the method returns.
    Decode(String),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Api(e) => write!(f, "Telegram refused the request ({} {})", e.error_code, e.description),
            ApiError::Network { message, .. } => write!(f, "cannot reach the Bot API: {message}"),
            ApiError::Decode(e) => write!(f, "unexpected answer from the Bot API: {e}"),
        }
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    /// The seconds Telegram asks to wait (`429 Too Many Requests`).
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::Api(e) if e.error_code == 429 => {
                Some(e.parameters.and_then(|p| p.retry_after).map(u64::from).unwrap_or(1))
            }
            _ => None,
        }
    }

    /// The HTTP-like error code of an `ok: false` answer.
    pub fn code(&self) -> Option<u64> {
        match self {
            ApiError::Api(e) => Some(e.error_code),
            _ => None,
        }
    }
}

/// A transport error with its causes ("error sending request" alone says
/// little), without the URL.
fn network(e: reqwest::Error) -> ApiError {
    let connect = e.is_connect();
    ApiError::Network { connect, message: bub_kit::channel::error_chain(&e.without_url()) }
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

/// The longest wait a `retry_after` may impose on one call.
const MAX_RETRY_AFTER: u64 = 60;
/// How often one call is tried at most (429s and connect errors).
const ATTEMPTS: u32 = 4;

/// A bot: the method base URL and a client.
#[derive(Clone)]
pub struct Bot {
    client: reqwest::Client,
    methods: String,
    files: String,
    max_answer: u64,
}

impl Bot {
    /// A bot for `token` at `api_base` (`https://api.telegram.org`), through
    /// `proxy` when given (`http://…`, `socks5://…`). `read_timeout` bounds a
    /// request (long polls add their own `timeout` to it); `max_answer`
    /// bounds the size of an answer.
    pub fn new(
        api_base: &str,
        token: &str,
        proxy: Option<&str>,
        read_timeout: Duration,
        max_answer: u64,
    ) -> Result<Bot, String> {
        let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(10)).timeout(read_timeout);
        if let Some(proxy) = proxy {
            let proxy = reqwest::Proxy::all(proxy).map_err(|e| {
                format!(
                    "BUB_TELEGRAM_PROXY={proxy:?} is not a proxy URL like http://host:port or socks5://host:port ({e})"
                )
            })?;
            builder = builder.proxy(proxy);
        }
        let client = builder.build().map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        let base = api_base.trim_end_matches('/');
        Ok(Bot { client, methods: format!("{base}/bot{token}"), files: format!("{base}/file/bot{token}"), max_answer })
    }

    /// Downloads a file by its `file_path` (from `getFile`), refusing more
    /// than `limit` bytes.
    pub async fn download(&self, file_path: &str, limit: u64) -> Result<Vec<u8>, ApiError> {
        let url = format!("{}/{}", self.files, file_path.trim_start_matches('/'));
        let mut response = self.client.get(url).send().await.map_err(network)?;
        if !response.status().is_success() {
            let message = format!("the file download answered {}", response.status());
            return Err(ApiError::Network { message, connect: false });
        }
        read_capped(&mut response, limit, |e| ApiError::Decode(format!("the file download: {e} (max_file_bytes)")))
            .await
    }

    /// One call, no retry: for what is not worth waiting for (a refusal
    /// sent to a stranger is dropped when Telegram rate-limits).
    pub async fn once<Output: DeserializeOwned>(&self, method: &str, body: Option<String>) -> Result<Output, ApiError> {
        let mut request = self.client.post(format!("{}/{method}", self.methods));
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body);
        }
        let mut response = request.send().await.map_err(network)?;
        let success = response.status().is_success();
        let bytes = read_capped(&mut response, self.max_answer, |e| {
            ApiError::Decode(format!(
                "{method}: {e}; a proxy or Bot API server sending this much is refused \
                 (raise BUB_TELEGRAM_MAX_ANSWER_BYTES if it is right)"
            ))
        })
        .await?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if success {
            return serde_json::from_str(&text).map_err(|e| ApiError::Decode(format!("{method}: {e}")));
        }
        match serde_json::from_str::<ErrorResponse>(&text) {
            Ok(error) => Err(ApiError::Api(error)),
            Err(_) => Err(ApiError::Decode(format!("{method}: {}", text.chars().take(200).collect::<String>()))),
        }
    }

    /// One method call with the retry rules of this module.
    pub async fn call<Output: DeserializeOwned>(&self, method: &str, body: Option<String>) -> Result<Output, ApiError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let error = match self.once(method, body.clone()).await {
                Ok(output) => return Ok(output),
                Err(e) => e,
            };
            if attempt >= ATTEMPTS {
                return Err(error);
            }
            let wait = match &error {
                ApiError::Api(_) => match error.retry_after() {
                    Some(seconds) => Duration::from_secs(seconds.min(MAX_RETRY_AFTER)),
                    None => return Err(error),
                },
                // Only a request that never left: retrying anything else
                // could post a reply twice.
                ApiError::Network { connect: true, .. } => Duration::from_millis(500 << attempt),
                _ => return Err(error),
            };
            tracing::warn!("telegram: {method}: {error}; retrying in {:.1} s", wait.as_secs_f64());
            tokio::time::sleep(wait).await;
        }
    }
}

#[async_trait::async_trait]
impl frankenstein::AsyncTelegramApi for Bot {
    type Error = ApiError;

    async fn request<Params, Output>(&self, method: &str, params: Option<Params>) -> Result<Output, ApiError>
    where
        Params: serde::ser::Serialize + std::fmt::Debug + std::marker::Send,
        Output: DeserializeOwned,
    {
        let body = match params {
            Some(p) => Some(serde_json::to_string(&p).map_err(|e| ApiError::Decode(e.to_string()))?),
            None => None,
        };
        self.call(method, body).await
    }

    /// Uploads are not used by the channel (replies are text).
    async fn request_with_form_data<Params, Output>(
        &self,
        method: &str,
        _params: Params,
        _files: Vec<(&str, std::path::PathBuf)>,
    ) -> Result<Output, ApiError>
    where
        Params: serde::ser::Serialize + std::fmt::Debug + std::marker::Send,
        Output: DeserializeOwned,
    {
        Err(ApiError::Decode(format!("{method}: file uploads are not supported by telegram-channel")))
    }
}
