//! Context messages shared by the steps of a session.
//!
//! Every model request carries the session's whole context. Copying it
//! into each step's request, converting it into host values twice a step
//! for the interception hooks, and encoding it for the wire again made a
//! step's cost grow with the tape. A [`Message`] is built once, when the
//! context selector first folds its entry, and shared (`Arc`) by every
//! later request of the session: a request clones pointers; the host value
//! and the wire form are built on first use and kept with the message.
//!
//! A message is immutable while shared. [`Message::json_mut`] (through
//! `Arc::make_mut`) gives a private copy without the kept forms, so an
//! event handler that edits a request never sees a stale one.

mod json;
mod request;

use json::Count;
pub use json::{json_text, written, JsonArray, Part, WritePart};
pub use request::CallRequest;
pub(crate) use request::ListSlot;

use std::sync::{Arc, OnceLock};

use serde_json::Value;

/// One context message in Bub's neutral shape (`{role, content, …}`),
/// with the forms built from it so far.
///
/// A message read from a tape in the plain shape (`{"role", "content"}`,
/// the content a string: nearly every message of a long session) is kept
/// as its stored text ([`Message::stored`]): its JSON is parsed only when
/// something reads it, and its chat wire text is that text (the
/// first read of a 10,000-entry session spent a fifth of its time parsing
/// payloads into JSON and writing them out again).
#[derive(Clone)]
pub struct Message {
    // Boxed: a `Value` is 72 bytes, and a plain message read from a long
    // tape is seldom parsed (a 1,000-entry session keeps 1,000 messages).
    json: OnceLock<Box<Value>>,
    // Where a plain message's parts sit in its stored text, which is its
    // lazy host value's (`hosted`, always set while this is).
    plain: Option<Spans>,
    hosted: OnceLock<bub_abi::Value>,
    wire: OnceLock<(WireForm, Box<str>)>,
    // False for a step's new message: sent once, then read back from the
    // tape as another message, so its wire text is written straight into
    // the body and never kept.
    keep_wire: bool,
}

/// Where a plain stored message's role and content (each as JSON) sit in
/// its text. Small: a long session keeps one per message.
#[derive(Clone)]
struct Spans {
    // The role, when its JSON has escapes; else it is the text between
    // `role_text`'s quotes.
    role: Option<Box<str>>,
    role_text: (u32, u32),
    content: (u32, u32),
    // The text is exactly `{"role":…,"content":…}`: it is the chat form.
    exact: bool,
}

impl Spans {
    /// The spans of these ranges of `text`; None past 4 GiB.
    fn new(
        text: &str,
        role: Option<Box<str>>,
        r: std::ops::Range<usize>,
        c: std::ops::Range<usize>,
        exact: bool,
    ) -> Option<Spans> {
        u32::try_from(text.len()).ok()?;
        let span = |r: std::ops::Range<usize>| (r.start as u32, r.end as u32);
        Some(Spans { role, role_text: span(r), content: span(c), exact })
    }

    fn slice(text: &str, (start, end): (u32, u32)) -> &str {
        &text[start as usize..end as usize]
    }
}

/// A message in the plain shape, as its stored text: what
/// [`Message::plain`] answers.
#[derive(Debug, Clone, Copy)]
pub struct Plain<'a> {
    /// The role.
    pub role: &'a str,
    /// The role as JSON text (a string).
    pub role_json: &'a str,
    /// The content as JSON text (a string).
    pub content_json: &'a str,
    /// The whole text when it is exactly `{"role":…,"content":…}`.
    pub exact: Option<&'a str>,
}

/// Which encoding a kept wire form is (a message is sent in one format per
/// session, so one slot is enough; another format encodes afresh).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireForm {
    /// Chat completions, plain.
    Chat,
    /// Chat completions with reasoning replayed as `reasoning_content`.
    ChatWithReasoning,
    /// Responses API input items (zero or more, comma-separated).
    Responses,
}

/// The shared handle every request holds.
pub type Shared = Arc<Message>;

