//! The key layout (the table in the module docs of `dynamo`) and attribute helpers.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, NaiveDate, Utc};
use switchboard_domain::{AgentId, ExecutionId, ExecutionStatus, Session, SessionId, TenantId, TriggerId};
use switchboard_engine::ConfigKind;

use super::Item;

pub(super) fn tenant_pk(t: &TenantId) -> String {
    format!("TENANT#{t}")
}

pub(super) fn config_prefix(kind: ConfigKind) -> &'static str {
    match kind {
        ConfigKind::Agent => "AGENT#",
        ConfigKind::Trigger => "TRIGGER#",
        ConfigKind::Tool => "TOOL#",
        ConfigKind::Skill => "SKILL#",
    }
}

pub(super) fn config_sk(kind: ConfigKind, id: &str) -> String {
    format!("{}{id}", config_prefix(kind))
}

pub(super) fn session_sk(s: SessionId) -> String {
    format!("SESSION#{s}")
}

pub(super) fn active_sk(conversation_id: &str) -> String {
    format!("ACTIVE#{conversation_id}")
}

pub(super) fn conversation_key(t: &TenantId, conversation_id: &str) -> String {
    format!("TENANT#{t}#CONV#{conversation_id}")
}

/// Millisecond UTC time that sorts as text.
pub(super) fn sortable(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// Sessions of a conversation sort by start; a handed-to session started in the same
/// millisecond as its parent still sorts after it (depth), then by id.
pub(super) fn start_key(s: &Session) -> String {
    format!("{}#{:03}#{}", sortable(s.started_at), s.handoff_depth, s.session_id)
}

pub(super) fn execution_pk(s: SessionId) -> String {
    format!("SESSION#{s}")
}

/// The timestamp is the id's own (its creation time), so records sort exactly as their ids do,
/// which is the order the embedded store lists them in.
pub(super) fn execution_sk(e: ExecutionId) -> String {
    let ms = i64::try_from(e.0.timestamp_ms()).unwrap_or(i64::MAX);
    let at = DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MIN_UTC);
    format!("EXEC#{}#{e}", sortable(at))
}

pub(super) fn source_sk(source_id: &str) -> String {
    format!("SOURCE#{source_id}")
}

pub(super) fn execution_id_sk(e: ExecutionId) -> String {
    format!("EXECID#{e}")
}

/// The partition of a tenant's daily usage (executions table).
pub(super) fn usage_pk(t: &TenantId) -> String {
    format!("TENANT#{t}#USAGE")
}

/// How many items one day's usage of an agent and model is spread over, so that a busy tenant's
/// turns rarely write the same item at once (a transaction conflict costs a retry).
pub(super) const USAGE_SHARDS: u128 = 16;

/// `DAY#<day>#<agent>#<model>#<shard>`: sorts by day, then agent, then model. Agent ids are
/// ULIDs (no `#`), so the model is everything between the agent and the shard.
pub(super) fn usage_sk(day: NaiveDate, agent: AgentId, model: &str, shard: u128) -> String {
    format!("DAY#{day}#{agent}#{model}#{shard:02}")
}

/// `HOUR#<YYYY-MM-DDTHH>#<status>#<shard>`, beside the usage items: sorts by hour, then status.
pub(super) fn activity_sk(hour: DateTime<Utc>, status: ExecutionStatus, shard: u128) -> String {
    format!("HOUR#{}#{}#{shard:02}", hour.format("%Y-%m-%dT%H"), status.as_str())
}

/// `SPLIT#<YYYY-MM-DDTHH>#<trigger>#<variant>#<status>#<shard>`, beside the activity items: a
/// traffic-split variant's executions of a status in an hour. Variant names have no `#`.
pub(super) fn split_sk(
    hour: DateTime<Utc>,
    trigger: TriggerId,
    variant: &str,
    status: ExecutionStatus,
    shard: u128,
) -> String {
    format!("SPLIT#{}#{trigger}#{variant}#{}#{shard:02}", hour.format("%Y-%m-%dT%H"), status.as_str())
}

/// TTL value: epoch seconds, rounded up so that DynamoDB never deletes a record before it expires.
pub(super) fn ttl_seconds(t: DateTime<Utc>) -> i64 {
    let s = t.timestamp();
    if t.timestamp_subsec_nanos() > 0 { s.saturating_add(1) } else { s }
}

pub(super) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(super) fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(super) fn key(pk: String, sk: String) -> Item {
    HashMap::from([("PK".to_owned(), s(pk)), ("SK".to_owned(), s(sk))])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_rounds_up_so_nothing_is_deleted_early() {
        let t: DateTime<Utc> = "2026-11-23T07:00:00.250Z".parse().unwrap_or_default();
        assert_eq!(ttl_seconds(t), t.timestamp() + 1);
        let whole: DateTime<Utc> = "2026-11-23T07:00:00Z".parse().unwrap_or_default();
        assert_eq!(ttl_seconds(whole), whole.timestamp());
    }

    #[test]
    fn execution_keys_sort_like_their_ids() {
        let a = ExecutionId(ulid::Ulid::from_parts(1_000, 99));
        let b = ExecutionId(ulid::Ulid::from_parts(1_001, 1));
        assert!(a < b);
        assert!(execution_sk(a) < execution_sk(b));
        assert!(execution_sk(a).starts_with("EXEC#1970-01-01T00:00:01.000Z#"));
    }
}
