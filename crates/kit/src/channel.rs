//! Helpers for channel plugins (IM bots): settings under Bub's variable
//! names, replies split at a platform's length limit, the text of an
//! outbound whose content is Bub's JSON, a reply streamed into one edited
//! message, error messages with their causes, answers read under a cap,
//! and the pace of refusals ("Access denied.") sent to strangers.
//!
//! Not part of the ABI: plain code compiled into each plugin that uses it.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use serde_json::{Map, Value};

/// Whether a secret a request carries is the expected one, compared
/// without an early exit, so the time it takes does not tell how much of
/// a guess was right (bearer tokens, Telegram's webhook secret).
pub fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len() && given.iter().zip(expected).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A channel's settings: `<PREFIX><KEY>` in the environment (Bub's names,
/// such as `BUB_TELEGRAM_TOKEN`), else `<key>` of the plugin's config (the
/// environment wins, as in Bub's pydantic settings). Blank is unset; a
/// list in the config reads as its items joined by commas.
#[derive(Clone, Copy, Debug)]
pub struct Settings<'a> {
    /// The plugin's config.
    pub config: &'a Map<String, Value>,
    /// The variable prefix, `BUB_TELEGRAM_`.
    pub env_prefix: &'a str,
    /// The plugin's name, for error messages.
    pub plugin: &'a str,
}

impl Settings<'_> {
    /// A text setting.
    pub fn text(&self, key: &str) -> Option<String> {
        let env = std::env::var(format!("{}{}", self.env_prefix, key.to_uppercase())).ok();
        let value = env.or_else(|| match self.config.get(key)? {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            Value::Array(items) => Some(
                items
                    .iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            other => Some(other.to_string()),
        })?;
        let value = value.trim().to_owned();
        (!value.is_empty()).then_some(value)
    }

    /// A comma-separated set (`allow_users`).
    pub fn list(&self, key: &str) -> HashSet<String> {
        let text = self.text(key).unwrap_or_default();
        text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
    }

    /// A whole number, `default` when unset.
    pub fn number(&self, key: &str, default: u64) -> Result<u64, String> {
        match self.text(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("{}: {key}={v:?} is not a whole number", self.plugin)),
        }
    }

    /// A flag: `true`, `1` or `yes`.
    pub fn flag(&self, key: &str) -> bool {
        self.text(key).is_some_and(|v| matches!(v.to_lowercase().as_str(), "true" | "1" | "yes"))
    }
}

/// A reply streamed into one message: text deltas accumulate, the message
/// is sent at the first and edited at most once per interval, and the
/// turn's outbound completes it.
#[derive(Debug, Default)]
pub struct LiveReply {
    /// The platform's id of the message, once sent.
    pub id: Option<String>,
    text: String,
    /// What the message shows now.
    pub shown: String,
    last_edit: Option<Instant>,
}

impl LiveReply {
    /// Adds `delta`; the whole text so far when the message is due for an
    /// edit (or its first send), and the id to edit (none: send it).
    pub fn push(&mut self, delta: &str, interval: Duration) -> Option<(String, Option<String>)> {
        self.text.push_str(delta);
        if self.last_edit.is_some_and(|t| t.elapsed() < interval) || self.text.trim().is_empty() {
            return None;
        }
        self.last_edit = Some(Instant::now());
        Some((self.text.clone(), self.id.clone()))
    }

    /// Records that the message `id` now shows `shown`.
    pub fn shown(&mut self, id: String, shown: String) {
        self.id = Some(id);
        self.shown = shown;
    }
}

/// A platform a reply is posted to and edited on, as [`LiveReplies`]
/// needs it. Errors are the platform's words; the caller adds its name.
pub trait Messenger {
    /// Posts `text` to `chat`; the new message's id.
    fn post(&self, chat: &str, text: &str) -> impl std::future::Future<Output = Result<String, String>> + Send;
    /// Edits message `id` of `chat` to show `text`.
    fn edit(&self, chat: &str, id: &str, text: &str) -> impl std::future::Future<Output = Result<(), String>> + Send;
}

/// Each chat's reply being streamed: the one place the IM channels keep
/// a streamed turn's message, grow it as the model writes, and complete
/// it with the turn's outbound.
#[derive(Debug, Default)]
pub struct LiveReplies(std::sync::Mutex<HashMap<String, LiveReply>>);