/// Where the role and the content (each as JSON, quotes included) sit in
/// `text` when it is exactly `{"role":"…","content":"…"}`: no spaces, these
/// keys in this order, the role without escapes. That is how the store and
/// Bub write a message, so nearly every stored one is read by this one
/// scan; any other form is left to serde. `text` is valid JSON (the store
/// checked it), so the scan only has to find where each string ends.
fn exact_spans(text: &str) -> Option<(std::ops::Range<usize>, std::ops::Range<usize>)> {
    const ROLE: &str = r#"{"role":""#;
    const CONTENT: &str = r#","content":""#;
    let b = text.as_bytes();
    if !text.starts_with(ROLE) {
        return None;
    }
    let role_end = ROLE.len() + b[ROLE.len()..].iter().position(|&c| c == b'"' || c == b'\\')?;
    if b[role_end] != b'"' || !text[role_end + 1..].starts_with(CONTENT) {
        return None;
    }
    let content_start = role_end + CONTENT.len();
    // The next quote or backslash by a SIMD search, not byte by byte: a
    // long session's first read scans every stored message's content.
    let mut i = content_start + 1;
    loop {
        i += memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        if b[i] == b'"' {
            break;
        }
        i += 2;
    }
    // The content's closing quote, then the map's closing brace, last.
    (i + 2 == b.len() && b[i + 1] == b'}').then(|| (ROLE.len() - 1..role_end + 1, content_start..i + 1))
}

impl Message {
    fn of(json: Value, hosted: OnceLock<bub_abi::Value>, keep_wire: bool) -> Shared {
        Arc::new(Message {
            json: OnceLock::from(Box::new(json)),
            plain: None,
            hosted,
            wire: OnceLock::new(),
            keep_wire,
        })
    }

    /// A message from its JSON.
    pub fn new(json: Value) -> Shared {
        Message::of(json, OnceLock::new(), true)
    }

    /// A message sent once (a step's new user message): its wire text is
    /// written into the request body as it is encoded, never kept.
    pub fn sent_once(json: Value) -> Shared {
        Message::of(json, OnceLock::new(), false)
    }

    /// A message from its JSON and the same message as a host value
    /// (a tape payload's node, as its store answered it).
    pub fn with_hosted(json: Value, hosted: bub_abi::Value) -> Shared {
        Message::of(json, OnceLock::from(hosted), true)
    }

