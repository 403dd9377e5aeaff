//! The queue's statements, run on the database thread inside the caller's transaction or a
//! unit of their own: enqueue, receive (dead-lettering on the way), ack, the group heads they
//! keep. No wake-ups and no waiting here: that is `SqliteWorkQueue`'s part.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};
use switchboard_engine::{Clock, Enqueued};
use ulid::Ulid;

use crate::db::{DbError, atomic};

/// The oldest dead letters, at most `?1`.
pub(crate) const DEAD_LETTERS: &str = "SELECT group_id, dedup_id, body, receive_count, enqueued_at, dead_at
     FROM queue_dead_letters ORDER BY id LIMIT CAST(?1 AS INTEGER)";

/// A received item. `receipt` acks or releases it until the item is received again.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub receipt: String,
    pub group_id: String,
    pub dedup_id: String,
    pub body: String,
    /// Including this delivery.
    pub receive_count: u32,
    pub enqueued_at: DateTime<Utc>,
}

/// The queue's settings in the units its rows use.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) visibility_ms: i64,
    pub(super) dedup_ms: i64,
    pub(super) max_receives: u32,
}

/// What one receive transaction did.
#[derive(Debug)]
pub(super) struct Received {
    pub(super) delivery: Option<Delivery>,
    pub(super) dead: Vec<(String, String)>,
}

/// What one enqueue transaction did: whether the item is new, whether it became its group's
/// head, what was received for a waiting worker, and the caller's own write.
pub(super) struct Enqueue<T> {
    pub(super) outcome: Enqueued,
    pub(super) head: bool,
    pub(super) received: Option<Received>,
    pub(super) done: T,
}

/// Enqueues `(group, dedup id, body)` at `now` in its own unit, with the caller's write `with`
/// (told whether the item is new; `Err(stop)` writes nothing); a new head is received at once
/// when `receive_for_waiting` says a worker waits for it.
pub(super) fn enqueue_in<T, S>(
    conn: &mut Connection,
    now: i64,
    limits: Limits,
    (group_id, dedup_id, body): (&str, &str, &str),
    with: impl FnOnce(&Connection, bool) -> Result<Result<T, S>, DbError>,
    receive_for_waiting: impl FnOnce() -> bool,
) -> Result<Result<Enqueue<T>, S>, DbError> {
    let tx = atomic(conn)?;
    tx.prepare_cached("DELETE FROM queue_dedup WHERE expires_at <= ?1")?.execute([now])?;
    let fresh = tx
        .prepare_cached(
            "INSERT INTO queue_dedup (dedup_id, expires_at) VALUES (?1, ?2)
             ON CONFLICT (dedup_id) DO NOTHING",
        )?
        .execute(params![dedup_id, now.saturating_add(limits.dedup_ms)])?;
    // Dropped without its commit, the savepoint rolls back.
    let done = match with(&tx, fresh == 1)? {
        Ok(done) => done,
        Err(stop) => return Ok(Err(stop)),
    };
    if fresh == 0 {
        // Expired records were pruned just above, so the one left is in the window.
        // Committing keeps that pruning.
        tx.commit()?;
        return Ok(Ok(Enqueue { outcome: Enqueued::Duplicate, head: false, received: None, done }));
    }
    tx.prepare_cached(
        "INSERT INTO queue_items (group_id, dedup_id, body, enqueued_at)
         VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![group_id, dedup_id, body, now])?;
    let seq = tx.last_insert_rowid();
    let head = tx
        .prepare_cached(
            "INSERT INTO queue_groups (group_id, head_seq, visible_at, state)
             VALUES (?1, ?2, ?3, 'ready')
             ON CONFLICT (group_id) DO NOTHING",
        )?
        .execute(params![group_id, seq, now])?
        == 1;
    // A new head with a worker waiting: received here, for that worker, so that it
    // needs no database call of its own to take it.
    let received = match head && receive_for_waiting() {
        true => Some(receive_in(&tx, now, limits)?),
        false => None,
    };
    tx.commit()?;
    Ok(Ok(Enqueue { outcome: Enqueued::Queued, head, received, done }))
}

/// Deletes the item `receipt` holds and advances its group; false if the receipt is stale.
pub(super) fn ack_in(conn: &mut Connection, receipt: &str) -> Result<bool, DbError> {
    let tx = atomic(conn)?;
    let Some((seq, group_id)) = held_by(&tx, receipt)? else {
        return Ok(false);
    };
    tx.prepare_cached("DELETE FROM queue_items WHERE seq = ?1")?.execute([seq])?;
    advance_head(&tx, &group_id)?;
    tx.commit()?;
    Ok(true)
}

/// One receive, in its own savepoint, at the clock's now.
pub(super) fn receive_now(conn: &mut Connection, clock: &dyn Clock, limits: Limits) -> Result<Received, DbError> {
    let now = clock.now().timestamp_millis();
    let tx = atomic(conn)?;
    let received = receive_in(&tx, now, limits)?;
    tx.commit()?;
    Ok(received)
}

