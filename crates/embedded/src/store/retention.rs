//! What the retention sweep reads and deletes: each kind's oldest rows, a bounded batch per
//! database call, and the incremental vacuum that hands the freed pages back to the file system.
//! Which rows are due is decided here from a cutoff the caller gives; the periods, the archive
//! and the loop over batches are `crate::retention`'s.
//!
//! Execution records, the event log and the conversation log are read in row order: their rows
//! are numbered in the order they were written, which is (up to a turn's length) the order they
//! come due in, so a sweep reads the rows it deletes and at most a batch more. Sessions are found
//! through `sessions_by_update` (schema step 14), which holds only the sessions that are not
//! active.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, params};
use serde_json::{Value, json};
use switchboard_domain::archive::ArchiveKind;
use switchboard_domain::limits::CONTENT_TTL_DAYS;
use switchboard_engine::StoreError;

use super::{SqliteStore, from_json, store_err};
use crate::db::DbError;

/// Where a kind's next batch starts: after the row `seq` (sessions: after (`updated_ms`, `seq`)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub updated_ms: i64,
    pub seq: i64,
}

impl Cursor {
    pub const START: Cursor = Cursor { updated_ms: i64::MIN, seq: i64::MIN };
}

/// A row that is due: what its delete checks, and the record the archive gets.
#[derive(Debug, Clone, PartialEq)]
pub struct DueRow {
    /// Its number in its table (the archive's sequence number).
    pub seq: i64,
    pub tenant: String,
    /// The execution, session, event or message id.
    pub id: String,
    /// A session's version: one written since it was read is not deleted.
    pub version: i64,
    /// The record as the archive keeps it, when asked for.
    pub record: Option<Value>,
}

/// One batch: the due rows among those read, how many were read, and where the next starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub due: Vec<DueRow>,
    pub read: usize,
    pub next: Cursor,
}

/// The database file's pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pages {
    /// Pages in the file (`PRAGMA page_count`), free ones included.
    pub count: u64,
    /// Pages on the free list (`PRAGMA freelist_count`), which the file keeps until a vacuum.
    pub free: u64,
    pub size: u64,
}

impl Pages {
    pub fn bytes(&self) -> u64 {
        self.count.saturating_mul(self.size)
    }
}

/// Execution records in row order after `?1`, at most `?2`; the body when `?3`.
const EXECUTIONS: &str = "SELECT rowid, tenant_id, execution_id, expires_at, CASE WHEN ?3 THEN body END
     FROM executions WHERE rowid > ?1 ORDER BY rowid LIMIT ?2";

/// Recorded content in row order after `?1`, at most `?2`; the body when `?3`.
const CONTENT: &str = "SELECT seq, tenant_id, sha256, expires_at, session_id, CASE WHEN ?3 THEN body END
     FROM content WHERE seq > ?1 ORDER BY seq LIMIT ?2";

/// Sessions that are not active and were last written before `?3`, after (`?1`, `?2`) in the
/// order of `sessions_by_update`, at most `?4`; the body when `?5`. `owns`: a session handed to
/// a human and still its conversation's newest, through which the human owns the conversation
/// (the body is read only for a session handed off).
const SESSIONS: &str = "SELECT seq, tenant_id, session_id, version, updated_ms,
            CASE WHEN status <> 'handed_off' THEN 0
                 WHEN json_extract(body, '$.handedOffTo.type') IS NOT 'human' THEN 0
                 WHEN EXISTS (SELECT 1 FROM sessions n
                              WHERE n.tenant_id = s.tenant_id AND n.conversation_id = s.conversation_id
                                AND n.seq > s.seq) THEN 0
                 ELSE 1 END AS owns,
            CASE WHEN ?5 THEN body END
     FROM sessions s INDEXED BY sessions_by_update
     WHERE status <> 'active' AND updated_ms < ?3 AND (updated_ms, seq) > (?1, ?2)
     ORDER BY updated_ms, seq LIMIT ?4";

