//! A Telegram message as Bub reads it: which messages count (Bub's
//! `BubMessageFilter`), their text and metadata (`TelegramMessageParser`),
//! and the one file each may carry.
//!
//! Entity offsets are UTF-16 code units, as the Bot API counts them (Bub
//! slices Python strings by them, which is off after an emoji; here not).

use frankenstein::types::{ChatType, Message, MessageEntity, MessageEntityType};
use serde_json::{json, Map, Value};

/// The bot itself (`getMe`): group messages count when they address it.
#[derive(Clone, Debug, Default)]
pub struct Me {
    /// The bot's user id.
    pub id: u64,
    /// Its username, lower-cased, without `@`.
    pub username: String,
}

/// Bub's name for what a message carries.
pub fn message_type(m: &Message) -> &'static str {
    if m.text.is_some() {
        "text"
    } else if m.photo.as_ref().is_some_and(|p| !p.is_empty()) {
        "photo"
    } else if m.audio.is_some() {
        "audio"
    } else if m.sticker.is_some() {
        "sticker"
    } else if m.video.is_some() {
        "video"
    } else if m.voice.is_some() {
        "voice"
    } else if m.document.is_some() {
        "document"
    } else if m.video_note.is_some() {
        "video_note"
    } else {
        "unknown"
    }
}

/// A message starting with a bot command (`/start`, `/help`): Bub's
/// `filters.COMMAND`, which its message handler skips (`/bub …` aside).
pub fn is_bot_command(m: &Message) -> bool {
    m.entities.iter().flatten().any(|e| e.type_field == MessageEntityType::BotCommand && e.offset == 0)
}

/// The command name of a leading bot command (`/start@my_bot` → `start`).
pub fn bot_command(m: &Message) -> Option<String> {
    let text = m.text.as_deref()?;
    is_bot_command(m).then(|| {
        let word = text.split_whitespace().next().unwrap_or("");
        word.trim_start_matches('/').split('@').next().unwrap_or("").to_owned()
    })
}

fn utf16_slice(text: &str, offset: u16, length: u16) -> String {
    let units: Vec<u16> = text.encode_utf16().collect();
    let start = (offset as usize).min(units.len());
    let end = (start + length as usize).min(units.len());
    String::from_utf16_lossy(&units[start..end])
}

fn entities(m: &Message) -> impl Iterator<Item = &MessageEntity> {
    m.entities.iter().flatten().chain(m.caption_entities.iter().flatten())
}

/// Whether the message is for the bot (Bub's filter): every private
/// message; in a group, a mention (`@bot`, a text mention, or the word
/// `bub`) or a reply to the bot; media without a caption only as a reply.
/// Inactive messages still reach the gateway, which counts them only
/// within its active window.
pub fn is_active(m: &Message, me: &Me) -> bool {
    let kind = message_type(m);
    if kind == "unknown" {
        return false;
    }
    match m.chat.type_field {
        ChatType::Private => true,
        ChatType::Group | ChatType::Supergroup => {
            let reply_to_bot = m.reply_to_message.as_ref().and_then(|r| r.from.as_ref()).is_some_and(|u| u.id == me.id);
            if kind != "text" && m.caption.is_none() {
                return reply_to_bot;
            }
            mentions(m, me) || reply_to_bot
        }
        ChatType::Channel => false,
    }
}

fn mentions(m: &Message, me: &Me) -> bool {
    let source = m.text.as_deref().or(m.caption.as_deref()).unwrap_or("");
    let content = source.trim().to_lowercase();
    let handle = format!("@{}", me.username);
    let by_keyword = content.contains("bub") || (!me.username.is_empty() && content.contains(&handle));
    let by_entity = entities(m).any(|e| match e.type_field {
        MessageEntityType::Mention => {
            !me.username.is_empty() && utf16_slice(source, e.offset, e.length).to_lowercase() == handle
        }
        MessageEntityType::TextMention => e.user.as_ref().is_some_and(|u| u.id == me.id),
        _ => false,
    });
    by_entity || by_keyword
}

/// The one file a message carries, to fetch if small enough.
#[derive(Clone, Debug, PartialEq)]
pub struct FileRef {
    /// Bub's media type: `image`, `audio`, `video` or `document`.
    pub kind: &'static str,
    /// Telegram's id of the file.
    pub file_id: String,
    /// Its size, when Telegram says.
    pub file_size: Option<u64>,
    /// Its MIME type.
    pub mime_type: String,
    /// Its name (documents, audio).
    pub file_name: Option<String>,
}

/// A message's content and metadata, as Bub's parser makes them.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    /// The text: the message's, or a description (`[Photo message] Caption: …`).
    pub content: String,
    /// `message_id`, `type`, `username`, `full_name`, `sender_id`,
    /// `sender_is_bot`, `date`, `links`, `media` (the file's facts).
    pub metadata: Map<String, Value>,
    /// The file, if any.
    pub file: Option<FileRef>,
}

