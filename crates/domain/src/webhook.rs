//! The webhook signature schemes (`contracts/webhooks.md`): Switchboard's own here and Standard
//! Webhooks in [`standard`], each with the signing on the caller's side and the public
//! verification a receiver runs. Pure functions only; no clock, no I/O.

pub mod standard;

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// How a webhook tool's requests are signed. Switchboard's own scheme is the default, and a tool
/// that does not name one keeps it (the field is left out when written).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SignatureScheme {
    /// `Switchboard-Timestamp` and `Switchboard-Signature: v1=<hex>`.
    #[default]
    Switchboard,
    /// `webhook-id`, `webhook-timestamp` and `webhook-signature: v1,<base64>`, verified with the
    /// official Standard Webhooks libraries; the secret is `whsec_<base64>` ([`standard`]).
    StandardWebhooks,
}

impl SignatureScheme {
    /// True for the default, which is not written out.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// Unix seconds at which the request was signed.
pub const TIMESTAMP_HEADER: &str = "Switchboard-Timestamp";
/// `v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`, possibly several, comma-separated.
pub const SIGNATURE_HEADER: &str = "Switchboard-Signature";
/// Stable across retries and redeliveries of one tool call; receivers deduplicate on it.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Switchboard-Idempotency-Key";

/// How far a timestamp may be from the receiver's clock, either way.
pub const TOLERANCE_SECS: i64 = 300;

type HmacSha256 = Hmac<Sha256>;

/// HMAC-SHA256 under `key` over `parts` joined with `.`.
fn mac(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // Unreachable fallback: HMAC takes keys of any length (long ones are hashed), so
    // `new_from_slice` never fails for it; the trait merely allows other MACs to.
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| <HmacSha256 as KeyInit>::new(&Default::default()));
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            mac.update(b".");
        }
        mac.update(part);
    }
    mac
}

/// The first of `candidates` (decoded signatures) that equals `expected`, compared in constant
/// time; `NoSignature` when there is none to compare.
fn match_any<'a>(
    expected: &HmacSha256,
    candidates: impl Iterator<Item = &'a str>,
    decode: impl Fn(&str) -> Option<Vec<u8>>,
) -> Result<(), VerifyError> {
    let mut candidates = candidates.peekable();
    if candidates.peek().is_none() {
        return Err(VerifyError::NoSignature);
    }
    for candidate in candidates {
        if let Some(tag) = decode(candidate)
            && expected.clone().verify_slice(&tag).is_ok()
        {
            return Ok(());
        }
    }
    Err(VerifyError::Mismatch)
}

/// The timestamp header as unix seconds, when it is one and within [`TOLERANCE_SECS`] of `now_unix`.
fn timestamp_within_tolerance(header: &str, now_unix: i64) -> Result<i64, VerifyError> {
    let ts = header.trim();
    if ts.is_empty() || !ts.bytes().all(|b| b.is_ascii_digit()) {
        return Err(VerifyError::MalformedTimestamp);
    }
    let timestamp: i64 = ts.parse().map_err(|_| VerifyError::MalformedTimestamp)?;
    if now_unix.abs_diff(timestamp) > TOLERANCE_SECS.unsigned_abs() {
        return Err(VerifyError::OutsideTolerance);
    }
    Ok(timestamp)
}

/// The `Switchboard-Signature` value for `body` signed at `timestamp`: `v1=<lowercase hex>`.
pub fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let tag = mac(secret, &[timestamp.to_string().as_bytes(), body]).finalize().into_bytes();
    format!("v1={}", crate::ids::lower_hex(&tag))
}

/// Why a request's signature was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the timestamp header is not a unix time in seconds")]
    MalformedTimestamp,
    #[error("the timestamp is more than five minutes away from now")]
    OutsideTolerance,
    #[error("the signature header holds no v1 signature")]
    NoSignature,
    #[error("no signature matches")]
    Mismatch,
    #[error("the message id header is missing")]
    MissingId,
}