/// The event log in row order after `?1`, at most `?2`; the body when `?3`.
const EVENTS: &str = "SELECT seq, tenant_id, event_id, created_at, CASE WHEN ?3 THEN body END
     FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2";

/// The conversation log in row order after `?1`, at most `?2`.
const MESSAGES: &str = "SELECT seq, tenant_id, message_id, created_at, conversation_id, direction, text,
            idempotency_key, COALESCE(sender,
              CASE WHEN direction = 'inbound' THEN 'customer' WHEN idempotency_key IS NULL THEN 'human' ELSE 'agent' END)
     FROM messages WHERE seq > ?1 ORDER BY seq LIMIT ?2";

impl SqliteStore {
    /// The next batch of `kind`'s rows after `after`, at most `limit`, and which of them are due:
    /// execution records whose `expiresAt` is before `due_ms`; sessions, events and messages
    /// written before `due_ms` (sessions: last written; never one that is active, or one through
    /// which a human operator owns its conversation). With `records`, each due row's record as
    /// the archive keeps it.
    pub async fn retention_batch(
        &self,
        kind: ArchiveKind,
        after: Cursor,
        due_ms: i64,
        limit: usize,
        records: bool,
    ) -> Result<Batch, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let raw = self
            .db
            .call(move |c| match kind {
                ArchiveKind::Executions => executions(c, after, due_ms, limit, records),
                ArchiveKind::Sessions => sessions(c, after, due_ms, limit, records),
                ArchiveKind::Events => events(c, after, due_ms, limit, records),
                ArchiveKind::Messages => messages(c, after, due_ms, limit, records),
                ArchiveKind::Content => content(c, after, due_ms, limit, records),
            })
            .await
            .map_err(store_err)?;
        let mut due = Vec::with_capacity(raw.due.len());
        for row in raw.due {
            let record = match (row.body, row.record) {
                (Some(body), _) => Some(from_json::<Value>(&body)?),
                (None, record) => record,
            };
            due.push(DueRow { seq: row.seq, tenant: row.tenant, id: row.id, version: row.version, record });
        }
        Ok(Batch { due, read: raw.read, next: raw.next })
    }

    /// Deletes `rows` of `kind` (read by [`SqliteStore::retention_batch`]) in one database call,
    /// each only if it is still the row that was read (a session: at the version read, and
    /// still not active); how many were deleted.
    pub async fn retention_delete(&self, kind: ArchiveKind, rows: Vec<DueRow>) -> Result<usize, StoreError> {
        let sql = match kind {
            ArchiveKind::Executions => {
                "DELETE FROM executions WHERE rowid = ?1 AND tenant_id = ?2 AND execution_id = ?3"
            }
            ArchiveKind::Sessions => {
                "DELETE FROM sessions WHERE seq = ?1 AND tenant_id = ?2 AND session_id = ?3 AND version = ?4
                   AND status <> 'active'"
            }
            ArchiveKind::Events => "DELETE FROM events WHERE seq = ?1 AND tenant_id = ?2 AND event_id = ?3",
            ArchiveKind::Messages => "DELETE FROM messages WHERE seq = ?1 AND tenant_id = ?2 AND message_id = ?3",
            // Kept when a turn wrote it again since it was read (its expiry moved on).
            ArchiveKind::Content => {
                "DELETE FROM content WHERE seq = ?1 AND tenant_id = ?2 AND sha256 = ?3 AND expires_at = ?4"
            }
        };
        let versioned = matches!(kind, ArchiveKind::Sessions | ArchiveKind::Content);
        self.db
            .call(move |c| {
                let mut stmt = c.prepare_cached(sql)?;
                let mut deleted = 0;
                for row in &rows {
                    deleted += if versioned {
                        stmt.execute(params![row.seq, row.tenant, row.id, row.version])?
                    } else {
                        stmt.execute(params![row.seq, row.tenant, row.id])?
                    };
                }
                Ok(deleted)
            })
            .await
            .map_err(store_err)
    }

    /// Hands up to `pages` free pages back to the file system (`PRAGMA incremental_vacuum`: the
    /// file's last pages move into free ones and the file is cut short at the next checkpoint),
    /// in one database call; the pages moved, and the file's pages after. Moves nothing in a
    /// database without `auto_vacuum = INCREMENTAL` (see `crate::db`).
    pub async fn vacuum_step(&self, pages: u32) -> Result<(u64, Pages), StoreError> {
        self.db
            .call(move |c| {
                // A pragma's argument cannot be a parameter; a number is safe to write in.
                let mut stmt = c.prepare(&format!("PRAGMA incremental_vacuum({pages})"))?;
                let mut rows = stmt.query([])?;
                // One row per page moved: the pragma does its work as it is stepped.
                let mut moved = 0_u64;
                while rows.next()?.is_some() {
                    moved += 1;
                }
                Ok((moved, pages_of(c)?))
            })
            .await
            .map_err(store_err)
    }

    /// The database file's pages now.
    pub async fn pages(&self) -> Result<Pages, StoreError> {
        self.db.call(|c| pages_of(c)).await.map_err(store_err)
    }
}