/// Delivers the next head, dead-lettering the heads that ran out of receives on the way.
pub(super) fn receive_in(tx: &Connection, now: i64, limits: Limits) -> Result<Received, DbError> {
    let mut dead = Vec::new();
    loop {
        let head: Option<(String, i64)> = tx
            .prepare_cached(
                "SELECT group_id, head_seq FROM queue_groups
                 WHERE visible_at <= ?1 ORDER BY visible_at, head_seq LIMIT 1",
            )?
            .query_row([now], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let Some((group_id, seq)) = head else {
            return Ok(Received { delivery: None, dead });
        };
        let item: Option<(String, String, u32, i64)> = tx
            .prepare_cached("SELECT dedup_id, body, receive_count, enqueued_at FROM queue_items WHERE seq = ?1")?
            .query_row([seq], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .optional()?;
        let Some((dedup_id, body, receive_count, enqueued_at)) = item else {
            // A head row outliving its item can only come from a hand-edited file; repair it
            // rather than block the group forever.
            advance_head(tx, &group_id)?;
            continue;
        };
        if receive_count >= limits.max_receives {
            tx.prepare_cached(
                "INSERT INTO queue_dead_letters
                     (group_id, dedup_id, body, receive_count, enqueued_at, dead_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![group_id, dedup_id, body, receive_count, enqueued_at, now])?;
            tx.prepare_cached("DELETE FROM queue_items WHERE seq = ?1")?.execute([seq])?;
            advance_head(tx, &group_id)?;
            dead.push((group_id, dedup_id));
            continue;
        }
        let receipt = format!("{seq}.{}", Ulid::generate());
        let receive_count = receive_count.saturating_add(1);
        tx.prepare_cached("UPDATE queue_items SET receive_count = ?2, receipt = ?3 WHERE seq = ?1")?
            .execute(params![seq, receive_count, receipt])?;
        tx.prepare_cached("UPDATE queue_groups SET visible_at = ?2, state = 'in_flight' WHERE group_id = ?1")?
            .execute(params![group_id, now.saturating_add(limits.visibility_ms)])?;
        return Ok(Received {
            delivery: Some(Delivery {
                receipt,
                group_id,
                dedup_id,
                body,
                receive_count,
                enqueued_at: time(enqueued_at)?,
            }),
            dead,
        });
    }
}

/// Whether any item is queued (ready, in flight or delayed). Every queued item belongs to a
/// group with a row, so this needs no count.
pub(super) fn any_queued(conn: &Connection) -> Result<bool, DbError> {
    Ok(conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM queue_groups)")?.query_row([], |r| r.get(0))?)
}

/// The item (seq, group) whose current receipt is `receipt`, if any (a receipt that is not of
/// the form this queue gives out holds nothing).
pub(super) fn held_by(tx: &Connection, receipt: &str) -> Result<Option<(i64, String)>, DbError> {
    let Some(seq) = receipt.split_once('.').and_then(|(seq, _)| seq.parse::<i64>().ok()) else {
        return Ok(None);
    };
    Ok(tx
        .prepare_cached("SELECT seq, group_id FROM queue_items WHERE seq = ?1 AND receipt = ?2")?
        .query_row(params![seq, receipt], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?)
}

/// A group's oldest item. The parameter is cast (see `crate::db`, "Plans that stay").
pub(crate) const NEXT_IN_GROUP: &str =
    "SELECT seq, enqueued_at FROM queue_items WHERE group_id = CAST(?1 AS TEXT) ORDER BY seq LIMIT 1";

/// Up to `max` bodies queued in `group_id` behind the item of `dedup_id`, in order (none when
/// that item is not queued).
pub(super) fn bodies_behind(c: &Connection, group_id: &str, dedup_id: &str, max: i64) -> Result<Vec<String>, DbError> {
    let mut stmt = c.prepare_cached(
        "SELECT body FROM queue_items
          WHERE group_id = ?1 AND seq > (SELECT seq FROM queue_items WHERE group_id = ?1 AND dedup_id = ?2)
          ORDER BY seq LIMIT ?3",
    )?;
    let bodies = stmt.query_map(params![group_id, dedup_id, max], |r| r.get(0))?.collect::<Result<Vec<String>, _>>()?;
    Ok(bodies)
}

/// Makes the group's oldest remaining item its head, or forgets the group when it is empty.
pub(super) fn advance_head(tx: &Connection, group_id: &str) -> Result<(), DbError> {
    let next: Option<(i64, i64)> =
        tx.prepare_cached(NEXT_IN_GROUP)?.query_row([group_id], |r| Ok((r.get(0)?, r.get(1)?))).optional()?;
    match next {
        // The new head has been waiting since it was enqueued, so it sorts by its age.
        Some((seq, enqueued_at)) => tx
            .prepare_cached(
                "UPDATE queue_groups SET head_seq = ?2, visible_at = ?3, state = 'ready'
                 WHERE group_id = ?1",
            )?
            .execute(params![group_id, seq, enqueued_at])?,
        None => tx.prepare_cached("DELETE FROM queue_groups WHERE group_id = ?1")?.execute([group_id])?,
    };
    Ok(())
}

/// Drops a tenant's queued, delayed and dead-lettered work (its groups are
/// `<tenant>:<conversation>`), within the caller's transaction. An item a worker holds is gone
/// too: its ack then finds nothing. The deduplication ids (hashes, kept until they expire) stay.
pub(crate) fn forget_tenant(tx: &Connection, tenant: &str) -> Result<(), rusqlite::Error> {
    // A prefix compare, not LIKE: `_` is a wildcard there and may be in a tenant id.
    let prefix = format!("{tenant}:");
    for sql in [
        "DELETE FROM queue_items WHERE substr(group_id, 1, length(?1)) = ?1",
        "DELETE FROM queue_groups WHERE substr(group_id, 1, length(?1)) = ?1",
        "DELETE FROM queue_dead_letters WHERE substr(group_id, 1, length(?1)) = ?1",
    ] {
        tx.prepare_cached(sql)?.execute(params![prefix])?;
    }
    Ok(())
}

pub(super) fn time(ms: i64) -> Result<DateTime<Utc>, rusqlite::Error> {
    DateTime::from_timestamp_millis(ms).ok_or(rusqlite::Error::IntegralValueOutOfRange(0, ms))
}
