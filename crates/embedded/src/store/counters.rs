//! Tenant counters in SQLite: one row per tenant and window, changed by single upserts (SQLite
//! runs one writer at a time, so a count never passes its limit). A tenant's expired rows are
//! deleted as its new ones are written. Session slots are rows of `session_slots`, taken and
//! freed in one transaction each (the only connection serialises them).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};
use switchboard_domain::{OutboundEvent, TenantId};
use switchboard_engine::{Admit, Counters, Slot, SlotAndCount, StoreError};

use super::{SqliteStore, store_err};
use crate::db::{DbError, atomic};

#[async_trait]
impl Counters for SqliteStore {
    async fn take(
        &self,
        tenant: &TenantId,
        window: &str,
        limit: u64,
        expires: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let (t, w, now) = (tenant.to_string(), window.to_owned(), self.clock.now().timestamp_millis());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let expires = expires.timestamp_millis();
        self.db
            .call(move |c| {
                let tx = atomic(c)?;
                let counted = take_in(&tx, &t, &w, now, expires, limit)?;
                tx.commit()?;
                Ok(counted)
            })
            .await
            .map_err(store_err)
    }

    async fn first(
        &self,
        tenant: &TenantId,
        window: &str,
        expires: DateTime<Utc>,
        announce: &OutboundEvent,
    ) -> Result<bool, StoreError> {
        let (t, w, expires) = (tenant.to_string(), window.to_owned(), expires.timestamp_millis());
        let body = serde_json::to_string(announce).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let (id, kind, at) = (announce.id.clone(), announce.detail_type.clone(), self.clock.now().to_rfc3339());
        self.db
            .call(move |c| {
                let tx = atomic(c)?;
                let changed = tx
                    .prepare_cached(
                        "INSERT INTO tenant_counters (tenant_id, window_key, count, notified, expires_ms)
                         VALUES (?1, ?2, 0, 1, ?3)
                         ON CONFLICT (tenant_id, window_key) DO UPDATE SET notified = 1 WHERE notified = 0",
                    )?
                    .execute(params![t, w, expires])?;
                if changed == 1 {
                    tx.prepare_cached(super::events::LOG_EVENT)?.execute(params![id, t, kind, body, at])?;
                }
                tx.commit()?;
                Ok(changed == 1)
            })
            .await
            .map_err(store_err)
    }

