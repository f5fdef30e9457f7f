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
//! recent ids). The file is written (privately, atomically) at every
//! move; at most [`MAX_CHANNELS`] channels are kept, the least recently
//! moved forgotten first.

use std::{
    collections::HashSet,
    path::PathBuf,
    time::{SystemTime, UNIX_EPOCH},
};

use serde_json::{json, Map, Value};

/// How many channels' cursors are kept.
pub const MAX_CHANNELS: usize = 256;

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
        let map = match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
                Ok(Value::Object(map)) => map,
                _ => {
                    tracing::warn!("discord: {} is not a JSON object; starting without cursors", path.display());
                    Map::new()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Map::new(),
            Err(e) => {
                tracing::warn!("discord: cannot read {}: {e}; starting without cursors", path.display());
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
    /// (never back, and not in a frozen channel) and is written.
    pub fn settled(&mut self, channel: &str, id: u64, guild: Option<&str>) {
        if self.frozen.contains(channel) {
            return;
        }
        let current = self.map.get(channel).and_then(|c| c["after"].as_str()?.parse::<u64>().ok()).unwrap_or(0);
        if id <= current {
            return;
        }
        self.map.remove(channel);
        self.map.insert(channel.to_owned(), json!({"after": id.to_string(), "guild": guild, "at": now()}));
        while self.map.len() > MAX_CHANNELS {
            let oldest = self.map.iter().min_by_key(|(_, c)| c["at"].as_u64().unwrap_or(0)).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.map.remove(&oldest);
            }
        }
        self.save();
    }

    /// Message `id` of `channel` was refused: the cursor stays before it
    /// (set there when the channel had none) for the rest of this run, so
    /// the next start reads it back.
    pub fn refused(&mut self, channel: &str, id: u64, guild: Option<&str>) {
        if !self.map.contains_key(channel) {
            self.settled(channel, id.saturating_sub(1), guild);
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
        cursors.settled("C1", 10, Some("G1"));
        cursors.settled("C1", 9, Some("G1"));
        cursors.settled("D1", 5, None);
        cursors.refused("D1", 6, None);
        cursors.settled("D1", 7, None);
        cursors.refused("N1", 20, None);
        cursors.settled("X1", 3, None);
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
}
