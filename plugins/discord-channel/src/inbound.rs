//! A Discord message (a Gateway `MESSAGE_CREATE`, or one read back over
//! REST) as the gateway reads it, the way Bub's bub-discord reads it:
//! which ones count, when one addresses the bot, what is a command, and
//! the content's JSON of text and metadata.
//!
//! Counted: people's messages (not bots', not webhooks'), of the default
//! and reply types (not joins, pins, boosts), with text, attachments or
//! stickers. Active: a direct message; a mention of the bot; a reply to
//! one of its messages; text that says "bub" or starts with
//! `<prefix>bub`; any message in a thread whose name starts with "bub"
//! (which the message does not say: the channel asks Discord).

use serde_json::{json, Map, Value};

/// Discord's epoch (2015-01-01) in Unix milliseconds.
const DISCORD_EPOCH_MS: u64 = 1_420_070_400_000;

/// A snowflake id (a string on the wire) as a number; 0 when it is none.
pub fn snowflake(id: &Value) -> u64 {
    id.as_str().and_then(|s| s.parse().ok()).or_else(|| id.as_u64()).unwrap_or(0)
}

/// When the object with snowflake `id` was made, in Unix seconds.
pub fn created_at(id: u64) -> f64 {
    ((id >> 22) + DISCORD_EPOCH_MS) as f64 / 1000.0
}

/// The smallest snowflake made at or after `unix` seconds (what a
/// read-back `after=` from that moment names).
pub fn snowflake_at(unix: f64) -> u64 {
    let ms = (unix * 1000.0).max(0.0) as u64;
    ms.saturating_sub(DISCORD_EPOCH_MS) << 22
}

/// An attachment of a message.
#[derive(Clone, Debug, PartialEq)]
pub struct Attachment {
    /// Its id.
    pub id: String,
    /// Its file name.
    pub filename: String,
    /// Its MIME type, when Discord knows it.
    pub content_type: Option<String>,
    /// Its size in bytes.
    pub size: Option<u64>,
    /// Where it is (Discord's CDN).
    pub url: String,
}

/// A message worth a turn (or a place in a batch).
#[derive(Clone, Debug, PartialEq)]
pub struct Inbound {
    /// Its id.
    pub id: String,
    /// The channel (a guild channel, a thread or a DM).
    pub channel: String,
    /// The guild; none in a direct message.
    pub guild: Option<String>,
    /// The author's id.
    pub author: String,
    /// The author's user name.
    pub username: String,
    /// The author's global display name.
    pub global_name: Option<String>,
    /// The author's nickname in the guild.
    pub nick: Option<String>,
    /// The text.
    pub text: String,
    /// Users it mentions (ids).
    pub mentions: Vec<String>,
    /// The message it replies to, when Discord sent it along.
    pub replied: Option<Value>,
    /// Its attachments.
    pub attachments: Vec<Attachment>,
    /// Its stickers: (id, name).
    pub stickers: Vec<(String, String)>,
}

fn text(value: &Value) -> Option<String> {
    value.as_str().filter(|s| !s.is_empty()).map(str::to_owned)
}

