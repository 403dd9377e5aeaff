//! The Standard Webhooks signature scheme, a webhook tool's alternative to Switchboard's own, so
//! that receivers verify with the official libraries: the signed content is
//! `"<webhook-id>.<webhook-timestamp>.<body>"`, the key is the base64 after `whsec_`, and the
//! header is `v1,<base64>`. Pure functions only; no clock, no I/O.

use base64::Engine;
use base64::alphabet;
use base64::engine::general_purpose::STANDARD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hmac::Mac;

use super::{VerifyError, mac, match_any, timestamp_within_tolerance};

/// The message id: Switchboard sends the call's idempotency key, stable across retries.
pub const ID_HEADER: &str = "webhook-id";
/// Unix seconds at which the request was signed.
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// `v1,<base64 HMAC-SHA256>`, possibly several, space-separated.
pub const SIGNATURE_HEADER: &str = "webhook-signature";
/// What a Standard Webhooks secret starts with; the official libraries take it as optional.
pub const SECRET_PREFIX: &str = "whsec_";

/// The standard alphabet, padded or not: the official Python and TypeScript libraries accept both.
const SECRET_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A signing key: the bytes a `whsec_<base64>` secret encodes. Its `Debug` is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct Key(Vec<u8>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(<redacted>)")
    }
}

/// Why a secret is not a Standard Webhooks secret. The messages never hold the secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("it is not 'whsec_' followed by standard base64")]
    NotBase64,
    #[error("it encodes no bytes")]
    Empty,
}

impl Key {
    /// The key of `secret`: `whsec_` (optional, as the official libraries take it) followed by
    /// standard base64, padded or not. Anything else is refused rather than read leniently, so
    /// that a mistyped secret fails here and not as a mismatch at the receiver.
    pub fn from_secret(secret: &str) -> Result<Self, KeyError> {
        let encoded = secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret);
        let bytes = SECRET_BASE64.decode(encoded).map_err(|_| KeyError::NotBase64)?;
        if bytes.is_empty() {
            return Err(KeyError::Empty);
        }
        Ok(Self(bytes))
    }
}

/// The `webhook-signature` value for `body` sent as message `id` at `timestamp`: `v1,<base64>`.
pub fn sign(key: &Key, id: &str, timestamp: i64, body: &[u8]) -> String {
    let tag = mac(&key.0, &[id.as_bytes(), timestamp.to_string().as_bytes(), body]).finalize().into_bytes();
    format!("v1,{}", STANDARD.encode(tag))
}

/// Checks a received request as the official libraries do: `id` is present, the timestamp is
/// within five minutes of `now_unix` either way, and one of the space-separated `v1,` signatures
/// in `signature_header` (several during a secret rotation) matches. Constant-time comparison.
pub fn verify(
    key: &Key,
    id: &str,
    timestamp_header: &str,
    signature_header: &str,
    body: &[u8],
    now_unix: i64,
) -> Result<(), VerifyError> {
    if id.is_empty() {
        return Err(VerifyError::MissingId);
    }
    let timestamp = timestamp_within_tolerance(timestamp_header, now_unix)?;
    let expected = mac(&key.0, &[id.as_bytes(), timestamp.to_string().as_bytes(), body]);
    let candidates = signature_header.split(' ').filter_map(|s| s.strip_prefix("v1,"));
    match_any(&expected, candidates, |c| STANDARD.decode(c).ok())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// The rows of the contract's Standard Webhooks table: secret, id, timestamp, body, signature.
    /// Computed with Python's `hmac` and `base64` modules, and equal to what the official Python
    /// library signs; the first is the scheme's own published example.
    fn vectors() -> Vec<(String, String, i64, String, String)> {
        super::super::tests::contract_table("## Test vectors: Standard Webhooks", 5)
            .into_iter()
            .map(|c| (c[0].clone(), c[1].clone(), c[2].parse().expect("timestamp"), c[3].clone(), c[4].clone()))
            .collect()
    }

    #[test]
    fn it_signs_the_contracts_test_vectors() {
        let vectors = vectors();
        assert_eq!(vectors.len(), 3, "the contract lists three Standard Webhooks vectors");
        for (secret, id, ts, body, expected) in vectors {
            let key = Key::from_secret(&secret).unwrap();
            assert_eq!(sign(&key, &id, ts, body.as_bytes()), expected, "{secret}");
            assert_eq!(verify(&key, &id, &ts.to_string(), &expected, body.as_bytes(), ts), Ok(()));
        }
    }

    #[test]
    fn the_secret_prefix_is_optional_and_padding_too_but_nothing_else_is_read() {
        let padded = Key::from_secret("whsec_c3dpdGNoYm9hcmQtc3RhbmRhcmQ=").unwrap();
        assert_eq!(Key::from_secret("c3dpdGNoYm9hcmQtc3RhbmRhcmQ"), Ok(padded.clone()));
        assert_eq!(Key::from_secret("whsec_c3dpdGNoYm9hcmQtc3RhbmRhcmQ"), Ok(padded));
        for wrong in ["whsec-test-0123456789", "whsec_a b", "whsec_c3dp_GNo", "whsec_@@@@"] {
            assert_eq!(Key::from_secret(wrong), Err(KeyError::NotBase64), "{wrong}");
        }
        assert_eq!(Key::from_secret("whsec_"), Err(KeyError::Empty));
        assert_eq!(Key::from_secret(""), Err(KeyError::Empty));
        assert!(!format!("{:?}", Key::from_secret("whsec_c3dp").unwrap()).contains("c3dp"));
    }

    #[test]
    fn it_rejects_a_tampered_body_a_stale_timestamp_a_wrong_key_and_a_missing_id() {
        let (secret, id, ts, body, sig) = vectors().swap_remove(1);
        let (key, at) = (Key::from_secret(&secret).unwrap(), ts.to_string());
        let check = |key: &Key, id: &str, body: &[u8], now| verify(key, id, &at, &sig, body, now);
        assert_eq!(check(&key, &id, b"{}", ts), Err(VerifyError::Mismatch));
        assert_eq!(check(&key, &id, body.as_bytes(), ts + 301), Err(VerifyError::OutsideTolerance));
        assert_eq!(check(&key, &id, body.as_bytes(), ts - 300), Ok(()));
        let other = Key::from_secret("whsec_b3RoZXI=").unwrap();
        assert_eq!(check(&other, &id, body.as_bytes(), ts), Err(VerifyError::Mismatch));
        assert_eq!(check(&key, "another-id", body.as_bytes(), ts), Err(VerifyError::Mismatch));
        assert_eq!(check(&key, "", body.as_bytes(), ts), Err(VerifyError::MissingId));
    }

    #[test]
    fn it_accepts_any_of_several_space_separated_signatures() {
        let (secret, id, ts, body, good) = vectors().swap_remove(0);
        let key = Key::from_secret(&secret).unwrap();
        let old = sign(&Key::from_secret("whsec_b2xk").unwrap(), &id, ts, body.as_bytes());
        let check = |header: &str| verify(&key, &id, &ts.to_string(), header, body.as_bytes(), ts);
        assert_eq!(check(&format!("{old} v1a,c2lnbmVk {good}")), Ok(()));
        assert_eq!(check(&old), Err(VerifyError::Mismatch));
        assert_eq!(check("v1a,c2lnbmVk"), Err(VerifyError::NoSignature));
        assert_eq!(check("v1,not base64!"), Err(VerifyError::Mismatch));
    }
}
