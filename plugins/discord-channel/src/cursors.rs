//! Where each channel's messages were last settled, kept on disk, so a
//! restart reads back what the Gateway will never send again.
//!
//! Discord's Gateway has no acknowledgement and no redelivery: an event
//! is sent once, replayed only to a resumed session, and a new session
//! starts with nothing. So a message the gateway refused while stopping,
//! or one that came while it was down, would be lost. Each channel's
//! cursor is the id of its last message that was handed over (or
//! deliberately passed over); a refusal freezes the channel's cursor for
//! the rest of the run. After the next start's `READY`, every channel
//! with a cursor is read from it over REST (`GET …/messages?after=`)
//! and what is younger than `catch_up_hours` goes to the gateway first,
//! in order, before the Gateway's own events, which wait on the socket.
//! A message seen both ways is handed over once (the channel remembers
//! recent ids, and the gateway each message's key: `idempotency_keys`).
//! The file is written (privately, atomically) at every move, and read
//! only as a private regular file of the user, under a size cap (a link
//! to `/dev/zero` or a FIFO is refused, not read).
//!
//! What is kept: the cursors of direct messages and of the channels and
//! people the allow-lists name (**kept**: at most [`MAX_KEPT`]) apart from
//! the others (at most [`MAX_CHANNELS`], the least recently moved
//! forgotten first), so strangers chatting in many channels cannot push a
//! listed user's cursor out. A listed user's direct-message channel that
//! has no cursor yet (the first message of a new conversation came while
//! the gateway was down) is found at READY (`POST /users/@me/channels`)
//! and read back from `catch_up_hours` ago.

use std::{
    collections::HashSet,
    path::PathBuf,
    time::{SystemTime, UNIX_EPOCH},
};

use serde_json::{json, Map, Value};

/// How many other channels' cursors are kept.
pub const MAX_CHANNELS: usize = 256;

/// How many kept cursors (direct messages, listed channels and people) are kept.
pub const MAX_KEPT: usize = 4096;

/// The largest cursor file read.
const MAX_FILE: u64 = 8 << 20;

/// The cursors of one channel plugin's home.
#[derive(Debug)]
pub struct Cursors {
    path: PathBuf,
    map: Map<String, Value>,
    frozen: HashSet<String>,
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A channel to read back: its id, the last settled message, its guild.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Due {
    /// The channel.
    pub channel: String,
    /// Read messages after this id.
    pub after: u64,
    /// Its guild (REST messages do not say; none is a DM).
    pub guild: Option<String>,
}

impl Cursors {
    /// The cursors in `path` (none when it is missing or unreadable: the
    /// channel then reads nothing back, and says so).
    pub fn load(path: PathBuf) -> Cursors {
        let map = match bub_kit::files::read_trusted(&path, MAX_FILE) {
            Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
                Ok(Value::Object(map)) => map,
                _ => {
                    tracing::warn!("discord: {} is not a JSON object; starting without cursors", path.display());
                    Map::new()
                }
            },
            Err(bub_kit::files::TrustError::Missing) => Map::new(),
            Err(e) => {
                tracing::warn!(
                    "discord: refusing {}: {e}; starting without cursors (remove it, and messages that came while \
                     the gateway was down are not read back this time)",
                    path.display()
                );
                Map::new()
            }
        };
        Cursors { path, map, frozen: HashSet::new() }
    }

    /// The channels to read back, each from its cursor.
    pub fn due(&self) -> Vec<Due> {
        self.map
            .iter()
            .filter_map(|(channel, c)| {
                Some(Due {
                    channel: channel.clone(),
                    after: c["after"].as_str()?.parse().ok()?,
                    guild: c["guild"].as_str().map(str::to_owned),
                })
            })
            .collect()
    }

    /// Message `id` of `channel` is settled: the cursor moves to it
    /// (never back, and not in a frozen channel) and is written. `keep`:
    /// a direct message, or a listed channel or person's (once kept, a
    /// cursor stays kept).
    pub fn settled(&mut self, channel: &str, id: u64, guild: Option<&str>, keep: bool) {
        if self.frozen.contains(channel) {
            return;
        }
        let current = self.map.get(channel);
        let after = current.and_then(|c| c["after"].as_str()?.parse::<u64>().ok()).unwrap_or(0);
        if id <= after && current.is_some() {
            return;
        }
        let keep = keep || guild.is_none() || current.is_some_and(|c| c["keep"] == json!(true));
        self.map.remove(channel);
        self.map
            .insert(channel.to_owned(), json!({"after": id.to_string(), "guild": guild, "at": now(), "keep": keep}));
        self.evict();
        self.save();
    }

