//! A listener a stranger cannot exhaust (feature `server`): the HTTP
//! servers of the channels (http-channel's API, Telegram's webhook) share
//! it, because every one of them is reachable by people other than the
//! user.
//!
//! What one peer can hold is bounded by the server, never by the client:
//! - **connections**: at most `max_connections` open at once; more are
//!   answered a JSON 503 on the spot and closed, with one log line a
//!   second (`axum::serve` has no cap: 1,010 idle connections at
//!   `ulimit -n 1024` made a channel unresponsive, then the tapes could
//!   not be written);
//! - **a request's head** must arrive within `header_timeout`, which is
//!   also how long an idle keep-alive connection stays (hyper's timer,
//!   which `axum::serve` never sets: a slowloris held a connection
//!   forever);
//! - **a body** is read only when the handler asks ([`read_body`]: after
//!   it has checked the token or secret on the headers), within
//!   `body_timeout` and `max_body_bytes`;
//! - **an answer** must be taken by the peer: a connection whose writes
//!   make no progress for `write_timeout` is closed, so a stalled reader
//!   of a big answer or an endless event stream does not hold its memory.
//!
//! A stop lets the requests in flight finish (the caller bounds how long
//! it waits).

use std::{sync::Arc, time::Duration};

use axum::{body::Body, Router};
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use tokio::{
    net::TcpListener,
    sync::{oneshot, watch, Semaphore},
};

/// What one listener allows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// Connections open at once.
    pub max_connections: usize,
    /// A request's head must arrive within this; an idle keep-alive
    /// connection is closed after it.
    pub header_timeout: Duration,
    /// A request's body must arrive within this ([`read_body`]).
    pub body_timeout: Duration,
    /// The largest body accepted ([`read_body`]).
    pub max_body_bytes: usize,
    /// A connection whose answer makes no progress for this long is closed.
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            max_body_bytes: 1 << 20,
            write_timeout: Duration::from_secs(60),
        }
    }
}

/// Who a listener is, for its refusals and log lines.
#[derive(Clone, Copy, Debug)]
pub struct Named {
    /// What serves (`"http channel"`).
    pub who: &'static str,
    /// The setting that sets [`Limits::max_connections`] (`"max_connections"`).
    pub connections_setting: &'static str,
}

/// Serves `app` on `listener` until `stop` fires, then lets the requests in
/// flight finish.
pub async fn serve(listener: TcpListener, app: Router, limits: Limits, mut stop: oneshot::Receiver<()>, named: Named) {
    let who = named.who;
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let (stopping, stopping_rx) = watch::channel(false);
    let pace = crate::channel::LogPace::new(Duration::from_secs(1));
    loop {
        let stream = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of descriptors (EMFILE) or a connection reset before
                // it was taken: wait a moment rather than spin.
                Err(e) => {
                    tracing::warn!("{who}: accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            refuse(stream, limits.max_connections, named, &pace);
            continue;
        };
        let service = TowerToHyperService::new(app.clone());
        let mut stopping = stopping_rx.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut stream = tokio_io_timeout::TimeoutStream::new(stream);
            stream.set_write_timeout(Some(limits.write_timeout));
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
            let conn = builder.serve_connection(TokioIo::new(Box::pin(stream)), service);
            tokio::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!("{who}: connection ended: {e}");
                    }
                }
                _ = stopping.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    drop(listener);
    let _ = stopping.send(true);
    // Every connection holds a permit until it ends.
    let _ = open.acquire_many(limits.max_connections as u32).await;
}

/// Answers a connection over the cap with a JSON 503 and closes it,
/// without waiting on the peer: the answer goes into the socket's buffer
/// or nowhere. Logged once a second at most.
fn refuse(stream: tokio::net::TcpStream, max: usize, named: Named, pace: &crate::channel::LogPace) {
    let Named { who, connections_setting } = named;
    let body = serde_json::json!({
        "status": "error",
        "error": format!(
            "too many connections: the {who} serves {max} at once (its {connections_setting} setting); retry shortly"
        ),
    })
    .to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         retry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(response.as_bytes());
    if let Some(n) = pace.note() {
        tracing::warn!("{who}: refusing connections: {max} are open (its {connections_setting} setting); {n} refused");
    }
}

/// Why a body was not read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// Larger than `max_body_bytes`.
    #[error("the body is larger than {0} bytes")]
    TooLarge(usize),
    /// Not all there within `body_timeout`.
    #[error("the body did not arrive within {0:?}")]
    TimedOut(Duration),
    /// The peer cut it, or it was malformed.
    #[error("reading the body failed: {0}")]
    Failed(String),
}

/// The body, read within `limits`' deadline and size. Call it only once
/// the request's headers have shown it may be read (its token, its
/// secret): a stranger's body is never read.
pub async fn read_body(limits: &Limits, body: Body) -> Result<axum::body::Bytes, BodyError> {
    match tokio::time::timeout(limits.body_timeout, axum::body::to_bytes(body, limits.max_body_bytes)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Err(_) => Err(BodyError::TimedOut(limits.body_timeout)),
        // `to_bytes` fails for a body over the limit, or one the client cut.
        Ok(Err(e)) if std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>()) => {
            Err(BodyError::TooLarge(limits.max_body_bytes))
        }
        Ok(Err(e)) => Err(BodyError::Failed(e.to_string())),
    }
}
