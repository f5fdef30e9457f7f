//! A forward HTTP proxy on loopback, for the channels' proxy settings: a
//! `CONNECT host:port` opens a tunnel (as a WebSocket or an https request
//! through a proxy asks, RFC 9110 §9.3.6); a request in absolute form
//! (`GET http://host/path`, a plain-http request through a proxy) is sent
//! on in origin form. It records what it was asked, so a test can tell
//! that a connection went through it.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    sync::{Arc, Mutex},
};

/// The proxy.
pub struct Proxy {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    asked: Arc<Mutex<Vec<String>>>,
}

impl Default for Proxy {
    fn default() -> Self {
        Proxy::start()
    }
}

impl Proxy {
    /// Starts serving.
    pub fn start() -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let asked = Arc::new(Mutex::new(Vec::new()));
        let record = asked.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let record = record.clone();
                std::thread::spawn(move || serve(client, &record));
            }
        });
        Proxy { url, asked }
    }

    /// The request lines it was sent (`CONNECT 127.0.0.1:5000 HTTP/1.1`,
    /// `GET http://127.0.0.1:5001/api/v10/gateway/bot HTTP/1.1`), in order.
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

fn serve(client: TcpStream, asked: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(client.try_clone().expect("clone the client socket"));
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() || line.is_empty() {
        return;
    }
    let mut head = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() || header.is_empty() {
            return;
        }
        if header == "\r\n" {
            break;
        }
        head.push(header);
    }
    let line = line.trim_end().to_owned();
    asked.lock().unwrap().push(line.clone());
    let mut words = line.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let mut client = client;
    if method == "CONNECT" {
        let Ok(upstream) = TcpStream::connect(target) else {
            let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n");
            return;
        };
        if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").is_err() {
            return;
        }
        pipe(reader, client, upstream, Vec::new());
        return;
    }
    let Some(rest) = target.strip_prefix("http://") else {
        let _ = client.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        return;
    };
    let (authority, path) = rest.split_once('/').map_or((rest, "/".to_owned()), |(a, p)| (a, format!("/{p}")));
    let Ok(upstream) = TcpStream::connect(authority) else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n");
        return;
    };
    let mut first = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    for header in head.iter().filter(|h| !h.to_ascii_lowercase().starts_with("proxy-")) {
        first.extend_from_slice(header.as_bytes());
    }
    first.extend_from_slice(b"\r\n");
    pipe(reader, client, upstream, first);
}

/// Copies both ways until either side closes; `first` goes upstream before
/// what the client sends next (what the reader buffered included).
fn pipe(mut reader: BufReader<TcpStream>, mut client: TcpStream, mut upstream: TcpStream, first: Vec<u8>) {
    let buffered = reader.buffer().to_vec();
    if upstream.write_all(&first).and_then(|()| upstream.write_all(&buffered)).is_err() {
        return;
    }
    reader.consume(buffered.len());
    let (Ok(mut up_read), Ok(mut client_write)) = (upstream.try_clone(), client.try_clone()) else { return };
    let down = std::thread::spawn(move || {
        let _ = std::io::copy(&mut up_read, &mut client_write);
        let _ = client_write.shutdown(std::net::Shutdown::Both);
    });
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match reader.get_mut().read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if upstream.write_all(&chunk[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = upstream.shutdown(std::net::Shutdown::Both);
    let _ = client.flush();
    let _ = down.join();
}
