//! `SqliteStore`: tenants, agents, triggers, sessions, execution records, the local conversation
//! log and the outbound event log, all in the profile's one SQLite file. Records are stored as
//! JSON bodies beside the columns that are queried, mirroring the DynamoDB key design. One file
//! per concern: `config` (tenant configuration), `sessions` (sessions and turn commits),
//! `executions` (reading execution records and the reports), `insights`, `conversations` (the local conversation log), `events` (the outbound event log),
//! `retention` (reading and deleting what is due, the vacuum), `versions` (kept configuration
//! versions); tenants and API keys here. Its tables are schema steps in `crate::schema::store`.
//! It calls down into `crate::queue` in two places, inside its own transactions: a tenant's
//! delete forgets the tenant's queued work, and a turn's commit settles the worker's item
//! (`SettleOnCommit`).
//!
//! The rules of configuration writes (validation, references, deletes of used records) are the
//! engine's `ConfigService`; this store only stores, conditionally on versions.

mod config;
mod conversations;
mod counters;
mod events;
mod executions;
mod insights;
mod keys;
mod retention;
mod sessions;
mod variants;
mod versions;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rusqlite::{ErrorCode, params};
use serde::Serialize;
use serde::de::DeserializeOwned;
use switchboard_domain::{Agent, AgentId, EventType, SessionStatus, Tenant, TenantId, Trigger};
use switchboard_engine::{Clock, StoreError};

use crate::db::{Db, DbError};

pub(crate) use counters::Taken;
pub use keys::{NewKey, StoredKey};
pub use retention::{Batch, Cursor, DueRow, Pages};

/// Maps database failures onto the engine's store errors.
fn store_err(e: DbError) -> StoreError {
    let retryable = e.retryable();
    StoreError::Unavailable { message: e.to_string(), retryable }
}

fn to_json<T: Serialize>(v: &T) -> Result<String, DbError> {
    serde_json::to_string(v).map_err(|e| DbError::Task(format!("encode: {e}")))
}

fn from_json<T: DeserializeOwned>(s: &str) -> Result<T, StoreError> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn is_constraint(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::ConstraintViolation)
}

fn status_str(s: SessionStatus) -> &'static str {
    match s {
        SessionStatus::Active => "active",
        SessionStatus::HandedOff => "handed_off",
        SessionStatus::Completed => "completed",
        SessionStatus::Failed => "failed",
        SessionStatus::Abandoned => "abandoned",
    }
}

/// What the engine and the API read for every message, kept in memory until a write through
/// this store changes it: tenants, agents, active triggers per event type (sorted for
/// evaluation) and the owners of API keys. Only records that exist are kept. Other processes on
/// the same file write only new tenants and API keys (`switchboard tenants …`), which no entry
/// can contradict; keys are removed only through this store (revoked, or with their tenant).
#[derive(Debug, Default)]
struct Caches {
    /// Bumped (under the lock) by every invalidation. A read fills the cache only when no
    /// invalidation ran since it began, so a slow read never puts back what a write replaced.
    generation: AtomicU64,
    entries: Mutex<CacheEntries>,
}

#[derive(Debug, Default)]
struct CacheEntries {
    tenants: HashMap<TenantId, Tenant>,
    agents: HashMap<(TenantId, AgentId), Agent>,
    triggers: HashMap<(TenantId, EventType), Arc<[Trigger]>>,
    /// API key hash → the key as stored.
    keys: HashMap<String, keys::StoredKey>,
}

impl Caches {
    fn get<T>(&self, read: impl FnOnce(&CacheEntries) -> Option<T>) -> Option<T> {
        self.entries.lock().ok().and_then(|e| read(&e))
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Stores what a read that began at `generation` found, unless a write came in between.
    fn fill(&self, generation: u64, write: impl FnOnce(&mut CacheEntries)) {
        if let Ok(mut e) = self.entries.lock()
            && self.generation.load(Ordering::Acquire) == generation
        {
            write(&mut e);
        }
    }

    fn invalidate(&self, tenant: &TenantId) {
        if let Ok(mut e) = self.entries.lock() {
            self.generation.fetch_add(1, Ordering::AcqRel);
            e.tenants.remove(tenant);
            e.agents.retain(|(t, _), _| t != tenant);
            e.triggers.retain(|(t, _), _| t != tenant);
            e.keys.retain(|_, key| key.tenant.as_ref() != Some(tenant));
        }
    }
}

/// Each tenant's tokens of a UTC day (`ExecutionLog::tokens_on`), kept exact in memory: filled
/// by a read on the database thread and added to by every turn commit there, in the order the
/// thread runs them, so no commit is missed or counted twice. Only this process records turns
/// on its database (other processes add tenants and keys), so the figure is the table's. A
/// commit's tokens are added when its savepoint is released; should the group's final `COMMIT`
/// fail, the figure is high until the process restarts — the safe side for a limit.
#[derive(Debug, Default)]
struct DayTokens(Mutex<HashMap<(String, String), u64>>);

impl DayTokens {
    fn get(&self, tenant: &str, day: &str) -> Option<u64> {
        self.0.lock().ok().and_then(|m| m.get(&(tenant.to_owned(), day.to_owned())).copied())
    }

    /// Keeps what a read on the database thread found; the tenant's earlier days go.
    fn fill(&self, tenant: &str, day: &str, tokens: u64) {
        if let Ok(mut m) = self.0.lock() {
            m.retain(|(t, d), _| t != tenant || d.as_str() >= day);
            m.insert((tenant.to_owned(), day.to_owned()), tokens);
        }
    }