/// Reads a message object; `None` for what is no person's new message
/// (and for the bot's own, `me`).
pub fn parse(message: &Value, me: &str) -> Option<Inbound> {
    let kind = message["type"].as_u64().unwrap_or(0);
    if kind != 0 && kind != 19 {
        return None;
    }
    let author = &message["author"];
    if author["bot"] == json!(true) || message.get("webhook_id").is_some_and(|w| !w.is_null()) {
        return None;
    }
    let author_id = text(&author["id"])?;
    if author_id == me {
        return None;
    }
    let attachments: Vec<Attachment> = message["attachments"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| {
            Some(Attachment {
                id: text(&a["id"])?,
                filename: text(&a["filename"]).unwrap_or_else(|| "file".into()),
                content_type: text(&a["content_type"]),
                size: a["size"].as_u64(),
                url: text(&a["url"])?,
            })
        })
        .collect();
    let stickers: Vec<(String, String)> = message["sticker_items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| Some((text(&s["id"])?, text(&s["name"]).unwrap_or_default())))
        .collect();
    let body = message["content"].as_str().unwrap_or("").to_owned();
    if body.trim().is_empty() && attachments.is_empty() && stickers.is_empty() {
        return None;
    }
    Some(Inbound {
        id: text(&message["id"])?,
        channel: text(&message["channel_id"])?,
        guild: text(&message["guild_id"]),
        author: author_id,
        username: author["username"].as_str().unwrap_or("").to_owned(),
        global_name: text(&author["global_name"]),
        nick: text(&message["member"]["nick"]),
        text: body,
        mentions: message["mentions"].as_array().into_iter().flatten().filter_map(|u| text(&u["id"])).collect(),
        replied: message.get("referenced_message").filter(|r| r.is_object()).cloned(),
        attachments,
        stickers,
    })
}

impl Inbound {
    /// The names an allow-list may give for the author: id, user name,
    /// global name (Bub's `sender_tokens`).
    pub fn sender_names(&self) -> Vec<&str> {
        let mut names = vec![self.author.as_str(), self.username.as_str()];
        names.extend(self.global_name.as_deref());
        names
    }

    /// Whether it replies to a message of `me`.
    pub fn replies_to(&self, me: &str) -> bool {
        self.replied.as_ref().is_some_and(|r| r["author"]["id"].as_str() == Some(me))
    }

    /// Whether it addresses the bot `me` by itself (see the module docs);
    /// a thread named "bub…" is the channel's to find out.
    pub fn is_active(&self, me: &str, prefix: &str) -> bool {
        self.guild.is_none()
            || self.text.to_lowercase().contains("bub")
            || self.text.starts_with(&format!("{prefix}bub"))
            || (!me.is_empty() && self.mentions.iter().any(|m| m == me))
            || self.replies_to(me)
    }

    /// The text Bub reads: the message's, else a line per attachment or
    /// sticker; with the attachments' or stickers' metadata.
    pub fn body(&self) -> (String, Option<Value>) {
        if !self.text.is_empty() {
            return (self.text.clone(), None);
        }
        if !self.attachments.is_empty() {
            let lines: Vec<String> = self.attachments.iter().map(|a| format!("[Attachment: {}]", a.filename)).collect();
            let meta: Vec<Value> = self
                .attachments
                .iter()
                .map(|a| {
                    let mut m = json!({"id": a.id, "filename": a.filename});
                    if let Some(t) = &a.content_type {
                        m["content_type"] = json!(t);
                    }
                    if let Some(s) = a.size {
                        m["size"] = json!(s);
                    }
                    m["url"] = json!(a.url);
                    m
                })
                .collect();
            return (lines.join("\n"), Some(json!({"attachments": meta})));
        }
        if !self.stickers.is_empty() {
            let lines: Vec<String> = self.stickers.iter().map(|(_, name)| format!("[Sticker: {name}]")).collect();
            let meta: Vec<Value> = self.stickers.iter().map(|(id, name)| json!({"id": id, "name": name})).collect();
            return (lines.join("\n"), Some(json!({"stickers": meta})));
        }
        ("[Unknown message type]".to_owned(), None)
    }

    /// The command in it, if it is one: the text after an optional
    /// `<prefix>bub ` (Bub) or a leading mention of the bot, starting
    /// with `,`.
    pub fn command(&self, me: &str, prefix: &str) -> Option<String> {
        let (text, _) = self.body();
        let text = text.strip_prefix(&format!("{prefix}bub ")).unwrap_or(&text);
        let text = text.trim();
        let text = [format!("<@{me}>"), format!("<@!{me}>")]
            .iter()
            .find_map(|m| text.strip_prefix(m.as_str()))
            .map_or(text, str::trim_start);
        text.starts_with(',').then(|| text.to_owned())
    }

    /// The content the gateway gets: the text with the message's metadata
    /// as a JSON object, in the shape and order of Bub's bub-discord.
    pub fn content(&self, prefix: &str) -> String {
        let (body, media) = self.body();
        let body = body.strip_prefix(&format!("{prefix}bub ")).map(str::to_owned).unwrap_or(body);
        let mut content = Map::new();
        content.insert("message".into(), json!(body));
        content.insert("channel_id".into(), json!(self.channel));
        let id = snowflake(&json!(self.id));
        content.insert("message_id".into(), json!(id));
        let kind = if !self.text.is_empty() {
            "text"
        } else if !self.attachments.is_empty() {
            "attachment"
        } else if !self.stickers.is_empty() {
            "sticker"
        } else {
            "unknown"
        };
        content.insert("type".into(), json!(kind));
        content.insert("username".into(), json!(self.username));
        let full_name = self.nick.as_ref().or(self.global_name.as_ref()).unwrap_or(&self.username);
        content.insert("full_name".into(), json!(full_name));
        content.insert("sender_id".into(), json!(self.author));
        content.insert("date".into(), json!(created_at(id)));
        if let Some(guild) = &self.guild {
            content.insert("guild_id".into(), json!(guild));
        }
        if let Some(media) = media {
            content.insert("media".into(), media);
        }
        if let Some(replied) = &self.replied {
            let author = &replied["author"];
            let text: String = replied["content"].as_str().unwrap_or("").chars().take(100).collect();
            content.insert(
                "reply_to_message".into(),
                json!({
                    "message_id": replied["id"].as_str().unwrap_or(""),
                    "from_user_id": author["id"].as_str().unwrap_or(""),
                    "from_username": author["username"].as_str().unwrap_or(""),
                    "from_is_bot": author["bot"] == json!(true),
                    "text": text,
                }),
            );
        }
        // bub-discord: `json.dumps({...}, ensure_ascii=False)`.
        bub_kit::python::python_json(&Value::Object(content))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(extra: Value) -> Value {
        let mut m = json!({"id": "1300000000000000000", "type": 0, "channel_id": "C1", "guild_id": "G1",
            "author": {"id": "U1", "username": "ann", "global_name": "Ann"}, "content": "hello",
            "mentions": [], "attachments": []});
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        m
    }

    #[test]
    fn people_s_messages_count_and_what_addresses_the_bot_is_active() {
        let chatter = parse(&message(json!({})), "B0").unwrap();
        assert!(!chatter.is_active("B0", "!"));
        let dm = parse(&message(json!({"guild_id": null})), "B0").unwrap();
        assert!(dm.is_active("B0", "!"));
        for active in [
            json!({"mentions": [{"id": "B0"}], "content": "<@B0> hi"}),
            json!({"content": "ask Bub about it"}),
            json!({"content": "!bubble"}),
            json!({"type": 19, "referenced_message": {"id": "9", "author": {"id": "B0", "bot": true}, "content": "x"}}),
        ] {
            assert!(parse(&message(active.clone()), "B0").unwrap().is_active("B0", "!"), "{active}");
        }
        for skipped in [
            json!({"author": {"id": "X", "username": "bot", "bot": true}}),
            json!({"author": {"id": "B0", "username": "me"}}),
            json!({"webhook_id": "W1"}),
            json!({"type": 7}),
            json!({"content": "  "}),
        ] {
            assert_eq!(parse(&message(skipped.clone()), "B0"), None, "{skipped}");
        }
    }

    #[test]
    fn commands_follow_the_prefix_or_a_mention() {
        let command = |text: &str| parse(&message(json!({"content": text})), "B0").unwrap().command("B0", "!");
        assert_eq!(command(",help").as_deref(), Some(",help"));
        assert_eq!(command("!bub ,tape.info").as_deref(), Some(",tape.info"));
        assert_eq!(command("<@B0> ,help").as_deref(), Some(",help"));
        assert_eq!(command("hello, there"), None);
    }

    #[test]
    fn content_is_bubs_json_with_metadata_and_the_message_replied_to() {
        let m = parse(
            &message(json!({"member": {"nick": "Annie"}, "content": "!bub what now",
                "referenced_message": {"id": "7", "author": {"id": "B0", "username": "bub", "bot": true}, "content": "earlier"}})),
            "B0",
        )
        .unwrap();
        let content: Value = serde_json::from_str(&m.content("!")).unwrap();
        assert_eq!(content["message"], "what now");
        assert_eq!(content["message_id"], json!(1300000000000000000u64));
        assert_eq!(content["full_name"], "Annie");
        assert_eq!(content["guild_id"], "G1");
        assert_eq!(content["reply_to_message"]["from_is_bot"], true);
        assert_eq!(content["date"], json!(created_at(1300000000000000000)));
        let keys: Vec<&String> = content.as_object().unwrap().keys().collect();
        assert_eq!(keys[..4], ["message", "channel_id", "message_id", "type"]);
        let file = parse(
            &message(json!({"content": "", "attachments": [{"id": "A1", "filename": "cat.png",
            "content_type": "image/png", "size": 3, "url": "https://cdn.discordapp.com/a/cat.png"}]})),
            "B0",
        )
        .unwrap();
        let content: Value = serde_json::from_str(&file.content("!")).unwrap();
        assert_eq!(content["message"], "[Attachment: cat.png]");
        assert_eq!(content["type"], "attachment");
        assert_eq!(content["media"]["attachments"][0]["size"], 3);
    }

    #[test]
    fn snowflakes_tell_when_they_were_made() {
        // Discord's documented example: 175928847299117063 is 2016-04-30 11:18:25.796 UTC.
        assert_eq!(created_at(175928847299117063), 1462015105.796);
        assert_eq!(snowflake(&json!("42")), 42);
        assert_eq!(snowflake(&json!(null)), 0);
    }
}