    /// A stored payload still as its text (see
    /// [`bub_abi::ValueRef::lazy_json`]) in the plain shape: exactly the
    /// keys `role` (not `tool`) and `content`, the content a string. None
    /// for any other payload, which the caller parses.
    pub fn stored(hosted: &bub_abi::Value) -> Option<Shared> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct PlainText<'a> {
            #[serde(borrow)]
            role: &'a serde_json::value::RawValue,
            #[serde(borrow)]
            content: &'a serde_json::value::RawValue,
        }
        let text = hosted.as_ref().lazy_json()?;
        if let Some((role_text, content)) = exact_spans(text) {
            if &text[role_text.start + 1..role_text.end - 1] == "tool" {
                return None;
            }
            return Some(Message::plain_stored(hosted, Spans::new(text, None, role_text, content, true)?));
        }
        let p: PlainText<'_> = serde_json::from_str(text).ok()?;
        let (role_json, content_json) = (p.role.get(), p.content.get());
        if !content_json.starts_with('"') {
            return None;
        }
        let role: std::borrow::Cow<'_, str> = serde_json::from_str(role_json).ok()?;
        if role == "tool" {
            return None;
        }
        // Kept only when it differs from its JSON's inside (escapes).
        let role = (*role != role_json[1..role_json.len() - 1]).then(|| role.into_owned().into_boxed_str());
        let at = |part: &str| part.as_ptr() as usize - text.as_ptr() as usize;
        let (role_text, content) =
            (at(role_json)..at(role_json) + role_json.len(), at(content_json)..at(content_json) + content_json.len());
        let exact = text.starts_with(r#"{"role":"#)
            && role_text.start == 8
            && text[role_text.end..content.start] == *r#","content":"#
            && content.end + 1 == text.len();
        Some(Message::plain_stored(hosted, Spans::new(text, role, role_text, content, exact)?))
    }

    fn plain_stored(hosted: &bub_abi::Value, spans: Spans) -> Shared {
        Arc::new(Message {
            json: OnceLock::new(),
            plain: Some(spans),
            hosted: OnceLock::from(hosted.clone()),
            wire: OnceLock::new(),
            keep_wire: true,
        })
    }

    /// Messages from JSON values.
    pub fn all(json: impl IntoIterator<Item = Value>) -> Vec<Shared> {
        json.into_iter().map(Message::new).collect()
    }

    /// The message in the plain shape as its stored text, if it was read
    /// so (see [`Message::stored`]) and has not been changed since.
    pub fn plain(&self) -> Option<Plain<'_>> {
        let (spans, text) = (self.plain.as_ref()?, self.stored_text()?);
        let role_json = Spans::slice(text, spans.role_text);
        Some(Plain {
            role: spans.role.as_deref().unwrap_or(&role_json[1..role_json.len() - 1]),
            role_json,
            content_json: Spans::slice(text, spans.content),
            exact: spans.exact.then_some(text),
        })
    }

    /// The stored text of a [plain](Message::plain) message that is
    /// exactly `{"role":…,"content":…}` ([`Plain::exact`]), without
    /// slicing out its parts: a request body splices it in as it is, for
    /// every message of the context at every step.
    pub fn exact_text(&self) -> Option<&str> {
        if !self.plain.as_ref()?.exact {
            return None;
        }
        self.stored_text()
    }

    /// A plain message's stored text: its host value's.
    fn stored_text(&self) -> Option<&str> {
        self.plain.as_ref()?;
        self.hosted.get()?.as_ref().lazy_json()
    }

    /// Whether it is [plain](Message::plain): a message that neither calls
    /// a tool nor answers one.
    pub fn is_plain(&self) -> bool {
        self.plain.is_some()
    }

    /// The role (`""` when there is none), without parsing a plain
    /// message's JSON.
    pub fn role(&self) -> &str {
        match self.plain() {
            Some(plain) => plain.role,
            None => self.json().get("role").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// The JSON (a plain message's is parsed from its text the first time).
    pub fn json(&self) -> &Value {
        self.json.get_or_init(|| {
            let text = self.stored_text();
            Box::new(
                text.and_then(|t| serde_json::from_str(t).ok()).unwrap_or_else(|| Value::Object(Default::default())),
            )
        })
    }

    /// Whether its JSON has been parsed (or was given).
    #[cfg(test)]
    pub(crate) fn is_parsed(&self) -> bool {
        self.json.get().is_some()
    }

    /// The JSON, to change: the kept forms are dropped. Use it through
    /// `Arc::make_mut`, which copies a message others share.
    pub fn json_mut(&mut self) -> &mut Value {
        self.json();
        self.plain = None;
        self.hosted = OnceLock::new();
        self.wire = OnceLock::new();
        self.json.get_mut().expect("read just now")
    }

    /// The JSON, given up.
    pub fn into_json(self) -> Value {
        self.json();
        *self.json.into_inner().expect("read just now")
    }

    /// The message as a host value (built once, then shared by every
    /// request that carries it).
    pub fn hosted(&self) -> &bub_abi::Value {
        self.hosted.get_or_init(|| bub_abi::Value::from_serialize(self.json()).expect("JSON always serializes"))
    }

    /// The message's part of a request's list in `form`: its kept wire
    /// text (written by `write` the first time, at its exact size), or,
    /// for a message [sent once](Message::sent_once), `write` itself, run
    /// into the body when it is encoded. `write` must write the same text
    /// each time it runs (it is run twice: to measure, then to write).
    /// `write` gets the message: a [plain](Message::plain) one may be
    /// written from its stored text.
    pub fn wire_part<'a, W>(&'a self, form: WireForm, write: W) -> Part<'a>
    where
        W: Fn(&Message, &mut dyn std::io::Write) -> std::io::Result<()> + 'a,
    {
        if self.keep_wire {
            return Part::Text(self.wire_of(form, || written(|out| write(self, out))));
        }
        let mut count = Count(0);
        write(self, &mut count).expect("counting never fails");
        Part::Direct { len: count.0, write: Box::new(move |out| write(self, out)) }
    }

    /// The message's wire text in `form`, built by `encode` the first time.
    /// A message sent in another form before is encoded afresh each time.
    pub fn wire(&self, form: WireForm, encode: impl FnOnce(&Value) -> String) -> std::borrow::Cow<'_, str> {
        self.wire_of(form, || encode(self.json()))
    }

    fn wire_of(&self, form: WireForm, encode: impl FnOnce() -> String) -> std::borrow::Cow<'_, str> {
        match self.wire.get() {
            Some((f, text)) if *f == form => std::borrow::Cow::Borrowed(text),
            Some(_) => std::borrow::Cow::Owned(encode()),
            None => {
                let (_, text) = self.wire.get_or_init(|| (form, encode().into_boxed_str()));
                std::borrow::Cow::Borrowed(text)
            }
        }
    }
}

