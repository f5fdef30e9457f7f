//! Host values across the connection, and the objects inside them.
//!
//! A value is written as its JSON; a live object in it (ABI 2.2: a tool's
//! `context.tape`, an object in the turn state) is lent to the other side
//! and written as the marker `{"$bub_isolated_object": id, "kind", "name"}`.
//! The reader turns each marker back into a live object: a
//! [`RemoteObject`] whose methods are requests to the lender. A value with
//! no marker in its text (nearly all of them) is parsed by the host's own
//! JSON reader in one pass.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
};

use bub_abi::{
    abi::ErrorKind,
    sdk::object::{ObjectFuture, ObjectImpl, ValueFuture},
    HookError, Object, Value, ValueKind, ValueRef,
};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::value::RawValue;

use super::{
    peer::Peer,
    wire::{Answer, Message, ObjRef},
};

const MARKER: &str = "$bub_isolated_object";

struct Enc<'a> {
    v: ValueRef<'a>,
    peer: &'a Arc<Peer>,
}

impl Serialize for Enc<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.v;
        // Containers are walked here (a live object may be inside); a
        // scalar serializes as the value itself does.
        match v.kind() {
            ValueKind::Array => {
                let mut seq = s.serialize_seq(Some(v.len()))?;
                for item in v.items() {
                    seq.serialize_element(&Enc { v: item, peer: self.peer })?;
                }
                seq.end()
            }
            ValueKind::Object => {
                if let Some(object) = v.live_object() {
                    let r = self.peer.export(object.into_handle());
                    let mut map = s.serialize_map(Some(3))?;
                    map.serialize_entry(MARKER, &r.id)?;
                    map.serialize_entry("kind", &r.kind)?;
                    map.serialize_entry("name", &r.name)?;
                    return map.end();
                }
                let mut map = s.serialize_map(Some(v.len()))?;
                for (k, item) in v.entries() {
                    map.serialize_entry(k, &Enc { v: item, peer: self.peer })?;
                }
                map.end()
            }
            _ => v.serialize(s),
        }
    }
}

/// `v` as raw JSON, its live objects lent to the other side.
pub(crate) fn encode(v: ValueRef<'_>, peer: &Arc<Peer>) -> Box<RawValue> {
    let text = serde_json::to_string(&Enc { v, peer }).unwrap_or_else(|_| "null".into());
    // What serde_json wrote is JSON.
    RawValue::from_string(text).unwrap_or_else(|_| RawValue::from_string("null".into()).expect("null is JSON"))
}

/// Raw JSON read back as a host value; markers become live objects of the
/// sender.
pub(crate) fn decode(raw: &RawValue, peer: &Arc<Peer>) -> Result<Value, HookError> {
    let text = raw.get();
    if !text.contains(MARKER) {
        return Value::from_json(text);
    }
    let tree: serde_json::Value =
        serde_json::from_str(text).map_err(|e| HookError::new(ErrorKind::TYPE, format!("not valid JSON: {e}")))?;
    build(&tree, peer)
}

fn build(v: &serde_json::Value, peer: &Arc<Peer>) -> Result<Value, HookError> {
    Ok(match v {
        serde_json::Value::Array(items) => {
            let mut out = Value::array();
            for item in items {
                out.push(build(item, peer)?);
            }
            out
        }
        serde_json::Value::Object(map) => {
            if let Some(id) = map.get(MARKER).and_then(|i| i.as_u64()) {
                let text = |k: &str| map.get(k).and_then(|s| s.as_str()).unwrap_or_default().to_owned();
                let object = RemoteObject::object(peer, ObjRef { id, kind: text("kind"), name: text("name") });
                return Value::from_live_object(&object);
            }
            let mut out = Value::object();
            for (k, item) in map {
                out.insert(k, build(item, peer)?);
            }
            out
        }
        scalar => Value::from(scalar),
    })
}

/// Finds an object again in a restarted process (see [`RemoteObject::revivable`]):
/// the new process and the object's id there.
pub(crate) type Revive =
    Box<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(Arc<Peer>, u64), HookError>> + Send>> + Send + Sync>;

/// Methods that put an object in service (a store entered for a scope, a
/// channel started): replayed, in order, on the object found again in a
/// restarted process. Their counterparts take it out of service.
const INTO_SERVICE: &[&str] = &["enter", "start"];
const OUT_OF_SERVICE: &[&str] = &["exit", "stop"];

/// An object of the other side: each method call is a request to it; the
/// last handle dropped releases it there.
pub(crate) struct RemoteObject {
    inner: Arc<Remote>,
}

/// A remote object's state, shared with the supervisor for objects it
/// revives on its own (a started channel, which nothing else would call).
pub(crate) struct Remote {
    /// The process it lives in and its id there (changed by a revival).
    at: Mutex<(Arc<Peer>, u64)>,
    kind: String,
    name: String,
    revive: Option<Revive>,
    /// The calls that put it in service, to replay after a revival.
    service: Mutex<Vec<(String, Value)>>,
    /// One revival at a time.
    reviving: tokio::sync::Mutex<()>,
}