fn caption_suffix(described: String, caption: Option<&str>) -> String {
    match caption.filter(|c| !c.is_empty()) {
        Some(c) => format!("{described} Caption: {c}"),
        None => described,
    }
}

/// Parses a message (Bub's `TelegramMessageParser.parse`).
pub fn parse(m: &Message) -> Parsed {
    let kind = message_type(m);
    let caption = m.caption.as_deref();
    let (content, file) = match kind {
        "text" => (m.text.clone().unwrap_or_default(), None),
        "photo" => {
            let largest = m.photo.as_ref().and_then(|p| p.last());
            let content = match caption.filter(|c| !c.is_empty()) {
                Some(c) => format!("[Photo message] Caption: {c}"),
                None => "[Photo message]".to_owned(),
            };
            let file = largest.map(|p| FileRef {
                kind: "image",
                file_id: p.file_id.clone(),
                file_size: p.file_size,
                mime_type: "image/jpeg".into(),
                file_name: None,
            });
            (content, file)
        }
        "audio" => {
            let a = m.audio.as_ref().expect("audio");
            let title = a.title.clone().unwrap_or_else(|| "Unknown".into());
            let content = match a.performer.as_deref().filter(|p| !p.is_empty()) {
                Some(p) => format!("[Audio: {p} - {title} ({}s)]", a.duration),
                None => format!("[Audio: {title} ({}s)]", a.duration),
            };
            let mime_type = a.mime_type.clone().unwrap_or_else(|| "audio/mpeg".into());
            let file = FileRef {
                kind: "audio",
                file_id: a.file_id.clone(),
                file_size: a.file_size,
                mime_type,
                file_name: a.file_name.clone(),
            };
            (content, Some(file))
        }
        "sticker" => {
            let s = m.sticker.as_ref().expect("sticker");
            let set = s.set_name.clone().unwrap_or_default();
            let content = match s.emoji.as_deref().filter(|e| !e.is_empty()) {
                Some(e) => format!("[Sticker: {e} from {set}]"),
                None => format!("[Sticker from {set}]"),
            };
            let mime_type = if s.is_animated { "video/webm" } else { "image/webp" }.to_owned();
            let file = FileRef {
                kind: "image",
                file_id: s.file_id.clone(),
                file_size: s.file_size,
                mime_type,
                file_name: None,
            };
            (content, Some(file))
        }
        "video" => {
            let v = m.video.as_ref().expect("video");
            let content = caption_suffix(format!("[Video: {}s]", v.duration), caption);
            let mime_type = v.mime_type.clone().unwrap_or_else(|| "video/mp4".into());
            let file = FileRef {
                kind: "video",
                file_id: v.file_id.clone(),
                file_size: v.file_size,
                mime_type,
                file_name: None,
            };
            (content, Some(file))
        }
        "voice" => {
            let v = m.voice.as_ref().expect("voice");
            let mime_type = v.mime_type.clone().unwrap_or_else(|| "audio/ogg".into());
            let file = FileRef {
                kind: "audio",
                file_id: v.file_id.clone(),
                file_size: v.file_size,
                mime_type,
                file_name: None,
            };
            (format!("[Voice message: {}s]", v.duration), Some(file))
        }
        "document" => {
            let d = m.document.as_ref().expect("document");
            let name = d.file_name.clone().unwrap_or_else(|| "unknown".into());
            let mime_type = d.mime_type.clone().unwrap_or_else(|| "application/octet-stream".into());
            let content = caption_suffix(format!("[Document: {name} ({mime_type})]"), caption);
            let file = FileRef {
                kind: "document",
                file_id: d.file_id.clone(),
                file_size: d.file_size,
                mime_type,
                file_name: d.file_name.clone(),
            };
            (content, Some(file))
        }
        "video_note" => {
            let v = m.video_note.as_ref().expect("video note");
            let file = FileRef {
                kind: "video",
                file_id: v.file_id.clone(),
                file_size: v.file_size,
                mime_type: "video/mp4".into(),
                file_name: None,
            };
            (format!("[Video note: {}s]", v.duration), Some(file))
        }
        other => (format!("[Unsupported message type: {other}]"), None),
    };
    let mut metadata = Map::new();
    metadata.insert("message_id".into(), json!(m.message_id));
    metadata.insert("type".into(), json!(kind));
    let from = m.from.as_deref();
    metadata.insert("username".into(), json!(from.and_then(|u| u.username.clone()).unwrap_or_default()));
    let full_name = from
        .map(|u| match &u.last_name {
            Some(last) => format!("{} {last}", u.first_name),
            None => u.first_name.clone(),
        })
        .unwrap_or_default();
    metadata.insert("full_name".into(), json!(full_name));
    metadata.insert("sender_id".into(), json!(from.map(|u| u.id.to_string()).unwrap_or_default()));
    if let Some(u) = from {
        metadata.insert("sender_is_bot".into(), json!(u.is_bot));
    }
    metadata.insert("date".into(), json!(m.date as f64));
    let links = links(m);
    if !links.is_empty() {
        metadata.insert("links".into(), json!(links));
    }
    if let Some(f) = &file {
        let mut media = json!({"file_id": f.file_id, "mime_type": f.mime_type});
        if let Some(size) = f.file_size {
            media["file_size"] = json!(size);
        }
        if let Some(name) = &f.file_name {
            media["file_name"] = json!(name);
        }
        metadata.insert("media".into(), media);
    }
    Parsed { content, metadata, file }
}

