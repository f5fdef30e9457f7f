//! A model request as the interception hooks see it: its messages shared
//! with the session, and their host-value form built once and kept.

use std::sync::Arc;

use super::{Message, Shared};

/// A model call's request as the agent holds it: Bub's `LLMCallRequest`
/// with its messages shared ([`Message`]). [`CallRequest::hosted`] is what
/// the interception hooks receive, [`CallRequest::to_abi`] the plain type.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallRequest {
    /// Run id (`run-YYYYMMDDTHHMMSSffffffZ`).
    pub run_id: String,
    /// `provider:model`.
    pub model: String,
    /// The messages.
    pub messages: Vec<Shared>,
    /// Tools offered (observational).
    pub tool_names: Vec<String>,
    /// Output token limit.
    pub max_tokens: Option<u64>,
    /// The last [`hosted`](CallRequest::hosted) form, reused while the
    /// request still reads the same.
    pub(crate) hosted_cache: HostedCache,
    /// Where the last request over the same kept context left its list of
    /// messages (see [`ListSlot`]); a slot of its own for a request built
    /// alone.
    pub(crate) list_slot: ListSlot,
}

/// Where the requests over one kept context (one session's, see
/// `context`) leave their host list of messages for the next one: step
/// after step and turn after turn a request holds the last one's messages
/// plus a few, and its list is that list with the new ones appended, in
/// place, instead of a pointer per message taken again. On a long
/// session that pass touched every message's node and was most of what
/// the gateway spent more on 100-turn sessions than on fresh ones.
/// A new slot is empty; its clones share it.
#[derive(Clone, Default)]
pub(crate) struct ListSlot(pub(super) Arc<std::sync::Mutex<Option<Hosted>>>);

impl PartialEq for ListSlot {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for ListSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ListSlot")
    }
}

/// A request's last host value: `before_llm_call` and `after_llm_call` get
/// the same one instead of a list of every context message built twice
/// per step. The fields are public, so it is checked before reuse: the
/// messages by address, against the ones it was built from, which it
/// keeps (so a message changed since, through `Arc::make_mut`, is a copy
/// at another address).
#[derive(Default)]
pub(crate) struct HostedCache(pub(super) std::sync::Mutex<Option<Hosted>>);

/// A host value built from a request's messages (the request, or its list
/// of messages) and those messages, to tell by address whether a later
/// request has the same.
///
/// The messages are shared by the request's kept value and the slot's
/// list (copied when one changes them while the other still holds them):
/// a copy of a `Vec<Shared>` is a reference count in every message,
/// memory a gateway cycling through long sessions has not touched since
/// the session's last turn.
#[derive(Clone)]
pub(crate) struct Hosted {
    pub(super) value: bub_abi::Value,
    pub(super) messages: Arc<Vec<Shared>>,
}

impl Clone for HostedCache {
    fn clone(&self) -> Self {
        HostedCache(std::sync::Mutex::new(bub_abi::sync::lock(&self.0).clone()))
    }
}

impl PartialEq for HostedCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for HostedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HostedCache")
    }
}

impl CallRequest {
    /// The request as a host value, the same as `LlmCallRequest`'s; each
    /// message's node is its kept one, so the cost is a pointer per message
    /// after the first request that carried it.
    pub fn hosted(&self) -> bub_abi::Value {
        let mut cache = bub_abi::sync::lock(&self.hosted_cache.0);
        if let Some(kept) = cache.as_ref().filter(|kept| self.reads_as(kept)) {
            return kept.value.clone();
        }
        // Built node by node, in `LlmCallRequest`'s key order: each message
        // is a pointer to its kept node (serde went through every message's
        // handle, a tenth of a 1,000-entry step's events).
        let (messages, built_from) = self.message_list();
        let mut tool_names = bub_abi::Value::array_with_capacity(self.tool_names.len());
        for name in &self.tool_names {
            tool_names.push(name.as_str());
        }
        let mut hosted = bub_abi::Value::object();
        hosted
            .insert("run_id", self.run_id.as_str())
            .insert("model", self.model.as_str())
            .insert("messages", messages)
            .insert("tool_names", tool_names)
            .insert("max_tokens", self.max_tokens);
        *cache = Some(Hosted { value: hosted.clone(), messages: built_from });
        hosted
    }

