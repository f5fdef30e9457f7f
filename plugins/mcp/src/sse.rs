//! MCP's older remote transport, HTTP with server-sent events (protocol
//! revision 2024-11-05), which many deployed servers still speak only and
//! which rmcp no longer ships: the client opens `GET <url>` as an event
//! stream; the server's first `endpoint` event names where to POST each
//! JSON-RPC message; answers come back as `message` events on the stream.
//!
//! Bounds and trust: the stream is read by `bub-sse` (one event at most
//! `max_message_bytes`); the endpoint must be on the stream's own origin
//! (scheme, host and port), so a server cannot have bub send its
//! credentials elsewhere; a stream silent past `sse_read_timeout` ends the
//! session; the reader stops when the session is dropped.

use std::{pin::Pin, time::Duration};

use futures_util::{Sink, Stream, StreamExt as _};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};

/// The messages a session sends.
pub(crate) type Outgoing = Pin<Box<dyn Sink<TxJsonRpcMessage<RoleClient>, Error = std::io::Error> + Send>>;
/// The messages a session receives.
pub(crate) type Incoming = Pin<Box<dyn Stream<Item = RxJsonRpcMessage<RoleClient>> + Send>>;

/// An open SSE session: rmcp's transport halves and the stream's reader
/// (aborted when this is dropped).
pub(crate) struct SseSession {
    pub outgoing: Outgoing,
    pub incoming: Incoming,
    pub reader: ReaderGuard,
}

/// Stops the stream's reader when dropped.
pub(crate) struct ReaderGuard(tokio::task::AbortHandle);

impl Drop for ReaderGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn headers(pairs: &[(String, String)]) -> Result<reqwest::header::HeaderMap, String> {
    let mut map = reqwest::header::HeaderMap::new();
    for (k, v) in pairs {
        let name =
            reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|_| format!("bad header name {k:?}"))?;
        let value = reqwest::header::HeaderValue::from_str(v).map_err(|_| format!("bad value for header {k}"))?;
        map.append(name, value);
    }
    Ok(map)
}

fn refused(status: reqwest::StatusCode) -> String {
    match status.as_u16() {
        401 | 403 => {
            format!("the server refused the connection (HTTP {status}): check the entry's `auth` token or `headers`")
        }
        _ => format!("the server answered HTTP {status}"),
    }
}

/// Opens the event stream at `url` and waits for the server's endpoint.
pub(crate) async fn open(
    url: &str,
    extra_headers: &[(String, String)],
    max_message: usize,
    read_timeout: Option<Duration>,
) -> Result<SseSession, String> {
    let headers = headers(extra_headers)?;
    let mut client = reqwest::Client::builder().connect_timeout(Duration::from_secs(10));
    if let Some(limit) = read_timeout {
        client = client.read_timeout(limit);
    }
    let client = client.build().map_err(|e| e.to_string())?;
    let resp = client
        .get(url)
        .headers(headers.clone())
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .send()
        .await
        .map_err(|e| format!("cannot reach {url}: {e}"))?;
    if !resp.status().is_success() {
        return Err(refused(resp.status()));
    }
    let origin = resp.url().clone();
    let limits = bub_sse::Limits { max_event_bytes: max_message, max_stream_bytes: u64::MAX };
    let mut events = bub_sse::EventStream::new(resp.bytes_stream(), limits);
    let endpoint = loop {
        match events.next().await {
            Some(Ok(event)) if event.event == "endpoint" => break event.data.trim().to_owned(),
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(format!("the event stream failed before naming its endpoint: {e:?}")),
            None => return Err("the event stream ended before naming its endpoint".into()),
        }
    };
    let endpoint =
        origin.join(&endpoint).map_err(|e| format!("the server's endpoint {endpoint:?} is not a URL: {e}"))?;
    if endpoint.origin() != origin.origin() {
        return Err(format!(
            "the server named an endpoint on another origin ({}); its messages, and the entry's credentials, stay \
             with {}",
            endpoint.origin().ascii_serialization(),
            origin.origin().ascii_serialization()
        ));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<RxJsonRpcMessage<RoleClient>>(64);
    let reader = tokio::spawn(async move {
        while let Some(event) = events.next().await {
            match event {
                Ok(event) if event.event == "message" => match serde_json::from_str(&event.data) {
                    Ok(message) => {
                        if tx.send(message).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => tracing::warn!("mcp: an SSE message that is not JSON-RPC was ignored: {e}"),
                },
                Ok(_) => {}
                Err(bub_sse::Error::Limit(limit)) => {
                    tracing::warn!(
                        "mcp: an SSE event went past the mcp plugin's max_message_bytes ({limit:?}); the session ends"
                    );
                    return;
                }
                Err(bub_sse::Error::Transport(e)) => {
                    tracing::warn!("mcp: the SSE stream failed: {e}; the session ends");
                    return;
                }
            }
        }
    });
    let incoming: Incoming =
        Box::pin(futures_util::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|message| (message, rx)) },
        ));
    let outgoing: Outgoing = Box::pin(futures_util::sink::unfold(
        (client, endpoint, headers),
        |(client, endpoint, headers), message: TxJsonRpcMessage<RoleClient>| async move {
            let resp = client
                .post(endpoint.clone())
                .headers(headers.clone())
                .json(&message)
                .send()
                .await
                .map_err(|e| std::io::Error::other(format!("posting to {endpoint}: {e}")))?;
            if !resp.status().is_success() {
                return Err(std::io::Error::other(refused(resp.status())));
            }
            Ok((client, endpoint, headers))
        },
    ));
    Ok(SseSession { outgoing, incoming, reader: ReaderGuard(reader.abort_handle()) })
}