impl LiveReplies {
    /// A text delta of `chat`'s streamed turn: its message is posted at
    /// the first text and edited at most once an `interval`, showing the
    /// first of the pieces `split` cuts the text into. Best effort: a
    /// failed post or edit (the error returned, for the log) is made good
    /// by the next one, or by the outbound.
    pub async fn delta(
        &self,
        messenger: &impl Messenger,
        chat: &str,
        delta: &str,
        interval: Duration,
        split: impl Fn(&str) -> Vec<String>,
    ) -> Result<(), String> {
        let due = bub_abi::sync::lock(&self.0).entry(chat.to_owned()).or_default().push(delta, interval);
        let Some((text, id)) = due else { return Ok(()) };
        let shown = split(&text).into_iter().next().unwrap_or_default();
        if shown.is_empty() {
            return Ok(());
        }
        let sent = match id {
            Some(id) => messenger.edit(chat, &id, &shown).await.map(|()| id),
            None => messenger.post(chat, &shown).await,
        };
        let id = sent?;
        if let Some(entry) = bub_abi::sync::lock(&self.0).get_mut(chat) {
            entry.shown(id, shown);
        }
        Ok(())
    }

    /// The outbound of `chat`'s turn, cut into `pieces`: a streamed
    /// message is completed (edited to the first piece when it shows
    /// something else) and the rest posted; without one, every piece is
    /// posted. No pieces (a blank reply): nothing is sent.
    pub async fn complete(&self, messenger: &impl Messenger, chat: &str, pieces: Vec<String>) -> Result<(), String> {
        let live = bub_abi::sync::lock(&self.0).remove(chat);
        let mut pieces = pieces.into_iter().peekable();
        if pieces.peek().is_none() {
            return Ok(());
        }
        if let Some((id, shown)) = live.and_then(|l| l.id.map(|id| (id, l.shown))) {
            let first = pieces.next().unwrap_or_default();
            if first != shown {
                messenger.edit(chat, &id, &first).await?;
            }
        }
        for piece in pieces {
            messenger.post(chat, &piece).await?;
        }
        Ok(())
    }

    /// Forgets `chat`'s streamed message: its turn ended without an
    /// outbound (it failed), and the next turn starts a new one.
    pub fn end(&self, chat: &str) {
        bub_abi::sync::lock(&self.0).remove(chat);
    }
}

/// Chats showing a typing indicator while their turns run, counted, so a
/// chat with two turns running shows it until the second ends. `H` is
/// the plugin's handle on an indicator's loop (a task to abort).
#[derive(Debug)]
pub struct Typing<H>(std::sync::Mutex<HashMap<String, (usize, H)>>);

impl<H> Default for Typing<H> {
    fn default() -> Self {
        Typing(std::sync::Mutex::new(HashMap::new()))
    }
}

impl<H> Typing<H> {
    /// A turn of `chat` starts: `start` its indicator when none shows
    /// (`None`: it could not be started, and is not counted).
    pub fn begin(&self, chat: &str, start: impl FnOnce() -> Option<H>) {
        let mut typing = bub_abi::sync::lock(&self.0);
        if let Some((count, _)) = typing.get_mut(chat) {
            *count += 1;
        } else if let Some(handle) = start() {
            typing.insert(chat.to_owned(), (1, handle));
        }
    }

    /// A turn of `chat` ended: the indicator's handle when it was the
    /// last running, to stop it.
    pub fn end(&self, chat: &str) -> Option<H> {
        let mut typing = bub_abi::sync::lock(&self.0);
        let (count, _) = typing.get_mut(chat)?;
        *count -= 1;
        if *count > 0 {
            return None;
        }
        typing.remove(chat).map(|(_, handle)| handle)
    }

    /// Every indicator's handle, none left (the channel stops).
    pub fn drain(&self) -> Vec<H> {
        bub_abi::sync::lock(&self.0).drain().map(|(_, (_, handle))| handle).collect()
    }
}

/// When a receive loop tries again: after a failed attempt, 1 s doubling
/// to 30 s; after a connection that lived a while, at once (and the wait
/// starts over); after one that closed within [`Backoff::SHORT`], as
/// after a failure, so a peer that accepts and closes connections cannot
/// make the loop spin.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: Backoff::FIRST }
    }
}

impl Backoff {
    const FIRST: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(30);
    /// A connection that lived less than this is followed by a wait.
    pub const SHORT: Duration = Duration::from_secs(10);

    /// The wait after a failed attempt (the next one's is twice as long).
    pub fn failed(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(Backoff::MAX);
        wait
    }