/// `url` and `text_link` entities of the text, else of the caption.
fn links(m: &Message) -> Vec<String> {
    let (list, source) = match (&m.entities, &m.caption_entities) {
        (Some(e), _) if !e.is_empty() => (e, m.text.as_deref().unwrap_or("")),
        (_, Some(e)) => (e, m.caption.as_deref().unwrap_or("")),
        _ => return Vec::new(),
    };
    let mut links: Vec<String> = Vec::new();
    for e in list {
        let url = match e.type_field {
            MessageEntityType::TextLink => e.url.clone(),
            MessageEntityType::Url => Some(utf16_slice(source, e.offset, e.length).trim().to_owned()),
            _ => None,
        };
        if let Some(url) = url.filter(|u| !u.is_empty()) {
            if !links.contains(&url) {
                links.push(url);
            }
        }
    }
    links
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(v: Value) -> Message {
        serde_json::from_value(v).expect("a Bot API message")
    }

    fn me() -> Me {
        Me { id: 42, username: "bub_test_bot".into() }
    }

    fn group(extra: Value) -> Value {
        let mut m = json!({"message_id": 7, "date": 1700000000, "chat": {"id": -100, "type": "supergroup", "title": "g"},
                          "from": {"id": 1, "is_bot": false, "first_name": "Ann", "username": "ann"}});
        m.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        m
    }

    #[test]
    fn groups_count_mentions_and_replies_only() {
        let plain = message(group(json!({"text": "hello all"})));
        assert!(!is_active(&plain, &me()));
        // The mention is found by its UTF-16 offset, after an emoji.
        let mention = message(group(json!({"text": "😀 @Bub_Test_Bot hi",
            "entities": [{"type": "mention", "offset": 3, "length": 13}]})));
        assert!(is_active(&mention, &me()));
        let keyword = message(group(json!({"text": "ask bub about it"})));
        assert!(is_active(&keyword, &me()));
        let reply = message(group(json!({"text": "yes", "reply_to_message": {"message_id": 6, "date": 1,
            "chat": {"id": -100, "type": "supergroup"}, "from": {"id": 42, "is_bot": true, "first_name": "Bub"}, "text": "?"}})));
        assert!(is_active(&reply, &me()));
        let photo =
            message(group(json!({"photo": [{"file_id": "p", "file_unique_id": "u", "width": 1, "height": 1}]})));
        assert!(!is_active(&photo, &me()), "media without a caption counts only as a reply");
        let private = message(json!({"message_id": 1, "date": 1, "chat": {"id": 5, "type": "private"}, "text": "hi"}));
        assert!(is_active(&private, &me()));
    }

    #[test]
    fn media_is_described_and_its_file_named() {
        let doc = message(group(json!({"caption": "see", "document": {"file_id": "d1", "file_unique_id": "u",
            "file_name": "a.pdf", "mime_type": "application/pdf", "file_size": 10}})));
        let parsed = parse(&doc);
        assert_eq!(parsed.content, "[Document: a.pdf (application/pdf)] Caption: see");
        assert_eq!(parsed.file.as_ref().unwrap().kind, "document");
        assert_eq!(parsed.metadata["media"]["file_name"], "a.pdf");
        assert_eq!(parsed.metadata["full_name"], "Ann");
        let voice = message(group(json!({"voice": {"file_id": "v1", "file_unique_id": "u", "duration": 3}})));
        let parsed = parse(&voice);
        assert_eq!(parsed.content, "[Voice message: 3s]");
        assert_eq!(parsed.file.unwrap().mime_type, "audio/ogg");
        let photo =
            message(group(json!({"photo": [{"file_id": "small", "file_unique_id": "u", "width": 1, "height": 1},
            {"file_id": "big", "file_unique_id": "v", "width": 9, "height": 9, "file_size": 99}]})));
        let parsed = parse(&photo);
        assert_eq!(parsed.content, "[Photo message]");
        assert_eq!(parsed.file.unwrap().file_id, "big", "the largest size");
    }

    #[test]
    fn links_and_commands() {
        let m = message(group(json!({"text": "/start@bub_test_bot now https://x.io",
            "entities": [{"type": "bot_command", "offset": 0, "length": 19}, {"type": "url", "offset": 24, "length": 12}]})));
        assert_eq!(bot_command(&m).as_deref(), Some("start"));
        assert_eq!(parse(&m).metadata["links"], json!(["https://x.io"]));
    }
}
