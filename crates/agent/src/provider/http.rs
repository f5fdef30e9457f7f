//! The HTTP layer every wire format shares (Republic's rules, semantics §A6.7):
//! retries on 408, 409, 429, 5xx and transport failures, never after a
//! stream opened; backoff from `retry-after-ms` / `retry-after`, else
//! exponential with jitter; Republic's error texts.

use std::time::Duration;

use futures_util::StreamExt;

use super::{ProviderConfig, ProviderError};

/// One server-sent event.
pub use bub_sse::Event as SseEvent;

fn retryable(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || status >= 500
}

/// The server's requested delay (`retry-after-ms`, `retry-after` as seconds
/// or an HTTP date), clamped to `[0, max]`.
fn retry_after(headers: &reqwest::header::HeaderMap, max: Duration) -> Option<Duration> {
    let text = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).map(str::trim);
    let delay = if let Some(ms) = text("retry-after-ms").and_then(|t| t.parse::<f64>().ok()) {
        bub_kit::time::seconds_or_zero(ms / 1000.0)
    } else {
        let t = text("retry-after")?;
        match t.parse::<f64>() {
            // `1e30`, `inf`: clamped, not a panic.
            Ok(s) => bub_kit::time::seconds_or_zero(s),
            Err(_) => {
                let when = httpdate_to_system(t)?;
                when.duration_since(std::time::SystemTime::now()).unwrap_or_default()
            }
        }
    };
    Some(delay.min(max))
}

fn httpdate_to_system(text: &str) -> Option<std::time::SystemTime> {
    // RFC 7231 IMF-fixdate, e.g. "Wed, 21 Oct 2015 07:28:00 GMT".
    let ts = jiff::fmt::rfc2822::parse(text).ok()?;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(ts.timestamp().as_second().max(0) as u64))
}

/// A number in [0.75, 1) that differs between calls (backoff jitter).
fn jitter() -> f64 {
    0.75 + 0.25 * (bub_kit::random::u64() % 10_000) as f64 / 10_000.0
}

/// The backoff before retry number `attempt` (0-based).
pub fn backoff(config: &ProviderConfig, attempt: u32, headers: Option<&reqwest::header::HeaderMap>) -> Duration {
    if let Some(d) = headers.and_then(|h| retry_after(h, config.max_retry_delay)) {
        return d;
    }
    let exp = config.retry_delay.as_secs_f64() * 2f64.powi(attempt as i32);
    bub_kit::time::seconds_or_zero(exp.min(config.max_retry_delay.as_secs_f64()) * jitter())
}

/// The HTTP clients of one agent, one per timeout setting: building a
/// client (its TLS roots) costs about as much as a whole agent step, and a
/// shared client keeps connections alive between steps. Per agent, not per
/// process: pooled connections belong to the tokio runtime that opened them.
#[derive(Clone, Default)]
pub struct Clients(std::sync::Arc<std::sync::Mutex<Vec<(Duration, reqwest::Client)>>>);

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clients")
    }
}

impl PartialEq for Clients {
    /// Settings compare by their values, not by their connection pools.
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Clients {
    fn get(&self, config: &ProviderConfig) -> Result<reqwest::Client, ProviderError> {
        let mut clients = bub_abi::sync::lock(&self.0);
        if let Some((_, c)) = clients.iter().find(|(t, _)| *t == config.http_timeout) {
            return Ok(c.clone());
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10).min(config.http_timeout))
            .read_timeout(config.http_timeout)
            .build()
            .map_err(|e| ProviderError::Connection(e.to_string()))?;
        clients.push((config.http_timeout, client.clone()));
        Ok(client)
    }
}

/// The most of a provider's error body kept (in the error, the log, the
/// tape): 16 KiB. A hostile or broken server's 200 MB error page once grew
/// a session's tape by 419 MB.
pub const MAX_ERROR_BODY: usize = 16 << 10;

/// The start of `resp`'s body, at most `max` bytes (the rest is not read),
/// as text, saying so when it was cut.
async fn capped_text(mut resp: reqwest::Response, max: usize) -> String {
    let mut kept = Vec::new();
    let mut cut = false;
    while let Ok(Some(chunk)) = resp.chunk().await {
        let room = max - kept.len();
        kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if chunk.len() > room {
            cut = true;
            break;
        }
    }
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    if cut {
        text.push_str(&format!(" … [error body cut at {max} bytes]"));
    }
    text
}

/// POSTs `body` (JSON bytes) to `url` with retries; returns the successful
/// response.
pub async fn post(
    config: &ProviderConfig,
    url: &str,
    auth: &[(&str, String)],
    body: Vec<u8>,
) -> Result<reqwest::Response, ProviderError> {
    let client = config.clients.get(config)?;
    // Shared by the attempts: a retry does not copy a long context again.
    let body = bytes::Bytes::from(body);
    let mut attempt = 0;
    loop {
        let mut req = client.post(url).header("content-type", "application/json").body(body.clone());
        let has_agent = config.headers.keys().any(|k| k.eq_ignore_ascii_case("user-agent"));
        if !has_agent {
            req = req.header("user-agent", concat!("bub/", env!("CARGO_PKG_VERSION")));
        }
        for (k, v) in auth {
            req = req.header(*k, v);
        }
        for (k, v) in &config.headers {
            req = req.header(k, v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()));
        }
        let outcome = req.send().await;
        let retry_headers;
        let error = match outcome {
            Ok(resp) if resp.status().is_success() => return Ok(resp),
            Ok(resp) => {
                let status = resp.status().as_u16();
                retry_headers = Some(resp.headers().clone());
                let body = capped_text(resp, MAX_ERROR_BODY).await;
                let error = ProviderError::Status { status, body };
                if !retryable(status) {
                    return Err(error);
                }
                error
            }
            Err(e) => {
                retry_headers = None;
                if e.is_timeout() {
                    ProviderError::Timeout
                } else {
                    ProviderError::Connection(e.to_string())
                }
            }
        };
        if attempt >= config.max_retries {
            return Err(error);
        }
        let delay = backoff(config, attempt, retry_headers.as_ref());
        tracing::debug!(target: "bub::provider", "retrying in {delay:?} after: {error}");
        tokio::time::sleep(delay).await;
        attempt += 1;
    }
}

