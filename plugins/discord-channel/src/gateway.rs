//! The Discord Gateway connection: JSON encoding, no compression (so
//! every frame is one text message), API v10.
//!
//! What Discord documents, and what this loop does:
//! - **Hello** (op 10) gives the heartbeat interval. The first heartbeat
//!   (op 1, the last sequence number) goes after a random part of it,
//!   then one each interval. A heartbeat not acknowledged (op 11) by the
//!   next one means a zombie connection: it is closed and resumed.
//!   Discord's own heartbeat request (op 1) is answered at once.
//! - **Identify** (op 2: the token, the intents GUILD_MESSAGES,
//!   DIRECT_MESSAGES and MESSAGE_CONTENT) opens a session; **READY** gives
//!   its id, the URL to resume at and the bot's user. A new session
//!   replays nothing, so after each READY the channels are read back
//!   over REST from their cursors (`cursors.rs`), heartbeats going on.
//! - A dropped connection, Discord's **Reconnect** (op 7), a resumable
//!   **Invalid Session** (op 9, `true`) or any close code that allows it:
//!   **Resume** (op 6: token, session id, last sequence) at the resume
//!   URL, and Discord replays what was missed. A resume URL that cannot
//!   be reached is given up for a new session. An Invalid Session
//!   `false`, or close codes 4007 and 4009: a new session after 1–5 s.
//! - Close codes that no retry can mend (4004 bad token, 4010–4014 shard
//!   and intent errors) end the loop with a message saying what to fix.
//! - A connection that lived under 10 s is followed by a growing wait
//!   (`bub_kit::channel::Backoff`: 1 s doubling to 30 s), so a peer that
//!   accepts and closes cannot make the loop spin.
//!
//! Events are read one at a time, in Discord's order: a message is
//! queued on its channel's lane (`lanes.rs`) before the next frame is
//! read, so each channel's messages keep their order and no channel's
//! slow download holds another's.

use std::{sync::Arc, time::Duration};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::{sync::watch, time::Instant};
use tokio_tungstenite::tungstenite::{
    protocol::{frame::coding::CloseCode, CloseFrame},
    Message as Frame,
};

use crate::Shared;

/// The intents: GUILD_MESSAGES (1 << 9), DIRECT_MESSAGES (1 << 12),
/// MESSAGE_CONTENT (1 << 15, privileged: enabled in the Developer Portal).
pub const INTENTS: u64 = (1 << 9) | (1 << 12) | (1 << 15);

/// How a connection ended.
enum End {
    /// The channel stops.
    Stopped,
    /// Reconnect and resume the session.
    Resume,
    /// Reconnect with a new session.
    Identify,
    /// Nothing to retry: this message says what to fix.
    Fatal(String),
}

/// A session to resume.
struct Session {
    id: String,
    resume_url: String,
}

/// The URL to connect to for `base` (`wss://gateway.discord.gg`).
fn with_query(base: &str) -> String {
    format!("{}/?v=10&encoding=json", base.trim_end_matches('/'))
}

/// The heartbeat interval a Hello asks for (Discord's is about 41 s),
/// kept between 1 s and 10 min (a peer asking for a beat every
/// millisecond would make the loop spin); None when it names no number
/// of milliseconds (`null`, `"x"`, a negative or endless one): such a
/// Hello is refused and the connection made again, with backoff, rather
/// than kept without heartbeats.
fn heartbeat_interval(hello: &Value) -> Option<Duration> {
    let ms = hello["d"]["heartbeat_interval"].as_f64().filter(|ms| ms.is_finite() && *ms > 0.0)?;
    Some(Duration::from_millis(ms.clamp(1_000.0, 600_000.0) as u64))
}

/// What a close code means for the next connection.
fn after_close(code: u16) -> End {
    match code {
        4004 => End::Fatal("Discord refused the token (close code 4004); check BUB_DISCORD_TOKEN".into()),
        4010 | 4011 => End::Fatal(format!(
            "Discord asks for sharding (close code {code}); this channel runs one shard, for bots in fewer than \
             2,500 guilds"
        )),
        4012 => End::Fatal("Discord refused the Gateway version (close code 4012)".into()),
        4013 => End::Fatal("Discord refused the intents (close code 4013)".into()),
        4014 => End::Fatal(
            "Discord refused the Message Content intent (close code 4014): enable \"Message Content Intent\" \
             under Bot in the Discord Developer Portal"
                .into(),
        ),
        4007 | 4009 => End::Identify,
        _ => End::Resume,
    }
}

