//! A channel's client WebSocket (Slack's Socket Mode, Discord's Gateway):
//! TLS by rustls with ring and the Mozilla roots, chosen here rather than
//! by whichever crypto provider the process happens to have; every message
//! and frame capped (a peer can send anything, forever); the handshake
//! bounded in time; and, when a channel has a proxy setting, the
//! connection tunnelled through it (`CONNECT`), as the channel's HTTP
//! requests are, so a gateway behind a proxy does not get its REST calls
//! through and its WebSocket refused.

use std::{sync::Arc, time::Duration};

use base64::Engine;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tokio_tungstenite::tungstenite::{client::IntoClientRequest, protocol::WebSocketConfig};

/// An open client connection.
pub type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

/// How long the TCP connection, the proxy's answer and the handshake may
/// take together.
const HANDSHAKE: Duration = Duration::from_secs(20);

/// Opens `url` (`wss://…`, or `ws://…` for a server on loopback in
/// tests), messages and frames at most `max_message` bytes, through the
/// HTTP proxy `proxy` (`http://[user:pass@]host:port`) when given.
pub async fn connect(url: &str, proxy: Option<&str>, max_message: u64) -> Result<Socket, String> {
    match tokio::time::timeout(HANDSHAKE, open(url, proxy, max_message)).await {
        Ok(opened) => opened,
        Err(_) => Err(format!("no WebSocket handshake within {} s", HANDSHAKE.as_secs())),
    }
}

async fn open(url: &str, proxy: Option<&str>, max_message: u64) -> Result<Socket, String> {
    let request = url.into_client_request().map_err(|e| format!("{url:?} is not a WebSocket URL: {e}"))?;
    let host = request.uri().host().ok_or_else(|| format!("{url:?} names no host"))?.to_owned();
    let port = request.uri().port_u16().unwrap_or(if request.uri().scheme_str() == Some("ws") { 80 } else { 443 });
    let stream = match proxy {
        None => TcpStream::connect((host.as_str(), port)).await.map_err(|e| format!("{host}:{port}: {e}"))?,
        Some(proxy) => tunnel(proxy, &host, port).await?,
    };
    let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_tungstenite::Connector::Rustls(Arc::new(tls));
    let max = usize::try_from(max_message).unwrap_or(usize::MAX);
    let limits = WebSocketConfig::default().max_message_size(Some(max)).max_frame_size(Some(max));
    let (socket, _) = tokio_tungstenite::client_async_tls_with_config(request, stream, Some(limits), Some(connector))
        .await
        .map_err(|e| e.to_string())?;
    Ok(socket)
}

/// A proxy setting read: where it is, and its `Proxy-Authorization`.
#[derive(Debug, PartialEq, Eq)]
pub struct Proxy {
    /// `host:port`.
    pub address: String,
    /// `Basic …` when the URL carries a user.
    pub authorization: Option<String>,
}

/// Reads `http://[user:pass@]host[:port]` (port 80 by default). Other
/// schemes (`socks5://`) are refused with a message saying what is read.
pub fn parse_proxy(proxy: &str) -> Result<Proxy, String> {
    let rest = proxy.strip_prefix("http://").ok_or_else(|| {
        "the proxy must be an http:// URL (http://[user:pass@]host:port) for the WebSocket connection".to_owned()
    })?;
    let rest = rest.trim_end_matches('/');
    let (user, address) = match rest.rsplit_once('@') {
        Some((user, address)) => (Some(user), address),
        None => (None, rest),
    };
    if address.is_empty() || address.contains('/') {
        return Err("the proxy URL names no host (http://host:port)".to_owned());
    }
    let address = if address.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
        address.to_owned()
    } else {
        format!("{address}:80")
    };
    let authorization = user.map(|u| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(u)));
    Ok(Proxy { address, authorization })
}

/// A TCP connection to `host:port` through an HTTP proxy's `CONNECT`.
async fn tunnel(proxy: &str, host: &str, port: u16) -> Result<TcpStream, String> {
    let proxy = parse_proxy(proxy)?;
    let mut stream =
        TcpStream::connect(&proxy.address).await.map_err(|e| format!("the proxy at {}: {e}", proxy.address))?;
    let mut request = format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n");
    if let Some(authorization) = &proxy.authorization {
        request.push_str(&format!("Proxy-Authorization: {authorization}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.map_err(|e| format!("the proxy at {}: {e}", proxy.address))?;
    // The answer's head, byte by byte so nothing of the tunnel is read
    // past it; at most 8 KiB.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= 8192 {
            return Err(format!("the proxy at {} sent an answer head over 8 KiB", proxy.address));
        }
        let byte = stream.read_u8().await.map_err(|e| format!("the proxy at {} closed: {e}", proxy.address))?;
        head.push(byte);
    }
    let status = String::from_utf8_lossy(&head).lines().next().unwrap_or_default().to_owned();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("the proxy at {} refused the tunnel to {host}:{port}: {status}", proxy.address));
    }
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_urls_are_read_with_their_user_and_default_port() {
        assert_eq!(
            parse_proxy("http://proxy.local:3128").unwrap(),
            Proxy { address: "proxy.local:3128".into(), authorization: None }
        );
        let with_user = parse_proxy("http://me:secret@10.0.0.1/").unwrap();
        assert_eq!(with_user.address, "10.0.0.1:80");
        assert_eq!(with_user.authorization.as_deref(), Some("Basic bWU6c2VjcmV0"));
        assert!(parse_proxy("socks5://127.0.0.1:1080").unwrap_err().contains("http://"));
        assert!(parse_proxy("http://").is_err());
    }
}
