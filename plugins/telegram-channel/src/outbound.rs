//! Replies as Telegram takes them: at most 4096 characters a message (the
//! Bot API counts UTF-16 code units), so a long reply is split, at a
//! paragraph or line break when one is near the limit, else at a space,
//! else anywhere; and an outbound's text is its JSON `message` field when it
//! is one (Bub's channels put JSON there), else the content as it is.

use serde_json::Value;

/// Telegram's limit for one message's text.
pub const LIMIT: usize = 4096;

/// The text to send for an outbound's `content` (Bub's `send`).
pub fn reply_text(content: &str) -> String {
    match serde_json::from_str::<Value>(content) {
        Ok(Value::Object(map)) => map.get("message").and_then(Value::as_str).unwrap_or("").to_owned(),
        _ => content.to_owned(),
    }
}

fn units(s: &str) -> usize {
    s.encode_utf16().count()
}

/// `text` in pieces of at most `limit` UTF-16 units each.
pub fn split(text: &str, limit: usize) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while units(rest) > limit {
        // The longest prefix within the limit, on a char boundary.
        let mut count = 0;
        let mut end = 0;
        for (i, c) in rest.char_indices() {
            if count + c.len_utf16() > limit {
                break;
            }
            count += c.len_utf16();
            end = i + c.len_utf8();
        }
        let window = &rest[..end];
        // A break in the last quarter of the window, preferring paragraphs.
        let floor = end * 3 / 4;
        let cut = ["\n\n", "\n", " "]
            .iter()
            .find_map(|sep| window.rfind(sep).filter(|&i| i >= floor && i > 0).map(|i| i + sep.len()))
            .unwrap_or(end);
        pieces.push(rest[..cut].trim_end().to_owned());
        rest = rest[cut..].trim_start_matches('\n');
    }
    if !rest.trim().is_empty() {
        pieces.push(rest.to_owned());
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_replies_stay_whole_and_json_content_gives_its_message() {
        assert_eq!(split("hello", LIMIT), vec!["hello"]);
        assert!(split("  ", LIMIT).is_empty());
        assert_eq!(reply_text(r#"{"message": "hi", "chat_id": "1"}"#), "hi");
        assert_eq!(reply_text("plain [1]"), "plain [1]");
    }

    #[test]
    fn long_replies_split_at_breaks_within_the_limit() {
        let paragraph = "word ".repeat(700); // 3500 characters
        let text = format!("{paragraph}\n\n{paragraph}\n\n{paragraph}");
        let pieces = split(&text, LIMIT);
        assert_eq!(pieces.len(), 3, "one paragraph each");
        assert!(pieces.iter().all(|p| units(p) <= LIMIT));
        // Emoji are two UTF-16 units: 3000 of them need two messages.
        let emoji = "😀".repeat(3000);
        let pieces = split(&emoji, LIMIT);
        assert_eq!(pieces.len(), 2);
        assert!(pieces.iter().all(|p| units(p) <= LIMIT));
        assert_eq!(pieces.concat(), emoji, "nothing lost when there is no break");
    }
}
