//! The turn state across the connection: in the child, a [`StateStore`]
//! whose every operation is a request to the host ([`RemoteState`]); in
//! the host, the operations run on the state it lent ([`serve`]).
//!
//! State operations are synchronous in the ABI, so the child's side blocks
//! its thread for the answer (the host answers from its reader thread,
//! without waiting on anything else).

use std::{sync::Arc, time::Duration};

use abi_stable::{
    sabi_trait::TD_Opaque,
    std_types::{RArc, ROption, RResult, RStr, RString, RVec},
};
use bub_abi::{
    abi::{ObjectHandle, StateHandle, StateStore, StateStore_TO},
    Value,
};

use super::{
    codec::{self, RemoteObject},
    peer::Peer,
    wire::{Answer, Message, StateOp},
};

/// How long a state operation may wait for the host.
const LIMIT: Duration = Duration::from_secs(60);

#[derive(Clone)]
pub(crate) struct RemoteState(Arc<Inner>);

struct Inner {
    peer: Arc<Peer>,
    id: u64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.peer.closed().is_none() {
            self.peer.send(&Message::ReleaseState(self.id));
        }
    }
}

impl RemoteState {
    /// The state the host lent as `id`.
    pub fn handle(peer: &Arc<Peer>, id: u64) -> StateHandle {
        StateStore_TO::from_ptr(RArc::new(RemoteState(Arc::new(Inner { peer: peer.clone(), id }))), TD_Opaque)
    }

    fn op(&self, op: StateOp) -> Result<Answer, String> {
        let state = self.0.id;
        match self.0.peer.request_blocking(|id| Message::State { id, state, op }, LIMIT) {
            Ok(Answer::Error(_, message)) => Err(message),
            Ok(answer) => Ok(answer),
            Err(e) => Err(e.message.into_string()),
        }
    }

    fn value(&self, op: StateOp) -> Option<Value> {
        match self.op(op) {
            Ok(Answer::Value(raw)) => codec::decode(&raw, &self.0.peer).ok(),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(target: "bub::isolation", "turn state: {e}");
                None
            }
        }
    }
}

impl StateStore for RemoteState {
    fn get(&self, key: RStr<'_>) -> ROption<Value> {
        self.value(StateOp::Get(key.as_str().to_owned())).into()
    }

    fn set(&self, key: RStr<'_>, value: Value) -> RResult<(), RString> {
        let raw = codec::encode(value.as_ref(), &self.0.peer);
        self.op(StateOp::Set(key.as_str().to_owned(), raw)).map(|_| ()).map_err(RString::from).into()
    }

    fn remove(&self, key: RStr<'_>) -> bool {
        self.value(StateOp::Remove(key.as_str().to_owned())).and_then(|v| v.as_ref().as_bool()).unwrap_or(false)
    }

    fn keys(&self) -> RVec<RString> {
        let Some(v) = self.value(StateOp::Keys) else { return RVec::new() };
        v.as_ref().items().filter_map(|k| k.as_str().map(RString::from)).collect()
    }

    fn snapshot(&self) -> Value {
        self.value(StateOp::Snapshot).unwrap_or_else(Value::object)
    }

    fn set_object(&self, key: RStr<'_>, object: ObjectHandle) -> RResult<(), RString> {
        let r = self.0.peer.export(object);
        self.op(StateOp::SetObject(key.as_str().to_owned(), r)).map(|_| ()).map_err(RString::from).into()
    }

    fn get_object(&self, key: RStr<'_>) -> ROption<ObjectHandle> {
        match self.op(StateOp::GetObject(key.as_str().to_owned())) {
            Ok(Answer::Object(r)) => ROption::RSome(RemoteObject::object(&self.0.peer, r).into_handle()),
            _ => ROption::RNone,
        }
    }

    fn revision(&self) -> u64 {
        self.value(StateOp::Revision).and_then(|v| v.as_ref().as_u64()).unwrap_or(0)
    }
}

/// Runs `op` on the state the host lent as `state` (host side).
pub(crate) fn serve(peer: &Arc<Peer>, state: u64, op: StateOp) -> Answer {
    let Some(handle) = bub_abi::sync::lock(&peer.states).get(&state).cloned() else {
        return Answer::Error(bub_abi::ErrorKind::CLOSED.0, "that turn state is gone (its turn ended)".into());
    };
    let value = |v: Value| Answer::Value(codec::encode(v.as_ref(), peer));
    let done = |r: RResult<(), RString>| match r {
        RResult::ROk(()) => Answer::None,
        RResult::RErr(e) => Answer::Error(bub_abi::ErrorKind::ERROR.0, e.into_string()),
    };
    match op {
        StateOp::Get(key) => match handle.get(RStr::from_str(&key)) {
            ROption::RSome(v) => value(v),
            ROption::RNone => Answer::None,
        },
        StateOp::Set(key, raw) => match codec::decode(&raw, peer) {
            Ok(v) => done(handle.set(RStr::from_str(&key), v)),
            Err(e) => Answer::Error(e.kind.0, e.message.into_string()),
        },
        StateOp::Remove(key) => value(Value::from(handle.remove(RStr::from_str(&key)))),
        StateOp::Keys => {
            let mut list = Value::array();
            for k in handle.keys() {
                list.push(k.as_str());
            }
            value(list)
        }
        StateOp::Snapshot => value(handle.snapshot()),
        StateOp::SetObject(key, r) => {
            done(handle.set_object(RStr::from_str(&key), RemoteObject::object(peer, r).into_handle()))
        }
        StateOp::GetObject(key) => match handle.get_object(RStr::from_str(&key)) {
            ROption::RSome(h) => Answer::Object(peer.export(h)),
            ROption::RNone => Answer::None,
        },
        StateOp::Revision => value(Value::from(handle.revision())),
    }
}