impl std::ops::Deref for Message {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.json()
    }
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.json().fmt(f)
    }
}

impl PartialEq for Message {
    fn eq(&self, other: &Self) -> bool {
        self.json() == other.json()
    }
}

impl serde::Serialize for Message {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.json().serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{json::SCRATCH_BYTES, *};

    /// Behaviour 117: `before_llm_call` and `after_llm_call` see the same
    /// request; it is built once while unchanged, and afresh once changed.
    #[test]
    fn a_request_is_hosted_once_while_it_reads_the_same() {
        let mut request = CallRequest {
            run_id: "run-20261203T000000000000Z".into(),
            model: "openai:gpt".into(),
            messages: Message::all(vec![json!({"role": "user", "content": "hi"})]),
            tool_names: vec!["fs_read".into()],
            max_tokens: Some(100),
            hosted_cache: Default::default(),
            list_slot: Default::default(),
        };
        let address = |h: &bub_abi::Value| h.as_ref().get("run_id").and_then(|r| r.as_str()).map(str::as_ptr);
        let first = request.hosted();
        assert_eq!(address(&request.hosted()), address(&first), "built again though unchanged");
        assert_eq!(first.deserialize::<bub_abi::types::LlmCallRequest>().unwrap(), request.to_abi());
        request.messages.push(Message::new(json!({"role": "assistant", "content": "hello"})));
        assert_eq!(request.hosted().deserialize::<bub_abi::types::LlmCallRequest>().unwrap(), request.to_abi());
        Arc::make_mut(&mut request.messages[0]).json_mut()["content"] = json!("changed");
        assert_eq!(request.hosted().deserialize::<bub_abi::types::LlmCallRequest>().unwrap(), request.to_abi());
        for change in [
            |r: &mut CallRequest| r.model = "openai:other".into(),
            |r: &mut CallRequest| r.max_tokens = None,
            |r: &mut CallRequest| r.tool_names.clear(),
            |r: &mut CallRequest| r.run_id = "run-2".into(),
        ] {
            change(&mut request);
            assert_eq!(request.hosted().deserialize::<bub_abi::types::LlmCallRequest>().unwrap(), request.to_abi());
            // Key for key, in order, as serde writes `LlmCallRequest`.
            assert_eq!(request.hosted().to_json(), serde_json::to_string(&request.to_abi()).unwrap());
        }
    }

    /// Requests over one kept context build on the last one's list: each
    /// reads as its own messages whatever came before (a new system
    /// prompt, more messages, fewer, others, none), and a request's value
    /// kept by someone is not changed by the next one's.
    #[test]
    fn requests_over_one_context_list_their_own_messages_whatever_came_before() {
        let slot = ListSlot::default();
        let msg = |role: &str, text: &str| Message::new(json!({"role": role, "content": text}));
        let history: Vec<Shared> = (0..5).map(|i| msg("user", &format!("m{i}"))).collect();
        let request = |system: &str, messages: &[Shared]| {
            let mut all = vec![msg("system", system)];
            all.extend(messages.iter().cloned());
            CallRequest {
                run_id: "run-1".into(),
                model: "openai:gpt".into(),
                messages: all,
                tool_names: vec![],
                max_tokens: None,
                hosted_cache: Default::default(),
                list_slot: slot.clone(),
            }
        };
        let reads_as_itself = |r: &CallRequest| {
            let hosted = r.hosted();
            assert_eq!(hosted.deserialize::<bub_abi::types::LlmCallRequest>().unwrap(), r.to_abi());
            hosted
        };
        reads_as_itself(&request("s1", &history[..2]));
        reads_as_itself(&request("s2", &history[..3]));
        // The last request's value kept while the next ones are built.
        let kept_request = request("s3", &history[..4]);
        let kept = reads_as_itself(&kept_request);
        reads_as_itself(&request("s4", &history));
        assert_eq!(kept.deserialize::<bub_abi::types::LlmCallRequest>().unwrap(), kept_request.to_abi());
        drop(kept);
        let others: Vec<Shared> = (0..3).map(|i| msg("assistant", &format!("o{i}"))).collect();
        for messages in [&history[..], &history[..1], &[], &others[..], &history[..2]] {
            reads_as_itself(&request("s", messages));
        }
        // A request of no messages at all.
        let mut empty = request("s", &[]);
        empty.messages.clear();
        reads_as_itself(&empty);
        reads_as_itself(&request("s", &history));
    }

