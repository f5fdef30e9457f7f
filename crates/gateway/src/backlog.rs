//! The gateway's backlog: how many messages it has taken and not yet
//! started a turn for, in all and per session, bounded at the door.
//!
//! A message is counted from the moment the handler takes it until its
//! turn starts (or it is settled otherwise), by a [`Ticket`] that travels
//! with it and gives its place back when dropped, so no path can leak a
//! count. Past a bound the handler refuses the message, as it does while
//! the gateway stops: a channel keeps it for later (Telegram leaves it
//! unconfirmed, Slack unacknowledged, HTTP answers 503) and a plugin that
//! hands messages over from inside its turns (each turn handing over more
//! turns) is told why instead of growing the gateway without end.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

/// The counts and their bounds.
#[derive(Debug)]
pub(crate) struct Backlog {
    max_total: usize,
    max_session: usize,
    max_depth: u64,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    sessions: HashMap<String, usize>,
    refused: u64,
}

/// A message's place in the backlog, given back when dropped.
#[derive(Debug)]
pub(crate) struct Ticket {
    backlog: Arc<Backlog>,
    session: String,
}

impl Backlog {
    /// At most `max_total` messages waiting in all, `max_session` in one
    /// session, and none born more than `max_depth` turns deep.
    pub fn new(max_total: usize, max_session: usize, max_depth: u64) -> Arc<Backlog> {
        Arc::new(Backlog { max_total, max_session, max_depth, counts: Mutex::new(Counts::default()) })
    }

    /// A place for a message of `session`, `depth` turns deep (handed over
    /// from inside a turn whose own message was `depth - 1` deep), or why
    /// there is none (to hand back to whoever handed the message over).
    pub fn admit(self: &Arc<Self>, session: &str, depth: u64) -> Result<Ticket, String> {
        let mut counts = bub_abi::sync::lock(&self.counts);
        let in_session = counts.sessions.get(session).copied().unwrap_or(0);
        let full = if depth > self.max_depth {
            Some(format!(
                "it was handed over from inside a turn {depth} turns deep (BUB_MAX_INBOUND_DEPTH={}): a plugin's \
                 turns keep starting turns",
                self.max_depth
            ))
        } else if counts.total >= self.max_total {
            Some(format!(
                "the gateway has {} messages waiting for a turn (BUB_MAX_QUEUED_MESSAGES={})",
                counts.total, self.max_total
            ))
        } else if in_session >= self.max_session {
            Some(format!(
                "session {session} has {in_session} messages waiting for a turn (BUB_MAX_SESSION_QUEUE={})",
                self.max_session
            ))
        } else {
            None
        };
        if let Some(why) = full {
            counts.refused += 1;
            // The first refusal of a flood, then one line per thousand.
            if counts.refused % 1000 == 1 {
                tracing::warn!(
                    target: "bub::gateway",
                    "refusing a message: {why}; {} refused so far (a plugin handing messages over from inside its \
                     turns can do this)",
                    counts.refused
                );
            }
            return Err(format!("{why}; it was not taken, send it again later"));
        }
        counts.total += 1;
        *counts.sessions.entry(session.to_owned()).or_default() += 1;
        Ok(Ticket { backlog: self.clone(), session: session.to_owned() })
    }

    /// Messages waiting in all.
    #[cfg(test)]
    fn total(&self) -> usize {
        bub_abi::sync::lock(&self.counts).total
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut counts = bub_abi::sync::lock(&self.backlog.counts);
        counts.total = counts.total.saturating_sub(1);
        if let Some(n) = counts.sessions.get_mut(&self.session) {
            *n -= 1;
            if *n == 0 {
                counts.sessions.remove(&self.session);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_bounded_per_session_and_in_all_and_given_back_when_dropped() {
        let backlog = Backlog::new(3, 2, 4);
        let a1 = backlog.admit("a", 0).unwrap();
        let _a2 = backlog.admit("a", 4).unwrap();
        let err = backlog.admit("a", 0).unwrap_err();
        assert!(err.contains("session a has 2 messages") && err.contains("BUB_MAX_SESSION_QUEUE=2"), "{err}");
        let _b1 = backlog.admit("b", 0).unwrap();
        let err = backlog.admit("c", 0).unwrap_err();
        assert!(err.contains("BUB_MAX_QUEUED_MESSAGES=3"), "{err}");
        drop(a1);
        assert_eq!(backlog.total(), 2);
        let err = backlog.admit("d", 5).unwrap_err();
        assert!(err.contains("5 turns deep") && err.contains("BUB_MAX_INBOUND_DEPTH=4"), "{err}");
        assert!(backlog.admit("a", 0).is_ok(), "a place given back is taken again");
        assert_eq!(backlog.total(), 2, "and given back once more when that ticket dropped");
    }
}
