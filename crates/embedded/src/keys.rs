//! API keys of the embedded profile: random, shown once, stored only as a SHA-256 hash.

use sha2::{Digest, Sha256};

/// Prefix that makes a key recognisable in a config file or a leak scanner.
pub const KEY_PREFIX: &str = "sbk_";

#[derive(Debug, thiserror::Error)]
#[error("the operating system's random source failed: {0}")]
pub struct KeyError(String);

/// A new key: the prefix and 32 random bytes in hex.
pub fn generate_api_key() -> Result<String, KeyError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| KeyError(e.to_string()))?;
    Ok(format!("{KEY_PREFIX}{}", hex(&bytes)))
}

/// The hash under which a key is stored and looked up.
pub fn hash_api_key(key: &str) -> String {
    hex(&Sha256::digest(key.as_bytes()))
}

use switchboard_domain::ids::lower_hex as hex;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_random_and_hash_stably() {
        let (a, b) = (generate_api_key().unwrap(), generate_api_key().unwrap());
        assert_ne!(a, b);
        assert!(a.starts_with(KEY_PREFIX) && a.len() == KEY_PREFIX.len() + 64);
        assert_eq!(hash_api_key(&a), hash_api_key(&a));
        assert_ne!(hash_api_key(&a), hash_api_key(&b));
        // the known SHA-256 of "abc"
        assert_eq!(hash_api_key("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
