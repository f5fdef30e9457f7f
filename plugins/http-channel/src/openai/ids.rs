//! Response ids that carry their session: `previous_response_id` names
//! the session a conversation continues, so an id must be impossible to
//! guess and must still mean the same session after a restart and on the
//! other gateways behind one load balancer.
//!
//! An id is `resp_` and the URL-safe base64 of 16 random bytes (from the
//! kernel's CSPRNG), a 16-byte HMAC-SHA256 tag, and the session's name:
//! the gateway that made it, or any gateway with the same key, reads the
//! session back and checks the tag; nothing is stored, so nothing is lost
//! at a restart and nothing grows with the clients. A forged, altered or
//! foreign id fails the check and is answered as OpenAI answers an
//! unknown one (400 `previous_response_not_found`), never run on another
//! session. The key comes from the channel's token (every gateway that
//! shares the token shares the ids; a new token ends the old ids), or,
//! without a token, from a random key kept owner-only in the channel's
//! data folder. The session in an id is the caller's own (named by it, or
//! made for it), so it is no secret from the caller.

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// Random bytes, and tag bytes, in an id.
const NONCE: usize = 16;
const TAG: usize = 16;
/// The longest id read (a session name is short; this bounds the work a
/// peer can ask for).
const MAX_ID: usize = 4096;

/// Makes and reads response ids under one key.
#[derive(Clone)]
pub(crate) struct ResponseIds {
    key: [u8; 32],
}

impl std::fmt::Debug for ResponseIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseIds(…)")
    }
}

impl ResponseIds {
    /// Ids keyed by `secret` (the channel's token, or its key file).
    pub(crate) fn new(secret: &[u8]) -> ResponseIds {
        let mut hash = Sha256::new();
        hash.update(b"bub-rs http-channel response ids\0");
        hash.update(secret);
        ResponseIds { key: hash.finalize().into() }
    }

    // None only if HMAC refused the key, which it never does (any
    // length is a key): then no id is made and none is read.
    fn tag(&self, nonce: &[u8], session: &[u8]) -> Option<[u8; TAG]> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key).ok()?;
        mac.update(nonce);
        mac.update(session);
        let full = mac.finalize().into_bytes();
        let mut tag = [0u8; TAG];
        tag.copy_from_slice(&full[..TAG]);
        Some(tag)
    }

    /// A new id for a response on `session`.
    pub(crate) fn issue(&self, session: &str) -> std::io::Result<String> {
        let nonce = bub_kit::random::secret::<NONCE>()?;
        let tag = self.tag(&nonce, session.as_bytes()).ok_or_else(|| std::io::Error::other("HMAC refused the key"))?;
        let mut raw = Vec::with_capacity(NONCE + TAG + session.len());
        raw.extend_from_slice(&nonce);
        raw.extend_from_slice(&tag);
        raw.extend_from_slice(session.as_bytes());
        Ok(format!("resp_{}", URL_SAFE_NO_PAD.encode(raw)))
    }

    /// The session of `id`, if this key made it.
    pub(crate) fn session(&self, id: &str) -> Option<String> {
        if id.len() > MAX_ID {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(id.strip_prefix("resp_")?).ok()?;
        if raw.len() < NONCE + TAG {
            return None;
        }
        let (nonce, rest) = raw.split_at(NONCE);
        let (tag, session) = rest.split_at(TAG);
        let expected = self.tag(nonce, session)?;
        // Constant time: a peer must not learn a tag byte by byte.
        if !bub_kit::channel::same_secret(tag, &expected) {
            return None;
        }
        String::from_utf8(session.to_vec()).ok()
    }
}

/// The key material without a token: `<data_dir>/response-key`, made at
/// the first start (32 random bytes, owner-only).
pub(crate) fn key_file(data_dir: &std::path::Path) -> Result<Vec<u8>, String> {
    let path = data_dir.join("response-key");
    match bub_kit::files::read_trusted(&path, 4096) {
        Ok(bytes) if bytes.len() >= 16 => Ok(bytes),
        Ok(_) => Err(format!("http-channel: {} is too short; remove it to get a new key", path.display())),
        Err(bub_kit::files::TrustError::Missing) => {
            let key = bub_kit::random::secret::<32>()
                .map_err(|e| format!("http-channel: cannot read /dev/urandom for a key: {e}"))?;
            bub_kit::files::create_private_dir(data_dir)
                .and_then(|()| bub_kit::files::write_private(&path, &key))
                .map_err(|e| format!("http-channel: cannot write {}: {e}", path.display()))?;
            Ok(key.to_vec())
        }
        Err(e) => Err(format!("http-channel: refusing the response key file: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_names_its_session_to_its_key_only() {
        let ids = ResponseIds::new(b"token");
        let id = ids.issue("alice").unwrap();
        assert!(id.starts_with("resp_") && id.len() > 40, "{id}");
        assert_eq!(ids.session(&id).as_deref(), Some("alice"));
        assert_eq!(ResponseIds::new(b"token").session(&id).as_deref(), Some("alice"), "another gateway, same token");
        assert_eq!(ResponseIds::new(b"other").session(&id), None, "another key");
        assert_ne!(ids.issue("alice").unwrap(), id, "each id is new");
    }

    #[test]
    fn altered_forged_and_odd_ids_are_unknown() {
        let ids = ResponseIds::new(b"token");
        let id = ids.issue("alice").unwrap();
        // The session swapped for another under the same nonce and tag.
        let mut raw = URL_SAFE_NO_PAD.decode(id.strip_prefix("resp_").unwrap()).unwrap();
        let at = raw.len() - 1;
        raw[at] = b'X';
        assert_eq!(ids.session(&format!("resp_{}", URL_SAFE_NO_PAD.encode(&raw))), None);
        for odd in ["", "resp_", "resp_!!", "resp-1234-1", "chatcmpl_abc", &format!("resp_{}", "A".repeat(5000))] {
            assert_eq!(ids.session(odd), None, "{odd}");
        }
    }
}