    async fn hold_slot(
        &self,
        tenant: &TenantId,
        conversation: &str,
        limit: u64,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Slot, StoreError> {
        let (t, conv) = (tenant.to_string(), conversation.to_string());
        let (now, until) = (now.timestamp_millis(), until.timestamp_millis());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (slot, frees_at) = self
            .db
            .call(move |c| {
                let tx = atomic(c)?;
                let held = hold_in(&tx, &t, &conv, limit, now, until)?;
                if held.0.is_some() {
                    tx.commit()?;
                }
                Ok(held)
            })
            .await
            .map_err(store_err)?;
        Ok(match slot {
            Some(new) => Slot::Held { new },
            None => Slot::Full { frees_at: self.instant(frees_at) },
        })
    }

    async fn release_slot(&self, tenant: &TenantId, conversation: &str) -> Result<(), StoreError> {
        let (t, conv) = (tenant.to_string(), conversation.to_string());
        self.db.call(move |c| release_in(c, &t, &conv)).await.map_err(store_err)
    }

    fn sees_human_owner(&self) -> bool {
        true
    }

    /// Both in one database call and one savepoint: a slot taken for a count that is refused
    /// is given back before anyone sees it. With `unless_human`, the conversation's owner is
    /// read first in the same call.
    async fn hold_slot_and_take(&self, ask: &SlotAndCount<'_>) -> Result<Admit, StoreError> {
        let counts = self.counts(ask);
        let taken = self
            .db
            .call(move |c| {
                let tx = atomic(c)?;
                let taken = counts.take(&tx)?;
                // Full: nothing kept, not even the idle slots freed on the way (they stay held).
                if !matches!(taken, Taken::SessionsFull(_)) {
                    tx.commit()?;
                }
                Ok(taken)
            })
            .await
            .map_err(store_err)?;
        self.admit_of(taken)
    }
}

/// An admission's counts, to take in a database call ([`Counts::take`]).
#[derive(Debug)]
pub(crate) struct Counts {
    tenant: String,
    conversation: String,
    window: String,
    now: i64,
    until: i64,
    expires: i64,
    sessions: i64,
    limit: i64,
    counted_at: i64,
    unless_human: bool,
}

impl Counts {
    /// Renews or takes the conversation's slot, then counts one in the window (a slot taken
    /// for a count that is refused is given back). With `unless_human`, the conversation's owner
    /// is read first. No savepoint of its own: the caller keeps the writes or undoes them (all
    /// of them when every slot is held).
    pub(crate) fn take(&self, c: &Connection) -> Result<Taken, DbError> {
        let (t, conv) = (self.tenant.as_str(), self.conversation.as_str());
        if self.unless_human
            && let Some(owner) = human_owner(c, t, conv)?
        {
            return Ok(Taken::Human(owner.0, owner.1));
        }
        let (slot, frees_at) = hold_in(c, t, conv, self.sessions, self.now, self.until)?;
        let Some(new) = slot else {
            return Ok(Taken::SessionsFull(frees_at));
        };
        let counted = take_in(c, t, &self.window, self.counted_at, self.expires, self.limit)?;
        if !counted && new {
            release_in(c, t, conv)?;
        }
        Ok(Taken::Counted(counted))
    }
}

impl SqliteStore {
    /// What [`Counters::hold_slot_and_take`] takes for `ask`, to take inside another database
    /// call (the embedded intake takes them with the enqueue: see `crate::runtime`); its answer
    /// is [`SqliteStore::admit_of`] what [`Counts::take`] found.
    pub(crate) fn counts(&self, ask: &SlotAndCount<'_>) -> Counts {
        Counts {
            tenant: ask.tenant.to_string(),
            conversation: ask.conversation.to_owned(),
            window: ask.window.to_owned(),
            now: ask.now.timestamp_millis(),
            until: ask.until.timestamp_millis(),
            expires: ask.expires.timestamp_millis(),
            sessions: i64::try_from(ask.sessions).unwrap_or(i64::MAX),
            limit: i64::try_from(ask.limit).unwrap_or(i64::MAX),
            counted_at: self.clock.now().timestamp_millis(),
            unless_human: ask.unless_human,
        }
    }

    /// What [`Counts::take`] found, as the counters answer it.
    pub(crate) fn admit_of(&self, taken: Taken) -> Result<Admit, StoreError> {
        Ok(match taken {
            Taken::Counted(true) => Admit::Counted,
            Taken::Counted(false) => Admit::CountFull { took_slot: false },
            Taken::SessionsFull(frees_at) => Admit::SessionsFull { frees_at: self.instant(frees_at) },
            Taken::Human(session, agent) => {
                let bad = |what: &str| StoreError::Corrupt(format!("session row holds a bad {what}"));
                let session_id = session.parse().map_err(|_| bad("session id"))?;
                let agent_id = agent.parse().map_err(|_| bad("agent id"))?;
                Admit::HumanOwned { session_id, agent_id }
            }
        })
    }
}

/// What one admission's counts found.
#[derive(Debug)]
pub(crate) enum Taken {
    Counted(bool),
    SessionsFull(Option<i64>),
    /// The human's session and the agent it came from.
    Human(String, String),
}

/// The session and agent through which a human operator owns the conversation, if one does: the
/// conversation's newest session (its active one first), as `SessionStore::latest_session`
/// picks it, handed off to a human.
fn human_owner(c: &Connection, t: &str, conv: &str) -> Result<Option<(String, String)>, DbError> {
    let owner =
        c.prepare_cached(HUMAN_OWNER)?.query_row(params![t, conv], |r| Ok((r.get(0)?, r.get(1)?))).optional()?;
    Ok(owner)
}

/// See [`human_owner`]. Parameters cast (see `crate::db`, "Plans that stay").
pub(crate) const HUMAN_OWNER: &str = "SELECT session_id, json_extract(body, '$.agentId') FROM (
         SELECT session_id, status, body FROM sessions
         WHERE tenant_id = CAST(?1 AS TEXT) AND conversation_id = CAST(?2 AS TEXT)
         ORDER BY (status = 'active') DESC, seq DESC LIMIT 1)
     WHERE status = 'handed_off' AND json_extract(body, '$.handedOffTo.type') = 'human'";