/// The `authorization` header of the provider's API key, if it has one.
pub fn bearer(config: &ProviderConfig) -> Vec<(&'static str, String)> {
    config.api_key.iter().map(|k| ("authorization", format!("Bearer {k}"))).collect()
}

/// POSTs `body` to `path` under the client's base URL with its bearer
/// key, and reads the JSON answer (an unstreamed chat, embeddings,
/// decisions).
pub async fn post_json(
    client: &super::ModelClient,
    path: &str,
    body: &serde_json::Value,
) -> Result<serde_json::Value, ProviderError> {
    let url = format!("{}{path}", client.config.base_url);
    let bytes = serde_json::to_vec(body).expect("JSON values serialize");
    json(&client.config, post(&client.config, &url, &bearer(&client.config), bytes).await?).await
}

/// A whole JSON answer (an unstreamed chat, embeddings, decisions), read
/// within the call's stream limit so a hostile server cannot fill memory.
pub async fn json(config: &ProviderConfig, mut resp: reqwest::Response) -> Result<serde_json::Value, ProviderError> {
    let limit = config.stream_limits.max_stream_bytes;
    let mut body = Vec::new();
    loop {
        let chunk = match resp.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) if e.is_timeout() => return Err(ProviderError::Timeout),
            Err(e) => return Err(ProviderError::Connection(format!("reading the answer: {e}"))),
        };
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(ProviderError::TooLarge(limit_text(bub_sse::LimitError::StreamTooLarge { limit })));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| {
        let start = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        ProviderError::Response(format!("the answer is not JSON ({e}): {start}"))
    })
}

/// The response's server-sent events, within the call's stream limits; a
/// read failure mid-stream is an error (never retried: the stream already
/// opened). An event the server did not close with a blank line is still
/// dispatched at the end, as Republic's parser does.
pub fn events(
    config: &ProviderConfig,
    resp: reqwest::Response,
) -> impl futures_util::Stream<Item = Result<SseEvent, ProviderError>> + Send + Unpin {
    bub_sse::EventStream::new(resp.bytes_stream(), config.stream_limits).map(|r| {
        r.map_err(|e| match e {
            bub_sse::Error::Transport(t) if t.is_timeout() => ProviderError::Timeout,
            bub_sse::Error::Transport(t) => ProviderError::Connection(format!("reading the event stream: {t}")),
            bub_sse::Error::Limit(limit) => ProviderError::TooLarge(limit_text(limit)),
        })
    })
}

/// What went over a limit, and the setting that raises it.
fn limit_text(limit: bub_sse::LimitError) -> String {
    match limit {
        bub_sse::LimitError::StreamTooLarge { limit } => format!(
            "the model's answer went past {limit} bytes and was stopped; \
             the limit is BUB_MODEL_MAX_OUTPUT_BYTES (model_max_output_bytes in config.json)"
        ),
        bub_sse::LimitError::EventTooLarge { limit } => format!(
            "one event of the model's stream went past {limit} bytes and was stopped; \
             the limit is BUB_MODEL_MAX_EVENT_BYTES (model_max_event_bytes in config.json)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ProviderConfig {
        ProviderConfig {
            kind: "openai".into(),
            base_url: String::new(),
            api_key: None,
            api_format: None,
            headers: Default::default(),
            extra_body: Default::default(),
            max_retries: 2,
            retry_delay: Duration::from_millis(500),
            max_retry_delay: Duration::from_secs(60),
            http_timeout: Duration::from_secs(600),
            call_timeout: None,
            stream_limits: Default::default(),
            clients: Default::default(),
            codex: None,
        }
    }

    #[test]
    fn retry_after_headers_set_the_backoff_behaviour_224() {
        let c = config();
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "2.5".parse().unwrap());
        assert_eq!(backoff(&c, 0, Some(&h)), Duration::from_millis(2500));
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after-ms", "1250".parse().unwrap());
        assert_eq!(backoff(&c, 0, Some(&h)), Duration::from_millis(1250));
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "600".parse().unwrap());
        assert_eq!(backoff(&c, 0, Some(&h)), Duration::from_secs(60));
    }

    /// A hostile `Retry-After` is clamped, never a panic.
    #[test]
    fn absurd_retry_after_values_are_clamped_not_a_panic() {
        let c = config();
        for v in ["1e30", "inf", "18446744073709551616", "NaN", "-5"] {
            for header in ["retry-after", "retry-after-ms"] {
                let mut h = reqwest::header::HeaderMap::new();
                h.insert(header, v.parse().unwrap());
                assert!(backoff(&c, 0, Some(&h)) <= Duration::from_secs(60), "{header}: {v}");
            }
        }
    }

    #[test]
    fn exponential_backoff_with_jitter_behaviour_225() {
        let c = config();
        let first = backoff(&c, 0, None).as_secs_f64();
        let second = backoff(&c, 1, None).as_secs_f64();
        assert!((0.375..=0.5).contains(&first), "{first}");
        assert!((0.75..=1.0).contains(&second), "{second}");
    }
}