fn pages_of(c: &Connection) -> Result<Pages, DbError> {
    let get = |pragma: &str| -> rusqlite::Result<u64> {
        let n: i64 = c.pragma_query_value(None, pragma, |r| r.get(0))?;
        Ok(u64::try_from(n).unwrap_or(0))
    };
    Ok(Pages { count: get("page_count")?, free: get("freelist_count")?, size: get("page_size")? })
}

/// A batch as read on the database thread (bodies still JSON text).
struct RawBatch {
    due: Vec<RawRow>,
    read: usize,
    next: Cursor,
}

struct RawRow {
    seq: i64,
    tenant: String,
    id: String,
    version: i64,
    body: Option<String>,
    record: Option<Value>,
}

impl RawBatch {
    fn new(after: Cursor) -> Self {
        Self { due: Vec::new(), read: 0, next: after }
    }
}

fn executions(c: &Connection, after: Cursor, due_ms: i64, limit: i64, records: bool) -> Result<RawBatch, DbError> {
    let mut batch = RawBatch::new(after);
    let mut stmt = c.prepare_cached(EXECUTIONS)?;
    let mut rows = stmt.query(params![after.seq, limit, records])?;
    while let Some(r) = rows.next()? {
        let (seq, expires): (i64, i64) = (r.get(0)?, r.get(3)?);
        batch.read += 1;
        batch.next.seq = seq;
        if expires < due_ms {
            batch.due.push(RawRow { seq, tenant: r.get(1)?, id: r.get(2)?, version: 0, body: r.get(4)?, record: None });
        }
    }
    Ok(batch)
}

/// Recorded content whose `expires_at` is before `due_ms`, in row order (a piece written again is
/// a new row); a row's `version` is its expiry, which its delete checks. The archive's record
/// holds the content as JSON with its key.
fn content(c: &Connection, after: Cursor, due_ms: i64, limit: i64, records: bool) -> Result<RawBatch, DbError> {
    let mut batch = RawBatch::new(after);
    let mut stmt = c.prepare_cached(CONTENT)?;
    let mut rows = stmt.query(params![after.seq, limit, records])?;
    while let Some(r) = rows.next()? {
        let (seq, expires): (i64, i64) = (r.get(0)?, r.get(3)?);
        batch.read += 1;
        batch.next.seq = seq;
        if expires >= due_ms {
            continue;
        }
        let (tenant, sha256, session): (String, String, String) = (r.get(1)?, r.get(2)?, r.get(4)?);
        let record = match r.get::<_, Option<Vec<u8>>>(5)? {
            Some(body) => {
                let content: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let expires_at = DateTime::<Utc>::from_timestamp_millis(expires);
                // The last write, which set the expiry: the day the archive files it under.
                let stored_at = expires_at.map(|t| (t - chrono::Duration::days(CONTENT_TTL_DAYS)).to_rfc3339());
                Some(json!({
                    "tenantId": tenant, "sessionId": session, "sha256": sha256, "storedAt": stored_at,
                    "expiresAt": expires_at.map(|t| t.to_rfc3339()), "content": content,
                }))
            }
            None => None,
        };
        batch.due.push(RawRow { seq, tenant, id: sha256, version: expires, body: None, record });
    }
    Ok(batch)
}