/// The Gateway loop: a connection at a time until the channel stops.
pub async fn run(shared: Arc<Shared>, first_url: String, mut stopped: watch::Receiver<bool>) {
    let mut gateway_url = first_url;
    let mut session: Option<Session> = None;
    let mut seq: Option<u64> = None;
    let mut backoff = bub_kit::channel::Backoff::default();
    loop {
        if *stopped.borrow() {
            return;
        }
        let url = match &session {
            Some(s) => with_query(&s.resume_url),
            None => with_query(&gateway_url),
        };
        let mut ws =
            match bub_kit::websocket::connect(&url, shared.config.proxy.as_deref(), shared.config.max_answer_bytes)
                .await
            {
                Ok(ws) => ws,
                Err(e) => {
                    let wait = backoff.failed();
                    tracing::warn!("discord: cannot connect to the Gateway: {e}; retrying in {} s", wait.as_secs());
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = stopped.changed() => return,
                    }
                    // A resume URL that cannot be reached is given up: a new
                    // session, whose READY reads back what was missed.
                    if session.take().is_some() {
                        seq = None;
                    } else if let Ok(rest) = shared.rest() {
                        if let Ok(url) = rest.gateway_url().await {
                            gateway_url = url;
                        }
                    }
                    continue;
                }
            };
        let opened = std::time::Instant::now();
        let end = connection(&shared, &mut ws, &mut session, &mut seq, &mut stopped).await;
        match end {
            End::Stopped => {
                // 1000: Discord ends the session and shows the bot offline.
                let _ = ws.close(None).await;
                return;
            }
            End::Fatal(message) => {
                tracing::error!("discord channel stops receiving: {message}");
                return;
            }
            End::Resume => {
                // Any code but 1000/1001 keeps the session resumable.
                let close = CloseFrame { code: CloseCode::from(4000), reason: "resuming".into() };
                let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(Some(close))).await;
            }
            End::Identify => {
                session = None;
                seq = None;
                let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(None)).await;
                // Discord: wait a random 1–5 s before identifying again.
                let wait = Duration::from_millis(1000 + bub_kit::random::u64() % 4000);
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stopped.changed() => return,
                }
            }
        }
        let Some(wait) = backoff.after_connection(opened.elapsed()) else { continue };
        tracing::info!(
            "discord: the connection lasted {:.1} s; reconnecting in {} s",
            opened.elapsed().as_secs_f64(),
            wait.as_secs()
        );
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stopped.changed() => return,
        }
    }
}

async fn send(ws: &mut bub_kit::websocket::Socket, payload: Value) -> bool {
    match ws.send(Frame::text(payload.to_string())).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!("discord: sending to the Gateway: {e}");
            false
        }
    }
}