    /// A request's kept value and the slot share one copy of the
    /// messages it was built from. The next request's splice extends that
    /// copy in place once nobody else holds it, and copies it while the
    /// last request still does, so that request still reads as its own.
    #[test]
    fn a_request_shares_its_messages_with_the_slot_until_one_changes() {
        let slot = ListSlot::default();
        let msg = |role: &str, text: &str| Message::new(json!({"role": role, "content": text}));
        let history: Vec<Shared> = (0..6).map(|i| msg("user", &format!("m{i}"))).collect();
        let request = |system: &str, n: usize| {
            let mut all = vec![msg("system", system)];
            all.extend(history[..n].iter().cloned());
            CallRequest {
                run_id: "run-1".into(),
                model: "openai:gpt".into(),
                messages: all,
                tool_names: vec![],
                max_tokens: None,
                hosted_cache: Default::default(),
                list_slot: slot.clone(),
            }
        };
        let cached = |r: &CallRequest| bub_abi::sync::lock(&r.hosted_cache.0).as_ref().unwrap().messages.clone();
        let in_slot = || bub_abi::sync::lock(&slot.0).as_ref().unwrap().messages.clone();
        let first = request("s1", 3);
        first.hosted();
        assert!(Arc::ptr_eq(&cached(&first), &in_slot()), "one copy for the request and the slot");
        // The first request still held: the next one's splice copies.
        let second = request("s2", 4);
        second.hosted();
        assert!(!Arc::ptr_eq(&cached(&first), &in_slot()));
        assert!(Arc::ptr_eq(&cached(&second), &in_slot()));
        let address = |h: &bub_abi::Value| h.as_ref().get("run_id").and_then(|r| r.as_str()).map(str::as_ptr);
        let kept = first.hosted();
        assert_eq!(kept.deserialize::<bub_abi::types::LlmCallRequest>().unwrap(), first.to_abi());
        assert_eq!(address(&first.hosted()), address(&kept), "the first request's value is still its kept one");
        // Once nobody else holds it, the next splice extends it in place.
        drop((first, kept, second));
        let before = Arc::as_ptr(&in_slot());
        let third = request("s3", 6);
        let hosted = third.hosted();
        assert_eq!(Arc::as_ptr(&in_slot()), before, "extended in place");
        assert_eq!(hosted.deserialize::<bub_abi::types::LlmCallRequest>().unwrap(), third.to_abi());
    }

