//! Identifiers. Records Switchboard creates carry ULIDs (sortable by creation time); tenants and
//! conversations come from outside and are validated opaque strings.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use ulid::Ulid;

use crate::limits::MAX_EXTERNAL_ID_LEN;

macro_rules! ulid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Ulid);

        impl $name {
            /// A fresh id; monotonic within a millisecond is not promised, uniqueness is.
            pub fn generate() -> Self {
                Self(Ulid::generate())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Ulid::from_string(s).map(Self).map_err(|_| IdError::NotAUlid)
            }
        }
    };
}

ulid_id!(
    /// An agent of a tenant.
    AgentId
);
ulid_id!(
    /// A trigger of a tenant.
    TriggerId
);
ulid_id!(
    /// A custom tool of a tenant (system tools are named, not numbered).
    ToolId
);
ulid_id!(
    /// A skill of a tenant.
    SkillId
);
ulid_id!(
    /// One agent's stretch of work on one conversation.
    SessionId
);
ulid_id!(
    /// One run of the agent loop for one inbound message.
    ExecutionId
);

/// Why a string is not a valid identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("must be a ULID (26 Crockford base32 characters)")]
    NotAUlid,
    #[error("must be 1 to 63 characters of letters, digits, '-', '_' or '.' (and not '.' or '..')")]
    BadExternalId,
}

/// Checks an id minted by another system (tenant, conversation, message): short, printable and
/// safe to embed in a key such as `TENANT#<id>`, a queue group id or a URL path segment. `.` and
/// `..` are refused: as path segments, proxies and URL libraries rewrite them.
pub fn check_external_id(s: &str) -> Result<(), IdError> {
    let ok = !s.is_empty()
        && s.len() <= MAX_EXTERNAL_ID_LEN
        && s != "."
        && s != ".."
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok { Ok(()) } else { Err(IdError::BadExternalId) }
}

/// A key for a client-chosen id within its tenant, for stores whose key space is shared by every
/// tenant (a queue's deduplication ids, say): the lowercase hex SHA-256 of `<tenant>` and `<id>`
/// joined by a newline, which neither may contain. 64 characters whatever the inputs, so it fits
/// SQS's 128-character `MessageDeduplicationId`; two tenants' equal ids never share a key.
pub fn tenant_scoped_key(tenant: &TenantId, id: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(tenant.as_str().as_bytes());
    hash.update(b"\n");
    hash.update(id.as_bytes());
    lower_hex(&hash.finalize())
}

/// `bytes` as lowercase hex: the one encoder behind signatures, key hashes and scoped keys.
pub fn lower_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    out
}

/// A tenant: the unit of isolation. Every record and every request belongs to exactly one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TenantId(String);

impl TenantId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TenantId {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        check_external_id(&s)?;
        Ok(Self(s))
    }
}

impl FromStr for TenantId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::try_from(s.to_owned())
    }
}

impl From<TenantId> for String {
    fn from(t: TenantId) -> Self {
        t.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_ids_are_checked_for_key_safety() {
        assert!("t-123".parse::<TenantId>().is_ok());
        assert_eq!("".parse::<TenantId>(), Err(IdError::BadExternalId));
        assert_eq!("a#b".parse::<TenantId>(), Err(IdError::BadExternalId));
        assert_eq!("x".repeat(64).parse::<TenantId>(), Err(IdError::BadExternalId));
        // dot segments would be rewritten on their way through a URL
        assert_eq!(".".parse::<TenantId>(), Err(IdError::BadExternalId));
        assert_eq!("..".parse::<TenantId>(), Err(IdError::BadExternalId));
        assert!("a.b".parse::<TenantId>().is_ok());
        assert!("...".parse::<TenantId>().is_ok());
    }

    #[test]
    fn scoped_keys_separate_tenants_and_fit_sqs() {
        let (a, b): (TenantId, TenantId) = ("ta".parse().unwrap(), "tb".parse().unwrap());
        assert_ne!(tenant_scoped_key(&a, "evt-1"), tenant_scoped_key(&b, "evt-1"));
        assert_eq!(tenant_scoped_key(&a, "evt-1"), tenant_scoped_key(&a, "evt-1"));
        // the separator cannot be forged: "t" + "a\nx" is not a valid tenant, and ids differ
        let t: TenantId = "t".parse().unwrap();
        assert_ne!(tenant_scoped_key(&t, "a"), tenant_scoped_key(&a, ""));
        let key = tenant_scoped_key(&a, &"x".repeat(63));
        assert_eq!(key.len(), 64);
        assert!(key.bytes().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn ulid_ids_round_trip_through_text() {
        let id = AgentId::generate();
        assert_eq!(id.to_string().parse::<AgentId>(), Ok(id));
        assert_eq!("agent-1".parse::<AgentId>(), Err(IdError::NotAUlid));
    }
}
