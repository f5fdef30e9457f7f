//! Random-looking numbers for ids (shell ids, spill handles, temporary
//! sessions) and backoff jitter: std's per-process random hash keys over a
//! counter and the clock. Not for secrets ([`secret`] is: the kernel's
//! CSPRNG); callers that need uniqueness check for collisions where it
//! matters.

use std::{
    hash::{BuildHasher, Hasher},
    sync::atomic::{AtomicU64, Ordering},
};

/// A new random-looking `u64` on every call.
pub fn u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    h.write_u128(now.as_nanos());
    h.finish()
}

/// `N` bytes from the kernel's CSPRNG (`/dev/urandom`): for secrets and
/// ids that must be unguessable (tokens, keys, response ids), unlike
/// [`u64`].
pub fn secret<const N: usize>() -> std::io::Result<[u8; N]> {
    use std::io::Read;
    let mut bytes = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// `bytes` as lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn secrets_differ_and_read_as_hex() {
        let (a, b) = (super::secret::<16>().unwrap(), super::secret::<16>().unwrap());
        assert_ne!(a, b);
        assert_eq!(super::hex(&[0, 0xab, 0x10]), "00ab10");
    }
}