    /// The host list of the messages: the last request's over the same
    /// kept context, its first message (the system prompt, new every step)
    /// replaced and the messages after their common part appended, when
    /// there is one; else a new list, left in the slot for the next. With
    /// the messages it was built from (this request's, shared with the
    /// slot).
    fn message_list(&self) -> (bub_abi::Value, Arc<Vec<Shared>>) {
        let slot = &self.list_slot.0;
        // Taken out: the list is then this request's alone to change (a
        // plugin that kept the last request keeps its own list: the
        // splice copies it then).
        let kept = bub_abi::sync::lock(slot).take();
        let list = match kept {
            Some(mut kept) if !kept.messages.is_empty() && !self.messages.is_empty() => {
                let same = kept.messages[1..].iter().zip(&self.messages[1..]).take_while(|(a, b)| Arc::ptr_eq(a, b));
                let keep = 1 + same.count();
                let first = Some(self.messages[0].hosted().as_ref());
                let tail = self.messages[keep..].iter().map(|m| m.hosted().as_ref());
                if kept.value.splice_refs(keep, first, tail) {
                    // In place unless the last request still holds them.
                    let messages = Arc::make_mut(&mut kept.messages);
                    messages.truncate(keep);
                    messages[0] = self.messages[0].clone();
                    messages.extend_from_slice(&self.messages[keep..]);
                    let built = (kept.value.clone(), kept.messages.clone());
                    *bub_abi::sync::lock(slot) = Some(kept);
                    return built;
                }
                self.new_list()
            }
            _ => self.new_list(),
        };
        let messages = Arc::new(self.messages.clone());
        *bub_abi::sync::lock(slot) = Some(Hosted { value: list.clone(), messages: messages.clone() });
        (list, messages)
    }

    /// The messages' host list, built afresh: a pointer to each one's node.
    fn new_list(&self) -> bub_abi::Value {
        let mut messages = bub_abi::Value::array_with_capacity(self.messages.len());
        for m in &self.messages {
            messages.push_ref(m.hosted().as_ref());
        }
        messages
    }

    /// Whether `kept` (an earlier [`hosted`](Self::hosted)) still reads as
    /// this request. The messages are compared by address, in Rust: through
    /// the value table, a 1,000-message context cost as much to check as
    /// to build again.
    fn reads_as(&self, kept: &Hosted) -> bool {
        let value = kept.value.as_ref();
        let text = |key: &str| value.get(key).and_then(|v| v.as_str());
        let Some(tools) = value.get("tool_names") else { return false };
        text("run_id") == Some(self.run_id.as_str())
            && text("model") == Some(self.model.as_str())
            && value.get("max_tokens").and_then(|v| v.as_u64()) == self.max_tokens
            && tools.len() == self.tool_names.len()
            && tools.items().zip(&self.tool_names).all(|(a, b)| a.as_str() == Some(b.as_str()))
            && kept.messages.len() == self.messages.len()
            && kept.messages.iter().zip(&self.messages).all(|(a, b)| Arc::ptr_eq(a, b))
    }

    /// As Bub's `LLMCallRequest` (the messages copied).
    pub fn to_abi(&self) -> bub_abi::types::LlmCallRequest {
        bub_abi::types::LlmCallRequest {
            run_id: self.run_id.clone(),
            model: self.model.clone(),
            messages: self.messages.iter().map(|m| m.json().clone()).collect(),
            tool_names: self.tool_names.clone(),
            max_tokens: self.max_tokens,
        }
    }

    /// From Bub's `LLMCallRequest` (a rewritten one: its messages are new).
    pub fn from_abi(r: bub_abi::types::LlmCallRequest) -> CallRequest {
        CallRequest {
            run_id: r.run_id,
            model: r.model,
            messages: Message::all(r.messages),
            tool_names: r.tool_names,
            max_tokens: r.max_tokens,
            hosted_cache: HostedCache::default(),
            list_slot: ListSlot::default(),
        }
    }
}