fn sessions(c: &Connection, after: Cursor, due_ms: i64, limit: i64, records: bool) -> Result<RawBatch, DbError> {
    let mut batch = RawBatch::new(after);
    let mut stmt = c.prepare_cached(SESSIONS)?;
    let mut rows = stmt.query(params![after.updated_ms, after.seq, due_ms, limit, records])?;
    while let Some(r) = rows.next()? {
        let (seq, updated_ms, owns): (i64, i64, bool) = (r.get(0)?, r.get(4)?, r.get(5)?);
        batch.read += 1;
        batch.next = Cursor { updated_ms, seq };
        if !owns {
            let (tenant, id, version, body) = (r.get(1)?, r.get(2)?, r.get(3)?, r.get(6)?);
            batch.due.push(RawRow { seq, tenant, id, version, body, record: None });
        }
    }
    Ok(batch)
}

/// Whether an RFC 3339 time the store wrote is before `due_ms`; a time that does not parse is
/// not (the row stays, and is logged).
fn written_before(at: &str, due_ms: i64, what: &str, seq: i64) -> bool {
    match DateTime::parse_from_rfc3339(at) {
        Ok(t) => t.with_timezone(&Utc).timestamp_millis() < due_ms,
        Err(e) => {
            tracing::warn!(table = what, seq, error = %e, "a row's time does not parse; retention keeps it");
            false
        }
    }
}

fn events(c: &Connection, after: Cursor, due_ms: i64, limit: i64, records: bool) -> Result<RawBatch, DbError> {
    let mut batch = RawBatch::new(after);
    let mut stmt = c.prepare_cached(EVENTS)?;
    let mut rows = stmt.query(params![after.seq, limit, records])?;
    while let Some(r) = rows.next()? {
        let (seq, at): (i64, String) = (r.get(0)?, r.get(3)?);
        batch.read += 1;
        batch.next.seq = seq;
        if written_before(&at, due_ms, "events", seq) {
            let body: Option<String> = r.get(4)?;
            // The event as published, and when the log took it (an event carries no time).
            let record = match body {
                Some(body) => {
                    let mut event: Value =
                        serde_json::from_str(&body).map_err(|e| DbError::Task(format!("event {seq}: {e}")))?;
                    if let Some(fields) = event.as_object_mut() {
                        fields.insert("loggedAt".into(), at.into());
                    }
                    Some(event)
                }
                None => None,
            };
            batch.due.push(RawRow { seq, tenant: r.get(1)?, id: r.get(2)?, version: 0, body: None, record });
        }
    }
    Ok(batch)
}

fn messages(c: &Connection, after: Cursor, due_ms: i64, limit: i64, records: bool) -> Result<RawBatch, DbError> {
    let mut batch = RawBatch::new(after);
    let mut stmt = c.prepare_cached(MESSAGES)?;
    let mut rows = stmt.query(params![after.seq, limit])?;
    while let Some(r) = rows.next()? {
        let (seq, tenant, id, at): (i64, String, String, String) = (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
        batch.read += 1;
        batch.next.seq = seq;
        if written_before(&at, due_ms, "messages", seq) {
            let record = if records {
                let key: Option<String> = r.get(7)?;
                let mut m = json!({
                    "tenantId": tenant, "conversationId": r.get::<_, String>(4)?, "messageId": id,
                    "direction": r.get::<_, String>(5)?, "sender": r.get::<_, String>(8)?,
                    "text": r.get::<_, String>(6)?, "createdAt": at,
                });
                if let (Some(key), Some(fields)) = (key, m.as_object_mut()) {
                    fields.insert("idempotencyKey".into(), key.into());
                }
                Some(m)
            } else {
                None
            };
            batch.due.push(RawRow { seq, tenant, id, version: 0, body: None, record });
        }
    }
    Ok(batch)
}