    /// The one-scan reading of a stored message finds the same role and
    /// content as serde does, and leaves every other form to serde.
    #[test]
    fn an_exact_message_is_read_by_one_scan_as_serde_reads_it() {
        let exact = [
            r#"{"role":"user","content":"hi"}"#,
            r#"{"role":"assistant","content":""}"#,
            r#"{"role":"user","content":"a \"quoted\" word, a \\ and \u00e9"}"#,
            r#"{"role":"user","content":"ends in a backslash \\"}"#,
            r#"{"role":"user","content":"\"}"}"#,
            r#"{"role":"developer","content":"x"}"#,
        ];
        // Past the SIMD search's 32-byte blocks too.
        let long =
            format!(r#"{{"role":"user","content":"{}\"{}\\{}"}}"#, "a".repeat(70), "b".repeat(40), "c".repeat(33));
        for text in exact.iter().copied().chain([long.as_str()]) {
            let (role, content) = exact_spans(text).unwrap_or_else(|| panic!("not read: {text}"));
            let map: serde_json::Map<String, Value> = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::from_str::<Value>(&text[role.clone()]).unwrap(), map["role"], "{text}");
            assert_eq!(serde_json::from_str::<Value>(&text[content.clone()]).unwrap(), map["content"], "{text}");
            assert_eq!(format!(r#"{{"role":{},"content":{}}}"#, &text[role], &text[content]), text);
        }
        for other in [
            r#"{ "role":"user","content":"x"}"#,
            r#"{"role":"user", "content":"x"}"#,
            r#"{"content":"x","role":"user"}"#,
            r#"{"role":"us\u0065r","content":"x"}"#,
            r#"{"role":"user","content":"a","content":"b"}"#,
            r#"{"role":"user","content":"a","name":"n"}"#,
            r#"{"role":"user","content":["x"]}"#,
            r#"{"role":"user","content":null}"#,
            r#"{"role":"user"}"#,
        ] {
            assert_eq!(exact_spans(other), None, "{other}");
        }
    }

    #[test]
    fn a_changed_message_drops_its_kept_forms_and_others_keep_theirs() {
        let shared = Message::new(json!({"role": "user", "content": "hi"}));
        assert_eq!(shared.wire(WireForm::Chat, |j| j.to_string()), r#"{"role":"user","content":"hi"}"#);
        let hosted = shared.hosted().to_json();
        let mut mine = shared.clone();
        Arc::make_mut(&mut mine).json_mut()["content"] = json!("changed");
        assert_eq!(mine.wire(WireForm::Chat, |j| j.to_string()), r#"{"role":"user","content":"changed"}"#);
        assert_eq!(mine.hosted().to_json(), r#"{"role":"user","content":"changed"}"#);
        assert_eq!(shared.hosted().to_json(), hosted);
        // Another form is encoded afresh, not kept over the first.
        assert_eq!(shared.wire(WireForm::Responses, |_| "x".into()), "x");
        assert_eq!(shared.wire(WireForm::Chat, |_| unreachable!("kept")), r#"{"role":"user","content":"hi"}"#);
    }

    #[test]
    fn arrays_join_their_parts_and_skip_empty_ones() {
        let parts = ["1", "", "2,3"].map(std::borrow::Cow::Borrowed);
        let array = JsonArray::new(parts);
        assert_eq!((array.to_string().as_str(), array.len()), ("[1,2,3]", 7));
        let empty = JsonArray::new(Vec::<Part>::new());
        assert_eq!((empty.to_string().as_str(), empty.len()), ("[]", 2));
    }

    #[test]
    fn a_message_sent_once_is_written_into_the_body_and_not_kept() {
        let write = |m: &Message, out: &mut dyn std::io::Write| {
            serde_json::to_writer(out, m.json()).map_err(std::io::Error::other)
        };
        let once = Message::sent_once(json!({"role": "user", "content": "big"}));
        let kept = Message::new(json!({"role": "user", "content": "small"}));
        let array = JsonArray::new([kept.wire_part(WireForm::Chat, write), once.wire_part(WireForm::Chat, write)]);
        assert!(matches!(array.0[1], Part::Direct { len: 31, .. }));
        let mut body = Vec::new();
        array.write_to(&mut body);
        assert_eq!(body.len(), array.len());
        assert_eq!(
            String::from_utf8(body).unwrap(),
            r#"[{"role":"user","content":"small"},{"role":"user","content":"big"}]"#
        );
        assert!(once.wire.get().is_none(), "a message sent once keeps no wire text");
        assert_eq!(kept.wire.get().map(|(_, t)| &**t), Some(r#"{"role":"user","content":"small"}"#));
    }

    #[test]
    fn json_text_is_exactly_sized() {
        // Past the reused buffer (counted, then written) and within it
        // (written once, copied out), then past it again: the buffer is
        // left clean each time.
        for n in [100_000, 10, SCRATCH_BYTES - 40, SCRATCH_BYTES, 3 * SCRATCH_BYTES, 5] {
            let value = json!({"role": "user", "content": "x".repeat(n), "n": [1, 2.5, null]});
            let text = json_text(&value);
            assert_eq!(text, value.to_string());
            assert_eq!(text.capacity(), text.len());
        }
    }
}
