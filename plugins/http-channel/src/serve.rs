//! The accept loop, bounded: a connection cap, a deadline for each request's
//! head (which is also how long an idle keep-alive connection may stay), and
//! a graceful stop.
//!
//! Why not `axum::serve`: it has no connection cap and sets no timer, so
//! hyper's header timeout never runs; 1,010 idle connections at
//! `ulimit -n 1024` made the channel unresponsive. The body's deadline and
//! size are the handler's (`read_body`), after the token is checked, so a
//! stranger cannot make the channel buffer anything.

use std::{sync::Arc, time::Duration};

use axum::Router;
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
pub(crate) struct Limits {
    /// Connections open at once (`max_connections`).
    pub max_connections: usize,
    /// A request's head must arrive within this; an idle keep-alive
    /// connection is closed after it (`header_timeout_seconds`).
    pub header_timeout: Duration,
    /// A request's body must arrive within this (`body_timeout_seconds`).
    pub body_timeout: Duration,
    /// The largest body accepted (`max_body_bytes`).
    pub max_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            max_body_bytes: 1 << 20,
        }
    }
}

/// Serves `app` on `listener` until `stop` fires, then lets the requests in
/// flight finish (the caller bounds how long it waits).
pub(crate) async fn serve(listener: TcpListener, app: Router, limits: Limits, mut stop: oneshot::Receiver<()>) {
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let (stopping, stopping_rx) = watch::channel(false);
    loop {
        let stream = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of descriptors (EMFILE) or a connection reset before
                // it was taken: wait a moment rather than spin.
                Err(e) => {
                    tracing::warn!("http channel: accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            refuse(stream, limits.max_connections);
            continue;
        };
        let service = TowerToHyperService::new(app.clone());
        let mut stopping = stopping_rx.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!("http channel: connection ended: {e}");
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

/// Answers a connection over the cap with a JSON 503 and closes it, without
/// waiting on the peer: the answer goes into the socket's buffer or nowhere.
fn refuse(stream: tokio::net::TcpStream, max: usize) {
    let body = serde_json::json!({
        "status": "error",
        "error": format!(
            "too many connections: the channel serves {max} at once (its max_connections setting); retry shortly"
        ),
    })
    .to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         retry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(response.as_bytes());
    // Once a second at most: a flood must not become a flood of log lines.
    static LAST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    if LAST.swap(now, std::sync::atomic::Ordering::Relaxed) != now {
        tracing::warn!("http channel: refusing connections: {max} are open (max_connections)");
    }
}
