//! The one SQLite file (WAL mode) that holds every record and the work queue of the embedded
//! profile. One connection, owned by one thread that runs the calls in the order they arrive:
//! SQLite serialises writers anyway, one connection keeps transactions simple, and a thread that
//! takes the next call from a channel while it is busy costs no wake-up per call (a blocking pool
//! behind a mutex paid a thread hand-off and a futex for each one).

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

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
            DbError::Sqlite(_) => false,
            DbError::Task(_) => true,
        }
    }
}

/// One call, run on the database thread.
type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// A shared handle to the database. The thread and its connection end when the last handle is
/// dropped (after the calls already sent).
#[derive(Debug, Clone)]
pub struct Db {
    jobs: mpsc::Sender<Job>,
    calls: Arc<AtomicU64>,
}

impl Db {
    /// Opens (creating if needed) `path`, switches to WAL, applies pending migrations and starts
    /// the database thread.
    pub fn open(path: &Path) -> Result<Self, DbError> {
        let mut conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // NORMAL in WAL mode: a commit survives a process crash; only an OS crash or power loss
        // may lose the last transactions.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrate(&conn)?;
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("switchboard-db".into())
            .spawn(move || {
                while let Ok(job) = queue.recv() {
                    // A call that panics fails alone: its caller gets `Task`, the thread goes on.
                    if std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut conn))).is_err() && !conn.is_autocommit() {
                        // A transaction guard rolls back as it unwinds; this covers a bare BEGIN.
                        let _ = conn.execute_batch("ROLLBACK");
                    }
                }
            })
            .map_err(|e| DbError::Task(format!("cannot start the database thread: {e}")))?;
        Ok(Self { jobs, calls: Arc::default() })
    }

    /// Runs `f` with the connection on the database thread, after the calls sent before it.
    pub async fn call<T, F>(&self, f: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, DbError> + Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |conn| {
            // The caller may have stopped waiting (its future dropped); the work still happened.
            let _ = reply.send(f(conn));
        });
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.jobs.send(job).map_err(|_| DbError::Task("the database thread has stopped".into()))?;
        answer.await.map_err(|_| DbError::Task("the database call panicked".into()))?
    }

    /// Calls made through this handle and its clones so far (what the pipeline bench reports
    /// per message).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    #[tokio::test]
    async fn a_call_that_panics_fails_alone_and_leaves_no_transaction_open() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("t.db")).unwrap();
        db.call(|c| Ok(c.execute_batch("CREATE TABLE t (v INTEGER)")?)).await.unwrap();
        let failed = db
            .call(|c| -> Result<(), DbError> {
                c.execute_batch("BEGIN IMMEDIATE; INSERT INTO t VALUES (1);")?;
                panic!("a bug in a call");
            })
            .await;
        assert!(matches!(failed, Err(DbError::Task(ref m)) if m.contains("panicked")), "{failed:?}");
        // The thread goes on, the half-done transaction was rolled back, and writes work again.
        let rows = db
            .call(|c| {
                assert!(c.is_autocommit());
                c.execute("INSERT INTO t VALUES (2)", [])?;
                Ok(c.query_row("SELECT group_concat(v) FROM t", [], |r| r.get::<_, String>(0))?)
            })
            .await
            .unwrap();
        assert_eq!(rows, "2");
        assert_eq!(db.calls(), 3);
    }

    #[tokio::test]
    async fn calls_run_in_the_order_they_were_sent() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("t.db")).unwrap();
        db.call(|c| Ok(c.execute_batch("CREATE TABLE t (v INTEGER)")?)).await.unwrap();
        let writes: Vec<_> =
            (0..50).map(|i| db.call(move |c| Ok(c.execute("INSERT INTO t VALUES (?1)", [i])?))).collect();
        // try_join_all polls them in order, so they are sent in order, all before any answers.
        futures::future::try_join_all(writes).await.unwrap();
        let order: Vec<i64> = db
            .call(|c| {
                let mut s = c.prepare("SELECT v FROM t ORDER BY rowid")?;
                let rows = s.query_map([], |r| r.get(0))?.collect::<Result<Vec<i64>, _>>()?;
                Ok(rows)
            })
            .await
            .unwrap();
        assert_eq!(order, (0..50).collect::<Vec<_>>());
    }
}
