//! Text helpers for channel plugins: replies split at a platform's length
//! limit, and the text of an outbound whose content is Bub's JSON.
//!
//! Not part of the ABI (plain functions compiled into each plugin).

/// How a platform counts a message's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    /// Characters (Unicode scalar values).
    Chars,
    /// UTF-16 code units (Telegram's Bot API).
    Utf16,
}

impl Count {
    fn of(self, c: char) -> usize {
        match self {
            Count::Chars => 1,
            Count::Utf16 => c.len_utf16(),
        }
    }

    /// The length of `s`.
    pub fn len(self, s: &str) -> usize {
        s.chars().map(|c| self.of(c)).sum()
    }
}

/// `text` in pieces of at most `limit` (counted by `count`): cut at a
/// paragraph break, else a line break, else a space, when one is in the
/// last quarter of a piece; else at the limit. Nothing but the whitespace
/// at a cut is lost; an all-blank text gives no piece.
pub fn split_message(text: &str, limit: usize, count: Count) -> Vec<String> {
    let limit = limit.max(1);
    let mut pieces = Vec::new();
    let mut rest = text;
    while count.len(rest) > limit {
        // The longest prefix within the limit, on a char boundary.
        let (mut used, mut end) = (0, 0);
        for (i, c) in rest.char_indices() {
            if used + count.of(c) > limit {
                break;
            }
            used += count.of(c);
            end = i + c.len_utf8();
        }
        let window = &rest[..end];
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

/// The text to send for an outbound's `content`: its `message` field when
/// the content is a JSON object (Bub's channels put JSON there), else the
/// content as it is (Bub's `TelegramChannel.send`).
pub fn reply_text(content: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(content) {
        Ok(serde_json::Value::Object(map)) => map.get("message").and_then(|m| m.as_str()).unwrap_or("").to_owned(),
        _ => content.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_texts_stay_whole_and_json_content_gives_its_message() {
        assert_eq!(split_message("hello", 4096, Count::Chars), vec!["hello"]);
        assert!(split_message("  ", 4096, Count::Chars).is_empty());
        assert_eq!(reply_text(r#"{"message": "hi", "chat_id": "1"}"#), "hi");
        assert_eq!(reply_text("plain [1]"), "plain [1]");
    }

    #[test]
    fn long_texts_split_at_breaks_within_the_limit() {
        let paragraph = "word ".repeat(700); // 3500 characters
        let text = format!("{paragraph}\n\n{paragraph}\n\n{paragraph}");
        let pieces = split_message(&text, 4096, Count::Utf16);
        assert_eq!(pieces.len(), 3, "one paragraph each");
        assert!(pieces.iter().all(|p| Count::Utf16.len(p) <= 4096));
        // Emoji are two UTF-16 units: 3000 of them need two Telegram messages, one of 4096 characters.
        let emoji = "😀".repeat(3000);
        let pieces = split_message(&emoji, 4096, Count::Utf16);
        assert_eq!(pieces.len(), 2);
        assert!(pieces.iter().all(|p| Count::Utf16.len(p) <= 4096));
        assert_eq!(pieces.concat(), emoji, "nothing lost when there is no break");
        assert_eq!(split_message(&emoji, 4096, Count::Chars).len(), 1);
    }
}