impl RemoteObject {
    /// The live object for `r`, an object of `peer`'s other side.
    pub fn object(peer: &Arc<Peer>, r: ObjRef) -> Object {
        Object::new(RemoteObject { inner: Remote::new(peer, r, None) })
    }

    /// Like [`object`](Self::object), for an object a plugin's provider
    /// hook answered (a tape store, a steering inbox, tools, channels):
    /// when that process has ended, the object is found again in the
    /// restarted process with `revive` (on its next method call, or by
    /// the supervisor through the `Weak` answered here) and what put it in
    /// service (`enter`, `start`) is called again, so the host's handle
    /// keeps working.
    pub fn revivable(peer: &Arc<Peer>, r: ObjRef, revive: Revive) -> (Object, std::sync::Weak<Remote>) {
        let inner = Remote::new(peer, r, Some(revive));
        let weak = Arc::downgrade(&inner);
        (Object::new(RemoteObject { inner }), weak)
    }
}

impl Remote {
    fn new(peer: &Arc<Peer>, r: ObjRef, revive: Option<Revive>) -> Arc<Remote> {
        Arc::new(Remote {
            at: Mutex::new((peer.clone(), r.id)),
            kind: r.kind,
            name: r.name,
            revive,
            service: Mutex::new(Vec::new()),
            reviving: tokio::sync::Mutex::new(()),
        })
    }

    fn current(&self) -> (Arc<Peer>, u64) {
        bub_abi::sync::lock(&self.at).clone()
    }

    /// Whether it was put in service and not taken out.
    pub fn in_service(&self) -> bool {
        !bub_abi::sync::lock(&self.service).is_empty()
    }

    /// Where it lives now: found again (and put back in service) if its
    /// process ended and it can be.
    pub async fn live(&self) -> Result<(Arc<Peer>, u64), HookError> {
        let (peer, id) = self.current();
        let Some(revive) = self.revive.as_ref().filter(|_| peer.closed().is_some()) else { return Ok((peer, id)) };
        let _one = self.reviving.lock().await;
        let (peer, id) = self.current();
        if peer.closed().is_none() {
            return Ok((peer, id)); // revived meanwhile
        }
        let (peer, id) = revive().await?;
        let replay = bub_abi::sync::lock(&self.service).clone();
        for (method, args) in replay {
            call(&peer, id, method.clone(), args).await.map_err(|e| {
                HookError::new(
                    e.kind,
                    format!("{}: putting it back in service ({method}) failed: {}", self.kind, e.message),
                )
            })?;
        }
        *bub_abi::sync::lock(&self.at) = (peer.clone(), id);
        Ok((peer, id))
    }
}

impl Drop for RemoteObject {
    fn drop(&mut self) {
        let (peer, id) = self.inner.current();
        if peer.closed().is_none() {
            peer.send(&Message::Release(id));
        }
    }
}

impl ObjectImpl for RemoteObject {
    fn kind(&self) -> &str {
        &self.inner.kind
    }

    fn name(&self) -> String {
        self.inner.name.clone()
    }

    fn invoke(&self, method: &str, args: serde_json::Value) -> ObjectFuture {
        let fut = self.invoke_value(method, Value::from(&args));
        Box::pin(async move { fut.await?.deserialize().map_err(|e| HookError::new(ErrorKind::TYPE, e.to_string())) })
    }

    fn invoke_value(&self, method: &str, args: Value) -> ValueFuture {
        let method = method.to_owned();
        let inner = self.inner.clone();
        Box::pin(async move {
            let (peer, object) = inner.live().await?;
            let kept = (inner.revive.is_some() && INTO_SERVICE.contains(&method.as_str())).then(|| args.clone());
            let answer = call(&peer, object, method.clone(), args).await?;
            if let Some(args) = kept {
                bub_abi::sync::lock(&inner.service).push((method, args));
            } else if OUT_OF_SERVICE.contains(&method.as_str()) {
                bub_abi::sync::lock(&inner.service).clear();
            }
            Ok(answer)
        })
    }
}

async fn call(peer: &Arc<Peer>, object: u64, method: String, args: Value) -> Result<Value, HookError> {
    let args = encode(args.as_ref(), peer);
    let (id, rx) = peer.request(|id| Message::Invoke { id, object, method, args });
    let guard = Forget { peer: peer.clone(), id };
    let answer = rx.await.unwrap_or_else(|_| Err(HookError::new(ErrorKind::CLOSED, "the connection ended")));
    drop(guard);
    match answer? {
        Answer::Value(raw) => decode(&raw, peer),
        Answer::None => Ok(Value::null()),
        Answer::Error(kind, message) => Err(HookError::new(ErrorKind(kind), message)),
        Answer::Object(_) | Answer::Objects(_) | Answer::Pending => {
            Err(HookError::new(ErrorKind::TYPE, "an object method answered an object, not a value"))
        }
    }
}

/// Stops waiting for a request whose future was dropped.
pub(crate) struct Forget {
    pub peer: Arc<Peer>,
    pub id: u64,
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.peer.forget(self.id);
    }
}
