//! Replies as Telegram takes them: at most 4096 characters a message,
//! counted in UTF-16 code units as the Bot API does.

use bub_kit::channel::{split_message, Count};

/// Telegram's limit for one message's text.
pub const LIMIT: usize = 4096;

/// `text` in messages Telegram accepts.
pub fn split(text: &str) -> Vec<String> {
    split_message(text, LIMIT, Count::Utf16)
}

pub use bub_kit::channel::reply_text;