    /// An attempt succeeded: the next failure waits the first wait again.
    pub fn succeeded(&mut self) {
        self.next = Backoff::FIRST;
    }

    /// After a connection that lived `lived`: `None` to reconnect at once,
    /// else the wait (growing, as after a failure).
    pub fn after_connection(&mut self, lived: Duration) -> Option<Duration> {
        if lived >= Backoff::SHORT {
            self.succeeded();
            return None;
        }
        Some(self.failed())
    }
}

/// `e` and its causes, `: `-joined ("error sending request" alone says
/// little).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// An answer read chunk by chunk, refused once it passes `limit` bytes:
/// a network peer (the platform, a proxy, a self-hosted server) can send
/// an endless body, and reading it whole would grow the gateway until it
/// aborts.
#[derive(Debug)]
pub struct CappedBody {
    limit: u64,
    bytes: Vec<u8>,
}

impl CappedBody {
    /// An empty body that takes at most `limit` bytes.
    pub fn new(limit: u64) -> CappedBody {
        CappedBody { limit, bytes: Vec::new() }
    }

    /// Adds `chunk`; an error saying how large the answer got once it
    /// passes the limit (what was read is dropped).
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), String> {
        if self.bytes.len() as u64 + chunk.len() as u64 > self.limit {
            self.bytes = Vec::new();
            return Err(format!("the answer is larger than {} bytes", self.limit));
        }
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }

    /// The bytes read.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// When a refusal ("Access denied.") may be sent to a conversation: at
/// most once per `interval` each, so strangers writing to the bot cannot
/// make it spend its rate limit (and its listed users' time) on them.
/// Remembers at most `capacity` conversations; past that the oldest are
/// forgotten.
#[derive(Debug)]
pub struct RefusalPace {
    interval: Duration,
    capacity: usize,
    last: HashMap<String, Instant>,
}

impl RefusalPace {
    /// One refusal per conversation per `interval`.
    pub fn new(interval: Duration, capacity: usize) -> RefusalPace {
        RefusalPace { interval, capacity: capacity.max(1), last: HashMap::new() }
    }

    /// Whether `chat` may be sent a refusal now (and, if so, counts it).
    pub fn allow(&mut self, chat: &str) -> bool {
        let now = Instant::now();
        if self.last.get(chat).is_some_and(|t| now.duration_since(*t) < self.interval) {
            return false;
        }
        if self.last.len() >= self.capacity {
            let interval = self.interval;
            self.last.retain(|_, t| now.duration_since(*t) < interval);
            if self.last.len() >= self.capacity {
                if let Some(oldest) = self.last.iter().min_by_key(|(_, t)| **t).map(|(k, _)| k.clone()) {
                    self.last.remove(&oldest);
                }
            }
        }
        self.last.insert(chat.to_owned(), now);
        true
    }
}

/// When a line about an event a flood repeats (a refused connection, a
/// request without the secret) may be logged: once per `interval` at
/// most, saying how many happened since the last line, so a flood does
/// not become a flood of log lines.
#[derive(Debug)]
pub struct LogPace {
    interval: Duration,
    state: std::sync::Mutex<(Option<Instant>, u64)>,
}

impl LogPace {
    /// A line per `interval` at most.
    pub const fn new(interval: Duration) -> LogPace {
        LogPace { interval, state: std::sync::Mutex::new((None, 0)) }
    }