    /// Adds a committed turn's tokens, if the day is kept (else the next read finds them).
    fn add(&self, tenant: &str, day: &str, tokens: u64) {
        if let Ok(mut m) = self.0.lock()
            && let Some(n) = m.get_mut(&(tenant.to_owned(), day.to_owned()))
        {
            *n += tokens;
        }
    }

    fn forget(&self, tenant: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.retain(|(t, _), _| t != tenant);
        }
    }
}

/// The embedded store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    db: Db,
    clock: Arc<dyn Clock>,
    /// Tenants, agents and active triggers; a tenant's are dropped on every write to its
    /// configuration.
    caches: Arc<Caches>,
    day_tokens: Arc<DayTokens>,
}

impl SqliteStore {
    /// Takes the database's write lock and lets it go: fails when the file is read-only, the disk
    /// is gone, or another process holds the lock past the busy timeout.
    pub async fn check_writable(&self) -> Result<(), StoreError> {
        // Inside a group the write lock is already held (taking it is how the group began); a
        // call that runs alone takes it here and meets the error.
        self.db
            .call(|c| if c.is_autocommit() { Ok(c.execute_batch("BEGIN IMMEDIATE; ROLLBACK;")?) } else { Ok(()) })
            .await
            .map_err(store_err)
    }

    pub fn new(db: Db, clock: Arc<dyn Clock>) -> Self {
        Self { db, clock, caches: Arc::default(), day_tokens: Arc::default() }
    }

    /// The clock the store stamps its rows with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Database calls made so far by everything sharing this store's database (store and queue).
    pub fn db_calls(&self) -> u64 {
        self.db.calls()
    }

    /// Of [`SqliteStore::db_calls`], those that ran on their caller's thread (see [`Db::call`]).
    pub fn db_calls_on_callers_thread(&self) -> u64 {
        self.db.calls_on_callers_thread()
    }

    /// Commits and WAL frames written so far (see [`Db::commits`]).
    pub fn db_commits(&self) -> (u64, u64) {
        self.db.commits()
    }

    /// Resolves once the database is closed (see [`Db::closed`]).
    pub fn closed(&self) -> impl Future<Output = ()> + Send + use<> {
        self.db.closed()
    }

    fn invalidate(&self, tenant: &TenantId) {
        self.caches.invalidate(tenant);
    }

    /// Creates a tenant; `false` if it already existed.
    pub async fn create_tenant(&self, tenant: &TenantId, name: &str) -> Result<bool, StoreError> {
        let (t, n, now) = (tenant.to_string(), name.to_owned(), self.clock.now().to_rfc3339());
        self.db
            .call(move |c| {
                Ok(c.prepare_cached("INSERT OR IGNORE INTO tenants (tenant_id, name, created_at) VALUES (?1, ?2, ?3)")?
                    .execute(params![t, n, now])?
                    > 0)
            })
            .await
            .map_err(store_err)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use rusqlite::StatementStatus;

    /// The statements every message runs, and those the API's lists, reports and event stream run
    /// per request, keep their plan: run through rusqlite's statement cache with new parameters
    /// each time, none is prepared again (see `crate::db`, "Plans that stay"; the lists bound a
    /// bare `LIMIT ?`, which alone made SQLite prepare them again on every call).
    /// The idle sweep reads the sessions due from their partial index, not the whole table.
    #[test]
    fn the_idle_sweep_reads_its_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plan.db");
        drop(crate::db::Db::open(&path).unwrap());
        let c = rusqlite::Connection::open(&path).unwrap();
        let plan: Vec<String> = c
            .prepare(&format!("EXPLAIN QUERY PLAN {}", super::sessions::IDLE_DUE))
            .unwrap()
            .query_map(rusqlite::params![1_796_000_000_000_i64, 500], |r| r.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(plan.iter().any(|step| step.contains("USING INDEX sessions_by_idle")), "{plan:?}");
        assert!(!plan.iter().any(|step| step.contains("TEMP B-TREE")), "ordered by the index: {plan:?}");
    }

    #[test]
    fn the_statements_run_for_every_message_or_request_are_never_prepared_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plans.db");
        drop(crate::db::Db::open(&path).unwrap());
        let c = rusqlite::Connection::open(&path).unwrap();
        for (sql, params) in [
            (crate::queue::NEXT_IN_GROUP, 1),
            (super::sessions::LATEST_SESSION, 2),
            (super::counters::HUMAN_OWNER, 2),
            (super::conversations::NEWEST_MESSAGES, 3),
            (super::conversations::OLDEST_MESSAGES, 3),
            // the API's lists and the event stream: per request, not per message
            (super::sessions::LIST_SESSIONS, 7),
            (super::executions::LIST_EXECUTIONS, 5),
            (super::events::EVENTS_AFTER, 3),
            (super::config::LIST_CONFIG, 4),
            (crate::queue::DEAD_LETTERS, 1),
            // the console's overview, usage reports, a tenant's keys
            (super::executions::ACTIVITY_BETWEEN, 3),
            (super::variants::VARIANTS_BETWEEN, 3),
            (super::executions::USAGE_BETWEEN, 3),
            (super::keys::TENANT_KEYS, 1),
        ] {
            for i in 0..5 {
                // digits, so that a LIMIT takes them too
                let values: Vec<String> = (0..params).map(|p| format!("{}", 100 * i + p + 1)).collect();
                let mut statement = c.prepare_cached(sql).unwrap();
                let mut rows = statement.query(rusqlite::params_from_iter(&values)).unwrap();
                while rows.next().unwrap().is_some() {}
                drop(rows);
                assert_eq!(statement.get_status(StatementStatus::RePrepare), 0, "prepared again: {sql}");
            }
        }
    }
}
