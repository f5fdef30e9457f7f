//! # bub-kit — Bub's shared readings and a plugin's utility belt
//!
//! Code that the host and many plugins need alike, but that is not part of
//! the contract between them: reading an envelope or a prompt the way Bub
//! does, selecting a tape's entries for a query, text search over tapes
//! (one ranking for every store, its index or a scan),
//! the helpers every channel plugin writes, private files under
//! `$BUB_HOME`, and a few small rooms (bounded caches, terminal-safe text,
//! durations from untrusted numbers, random ids).
//!
//! It lives apart from `bub-abi` so that a fix here is a release of this
//! crate, not of the ABI, and so that a plugin that needs none of it
//! compiles none of its dependencies (jiff, rapidfuzz, humantime, rustix).
//! Each plugin compiles its own copy; two plugins built against different
//! versions of this crate load side by side.
//!
//! ```
//! use serde_json::json;
//!
//! // Bub's default session id for a message: "<channel>:<chat_id>".
//! let message = json!({"channel": "telegram", "chat_id": 42, "content": "hi"});
//! assert_eq!(bub_kit::envelope::content_of(&message), "hi");
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod agent_plugins;
pub mod channel;
pub mod envelope;
pub mod files;
pub mod fuzzy;
#[cfg(feature = "http")]
pub mod http;
pub mod lru;
pub mod prompt;
pub mod python;
pub mod random;
pub mod search;
#[cfg(feature = "server")]
pub mod server;
pub mod tape;
pub mod terminal;
pub mod time;
#[cfg(feature = "websocket")]
pub mod websocket;
