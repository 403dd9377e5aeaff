//! Sessions due to close as abandoned (`switchboard_engine`'s idle sweep): the sessions table's
//! sparse GSI `SessionsIdle`, partition `idleShard` (`IDLE#<0..15>`, from the session id's random
//! bits, so that a busy tenant's turns, each of which moves its session's entry, spread over
//! sixteen partitions), sort `idleAt` (millisecond UTC text), keys only. Only a session whose
//! [`Session::idle_due`] is set carries the two: written with the session item, gone when a later
//! put leaves them out. A tick reads each shard's entries due, oldest first.

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use switchboard_domain::Session;
use switchboard_engine::{IdleSession, StoreError};

use super::codec::attr_s;
use super::keys::{s, sortable};
use super::page::paginate;
use super::{DynamoStore, Item};

/// The name of the sessions table's sparse index of sessions due to close when idle.
pub const SESSIONS_IDLE: &str = "SessionsIdle";
const IDLE_SHARD: &str = "idleShard";
const IDLE_AT: &str = "idleAt";
const IDLE_SHARDS: u128 = 16;

/// The index's two keys for `session`, if it is due to close when idle.
pub(super) fn idle_keys(session: &Session) -> Option<[(String, AttributeValue); 2]> {
    let at = session.idle_due()?;
    let shard = session.session_id.0.random() % IDLE_SHARDS;
    Some([(IDLE_SHARD.into(), s(format!("IDLE#{shard}"))), (IDLE_AT.into(), s(sortable(at)))])
}

impl DynamoStore {
    /// The sessions due at `now`, the longest idle first, at most `limit`: each shard's oldest
    /// (eventually consistent: the caller reads each session again).
    pub(super) async fn due_idle_sessions(
        &self,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<IdleSession>, StoreError> {
        let mut due: Vec<(String, IdleSession)> = Vec::new();
        for shard in 0..IDLE_SHARDS {
            let query = self
                .client
                .query()
                .table_name(&self.names.sessions_table)
                .index_name(SESSIONS_IDLE)
                .key_condition_expression("#shard = :shard AND #at <= :now")
                .expression_attribute_names("#shard", IDLE_SHARD)
                .expression_attribute_names("#at", IDLE_AT)
                .expression_attribute_values(":shard", s(format!("IDLE#{shard}")))
                .expression_attribute_values(":now", s(sortable(now)));
            due.extend(paginate(query, None).take(limit, |item| idle_session(&item).map(Some)).await?);
        }
        due.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(due.into_iter().take(limit).map(|(_, session)| session).collect())
    }
}

/// An index entry: when it is due, and the tenant and session from the table's keys.
fn idle_session(item: &Item) -> Result<(String, IdleSession), StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("an idle session entry with a bad {what}"));
    let tenant = attr_s(item, "PK")?.strip_prefix("TENANT#").ok_or_else(|| corrupt("PK"))?;
    let session = attr_s(item, "SK")?.strip_prefix("SESSION#").ok_or_else(|| corrupt("SK"))?;
    let idle = IdleSession {
        tenant_id: tenant.parse().map_err(|_| corrupt("tenant id"))?,
        session_id: session.parse().map_err(|_| corrupt("session id"))?,
    };
    Ok((attr_s(item, IDLE_AT)?.to_owned(), idle))
}