/// One connection: Hello, Identify or Resume, then events and heartbeats
/// until it ends.
async fn connection(
    shared: &Arc<Shared>,
    ws: &mut bub_kit::websocket::Socket,
    session: &mut Option<Session>,
    seq: &mut Option<u64>,
    stopped: &mut watch::Receiver<bool>,
) -> End {
    // Hello first, within 20 s.
    let hello = tokio::select! {
        frame = tokio::time::timeout(Duration::from_secs(20), ws.next()) => frame,
        _ = stopped.changed() => return End::Stopped,
    };
    let interval = match hello {
        Ok(Some(Ok(Frame::Text(text)))) => {
            let hello: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            match (hello["op"].as_u64(), heartbeat_interval(&hello)) {
                (Some(10), Some(interval)) => interval,
                (Some(10), None) => {
                    tracing::warn!(
                        "discord: the Gateway's Hello names no heartbeat interval ({}); reconnecting",
                        hello["d"]["heartbeat_interval"]
                    );
                    return End::Resume;
                }
                _ => {
                    tracing::warn!("discord: the Gateway did not begin with a Hello it could read; reconnecting");
                    return End::Resume;
                }
            }
        }
        Ok(Some(Ok(Frame::Close(frame)))) => return after_close(frame.map_or(1000, |f| f.code.into())),
        _ => {
            tracing::warn!("discord: no Hello from the Gateway within 20 s; reconnecting");
            return End::Resume;
        }
    };
    let token = shared.config.token.clone().unwrap_or_default();
    let opening = match (&*session, *seq) {
        (Some(s), Some(seq)) => json!({"op": 6, "d": {"token": token, "session_id": s.id, "seq": seq}}),
        _ => {
            *session = None;
            json!({"op": 2, "d": {"token": token, "intents": INTENTS,
                "properties": {"os": std::env::consts::OS, "browser": "bub-rs", "device": "bub-rs"}}})
        }
    };
    if !send(ws, opening).await {
        return End::Resume;
    }
    let jitter = (bub_kit::random::u64() % 1000) as f64 / 1000.0;
    let mut next_beat = Instant::now() + interval.mul_f64(jitter);
    let mut acked = true;
    loop {
        let frame = tokio::select! {
            frame = ws.next() => frame,
            _ = tokio::time::sleep_until(next_beat) => {
                if !acked {
                    tracing::warn!("discord: the last heartbeat was not acknowledged; reconnecting");
                    return End::Resume;
                }
                if !send(ws, json!({"op": 1, "d": *seq})).await {
                    return End::Resume;
                }
                acked = false;
                next_beat = Instant::now() + interval;
                continue;
            }
            _ = stopped.changed() => return End::Stopped,
        };
        let text = match frame {
            Some(Ok(Frame::Text(text))) => text,
            Some(Ok(Frame::Close(frame))) => {
                let code: u16 = frame.as_ref().map_or(1000, |f| f.code.into());
                tracing::info!("discord: the Gateway closed the connection ({code})");
                return after_close(code);
            }
            Some(Ok(_)) => {
                // Pings are answered by the library on the next write.
                let _ = ws.flush().await;
                continue;
            }
            Some(Err(e)) => {
                tracing::warn!("discord: the connection broke ({e}); resuming");
                return End::Resume;
            }
            None => {
                tracing::info!("discord: the connection closed; resuming");
                return End::Resume;
            }
        };
        let Ok(payload) = serde_json::from_str::<Value>(&text) else { continue };
        match payload["op"].as_u64() {
            Some(0) => {
                if let Some(s) = payload["s"].as_u64() {
                    *seq = Some(s);
                }
                let data = &payload["d"];
                match payload["t"].as_str() {
                    Some("READY") => {
                        let me = data["user"]["id"].as_str().unwrap_or_default().to_owned();
                        tracing::info!(
                            "discord.ready user={} id={me}",
                            data["user"]["username"].as_str().unwrap_or("?")
                        );
                        *bub_abi::sync::lock(&shared.me) = me;
                        if let (Some(id), Some(url)) =
                            (data["session_id"].as_str(), data["resume_gateway_url"].as_str())
                        {
                            *session = Some(Session { id: id.to_owned(), resume_url: url.to_owned() });
                        }
                        // A new session replays nothing: read back, over
                        // REST, what came since each channel's cursor.
                        // The Gateway's events wait on the socket
                        // meanwhile; heartbeats go on (their
                        // acknowledgements wait too).
                        let reading = crate::catch_up(shared);
                        tokio::pin!(reading);
                        loop {
                            tokio::select! {
                                () = &mut reading => break,
                                _ = tokio::time::sleep_until(next_beat) => {
                                    if !send(ws, json!({"op": 1, "d": *seq})).await {
                                        return End::Resume;
                                    }
                                    next_beat = Instant::now() + interval;
                                }
                                _ = stopped.changed() => return End::Stopped,
                            }
                        }
                        acked = true;
                    }
                    Some("RESUMED") => tracing::info!("discord: resumed the session"),
                    Some("MESSAGE_CREATE") => {
                        shared.lanes.dispatch(shared, data.clone()).await;
                    }
                    _ => {}
                }
            }
            // Discord asks for a heartbeat now.
            Some(1) if !send(ws, json!({"op": 1, "d": *seq})).await => return End::Resume,
            Some(7) => {
                tracing::info!("discord: Discord asks to reconnect; resuming");
                return End::Resume;
            }
            Some(9) => {
                if payload["d"] == json!(true) {
                    tracing::info!("discord: the session must be resumed again");
                    return End::Resume;
                }
                tracing::info!("discord: the session is no longer valid; identifying again");
                return End::Identify;
            }
            Some(11) => acked = true,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_codes_say_whether_to_resume_identify_or_stop() {
        assert!(matches!(after_close(4000), End::Resume));
        assert!(matches!(after_close(1006), End::Resume));
        assert!(matches!(after_close(4009), End::Identify));
        assert!(matches!(after_close(4007), End::Identify));
        let End::Fatal(message) = after_close(4014) else { panic!("4014 is fatal") };
        assert!(message.contains("Message Content Intent"), "{message}");
        let End::Fatal(message) = after_close(4004) else { panic!("4004 is fatal") };
        assert!(message.contains("BUB_DISCORD_TOKEN"), "{message}");
        assert_eq!(INTENTS, 37376);
        let hello =
            |d: &str| serde_json::from_str::<Value>(&format!(r#"{{"op": 10, "d": {{"heartbeat_interval": {d}}}}}"#));
        assert_eq!(heartbeat_interval(&hello("41250").unwrap()), Some(Duration::from_millis(41_250)));
        assert_eq!(heartbeat_interval(&hello("41250.7").unwrap()), Some(Duration::from_millis(41_250)));
        assert_eq!(heartbeat_interval(&hello("1").unwrap()), Some(Duration::from_secs(1)));
        assert_eq!(heartbeat_interval(&hello("18446744073709551615").unwrap()), Some(Duration::from_secs(600)));
        for bad in ["null", "\"x\"", "0", "-5", "{}"] {
            assert_eq!(heartbeat_interval(&hello(bad).unwrap()), None, "{bad}");
        }
        assert!(hello("1e400").is_err(), "a number past f64 is no JSON serde reads: the Hello is refused");
    }
}
