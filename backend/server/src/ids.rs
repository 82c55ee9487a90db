//! Random identifiers from the OS generator: share ids (72 bits), response ids, seeds.

use crate::error::{Error, Result};

/// Characters of a share id: URL-safe base64, so each character carries 6 bits.
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
/// Share id length: 12 × 6 = 72 random bits (the brief asks for at least 60).
pub const SHARE_ID_LEN: usize = 12;

/// `len` random characters of [`ALPHABET`].
pub fn random_id(len: usize) -> Result<String> {
    let mut bytes = vec![0u8; len];
    getrandom::fill(&mut bytes).map_err(|e| Error::Internal(format!("no OS randomness: {e}")))?;
    // 256 is a multiple of 64, so masking keeps every character equally likely.
    Ok(bytes.iter().map(|b| ALPHABET[(b & 63) as usize] as char).collect())
}

/// Whether `s` could be a share id (anything else is a 404 without a lookup).
pub fn is_share_id(s: &str) -> bool {
    s.len() == SHARE_ID_LEN && s.bytes().all(|b| ALPHABET.contains(&b))
}

/// A random sampling seed for requests that give none.
pub fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    match getrandom::fill(&mut b) {
        Ok(()) => u64::from_le_bytes(b),
        // The seed only varies output; the clock is a fine fallback.
        Err(_) => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0),
    }
}

/// An OpenAI-style response id such as `chatcmpl-…`.
pub fn response_id(prefix: &str) -> String {
    format!("{prefix}-{}", random_id(24).unwrap_or_else(|_| format!("{:016x}", random_seed())))
}

/// An id in the Responses and Messages APIs' form, such as `resp_…` or `msg_…`.
pub fn item_id(prefix: &str) -> String {
    format!("{prefix}_{}", random_id(24).unwrap_or_else(|_| format!("{:016x}", random_seed())))
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_ids_are_long_random_and_recognised() {
        let a = random_id(SHARE_ID_LEN).unwrap();
        let b = random_id(SHARE_ID_LEN).unwrap();
        assert_ne!(a, b);
        assert!(is_share_id(&a));
        assert!(!is_share_id("short"));
        assert!(!is_share_id("../../etc/pa"));
    }
}