impl SqliteStore {
    /// A stored instant in milliseconds; now when there is none.
    fn instant(&self, millis: Option<i64>) -> DateTime<Utc> {
        millis.and_then(DateTime::from_timestamp_millis).unwrap_or_else(|| self.clock.now())
    }
}

/// Counts one in the tenant's `window` unless it reached `limit`; prunes the tenant's expired
/// windows first.
fn take_in(tx: &Connection, t: &str, w: &str, now: i64, expires: i64, limit: i64) -> Result<bool, DbError> {
    tx.prepare_cached("DELETE FROM tenant_counters WHERE tenant_id = ?1 AND expires_ms < ?2")?
        .execute(params![t, now])?;
    // Inserting counts 1 (every limit is at least 1); an existing row counts on only while under
    // the limit. No row changed: the limit is reached.
    let changed = tx
        .prepare_cached(
            "INSERT INTO tenant_counters (tenant_id, window_key, count, notified, expires_ms)
             VALUES (?1, ?2, 1, 0, ?3)
             ON CONFLICT (tenant_id, window_key) DO UPDATE SET count = count + 1 WHERE count < ?4",
        )?
        .execute(params![t, w, expires, limit])?;
    Ok(changed == 1)
}

/// Renews or takes the conversation's slot: `(Some(new), _)` when held, `(None, first)` when
/// every slot is held, `first` being the earliest `held_until`. Nothing must be committed when
/// full (the idle slots it freed stay held).
fn hold_in(
    tx: &Connection,
    t: &str,
    conv: &str,
    limit: i64,
    now: i64,
    until: i64,
) -> Result<(Option<bool>, Option<i64>), DbError> {
    let renewed = tx
        .prepare_cached("UPDATE session_slots SET held_until_ms = ?3 WHERE tenant_id = ?1 AND conversation_id = ?2")?
        .execute(params![t, conv, until])?;
    if renewed == 1 {
        return Ok((Some(false), None));
    }
    // Kept by the slots' triggers (schema step `SLOT_COUNTS`): one row, however many are held.
    let count = || -> rusqlite::Result<i64> {
        let held = tx
            .prepare_cached("SELECT held FROM session_slot_counts WHERE tenant_id = ?1")?
            .query_row(params![t], |r| r.get(0))
            .optional()?;
        Ok(held.unwrap_or(0))
    };
    let mut held = count()?;
    if held >= limit {
        tx.prepare_cached("DELETE FROM session_slots WHERE tenant_id = ?1 AND held_until_ms <= ?2")?
            .execute(params![t, now])?;
        held = count()?;
    }
    if held >= limit {
        let first: Option<i64> = tx
            .prepare_cached("SELECT min(held_until_ms) FROM session_slots WHERE tenant_id = ?1")?
            .query_row(params![t], |r| r.get(0))?;
        return Ok((None, first));
    }
    tx.prepare_cached("INSERT INTO session_slots (tenant_id, conversation_id, held_until_ms) VALUES (?1, ?2, ?3)")?
        .execute(params![t, conv, until])?;
    Ok((Some(true), None))
}

fn release_in(c: &Connection, t: &str, conv: &str) -> Result<(), DbError> {
    c.prepare_cached("DELETE FROM session_slots WHERE tenant_id = ?1 AND conversation_id = ?2")?
        .execute(params![t, conv])?;
    Ok(())
}
