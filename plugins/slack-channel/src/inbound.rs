//! A Slack `message` event as the gateway reads it: which ones count, and
//! the message's text and metadata.
//!
//! Counted: messages of people (no `bot_id`, not the bot itself, no
//! subtype other than `file_share` and `thread_broadcast`; edits and
//! deletions are not new messages). Active: every direct message
//! (`channel_type: im`); elsewhere a mention of the bot (`<@BOTID>`) or a
//! reply in a thread the bot took part in. Inactive messages still reach
//! the gateway, which counts them only within its active window.

use serde_json::{json, Map, Value};

/// A message event worth a turn (or a place in a batch).
#[derive(Clone, Debug, PartialEq)]
pub struct Inbound {
    /// The conversation (`C…`, `D…`, `G…`).
    pub channel: String,
    /// The author.
    pub user: String,
    /// The text.
    pub text: String,
    /// The message's `ts` (its id).
    pub ts: String,
    /// The thread it belongs to, if any.
    pub thread_ts: Option<String>,
    /// `im`, `mpim`, `channel` or `group`.
    pub channel_type: String,
    /// Images of the message: (`url_private`, MIME type, size).
    pub images: Vec<(String, String, Option<u64>)>,
}

/// Reads a `message` (or `app_mention`) event; `None` for what is no
/// person's new message.
pub fn parse(event: &Value, bot_user: &str) -> Option<Inbound> {
    let kind = event["type"].as_str()?;
    if kind != "message" && kind != "app_mention" {
        return None;
    }
    if let Some(subtype) = event["subtype"].as_str() {
        if subtype != "file_share" && subtype != "thread_broadcast" {
            return None;
        }
    }
    if event.get("bot_id").is_some_and(|b| !b.is_null()) {
        return None;
    }
    let user = event["user"].as_str()?.to_owned();
    if user == bot_user {
        return None;
    }
    let images = event["files"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| {
            let mime = f["mimetype"].as_str()?;
            let url = f["url_private"].as_str()?;
            mime.starts_with("image/").then(|| (url.to_owned(), mime.to_owned(), f["size"].as_u64()))
        })
        .collect();
    Some(Inbound {
        channel: event["channel"].as_str()?.to_owned(),
        user,
        text: event["text"].as_str().unwrap_or("").to_owned(),
        ts: event["ts"].as_str()?.to_owned(),
        thread_ts: event["thread_ts"].as_str().map(str::to_owned),
        channel_type: event["channel_type"]
            .as_str()
            .unwrap_or(if kind == "app_mention" { "channel" } else { "" })
            .to_owned(),
        images,
    })
}

impl Inbound {
    /// Whether it addresses the bot (see the module docs); `in_thread`:
    /// whether the bot took part in its thread.
    pub fn is_active(&self, bot_user: &str, in_thread: bool) -> bool {
        self.channel_type == "im"
            || (!bot_user.is_empty() && self.text.contains(&format!("<@{bot_user}>")))
            || in_thread
    }

    /// The text without a leading mention of the bot (`<@B> ,help` is a command).
    pub fn text_without_mention(&self, bot_user: &str) -> &str {
        let mention = format!("<@{bot_user}>");
        self.text.trim_start().strip_prefix(mention.as_str()).unwrap_or(&self.text).trim_start()
    }

    /// The content the gateway gets: the text with the message's metadata,
    /// as a JSON object (the shape of Bub's Telegram channel).
    pub fn content(&self) -> String {
        let mut content = Map::new();
        content.insert("message".into(), json!(self.text));
        content.insert("sender_id".into(), json!(self.user));
        content.insert("ts".into(), json!(self.ts));
        content.insert("channel_type".into(), json!(self.channel_type));
        if let Some(thread) = &self.thread_ts {
            content.insert("thread_ts".into(), json!(thread));
        }
        // As Bub's channels write the model's view of a message: `json.dumps`.
        bub_kit::python::python_json(&Value::Object(content))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn people_s_new_messages_count_and_mentions_make_them_active() {
        let dm =
            json!({"type": "message", "channel": "D1", "user": "U1", "text": "hi", "ts": "1.1", "channel_type": "im"});
        let m = parse(&dm, "B0").unwrap();
        assert!(m.is_active("B0", false));
        let channel = json!({"type": "message", "channel": "C1", "user": "U1", "text": "<@B0> ,help", "ts": "1.2", "channel_type": "channel"});
        let m = parse(&channel, "B0").unwrap();
        assert!(m.is_active("B0", false));
        assert_eq!(m.text_without_mention("B0"), ",help");
        let chatter = json!({"type": "message", "channel": "C1", "user": "U1", "text": "lunch?", "ts": "1.3", "channel_type": "channel"});
        assert!(!parse(&chatter, "B0").unwrap().is_active("B0", false));
        for skipped in [
            json!({"type": "message", "subtype": "message_changed", "channel": "C1", "ts": "1"}),
            json!({"type": "message", "channel": "C1", "user": "U9", "bot_id": "X", "text": "bot", "ts": "1"}),
            json!({"type": "message", "channel": "C1", "user": "B0", "text": "me", "ts": "1"}),
            json!({"type": "reaction_added", "user": "U1"}),
        ] {
            assert_eq!(parse(&skipped, "B0"), None, "{skipped}");
        }
        let photo = json!({"type": "message", "subtype": "file_share", "channel": "D1", "user": "U1", "text": "", "ts": "2",
            "files": [{"mimetype": "image/png", "url_private": "https://files/x.png", "size": 3}, {"mimetype": "application/pdf", "url_private": "p"}]});
        assert_eq!(
            parse(&photo, "B0").unwrap().images,
            vec![("https://files/x.png".into(), "image/png".into(), Some(3))]
        );
    }
}