    /// Forgets the least recently moved cursors past the bounds: other
    /// channels' past [`MAX_CHANNELS`], kept ones' past [`MAX_KEPT`].
    fn evict(&mut self) {
        for (kept, max) in [(false, MAX_CHANNELS), (true, MAX_KEPT)] {
            let is = |c: &Value| (c["keep"] == json!(true)) == kept;
            while self.map.values().filter(|c| is(c)).count() > max {
                let oldest = self
                    .map
                    .iter()
                    .filter(|(_, c)| is(c))
                    .min_by_key(|(_, c)| c["at"].as_u64().unwrap_or(0))
                    .map(|(k, _)| k.clone());
                match oldest {
                    Some(oldest) => self.map.remove(&oldest),
                    None => break,
                };
            }
        }
    }

    /// A direct-message channel found at READY: read back from `after` if
    /// it has no cursor yet (whether one was made).
    pub fn found_dm(&mut self, channel: &str, after: u64) -> bool {
        if self.map.contains_key(channel) {
            return false;
        }
        self.map
            .insert(channel.to_owned(), json!({"after": after.to_string(), "guild": null, "at": now(), "keep": true}));
        self.evict();
        self.save();
        true
    }

    /// Message `id` of `channel` was refused: the cursor stays before it
    /// (set there when the channel had none) for the rest of this run, so
    /// the next start reads it back.
    pub fn refused(&mut self, channel: &str, id: u64, guild: Option<&str>, keep: bool) {
        if !self.map.contains_key(channel) {
            self.settled(channel, id.saturating_sub(1), guild, keep);
        }
        self.frozen.insert(channel.to_owned());
    }

    /// Forgets `channel` (deleted, or the bot was removed from it).
    pub fn forget(&mut self, channel: &str) {
        if self.map.remove(channel).is_some() {
            self.save();
        }
    }

    fn save(&self) {
        let Some(dir) = self.path.parent() else { return };
        let written = bub_kit::files::create_private_dir(dir).and_then(|()| {
            bub_kit::files::write_private(&self.path, Value::Object(self.map.clone()).to_string().as_bytes())
        });
        if let Err(e) = written {
            tracing::warn!(
                "discord: cannot write {}: {e}; messages refused at a stop may not be read back",
                self.path.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_move_forward_freeze_at_a_refusal_and_survive_a_restart() {
        let dir = std::env::temp_dir().join(format!("discord-cursors-{}", bub_kit::random::u64()));
        let path = dir.join("cursors.json");
        let mut cursors = Cursors::load(path.clone());
        cursors.settled("C1", 10, Some("G1"), false);
        cursors.settled("C1", 9, Some("G1"), false);
        cursors.settled("D1", 5, None, false);
        cursors.refused("D1", 6, None, false);
        cursors.settled("D1", 7, None, false);
        cursors.refused("N1", 20, None, false);
        cursors.settled("X1", 3, None, false);
        cursors.forget("X1");
        let mut due = Cursors::load(path).due();
        due.sort_by(|a, b| a.channel.cmp(&b.channel));
        assert_eq!(
            due,
            vec![
                Due { channel: "C1".into(), after: 10, guild: Some("G1".into()) },
                Due { channel: "D1".into(), after: 5, guild: None },
                Due { channel: "N1".into(), after: 19, guild: None },
            ]
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn strangers_in_many_channels_never_push_out_a_kept_cursor() {
        let dir = std::env::temp_dir().join(format!("discord-cursors-{}", bub_kit::random::u64()));
        let mut cursors = Cursors::load(dir.join("cursors.json"));
        cursors.settled("900", 1, Some("G"), true);
        cursors.settled("901", 1, None, false);
        for channel in 0..(MAX_CHANNELS as u64 + 50) {
            cursors.settled(&format!("{}", 1000 + channel), 5, Some("G"), false);
        }
        let due = cursors.due();
        assert!(due.iter().any(|d| d.channel == "900"), "a listed person's channel is kept");
        assert!(due.iter().any(|d| d.channel == "901"), "a direct message is kept");
        assert_eq!(due.len(), MAX_CHANNELS + 2);
        assert!(!due.iter().any(|d| d.channel == "1000"), "the oldest stranger's channel went");
        assert!(cursors.found_dm("902", 77) && !cursors.found_dm("902", 99));
        assert!(cursors.due().iter().any(|d| d.channel == "902" && d.after == 77));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_cursor_file_that_is_no_private_regular_file_is_not_read() {
        let dir = std::env::temp_dir().join(format!("discord-cursors-{}", bub_kit::random::u64()));
        bub_kit::files::create_private_dir(&dir).unwrap();
        let path = dir.join("cursors.json");
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        assert!(Cursors::load(path.clone()).due().is_empty(), "a link to /dev/zero is refused, not read");
        std::fs::remove_file(&path).unwrap();
        let fifo = std::process::Command::new("mkfifo").arg(&path).status();
        if fifo.is_ok_and(|s| s.success()) {
            assert!(Cursors::load(path).due().is_empty(), "a FIFO is refused without blocking");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
