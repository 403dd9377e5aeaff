//! The one SQLite file (WAL mode) that holds every record and the work queue of the embedded
//! profile. One connection, owned by one thread that runs the calls in the order they arrive:
//! SQLite serialises writers anyway, one connection keeps transactions simple, and a thread that
//! takes the next call from a channel while it is busy costs no wake-up per call (a blocking pool
//! behind a mutex paid a thread hand-off and a futex for each one).
//!
//! # Group commit
//!
//! The thread runs the calls waiting in its channel (up to [`GROUP_MAX`]) inside one write
//! transaction and commits once for all of them; only then does any caller get its answer. So a
//! caller never acts on a write that is not durable, and under load the commit's costs (WAL
//! frames for the pages the calls share, file locks, checkpoints) are paid once per group instead
//! of once per call. A call's own unit of atomicity is [`atomic`] (a savepoint): it commits or
//! rolls back on its own inside the group. If the group's commit fails, every call in it gets the
//! error; a call that panics rolls the group back, fails the calls of the group that ran before it,
//! and the thread goes on with the next group. When the write lock cannot be taken (another
//! process holds it past the busy timeout, or the file is read-only) the call runs alone, without
//! the group, and meets the error itself.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use rusqlite::{Connection, Savepoint};

/// Most calls committed together.
pub const GROUP_MAX: usize = 64;

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
    crate::store::MESSAGE_SENDER,
    crate::store::ACTIVITY,
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

/// One call, run on the database thread; it answers its caller once told how the group's commit
/// went.
type Job = Box<dyn FnOnce(&mut Connection) -> Answer + Send>;
type Answer = Box<dyn FnOnce(Result<(), &DbError>) + Send>;

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
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // NORMAL in WAL mode: a commit survives a process crash; only an OS crash or power loss
        // may lose the last transactions.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        // Every statement the store and the queue run stays prepared (the default keeps 16).
        conn.set_prepared_statement_cache_capacity(256);
        migrate(&conn)?;
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("switchboard-db".into())
            .spawn(move || serve(conn, &queue))
            .map_err(|e| DbError::Task(format!("cannot start the database thread: {e}")))?;
        Ok(Self { jobs, calls: Arc::default() })
    }

    /// Sends `f` to the database thread now (calls run in the order `call` was called) and
    /// answers its result once the group it ran in has committed.
    pub fn call<T, F>(&self, f: F) -> impl Future<Output = Result<T, DbError>> + Send + 'static
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, DbError> + Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let result = f(conn);
            Box::new(move |committed: Result<(), &DbError>| {
                // The caller may have stopped waiting (its future dropped); the work still happened.
                let _ = reply.send(committed.map_err(same_error).and(result));
            })
        });
        self.calls.fetch_add(1, Ordering::Relaxed);
        let sent = self.jobs.send(job).map_err(|_| DbError::Task("the database thread has stopped".into()));
        async move {
            sent?;
            answer.await.map_err(|_| DbError::Task("the database call panicked".into()))?
        }
    }

    /// Calls made through this handle and its clones so far (what the pipeline bench reports
    /// per message).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

/// The database thread: groups of calls, each group one transaction (see the module docs).
fn serve(mut conn: Connection, queue: &mpsc::Receiver<Job>) {
    let mut next = None;
    loop {
        let job = match next.take() {
            Some(job) => job,
            None => match queue.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        if conn.execute_batch("BEGIN IMMEDIATE").is_err() {
            // No write lock: this call alone, outside a group, meets the error itself.
            if let Some(answer) = run(&mut conn, job) {
                answer(Ok(()));
            } else if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            continue;
        }
        let mut answers = Vec::new();
        let mut job = Some(job);
        let mut panicked = false;
        while let Some(j) = job.take() {
            match run(&mut conn, j) {
                Some(answer) => answers.push(answer),
                None => {
                    panicked = true;
                    break;
                }
            }
            if answers.len() < GROUP_MAX {
                job = queue.try_recv().ok();
            }
        }
        if panicked {
            let _ = conn.execute_batch("ROLLBACK");
            let failed = DbError::Task("rolled back: a call in the same group panicked".into());
            answers.into_iter().for_each(|answer| answer(Err(&failed)));
            continue;
        }
        match conn.execute_batch("COMMIT") {
            Ok(()) => answers.into_iter().for_each(|answer| answer(Ok(()))),
            Err(e) => {
                if !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                let e = DbError::Sqlite(e);
                answers.into_iter().for_each(|answer| answer(Err(&e)));
            }
        }
        // A call that arrived while the group committed starts the next one.
        next = queue.try_recv().ok();
    }
}

/// Runs one call; `None` when it panicked (its caller then gets `Task`).
fn run(conn: &mut Connection, job: Job) -> Option<Answer> {
    std::panic::catch_unwind(AssertUnwindSafe(|| job(conn))).ok()
}

/// A call's unit of atomicity: a savepoint inside the group's transaction (a transaction of its
/// own when the call runs alone). `commit` keeps its writes; dropping it undoes them.
pub fn atomic(conn: &mut Connection) -> Result<Savepoint<'_>, DbError> {
    Ok(conn.savepoint()?)
}

