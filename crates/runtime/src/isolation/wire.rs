//! The messages between the host and an isolated plugin's process, and
//! their framing: a 4-byte big-endian length, then one JSON document.
//!
//! JSON because every payload already is one (hook arguments and answers
//! are host values, which are JSON plus live objects), it is what a
//! reader of a captured exchange can read, and `serde_json` is already
//! here. Host values travel as raw JSON (`Box<RawValue>`), written and read
//! once ([`codec`](super::codec)); a live object inside one travels as a
//! marker naming the sender's object table.
//!
//! The length is read before anything is allocated for the body, so a peer
//! that announces 4 GiB is refused by the cap, not by the allocator.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// An object of the sender's object table, as the receiver sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ObjRef {
    pub id: u64,
    pub kind: String,
    pub name: String,
}

/// What a request answers.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Answer {
    /// Python's `None` (or "no such key" for a state read).
    None,
    /// A host value.
    Value(Box<RawValue>),
    /// One object of the answering side.
    Object(ObjRef),
    /// A list of them.
    Objects(Vec<ObjRef>),
    /// A failure: an `ErrorKind` and its message.
    Error(u8, String),
    /// A sync call answered a future, dropped unpolled.
    Pending,
}

/// One registration an isolated library makes: the library itself, or a
/// member of a plugin set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Registration {
    pub name: String,
    pub version: String,
    pub description: String,
    /// `(hook name, marker, declared async)`.
    pub hooks: Vec<(String, u8, bool)>,
}

/// What the host tells a freshly started child.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Init {
    pub name: String,
    pub dir: String,
    pub library: String,
    pub sha256: Option<String>,
    pub config: serde_json::Map<String, serde_json::Value>,
    pub home: String,
    pub workspace: String,
    pub data_dir: String,
    pub limits: super::Limits,
}

/// An operation on the turn state the host lent for a call.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum StateOp {
    Get(String),
    Set(String, Box<RawValue>),
    Remove(String),
    Keys,
    Snapshot,
    SetObject(String, ObjRef),
    GetObject(String),
    Revision,
}

/// Every message, both ways.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Message {
    /// Host → child, first: load this library.
    Init(Box<Init>),
    /// Child → host: loaded; these are its registrations, library first.
    Ready { abi_version: String, registrations: Vec<Registration> },
    /// Child → host: the library could not be loaded (why).
    Failed(String),
    /// Host → child: call `hook` of registration `member`.
    Call {
        id: u64,
        member: usize,
        hook: String,
        args: Vec<Box<RawValue>>,
        /// The lent turn state (the host's state table).
        state: Option<u64>,
        /// The lent host object.
        object: Option<ObjRef>,
        /// A sync dispatch: a pending answer is not awaited.
        sync: bool,
    },
    /// Host → child: the host no longer waits for call `id`.
    Cancel(u64),
    /// Either way: call `method` of the receiver's object `object`.
    Invoke { id: u64, object: u64, method: String, args: Box<RawValue> },
    /// Either way: the sender dropped its last handle to the receiver's object.
    Release(u64),
    /// Child → host: an operation on lent state `state`.
    State { id: u64, state: u64, op: StateOp },
    /// Child → host: the child dropped lent state `state`.
    ReleaseState(u64),
    /// Child → host: `call_rest` from inside a hook of registration `member`.
    CallRest { id: u64, member: usize, hook: String, args: Box<RawValue> },
    /// Host → child: are you there? (answered by the reader, not a worker).
    Ping(u64),
    /// The answer to request `id` (a call, an invoke, a state op, a ping).
    Reply { id: u64, answer: Answer },
}

/// Why a frame could not be read.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// The peer closed the connection (cleanly, between frames).
    Closed,
    /// Reading failed.
    Io(std::io::Error),
    /// The peer announced more than the cap.
    TooLarge { announced: u64, cap: usize },
    /// The body is not a message.
    Malformed(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Closed => f.write_str("the connection closed"),
            FrameError::Io(e) => write!(f, "reading failed: {e}"),
            FrameError::TooLarge { announced, cap } => {
                write!(f, "a message of {announced} bytes is over the cap of {cap} bytes (isolation.max_message_mb)")
            }
            FrameError::Malformed(e) => write!(f, "a malformed message: {e}"),
        }
    }
}

impl FrameError {
    /// Whether the peer simply went away (closed, or its end failed), as
    /// opposed to sending something it must not.
    pub(crate) fn is_hang_up(&self) -> bool {
        matches!(self, FrameError::Closed | FrameError::Io(_))
    }

    /// Whether a read timeout (`set_read_timeout`) ran out.
    pub(crate) fn is_timeout(&self) -> bool {
        matches!(self, FrameError::Io(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
    }
}

/// Reads one message (at most `cap` bytes).
pub(crate) fn read(r: &mut impl Read, cap: usize) -> Result<Message, FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(FrameError::Io(e)),
    }
    let n = u32::from_be_bytes(len) as u64;
    if n > cap as u64 {
        return Err(FrameError::TooLarge { announced: n, cap });
    }
    let mut body = vec![0u8; n as usize];
    r.read_exact(&mut body).map_err(FrameError::Io)?;
    serde_json::from_slice(&body).map_err(|e| FrameError::Malformed(e.to_string()))
}

/// Encodes one message as a frame.
pub(crate) fn encode(message: &Message) -> Vec<u8> {
    let mut out = vec![0u8; 4];
    // A message of our own types always serializes.
    serde_json::to_writer(&mut out, message).expect("a message serializes");
    let n = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&n.to_be_bytes());
    out
}

/// Writes one frame.
pub(crate) fn write(w: &mut impl Write, frame: &[u8]) -> std::io::Result<()> {
    w.write_all(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_reads_back_and_an_oversized_one_is_refused_before_reading() {
        let frame = encode(&Message::Ping(7));
        let back = read(&mut &frame[..], 1 << 20).unwrap();
        assert!(matches!(back, Message::Ping(7)));
        let mut huge = u32::MAX.to_be_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        assert!(matches!(read(&mut &huge[..], 1 << 20), Err(FrameError::TooLarge { .. })));
        assert!(matches!(read(&mut &b""[..], 1 << 20), Err(FrameError::Closed)));
    }

    #[test]
    fn raw_values_survive_the_enum() {
        let raw = RawValue::from_string(r#"{"a":[1,2]}"#.into()).unwrap();
        let frame = encode(&Message::Reply { id: 1, answer: Answer::Value(raw) });
        match read(&mut &frame[..], 1 << 20).unwrap() {
            Message::Reply { answer: Answer::Value(v), .. } => assert_eq!(v.get(), r#"{"a":[1,2]}"#),
            other => panic!("{other:?}"),
        }
    }
}