    /// Counts one event; `Some(n)` when a line may be written now, `n`
    /// the events since the last line (this one included).
    pub fn note(&self) -> Option<u64> {
        let mut state = bub_abi::sync::lock(&self.state);
        state.1 += 1;
        let now = Instant::now();
        if state.0.is_some_and(|t| now.duration_since(t) < self.interval) {
            return None;
        }
        let n = state.1;
        *state = (Some(now), 0);
        Some(n)
    }
}

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
    fn a_capped_body_refuses_the_byte_past_its_limit() {
        let mut body = CappedBody::new(10);
        body.push(b"12345").unwrap();
        body.push(b"67890").unwrap();
        let err = body.push(b"1").unwrap_err();
        assert!(err.contains("larger than 10 bytes"), "{err}");
        let mut body = CappedBody::new(10);
        body.push(b"abc").unwrap();
        assert_eq!(body.into_bytes(), b"abc");
    }

    #[test]
    fn refusals_are_paced_per_conversation_and_memory_is_bounded() {
        let mut pace = RefusalPace::new(Duration::from_secs(60), 2);
        assert!(pace.allow("a"));
        assert!(!pace.allow("a"), "a second refusal within the interval");
        assert!(pace.allow("b"));
        assert!(pace.allow("c"), "a new conversation past the capacity");
        assert!(pace.last.len() <= 2);
        let mut quick = RefusalPace::new(Duration::ZERO, 4);
        assert!(quick.allow("a") && quick.allow("a"));
    }

    #[test]
    fn live_replies_send_once_then_edit_at_most_once_an_interval() {
        let mut live = LiveReply::default();
        assert_eq!(live.push("  ", Duration::ZERO), None, "nothing to show yet");
        assert_eq!(live.push("Hel", Duration::from_secs(60)), Some(("  Hel".into(), None)));
        live.shown("7".into(), "  Hel".into());
        assert_eq!(live.push("lo", Duration::from_secs(60)), None, "within the interval");
        assert_eq!(live.push("!", Duration::ZERO), Some(("  Hello!".into(), Some("7".into()))));
    }

    /// A platform that records what it was asked, in order.
    #[derive(Default)]
    struct Recorder(std::sync::Mutex<Vec<String>>);

    impl Messenger for Recorder {
        async fn post(&self, chat: &str, text: &str) -> Result<String, String> {
            let mut calls = self.0.lock().unwrap();
            calls.push(format!("post {chat} {text}"));
            Ok(calls.len().to_string())
        }
        async fn edit(&self, chat: &str, id: &str, text: &str) -> Result<(), String> {
            self.0.lock().unwrap().push(format!("edit {chat} {id} {text}"));
            Ok(())
        }
    }

    fn run<F: std::future::Future>(future: F) -> F::Output {
        // Nothing here waits on anything: one poll completes it.
        let mut future = std::pin::pin!(future);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(out) => out,
            std::task::Poll::Pending => panic!("the recorder never waits"),
        }
    }

    #[test]
    fn a_streamed_reply_is_posted_edited_and_completed_by_its_outbound() {
        let (live, platform) = (LiveReplies::default(), Recorder::default());
        let split = |t: &str| split_message(t, 12, Count::Chars);
        run(live.delta(&platform, "c", "Hello", Duration::ZERO, split)).unwrap();
        run(live.delta(&platform, "c", " world", Duration::ZERO, split)).unwrap();
        // The message already shows the first piece: no edit, the rest posted.
        run(live.complete(&platform, "c", split("Hello world\nand more"))).unwrap();
        assert_eq!(*platform.0.lock().unwrap(), ["post c Hello", "edit c 1 Hello world", "post c and more"]);
        // A streamed message showing less than the first piece is edited to it.
        let platform = Recorder::default();
        run(live.delta(&platform, "d", "Hi", Duration::ZERO, split)).unwrap();
        run(live.complete(&platform, "d", split("Hi there"))).unwrap();
        assert_eq!(*platform.0.lock().unwrap(), ["post d Hi", "edit d 1 Hi there"]);
        // Without a streamed message every piece is posted; a blank reply posts nothing.
        let platform = Recorder::default();
        run(live.complete(&platform, "c", vec!["a".into(), "b".into()])).unwrap();
        run(live.complete(&platform, "c", Vec::new())).unwrap();
        assert_eq!(*platform.0.lock().unwrap(), ["post c a", "post c b"]);
    }

    #[test]
    fn backoff_doubles_to_its_cap_and_starts_over_after_a_lasting_connection() {
        let mut backoff = Backoff::default();
        let waits: Vec<u64> = (0..7).map(|_| backoff.failed().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(backoff.after_connection(Duration::from_secs(60)), None);
        assert_eq!(backoff.after_connection(Duration::from_secs(1)), Some(Duration::from_secs(1)));
        assert_eq!(backoff.after_connection(Duration::ZERO), Some(Duration::from_secs(2)));
    }

    #[test]
    fn typing_shows_until_a_chats_last_turn_ends() {
        let typing = Typing::default();
        typing.begin("c", || Some(1));
        typing.begin("c", || panic!("already showing"));
        typing.begin("x", || None);
        assert_eq!(typing.end("c"), None, "a turn still runs");
        assert_eq!(typing.end("c"), Some(1));
        assert_eq!(typing.end("x"), None, "never started");
        typing.begin("d", || Some(2));
        assert_eq!(typing.drain(), vec![2]);
    }

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
