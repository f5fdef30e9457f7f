//! Text from models and plugins on its way to a terminal.
//!
//! A model's answer is a peer's text: an `ESC [2J` in it would clear the
//! user's screen, an OSC sequence could set the window title or write to
//! the clipboard on some terminals, and a bare `\r` can hide what was
//! printed before it. Printed answers show such characters escaped.
//! Deliberate difference from Bub, which prints them raw.

use std::borrow::Cow;

/// `text` with every control character except `\n`, `\t` and the `\r` of a
/// `\r\n` shown as its escape (`\u{1b}`); borrowed when there is none.
pub fn shown(text: &str) -> Cow<'_, str> {
    let risky = |c: char| c.is_control() && c != '\n' && c != '\t';
    let bare = |(i, c): (usize, char)| risky(c) && !(c == '\r' && text.as_bytes().get(i + 1) == Some(&b'\n'));
    if !text.char_indices().any(bare) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' && chars.peek() == Some(&'\n') || !risky(c) {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_plain_text_is_borrowed() {
        assert!(matches!(shown("plain\ttext\nwith lines\r\n"), Cow::Borrowed(_)));
        assert_eq!(shown("a\u{1b}[2Jb\rc\u{7}\u{9b}d"), "a\\u{1b}[2Jb\\rc\\u{7}\\u{9b}d");
    }
}