/// The group's commit error, for each of its calls (SQLite's code kept, so `retryable` holds).
fn same_error(e: &DbError) -> DbError {
    match e {
        DbError::Sqlite(rusqlite::Error::SqliteFailure(code, message)) => {
            DbError::Sqlite(rusqlite::Error::SqliteFailure(*code, message.clone()))
        }
        other => DbError::Task(other.to_string()),
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

    fn open() -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("t.db")).unwrap();
        (dir, db)
    }

    fn values(db: &Db) -> impl Future<Output = Result<Vec<i64>, DbError>> {
        db.call(|c| {
            let mut s = c.prepare("SELECT v FROM t ORDER BY rowid")?;
            let rows = s.query_map([], |r| r.get(0))?.collect::<Result<Vec<i64>, _>>()?;
            Ok(rows)
        })
    }

    /// A call inserting 1 that holds the database thread until `go` is sent, so that the calls
    /// made before then join its group.
    fn hold_the_thread(db: &Db) -> (std::sync::mpsc::Sender<()>, impl Future<Output = Result<usize, DbError>>) {
        let (go, gate) = std::sync::mpsc::channel::<()>();
        let first = db.call(move |c| {
            gate.recv().unwrap();
            Ok(c.execute("INSERT INTO t VALUES (1)", [])?)
        });
        (go, first)
    }

    #[tokio::test]
    async fn a_call_that_panics_fails_its_group_and_the_thread_goes_on() {
        let (_dir, db) = open();
        db.call(|c| Ok(c.execute_batch("CREATE TABLE t (v INTEGER)")?)).await.unwrap();
        let (go, first) = hold_the_thread(&db);
        let second = db.call(|c| Ok(c.execute("INSERT INTO t VALUES (2)", [])?));
        let bug = db.call(|c| -> Result<(), DbError> {
            let tx = atomic(c)?;
            tx.execute("INSERT INTO t VALUES (99)", [])?;
            panic!("a bug in a call");
        });
        go.send(()).unwrap();
        let (first, second, bug) = tokio::join!(first, second, bug);
        assert!(matches!(bug, Err(DbError::Task(ref m)) if m.contains("panicked")), "{bug:?}");
        // Nothing of the group was committed, and its callers are told so.
        for r in [first, second] {
            assert!(matches!(r, Err(DbError::Task(ref m)) if m.contains("rolled back")), "{r:?}");
        }
        db.call(|c| Ok(c.execute("INSERT INTO t VALUES (3)", [])?)).await.unwrap();
        assert_eq!(values(&db).await.unwrap(), [3]);
        assert_eq!(db.calls(), 6);
    }

    #[tokio::test]
    async fn calls_in_one_group_commit_or_roll_back_on_their_own() {
        let (_dir, db) = open();
        db.call(|c| Ok(c.execute_batch("CREATE TABLE t (v INTEGER CHECK (v > 0))")?)).await.unwrap();
        let (go, first) = hold_the_thread(&db);
        // Fails half way: its savepoint undoes its first insert, and the group still commits.
        let failing = db.call(|c| {
            let tx = atomic(c)?;
            tx.execute("INSERT INTO t VALUES (2)", [])?;
            tx.execute("INSERT INTO t VALUES (-1)", [])?;
            tx.commit()?;
            Ok(())
        });
        let last = db.call(|c| Ok(c.execute("INSERT INTO t VALUES (3)", [])?));
        go.send(()).unwrap();
        let (first, failing, last) = tokio::join!(first, failing, last);
        assert_eq!((first.unwrap(), last.unwrap()), (1, 1));
        assert!(matches!(failing, Err(DbError::Sqlite(_))), "{failing:?}");
        assert_eq!(values(&db).await.unwrap(), [1, 3]);
    }

    #[tokio::test]
    async fn a_group_whose_commit_fails_fails_every_call_in_it() {
        let (_dir, db) = open();
        // A deferred foreign key is checked at COMMIT, after every call of the group has run.
        db.call(|c| {
            Ok(c.execute_batch(
                "CREATE TABLE t (v INTEGER UNIQUE);
                 CREATE TABLE child (p INTEGER REFERENCES t (v) DEFERRABLE INITIALLY DEFERRED);",
            )?)
        })
        .await
        .unwrap();
        let (go, first) = hold_the_thread(&db);
        let orphan = db.call(|c| Ok(c.execute("INSERT INTO child VALUES (42)", [])?));
        go.send(()).unwrap();
        let (first, orphan) = tokio::join!(first, orphan);
        for r in [first, orphan] {
            assert!(
                matches!(r, Err(DbError::Sqlite(rusqlite::Error::SqliteFailure(ref e, _))) if e.code == rusqlite::ErrorCode::ConstraintViolation),
                "{r:?}"
            );
        }
        // Rolled back, and the next group works.
        db.call(|c| Ok(c.execute("INSERT INTO t VALUES (2)", [])?)).await.unwrap();
        assert_eq!(values(&db).await.unwrap(), [2]);
    }

    #[tokio::test]
    async fn calls_run_in_the_order_they_were_made() {
        let (_dir, db) = open();
        db.call(|c| Ok(c.execute_batch("CREATE TABLE t (v INTEGER)")?)).await.unwrap();
        let writes: Vec<_> =
            (0..200).map(|i| db.call(move |c| Ok(c.execute("INSERT INTO t VALUES (?1)", [i])?))).collect();
        // Awaited in reverse: the order is the one of the calls, not of the waits.
        for w in writes.into_iter().rev() {
            w.await.unwrap();
        }
        assert_eq!(values(&db).await.unwrap(), (0..200).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_call_whose_caller_stopped_waiting_still_happens() {
        let (_dir, db) = open();
        db.call(|c| Ok(c.execute_batch("CREATE TABLE t (v INTEGER)")?)).await.unwrap();
        drop(db.call(|c| Ok(c.execute("INSERT INTO t VALUES (7)", [])?)));
        assert_eq!(values(&db).await.unwrap(), [7]);
    }
}