/// Checks a received request: the timestamp is within [`TOLERANCE_SECS`] of `now_unix` and one
/// of the `v1=` signatures in `signature_header` (several during a secret rotation) matches
/// `body`. The comparison is constant-time.
pub fn verify(
    secret: &[u8],
    timestamp_header: &str,
    signature_header: &str,
    body: &[u8],
    now_unix: i64,
) -> Result<(), VerifyError> {
    let timestamp = timestamp_within_tolerance(timestamp_header, now_unix)?;
    let expected = mac(secret, &[timestamp.to_string().as_bytes(), body]);
    let candidates = signature_header.split(',').filter_map(|s| s.trim().strip_prefix("v1="));
    match_any(&expected, candidates, decode_hex)
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.as_bytes().chunks_exact(2).map(|p| Some((nibble(p[0])? << 4) | nibble(p[1])?)).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// Computed independently with Python's `hmac` module; also listed in `contracts/webhooks.md`.
    const VECTORS: &[(&str, i64, &str, &str)] = &[
        (
            "whsec_test_123",
            1_700_000_000,
            r#"{"tool":"lookup_order","arguments":{"orderId":"A-1"}}"#,
            "v1=f7d3706e7cdf2ca3c4dd276107f46c186a84aae502cd12a115221d19c947462d",
        ),
        ("s3cr3t", 1_718_000_000, "", "v1=b8a3a3dc0ccfb3612bf44e6cb5d847c6f0fa4a99deef03509cae214af1120084"),
        (
            "rotate-me-2024",
            1_735_689_600,
            r#"{"tool":"refund","arguments":{"amount":12.5,"note":"café"}}"#,
            "v1=64a2f614d4914cc8b1ceecca7ab72780bb109e4e136d66562856b1523adeab06",
        ),
    ];

    const CONTRACT: &str = include_str!("../../../contracts/webhooks.md");

    /// The rows of the contract's table under the heading `heading` (the whole line), each with
    /// `columns` cells: every cell is a backticked literal.
    pub(super) fn contract_table(heading: &str, columns: usize) -> Vec<Vec<String>> {
        let mut lines = CONTRACT.lines().skip_while(|l| *l != heading);
        assert_eq!(lines.next(), Some(heading), "the contract has a '{heading}' section");
        lines
            .take_while(|l| !l.starts_with("## "))
            .filter(|l| l.starts_with("| `"))
            .map(|line| {
                let cells: Vec<String> = line
                    .trim()
                    .trim_matches('|')
                    .split(" | ")
                    .map(|c| c.trim().strip_prefix('`').and_then(|c| c.strip_suffix('`')).expect("a backticked cell"))
                    .map(str::to_owned)
                    .collect();
                assert_eq!(cells.len(), columns, "row {line}");
                cells
            })
            .collect()
    }

    fn contract_vectors() -> Vec<(String, i64, String, String)> {
        contract_table("## Test vectors", 4)
            .into_iter()
            .map(|c| (c[0].clone(), c[1].parse().expect("timestamp"), c[2].clone(), c[3].clone()))
            .collect()
    }

    #[test]
    fn it_signs_the_fixed_test_vectors() {
        for (secret, ts, body, expected) in VECTORS {
            assert_eq!(sign(secret.as_bytes(), *ts, body.as_bytes()), *expected);
            assert_eq!(verify(secret.as_bytes(), &ts.to_string(), expected, body.as_bytes(), *ts), Ok(()));
        }
    }

    #[test]
    fn the_contract_lists_exactly_the_tested_vectors() {
        let documented = contract_vectors();
        let tested: Vec<_> =
            VECTORS.iter().map(|(s, t, b, e)| (s.to_string(), *t, b.to_string(), e.to_string())).collect();
        assert_eq!(documented, tested);
        for (secret, ts, body, expected) in &documented {
            assert_eq!(&sign(secret.as_bytes(), *ts, body.as_bytes()), expected);
        }
    }

    #[test]
    fn it_accepts_any_of_several_signatures_during_rotation() {
        let (secret, ts, body, good) = VECTORS[0];
        let other = sign(b"old-secret", ts, body.as_bytes());
        let header = format!("{other}, {good}");
        assert_eq!(verify(secret.as_bytes(), &ts.to_string(), &header, body.as_bytes(), ts), Ok(()));
        assert_eq!(verify(secret.as_bytes(), &ts.to_string(), &other, body.as_bytes(), ts), Err(VerifyError::Mismatch));
    }

    #[test]
    fn it_enforces_five_minutes_either_way() {
        let (secret, ts, body, sig) = VECTORS[0];
        let check = |now| verify(secret.as_bytes(), &ts.to_string(), sig, body.as_bytes(), now);
        assert_eq!(check(ts + 300), Ok(()));
        assert_eq!(check(ts - 300), Ok(()));
        assert_eq!(check(ts + 301), Err(VerifyError::OutsideTolerance));
        assert_eq!(check(ts - 301), Err(VerifyError::OutsideTolerance));
    }

    #[test]
    fn it_rejects_malformed_headers_and_tampered_bodies() {
        let (secret, ts, body, sig) = VECTORS[0];
        let s = secret.as_bytes();
        assert_eq!(verify(s, "soon", sig, body.as_bytes(), ts), Err(VerifyError::MalformedTimestamp));
        assert_eq!(verify(s, "-1", sig, body.as_bytes(), ts), Err(VerifyError::MalformedTimestamp));
        assert_eq!(verify(s, "", sig, body.as_bytes(), ts), Err(VerifyError::MalformedTimestamp));
        assert_eq!(verify(s, &ts.to_string(), "", body.as_bytes(), ts), Err(VerifyError::NoSignature));
        assert_eq!(verify(s, &ts.to_string(), "v0=abcd", body.as_bytes(), ts), Err(VerifyError::NoSignature));
        assert_eq!(verify(s, &ts.to_string(), "v1=zz", body.as_bytes(), ts), Err(VerifyError::Mismatch));
        assert_eq!(verify(s, &ts.to_string(), sig, b"{}", ts), Err(VerifyError::Mismatch));
        assert_eq!(verify(b"wrong", &ts.to_string(), sig, body.as_bytes(), ts), Err(VerifyError::Mismatch));
        // The timestamp is part of what is signed.
        assert_eq!(verify(s, &(ts + 1).to_string(), sig, body.as_bytes(), ts), Err(VerifyError::Mismatch));
    }
}
