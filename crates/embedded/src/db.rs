//! The one SQLite file (WAL mode) that holds every record and the work queue of the embedded
//! profile. Calls run on tokio's blocking pool behind one connection: SQLite serialises writers
//! anyway, and one connection keeps transactions simple.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

/// The schema, applied in order; the index of the last applied step is kept in `user_version`.
/// Steps are never edited once released: a data directory written by an older build replays only
/// the steps after its own.
pub const MIGRATIONS: &[&str] = &[
    crate::store::SCHEMA,
    crate::queue::SCHEMA,
    crate::store::SCOPE_CLIENT_IDS,
    crate::store::USAGE,
    crate::store::TENANT_STATUS,
    crate::store::TENANT_LIMITS,
    crate::store::SESSION_SLOTS,
];

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("database task failed: {0}")]
    Task(String),
    #[error("database lock poisoned")]
    Poisoned,
}

impl DbError {
    /// Busy/locked databases and I/O hiccups may pass; everything else will not.
    pub fn retryable(&self) -> bool {
        match self {
            DbError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => matches!(
                e.code,
                rusqlite::ErrorCode::DatabaseBusy
                    | rusqlite::ErrorCode::DatabaseLocked
                    | rusqlite::ErrorCode::SystemIoFailure
            ),
            DbError::Sqlite(_) | DbError::Poisoned => false,
            DbError::Task(_) => true,
        }
    }
}

/// A shared handle to the database.
#[derive(Debug, Clone)]
pub struct Db {
    conn: Arc<Mutex<Connection>>,
}

impl Db {
    /// Opens (creating if needed) `path`, switches to WAL and applies pending migrations.
    pub fn open(path: &Path) -> Result<Self, DbError> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // NORMAL in WAL mode: a commit survives a process crash; only an OS crash or power loss
        // may lose the last transactions.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrate(&conn)?;
        Ok(Self { conn: Arc::new(Mutex::new(conn)) })
    }

    /// Runs `f` with the connection on the blocking pool.
    pub async fn call<T, F>(&self, f: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, DbError> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().map_err(|_| DbError::Poisoned)?;
            f(&mut guard)
        })
        .await
        .map_err(|e| DbError::Task(e.to_string()))?
    }
}

fn migrate(conn: &Connection) -> Result<(), DbError> {
    let applied: usize = conn.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0))?.try_into().unwrap_or(0);
    for (i, step) in MIGRATIONS.iter().enumerate().skip(applied) {
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(step)?;
        tx.pragma_update(None, "user_version", i64::try_from(i + 1).unwrap_or(i64::MAX))?;
        tx.commit()?;
    }
    Ok(())
}
