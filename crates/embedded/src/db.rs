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
//!
//! # Calls on the caller's thread when nothing else is going on
//!
//! A hand-off to the thread and back costs two wake-ups and context switches (~20 µs of CPU, more
//! than a small call's own work), and buys nothing when there is nobody to group with. So while the
//! database is quiet — the last [`QUIET_CALLS`] calls each found no other call waiting for the
//! thread or running — a call runs on its caller's thread, in a transaction of its own, before
//! `call` returns. The first sign of company (a call still pending, or the connection taken)
//! sends calls back to the thread and its groups until the database is quiet again. Callers that
//! overlap keep group commit; a caller alone (one conversation at a time, a CLI command, a test)
//! pays no hand-off. The order of one caller's calls is kept either way: a call runs on its
//! caller's thread only when no earlier call is still queued. Such a call blocks its (async)
//! caller's thread for the call's duration, as a hand-off would block its task — but never for
//! another connection's write lock (another process writing the same file): a call that finds it
//! held goes to the thread, which waits for it up to [`BUSY_TIMEOUT`].
//!
//! # Checkpoints
//!
//! Copying the WAL back into the database file (and its `fsync`s) is a second thread's job, on a
//! connection of its own: SQLite's automatic checkpoint runs inside the commit that crosses its
//! threshold, so one call in a thousand waited for the copy of the whole log. The database thread
//! asks the checkpoint thread, from SQLite's WAL hook, once the log holds [`CHECKPOINT_BYTES`].
//! The log starts over only at a write that begins with every frame copied, which a copy made
//! beside a busy writer never reaches; so the thread copies again while its last pass found many
//! new frames, and once it has caught up, the database thread copies the few frames written
//! meanwhile itself, after its next commit. Past
//! [`WAL_CEILING_BYTES`] (a reader holding an old snapshot, a checkpoint thread that cannot keep
//! up) it copies whatever is left, as SQLite would, so the log stays bounded.
//!
//! # Plans that stay
//!
//! The statements run for every message compare a column with `CAST(?n AS TEXT)` where a bare
//! `?n` would let SQLite's planner look at the parameter's value (an equality on an index that
//! also orders the rows, in SQLite as rusqlite bundles it): such a statement is prepared again
//! whenever its parameters change, and rusqlite's statement cache clears them after every use, so
//! it was parsed and planned on every run — three statements per message, ~16 % of the database
//! thread's time. With the cast the value's type is fixed and the plan cannot depend on it (the
//! plan is the same); `store::tests` checks that those statements are never prepared again. The
//! API's lists and reports and the event stream cast theirs the same way, their `LIMIT` included:
//! a bare `LIMIT ?` alone made SQLite prepare a statement again on every call.

use std::cell::Cell;
use std::ops::Deref;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use rusqlite::wal::CheckpointMode;

/// Most calls committed together.
pub const GROUP_MAX: usize = 64;

/// How long the database thread keeps looking for the next call before it sleeps (see
/// `next_call`): the pipeline bench's CPU per message was lowest near 60 µs (docs/benchmarks.md).
pub const IDLE_SPIN: Duration = Duration::from_micros(60);

/// How many calls in a row must find no other call pending before calls run on their caller's
/// thread (see the module docs).
pub const QUIET_CALLS: u32 = 8;

/// Where calls run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Calls {
    /// Always on the database thread, in its groups.
    OnTheThread,
    /// On the caller's thread while the database is quiet (the default; see the module docs).
    InlineWhenQuiet,
}

/// The page size of a database this build creates (SQLite's default is 4 KiB). A message inserts
/// into a dozen B-trees whose keys are random (ids, conversations, de-duplication keys), so most
/// of the pages it writes are leaves it changes by one row: at 2 KiB a page, each written page
/// costs half the bytes (copied into the log, checksummed, copied again at the checkpoint). The
/// pipeline bench ran 11–12 % more messages a second for 7–8 % less CPU; 1 KiB pages did worse
/// than 2 KiB (docs/benchmarks.md, "Smaller pages"). A database made with other pages keeps
/// them: SQLite sets the page size only before the first write.
pub const PAGE_SIZE: u32 = 2048;

/// How long a call on the database thread waits for another connection's write lock (another
/// process writing to the same file) before it fails as busy, and retryable.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// KiB of pages the database connection keeps in its own cache (SQLite's default is 2,000 KiB).
/// The file's pages stay in the kernel's page cache as well, so a page missed here costs a `pread`
/// and a copy, not a disk read. What a turn reads again is the B-trees' upper pages and the leaves
/// that new rows go to, well inside 1 MiB: the pipeline bench (1,000 conversations whose sessions
/// are read again) ran as fast as with the default, and `serve` holds ~1 MB less after 10,000
/// messages; at 512 KiB it ran ~8 % slower (docs/benchmarks.md, "Resident memory").
pub const PAGE_CACHE_KIB: i64 = 1024;

/// Bytes of WAL after which the checkpoint thread is asked to copy the log into the database
/// file (32 MiB: 16,384 pages of [`PAGE_SIZE`]; eight times SQLite's default at 4 KiB), so that a
/// page written by many messages (a queue's, a counter's) is copied, and the two `fsync`s paid,
/// once per few hundred messages instead of once per few dozen (docs/benchmarks.md, "A longer
/// log"). A threshold in bytes, not pages, so that a database with other pages copies as often.
pub const CHECKPOINT_BYTES: i64 = 32 << 20;

/// Bytes of WAL past which the database thread checkpoints itself after a commit (128 MiB).
pub const WAL_CEILING_BYTES: i64 = 4 * CHECKPOINT_BYTES;

/// [`CHECKPOINT_BYTES`] and [`WAL_CEILING_BYTES`] in pages of `page_size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLimits {
    /// Pages in the log after which the checkpoint thread is asked to copy it.
    pub checkpoint: i32,
    /// Pages past which the database thread copies what is left itself.
    pub ceiling: i32,
}

impl LogLimits {
    /// The limits for pages of `page_size` bytes (SQLite's are 512 to 65,536).
    pub fn for_page_size(page_size: i64) -> Self {
        let pages = |bytes: i64| i32::try_from(bytes / page_size.clamp(512, 65_536)).unwrap_or(i32::MAX);
        Self { checkpoint: pages(CHECKPOINT_BYTES), ceiling: pages(WAL_CEILING_BYTES) }
    }
}

/// Passes the checkpoint thread makes back to back at most: each copies the frames a busy writer
/// added during the one before, so that the database thread's finishing copy stays small.
const COPY_PASSES: usize = 4;

/// Frames added during a pass below which the checkpoint thread stops and counts itself caught up.
const CAUGHT_UP_FRAMES: i32 = 128;

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
    shared: Arc<Shared>,
    /// Transactions committed and WAL frames they wrote (see [`Db::commits`]).
    written: Arc<Written>,
    /// How many checkpoints the checkpoint thread has run.
    checkpoints: tokio::sync::watch::Receiver<u64>,
    /// The log's limits in this database's pages.
    limits: LogLimits,
}

/// A call run on its caller's thread (its result), or sent to the database thread (its answer).
enum Call<T, A> {
    Ran(Result<T, DbError>),
    Sent(A),
}

/// What the handles and the database thread share.
#[derive(Debug)]
struct Shared {
    /// Taken by the thread for a group and by a caller for a call on its own thread.
    conn: Mutex<Connection>,
    /// Calls sent to the thread and not yet answered.
    pending: AtomicUsize,
    /// Calls in a row that found no other call pending.
    quiet: AtomicU32,
    calls: AtomicU64,
    /// Of `calls`, those run on their caller's thread.
    inline: AtomicU64,
    policy: Calls,
    /// The checkpoint thread, ended before `conn` closes (see `Drop`).
    checkpointer: Option<std::thread::JoinHandle<()>>,
    /// Dropped after `conn` (fields drop in the order they are declared): tells
    /// [`Db::closed`]'s waiters that the database is closed.
    closed: tokio::sync::watch::Sender<()>,
}

impl Drop for Shared {
    /// Closes the checkpoint thread's connection before this one. The last connection to close a
    /// WAL database copies the log into the file and deletes it, if it can lock the file for
    /// itself; when both closed at once, each could see the other and neither did, leaving the
    /// log (up to the ceiling) to be replayed at the next open. Closing them in order makes this
    /// one the last.
    fn drop(&mut self) {
        let conn = self.conn.get_mut().unwrap_or_else(PoisonError::into_inner);
        // The hook holds the checkpoint thread's only way to be asked: without it the thread's
        // channel closes and the thread ends (after a copy in progress).
        if let Err(e) = conn.wal_hook(None::<fn(&mut rusqlite::hooks::Wal, i32) -> rusqlite::Result<()>>) {
            tracing::warn!(error = %e, "cannot remove the WAL hook; the log may outlive this close");
        }
        if let Some(thread) = self.checkpointer.take()
            && thread.join().is_err()
        {
            tracing::warn!("the checkpoint thread panicked");
        }
    }
}

impl Db {
    /// Opens (creating if needed) `path`, switches to WAL, applies pending migrations and starts
    /// the database thread; calls run on their caller's thread while the database is quiet.
    pub fn open(path: &Path) -> Result<Self, DbError> {
        Self::open_with(path, Calls::InlineWhenQuiet)
    }

    /// [`Db::open`], with calls run where `policy` says.
    pub fn open_with(path: &Path, policy: Calls) -> Result<Self, DbError> {
        let mut conn = Connection::open(path)?;
        // Before the first write (the journal mode's): a database that exists keeps its own.
        conn.pragma_update(None, "page_size", PAGE_SIZE)?;
        // Likewise: a new database can give freed pages back (see `incremental_vacuum`); one
        // made before this setting is converted once, below.
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // NORMAL in WAL mode: a commit survives a process crash; only an OS crash or power loss
        // may lose the last transactions.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // Negative: a size in KiB, whatever the page size.
        conn.pragma_update(None, "cache_size", -PAGE_CACHE_KIB)?;
        // Every statement the store and the queue run stays prepared (the default keeps 16).
        conn.set_prepared_statement_cache_capacity(256);
        crate::schema::migrate(&conn)?;
        incremental_vacuum(&conn);
        let limits = LogLimits::for_page_size(conn.pragma_query_value(None, "page_size", |r| r.get(0))?);
        let written = Arc::new(Written::default());
        let (checkpointer, checkpoints) = start_checkpoints(&mut conn, path, limits, Arc::clone(&written))?;
        let (jobs, queue) = mpsc::channel::<Job>();
        let shared = Arc::new(Shared {
            conn: Mutex::new(conn),
            pending: AtomicUsize::new(0),
            quiet: AtomicU32::new(0),
            calls: AtomicU64::new(0),
            inline: AtomicU64::new(0),
            policy,
            checkpointer: Some(checkpointer),
            closed: tokio::sync::watch::Sender::new(()),
        });
        let thread = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("switchboard-db".into())
            .spawn(move || serve(&thread, &queue))
            .map_err(|e| DbError::Task(format!("cannot start the database thread: {e}")))?;
        Ok(Self { jobs, shared, written, checkpoints, limits })
    }

    /// Runs `f` now — on this thread while the database is quiet, otherwise sent to the database
    /// thread (calls run in the order `call` was called) — and answers its result once the
    /// transaction or group it ran in has committed.
    pub fn call<T, F>(&self, f: F) -> impl Future<Output = Result<T, DbError>> + Send + use<T, F>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, DbError> + Send + 'static,
    {
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
        let call = match self.try_inline(f) {
            Ok(result) => Call::Ran(result),
            Err(f) => Call::Sent(self.send(f)),
        };
        async move {
            match call {
                Call::Ran(result) => result,
                Call::Sent(answer) => answer.await,
            }
        }
    }

    /// Runs `f` on this thread if the database is quiet; gives it back otherwise.
    fn try_inline<T, F>(&self, f: F) -> Result<Result<T, DbError>, F>
    where
        F: FnOnce(&mut Connection) -> Result<T, DbError>,
    {
        let shared = &self.shared;
        let pending = || shared.pending.load(Ordering::Acquire) > 0;
        // Company seen: the quiet starts over, and the call goes to the thread.
        let company = |f| {
            shared.quiet.store(0, Ordering::Relaxed);
            Err(f)
        };
        if pending() {
            return company(f);
        }
        let quiet = shared.quiet.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if shared.policy != Calls::InlineWhenQuiet || quiet <= QUIET_CALLS {
            return Err(f);
        }
        let Ok(mut conn) = shared.conn.try_lock() else {
            return company(f);
        };
        // Checked again with the connection held: a call sent meanwhile runs first.
        if pending() {
            return company(f);
        }
        let began = match begin_without_waiting(&conn) {
            // Another connection writes: the thread waits for it, not this caller's thread.
            Err(e) if is_busy(&e) => return company(f),
            began => began.is_ok(),
        };
        shared.inline.fetch_add(1, Ordering::Relaxed);
        Ok(run_alone(&mut conn, began, f))
    }

    /// Sends `f` to the database thread; its answer once the group it ran in has committed.
    fn send<T, F>(&self, f: F) -> impl Future<Output = Result<T, DbError>> + Send + use<T, F>
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
        self.shared.pending.fetch_add(1, Ordering::AcqRel);
        let sent = self.jobs.send(job).map_err(|_| {
            self.shared.pending.fetch_sub(1, Ordering::AcqRel);
            DbError::Task("the database thread has stopped".into())
        });
        async move {
            sent?;
            answer.await.map_err(|_| DbError::Task("the database call panicked".into()))?
        }
    }

    /// Calls made through this handle and its clones so far (what the pipeline bench reports
    /// per message).
    pub fn calls(&self) -> u64 {
        self.shared.calls.load(Ordering::Relaxed)
    }

    /// Of [`Db::calls`], those that ran on their caller's thread.
    pub fn calls_on_callers_thread(&self) -> u64 {
        self.shared.inline.load(Ordering::Relaxed)
    }

    /// Write transactions committed so far and the WAL frames (pages) they wrote, as counted by
    /// SQLite's WAL hook: what the pipeline bench reports per message, to see how many commits
    /// and page writes a message costs.
    pub fn commits(&self) -> (u64, u64) {
        (self.written.commits.load(Ordering::Relaxed), self.written.frames.load(Ordering::Relaxed))
    }

    /// The count of checkpoints run by the checkpoint thread, to wait on.
    pub fn checkpoints(&self) -> tokio::sync::watch::Receiver<u64> {
        self.checkpoints.clone()
    }

    /// When the log is copied into the database file, in this database's pages.
    pub fn log_limits(&self) -> LogLimits {
        self.limits
    }

    /// Resolves once the database is closed: every handle dropped, the calls sent before answered,
    /// both connections closed (the log copied into the file and deleted). Take it before dropping
    /// the last handle.
    pub fn closed(&self) -> impl Future<Output = ()> + Send + use<> {
        let mut closed = self.shared.closed.subscribe();
        async move {
            // Nothing is ever sent: the wait ends when the sender is dropped.
            while closed.changed().await.is_ok() {}
        }
    }
}

/// Makes a database made before this build able to give freed pages back to the file system
/// (`auto_vacuum = INCREMENTAL`, which the retention sweep's `PRAGMA incremental_vacuum` needs).
/// SQLite sets it when a database is created; an existing one changes only through a `VACUUM`,
/// which rewrites the whole file once (through the log, so it needs free disk space about twice
/// the file's size) and is logged with its duration, as a schema step is. If that fails (no
/// disk space, another connection reading), the database works as before: deleted rows' pages
/// are reused by new rows but the file does not shrink; the next start tries again.
fn incremental_vacuum(conn: &Connection) {
    const INCREMENTAL: i64 = 2;
    let mode = conn.pragma_query_value(None, "auto_vacuum", |r| r.get::<_, i64>(0));
    if matches!(mode, Ok(INCREMENTAL)) {
        return;
    }
    tracing::info!("converting the database file to incremental vacuum: it is rewritten once, which may take a while");
    let started = Instant::now();
    let converted = conn
        .pragma_update(None, "auto_vacuum", "INCREMENTAL")
        .and_then(|()| conn.execute_batch("VACUUM"))
        .and_then(|()| conn.pragma_query_value(None, "auto_vacuum", |r| r.get::<_, i64>(0)));
    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match converted {
        Ok(INCREMENTAL) => tracing::info!(ms, "database file converted to incremental vacuum"),
        Ok(mode) => tracing::warn!(mode, ms, "the database file keeps its vacuum mode; it will not shrink"),
        Err(e) => {
            tracing::warn!(error = %e, ms, "cannot convert the database file to incremental vacuum; it will not shrink (the next start tries again)")
        }
    }
}

/// Hands the checkpoints of `conn`'s database to a thread with its own connection (see the module
/// docs): the thread, which ends once `conn`'s WAL hook is removed, and its count of checkpoints.
fn start_checkpoints(
    conn: &mut Connection,
    path: &Path,
    limits: LogLimits,
    written: Arc<Written>,
) -> Result<(std::thread::JoinHandle<()>, tokio::sync::watch::Receiver<u64>), DbError> {
    let checkpointer = wal_connection(path)?;
    let (count, counted) = tokio::sync::watch::channel(0_u64);
    // One request waiting is enough: the checkpoint copies whatever the log holds when it runs.
    let (ask, asked) = mpsc::sync_channel::<()>(1);
    // Set when the checkpoint thread has copied the whole log it saw.
    let caught_up = Arc::new(AtomicBool::new(false));
    let copied = Arc::clone(&caught_up);
    let thread = std::thread::Builder::new()
        .name("switchboard-checkpoint".into())
        .spawn(move || {
            while asked.recv().is_ok() {
                match copy_log(&checkpointer, limits.checkpoint) {
                    Ok((log, done)) if log >= limits.checkpoint && done == log => {
                        // Requests made while this one ran are answered by it; running again now
                        // would only get in the way of the database thread's finishing copy.
                        while asked.try_recv().is_ok() {}
                        copied.store(true, Ordering::Release);
                    }
                    Ok((-1, _)) => tracing::warn!("checkpoint did not run; the next one retries"),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "checkpoint failed; the next one retries"),
                }
                count.send_modify(|n| *n += 1);
            }
        })
        .map_err(|e| DbError::Task(format!("cannot start the checkpoint thread: {e}")))?;
    // Registering a WAL hook turns SQLite's automatic checkpoint off on this connection. An error
    // returned from the hook would fail a statement whose commit has happened: none is.
    let mut logged = 0;
    conn.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, pages: i32| {
        // The log's size after this commit: it grew by the frames written, or started over.
        let frames = if pages >= logged { pages - logged } else { pages };
        logged = pages;
        written.commits.fetch_add(1, Ordering::Relaxed);
        written.frames.fetch_add(u64::try_from(frames).unwrap_or(0), Ordering::Relaxed);
        if pages < limits.checkpoint {
            // The log started over since the thread last caught up.
            caught_up.store(false, Ordering::Relaxed);
        } else if pages >= limits.ceiling || caught_up.swap(false, Ordering::Acquire) {
            // The log starts over only at a write that begins with every frame copied, and the
            // thread's copy always trails the frames written meanwhile: this thread copies those
            // few (or, past the ceiling, whatever is left) so that the next write starts over.
            if let Err(e) = wal.checkpoint_v2(CheckpointMode::PASSIVE) {
                tracing::warn!(error = %e, "checkpoint failed; the next commit retries");
            }
        } else {
            let _ = ask.try_send(());
        }
        Ok(())
    }))?;
    Ok((thread, counted))
}

/// The checkpoint thread's copy: passes until one finds fewer than [`CAUGHT_UP_FRAMES`] new
/// frames (or [`COPY_PASSES`] ran, or a pass could not copy everything, or the log is shorter
/// than `threshold` pages); the last pass's frames in the log and frames copied.
fn copy_log(conn: &Connection, threshold: i32) -> rusqlite::Result<(i32, i32)> {
    let (mut log, mut done) = conn.wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE)?;
    for _ in 1..COPY_PASSES {
        if log < threshold || done != log {
            break;
        }
        let before = log;
        (log, done) = conn.wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE)?;
        if log - before < CAUGHT_UP_FRAMES {
            break;
        }
    }
    Ok((log, done))
}

/// Counted by the WAL hook, which runs after every commit that wrote to the log.
#[derive(Debug, Default)]
struct Written {
    commits: AtomicU64,
    frames: AtomicU64,
}

/// A second connection to the WAL database at `path`, its log opened: until a connection has read
/// the journal mode, SQLite declines to checkpoint through it.
fn wal_connection(path: &Path) -> Result<Connection, DbError> {
    let conn = Connection::open(path)?;
    let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(DbError::Task(format!("the database is in {mode} mode, not WAL")));
    }
    Ok(conn)
}

/// Runs one statement that returns no rows, kept prepared (transaction control runs for every
/// call; parsing it each time was a visible share of a message's CPU).
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

/// The database thread: groups of calls, each group one transaction (see the module docs).
fn serve(shared: &Shared, queue: &mpsc::Receiver<Job>) {
    let mut next = None;
    loop {
        let job = match next.take() {
            Some(job) => job,
            None => match next_call(queue) {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        let mut conn = shared.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let (taken, answers, outcome) = group(&mut conn, job, queue);
        drop(conn);
        // Counted as answered before the answers go out, so that a caller woken by one finds the
        // database quiet if nothing else is pending.
        shared.pending.fetch_sub(taken, Ordering::AcqRel);
        let outcome = match &outcome {
            Ok(()) => Ok(()),
            Err(e) => Err(e),
        };
        answers.into_iter().for_each(|answer| answer(outcome));
        // A call that arrived while the group committed starts the next one.
        next = queue.try_recv().ok();
    }
}

/// Runs `first` and the calls waiting behind it (up to [`GROUP_MAX`]) in one transaction: how
/// many calls it took, the answers of those that did not panic, and how the group ended.
fn group(conn: &mut Connection, first: Job, queue: &mpsc::Receiver<Job>) -> (usize, Vec<Answer>, Result<(), DbError>) {
    if exec(conn, "BEGIN IMMEDIATE").is_err() {
        // No write lock: this call alone, outside a group, meets the error itself.
        let answer = run(conn, first);
        if answer.is_none() && !conn.is_autocommit() {
            let _ = exec(conn, "ROLLBACK");
        }
        return (1, answer.into_iter().collect(), Ok(()));
    }
    let (mut taken, mut answers, mut panicked) = (0, Vec::new(), false);
    let mut job = Some(first);
    while let Some(j) = job.take() {
        taken += 1;
        match run(conn, j) {
            Some(answer) => answers.push(answer),
            None => {
                panicked = true;
                break;
            }
        }
        if taken < GROUP_MAX {
            job = queue.try_recv().ok();
        }
    }
    if panicked {
        let _ = exec(conn, "ROLLBACK");
        return (taken, answers, Err(DbError::Task("rolled back: a call in the same group panicked".into())));
    }
    (taken, answers, commit(conn))
}

/// Commits the open transaction; rolls it back when the commit fails (the error is the caller's).
fn commit(conn: &Connection) -> Result<(), DbError> {
    exec(conn, "COMMIT").map_err(|e| {
        if !conn.is_autocommit() {
            let _ = exec(conn, "ROLLBACK");
        }
        DbError::Sqlite(e)
    })
}

/// `BEGIN IMMEDIATE`, failing at once as busy when another connection holds the write lock
/// instead of sleeping in SQLite's busy handler for up to [`BUSY_TIMEOUT`]: on a caller's
/// (runtime) thread that sleep would stall every task the thread runs.
fn begin_without_waiting(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(Duration::ZERO)?;
    let began = exec(conn, "BEGIN IMMEDIATE");
    if let Err(e) = conn.busy_timeout(BUSY_TIMEOUT) {
        tracing::warn!(error = %e, "the database's busy timeout could not be set back");
    }
    began
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::DatabaseBusy)
}

/// One call in a transaction of its own, on the caller's thread (see the module docs): what a
/// group of one would answer. `began`: whether [`begin_without_waiting`] began the transaction.
fn run_alone<T>(
    conn: &mut Connection,
    began: bool,
    f: impl FnOnce(&mut Connection) -> Result<T, DbError>,
) -> Result<T, DbError> {
    let panicked = || DbError::Task("the database call panicked".into());
    if !began {
        // No write lock: the call meets the error itself, as on the thread.
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| f(conn)));
        if result.is_err() && !conn.is_autocommit() {
            let _ = exec(conn, "ROLLBACK");
        }
        return result.unwrap_or_else(|_| Err(panicked()));
    }
    FRESH_AT.with(|f| f.set(Some(conn.total_changes())));
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| f(conn)));
    FRESH_AT.with(|f| f.set(None));
    let Ok(result) = result else {
        if !conn.is_autocommit() {
            let _ = exec(conn, "ROLLBACK");
        }
        return Err(panicked());
    };
    if conn.is_autocommit() {
        // The call ended the transaction itself (or a dropped unit could not begin another).
        return result;
    }
    commit(conn).and(result)
}

/// The next call: looked for (yielding the core in between) for up to [`IDLE_SPIN`] before the
/// thread sleeps. Under load the next call comes within microseconds, and a thread that went to
/// sleep costs a futex wake-up and a context switch to both sides of every call.
fn next_call(queue: &mpsc::Receiver<Job>) -> Result<Job, mpsc::RecvError> {
    let start = Instant::now();
    while start.elapsed() < IDLE_SPIN {
        match queue.try_recv() {
            Ok(job) => return Ok(job),
            Err(mpsc::TryRecvError::Disconnected) => return Err(mpsc::RecvError),
            Err(mpsc::TryRecvError::Empty) => std::thread::yield_now(),
        }
    }
    queue.recv()
}

/// Runs one call; `None` when it panicked (its caller then gets `Task`).
fn run(conn: &mut Connection, job: Job) -> Option<Answer> {
    std::panic::catch_unwind(AssertUnwindSafe(|| job(conn))).ok()
}

thread_local! {
    /// While a call runs alone in a transaction of its own on this thread (see [`run_alone`]):
    /// the connection's count of changed rows when that transaction began. While the count is the
    /// same, the transaction has written nothing, so a unit of atomicity begun then is the whole
    /// transaction and needs no savepoint.
    static FRESH_AT: Cell<Option<u64>> = const { Cell::new(None) };
}

/// A call's unit of atomicity: a savepoint inside the group's transaction (a transaction of its
/// own when the call runs alone). `commit` keeps its writes; dropping it undoes them.
///
/// When the call runs alone in its own transaction and has changed nothing yet, the transaction
/// itself is the unit: no savepoint, so SQLite copies no page into a statement journal before
/// changing it (a savepoint costs a 4 KiB copy of every page it touches). Dropping it then rolls
/// the transaction back and begins another (deferred) for the rest of the call. (Only changes to rows are
/// counted: a call must not change the schema before taking its unit.)
pub fn atomic(conn: &mut Connection) -> Result<Atomic<'_>, DbError> {
    let whole = !conn.is_autocommit() && FRESH_AT.with(Cell::get) == Some(conn.total_changes());
    if !whole {
        exec(conn, "SAVEPOINT atomic")?;
    }
    Ok(Atomic { conn, released: false, whole })
}

/// A call's savepoint (see [`atomic`]); reads and writes go through it as through the connection.
#[derive(Debug)]
pub struct Atomic<'c> {
    conn: &'c Connection,
    released: bool,
    /// The unit is the call's whole transaction (see [`atomic`]).
    whole: bool,
}

impl Atomic<'_> {
    /// Keeps the writes made through the savepoint (commits them when the call runs alone).
    pub fn commit(mut self) -> rusqlite::Result<()> {
        if !self.whole {
            exec(self.conn, "RELEASE atomic")?;
        }
        self.released = true;
        Ok(())
    }
}

impl Deref for Atomic<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Atomic<'_> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if self.whole {
            // Nothing else was written in the transaction: undo it and go on in a new one, which
            // takes the write lock at its first write (a write that cannot have it meets the error
            // itself, as every write of a call does).
            let again = exec(self.conn, "ROLLBACK").and_then(|()| exec(self.conn, "BEGIN"));
            FRESH_AT.with(|f| f.set(again.ok().map(|()| self.conn.total_changes())));
            return;
        }
        // Undone, then forgotten; failing here leaves the group's own ROLLBACK or COMMIT to
        // settle it (a call that fails answers its error either way).
        let _ = exec(self.conn, "ROLLBACK TO atomic").and_then(|()| exec(self.conn, "RELEASE atomic"));
    }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use crate::schema::MIGRATIONS;

    /// A database whose calls all run on its thread: what the group tests hold.
    fn open() -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_with(&dir.path().join("t.db"), Calls::OnTheThread).unwrap();
        (dir, db)
    }

    /// The default policy, with table `t` created and the database already quiet: the next call
    /// runs on the caller's thread.
    async fn open_quiet() -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("t.db")).unwrap();
        db.call(|c| Ok(c.execute_batch("CREATE TABLE t (v INTEGER UNIQUE CHECK (v > 0))")?)).await.unwrap();
        // that call was the first of the quiet ones
        for _ in 1..QUIET_CALLS {
            assert_eq!(where_it_ran(&db).await, "switchboard-db");
        }
        (dir, db)
    }

    /// The name of the thread a call ran on.
    async fn where_it_ran(db: &Db) -> String {
        db.call(|_| Ok(std::thread::current().name().unwrap_or("unnamed").to_owned())).await.unwrap()
    }

    #[tokio::test]
    async fn a_caller_alone_runs_its_calls_on_its_own_thread_once_the_database_is_quiet() {
        let (_dir, db) = open_quiet().await;
        let me = std::thread::current().name().unwrap_or("unnamed").to_owned();
        let commits = db.commits().0;
        for v in 1..=3 {
            assert_eq!(where_it_ran(&db).await, me);
            db.call(move |c| Ok(c.execute("INSERT INTO t VALUES (?1)", [v])?)).await.unwrap();
        }
        // each write committed before its call returned, in a transaction of its own
        assert_eq!(db.commits().0 - commits, 3);
        assert_eq!(db.calls_on_callers_thread(), 6);
        assert_eq!(values(&db).await.unwrap(), [1, 2, 3]);
        // the database thread never ran them, and still serves a policy that sends it everything
        let (_other, threaded) = open();
        assert_eq!(where_it_ran(&threaded).await, "switchboard-db");
    }

    #[tokio::test]
    async fn a_call_that_finds_the_connection_taken_goes_to_the_thread_behind_it_and_ends_the_quiet() {
        let (_dir, db) = open_quiet().await;
        let inner_db = db.clone();
        // A call on the caller's thread makes another while it holds the connection: that one
        // cannot run here, so it is sent to the thread and runs after the first has committed.
        let inner = db
            .call(move |c| {
                c.execute("INSERT INTO t VALUES (1)", [])?;
                Ok(inner_db.call(|c| {
                    c.execute("INSERT INTO t VALUES (2)", [])?;
                    Ok(std::thread::current().name().unwrap_or("unnamed").to_owned())
                }))
            })
            .await
            .unwrap();
        assert_eq!(inner.await.unwrap(), "switchboard-db");
        assert_eq!(values(&db).await.unwrap(), [1, 2]);
        // Company was seen: the next calls (`values` above was the first) go to the thread until
        // the database is quiet again.
        for _ in 1..QUIET_CALLS {
            assert_eq!(where_it_ran(&db).await, "switchboard-db");
        }
        assert_ne!(where_it_ran(&db).await, "switchboard-db");
    }

    #[tokio::test]
    async fn a_call_that_finds_another_connection_writing_waits_on_the_database_thread_not_its_callers() {
        let (dir, db) = open_quiet().await;
        // another connection (another process, as far as SQLite can tell) holds the write lock
        let other = Connection::open(dir.path().join("t.db")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE; INSERT INTO t VALUES (1);").unwrap();
        // the call returns at once, sent to the database thread, which waits for the lock: on
        // this thread it would sleep in SQLite's busy handler, then fail as busy before the other
        // connection could commit
        let call = db.call(|c| {
            c.execute("INSERT INTO t VALUES (2)", [])?;
            Ok(std::thread::current().name().unwrap_or("unnamed").to_owned())
        });
        other.execute_batch("COMMIT").unwrap();
        assert_eq!(call.await.unwrap(), "switchboard-db");
        assert_eq!(values(&db).await.unwrap(), [1, 2]);
        // and the busy timeout the thread waits with is back in place for the next calls
        let timeout: i64 = db.call(|c| Ok(c.pragma_query_value(None, "busy_timeout", |r| r.get(0))?)).await.unwrap();
        assert_eq!(timeout, i64::try_from(BUSY_TIMEOUT.as_millis()).unwrap());
    }

    #[tokio::test]
    async fn a_lone_calls_first_unit_is_its_transaction_and_undoing_it_keeps_what_follows() {
        let (_dir, db) = open_quiet().await;
        let commits = db.commits().0;
        let modes = db
            .call(|c| {
                let first = {
                    // the call's first change: the transaction is the unit, no savepoint
                    let tx = atomic(c)?;
                    tx.execute("INSERT INTO t VALUES (1)", [])?;
                    tx.whole
                }; // dropped: undone
                let second = {
                    let tx = atomic(c)?;
                    tx.execute("INSERT INTO t VALUES (2)", [])?;
                    let whole = tx.whole;
                    tx.commit()?;
                    whole
                };
                // a change made: from now on a unit is a savepoint, undone on its own
                let third = {
                    let tx = atomic(c)?;
                    tx.execute("INSERT INTO t VALUES (3)", [])?;
                    tx.whole
                };
                c.execute("INSERT INTO t VALUES (4)", [])?;
                Ok((first, second, third))
            })
            .await
            .unwrap();
        assert_eq!(modes, (true, true, false));
        assert_eq!(values(&db).await.unwrap(), [2, 4]);
        assert_eq!(db.commits().0 - commits, 1, "one transaction kept");
        // on the database thread a unit is always a savepoint (other calls may share the group)
        let (_other, threaded) = open();
        threaded.call(|c| Ok(c.execute_batch("CREATE TABLE t (v INTEGER)")?)).await.unwrap();
        let whole = threaded.call(|c| Ok(atomic(c)?.whole)).await.unwrap();
        assert!(!whole);
    }

    #[tokio::test]
    async fn a_lone_call_that_ends_its_transaction_itself_keeps_its_answer() {
        let (_dir, db) = open_quiet().await;
        let n = db
            .call(|c| {
                let n = c.execute("INSERT INTO t VALUES (1)", [])?;
                c.execute_batch("COMMIT")?;
                Ok(n)
            })
            .await
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(values(&db).await.unwrap(), [1]);
    }

    #[tokio::test]
    async fn a_call_that_panics_on_its_callers_thread_is_rolled_back_and_answered() {
        let (_dir, db) = open_quiet().await;
        let bug = db.call(|c| -> Result<(), DbError> {
            c.execute("INSERT INTO t VALUES (99)", [])?;
            panic!("a bug in a call");
        });
        let bug = bug.await;
        assert!(matches!(bug, Err(DbError::Task(ref m)) if m.contains("panicked")), "{bug:?}");
        assert_ne!(where_it_ran(&db).await, "switchboard-db", "the panic did not end the quiet");
        db.call(|c| Ok(c.execute("INSERT INTO t VALUES (3)", [])?)).await.unwrap();
        assert_eq!(values(&db).await.unwrap(), [3]);
    }

    #[tokio::test]
    async fn a_call_whose_commit_fails_on_its_callers_thread_gets_the_error_and_writes_nothing() {
        let (_dir, db) = open_quiet().await;
        db.call(|c| {
            Ok(c.execute_batch("CREATE TABLE child (p INTEGER REFERENCES t (v) DEFERRABLE INITIALLY DEFERRED)")?)
        })
        .await
        .unwrap();
        let orphan = db.call(|c| {
            c.execute("INSERT INTO t VALUES (1)", [])?;
            Ok(c.execute("INSERT INTO child VALUES (42)", [])?)
        });
        let orphan = orphan.await;
        assert!(
            matches!(orphan, Err(DbError::Sqlite(rusqlite::Error::SqliteFailure(ref e, _))) if e.code == rusqlite::ErrorCode::ConstraintViolation),
            "{orphan:?}"
        );
        assert_eq!(values(&db).await.unwrap(), Vec::<i64>::new());
        db.call(|c| Ok(c.execute("INSERT INTO t VALUES (2)", [])?)).await.unwrap();
        assert_eq!(values(&db).await.unwrap(), [2]);
    }

    #[tokio::test]
    async fn a_call_that_cannot_have_the_write_lock_meets_the_error_itself() {
        let (dir, db) = open_quiet().await;
        // Another connection holds the write lock past the busy timeout (five seconds): the call,
        // though the database was quiet, goes to the thread, which waits that long, then runs it
        // outside a transaction.
        let other = wal_connection(&dir.path().join("t.db")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let (thread, outside) = db
            .call(|c| Ok((std::thread::current().name().unwrap_or("unnamed").to_owned(), c.is_autocommit())))
            .await
            .unwrap();
        assert_eq!(thread, "switchboard-db");
        assert!(outside, "the call ran outside a transaction, as on the thread");
        other.execute_batch("ROLLBACK").unwrap();
        db.call(|c| Ok(c.execute("INSERT INTO t VALUES (1)", [])?)).await.unwrap();
        assert_eq!(values(&db).await.unwrap(), [1]);
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
    async fn commits_and_the_log_pages_they_write_are_counted() {
        let (_dir, db) = open();
        db.call(|c| Ok(c.execute_batch("CREATE TABLE t (v INTEGER, pad BLOB)")?)).await.unwrap();
        let (commits, frames) = db.commits();
        // a read writes nothing
        values(&db).await.unwrap();
        assert_eq!(db.commits(), (commits, frames));
        // a row of ~5 pages: its overflow pages, the table's leaf, the database header and the
        // pointer map page that incremental vacuum keeps for new pages
        db.call(|c| Ok(c.execute("INSERT INTO t VALUES (1, zeroblob(10000))", [])?)).await.unwrap();
        let (after, written) = db.commits();
        assert_eq!(after - commits, 1);
        assert!((3..=8).contains(&(written - frames)), "{} pages", written - frames);
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
        let commits = db.commits().0;
        let (first, failing, last) = tokio::join!(first, failing, last);
        assert_eq!((first.unwrap(), last.unwrap()), (1, 1));
        assert_eq!(db.commits().0 - commits, 1, "one commit for the group");
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
    async fn the_checkpoint_thread_copies_the_log_into_the_database_file() {
        let (dir, db) = open();
        let file = dir.path().join("t.db");
        db.call(|c| Ok(c.execute_batch("CREATE TABLE t (v INTEGER, pad BLOB)")?)).await.unwrap();
        let before = std::fs::metadata(&file).unwrap().len();
        let mut checkpoints = db.checkpoints();
        // A page per row, a fifth more than the threshold in one commit: the WAL hook asks for a
        // checkpoint.
        let rows = i64::from(db.log_limits().checkpoint) * 6 / 5;
        let row = i64::from(PAGE_SIZE) * 3 / 4;
        db.call(move |c| {
            let mut insert = c.prepare("INSERT INTO t VALUES (?1, zeroblob(?2))")?;
            for i in 0..rows {
                insert.execute([i, row])?;
            }
            Ok(())
        })
        .await
        .unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(60), checkpoints.changed())
            .await
            .expect("no checkpoint within a minute")
            .unwrap();
        // The pages are in the database file now, not only in the log.
        let after = std::fs::metadata(&file).unwrap().len();
        assert!(after >= before + u64::try_from(rows * row).unwrap(), "database file {before} -> {after} bytes");
        assert_eq!(values(&db).await.unwrap().len(), usize::try_from(rows).unwrap());
        // The next commit copies what the thread could not (nothing here) and the one after it
        // starts the log over: it stays bounded under writes that never pause.
        for v in [rows, rows + 1] {
            db.call(move |c| Ok(c.execute("INSERT INTO t VALUES (?1, NULL)", [v])?)).await.unwrap();
        }
        let (log, _) = wal_connection(&file).unwrap().wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE).unwrap();
        assert!((0..10).contains(&log), "{log} frames in the log");
    }

    #[tokio::test]
    async fn a_closed_database_leaves_its_log_copied_and_deleted() {
        let (dir, db) = open();
        let file = dir.path().join("t.db");
        db.call(|c| Ok(c.execute_batch("CREATE TABLE t (v INTEGER, pad BLOB)")?)).await.unwrap();
        // Half again the threshold, a page per row, in commits of 64 rows: once past the
        // threshold each commit asks the checkpoint thread, which is still copying when the
        // database closes.
        let (rows, row) = (i64::from(db.log_limits().checkpoint) * 3 / 2, i64::from(PAGE_SIZE) * 3 / 4);
        for first in (0..rows).step_by(64) {
            db.call(move |c| {
                let mut insert = c.prepare_cached("INSERT INTO t VALUES (?1, zeroblob(?2))")?;
                for i in first..(first + 64).min(rows) {
                    insert.execute([i, row])?;
                }
                Ok(())
            })
            .await
            .unwrap();
        }
        let closed = db.closed();
        drop(db);
        tokio::time::timeout(std::time::Duration::from_secs(60), closed).await.expect("not closed within a minute");
        for suffix in ["-wal", "-shm"] {
            let left = dir.path().join(format!("t.db{suffix}"));
            assert!(
                !left.exists(),
                "{} left with {:?} bytes",
                left.display(),
                std::fs::metadata(&left).map(|m| m.len())
            );
        }
        // Every row is in the database file itself.
        let size = std::fs::metadata(&file).unwrap().len();
        assert!(size >= u64::try_from(rows * row).unwrap(), "database file of {size} bytes");
        let count: i64 =
            Connection::open(&file).unwrap().query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(count, rows);
    }

    #[test]
    fn the_log_limits_are_the_same_bytes_whatever_the_page_size() {
        let limits = LogLimits::for_page_size(i64::from(PAGE_SIZE));
        assert_eq!(limits, LogLimits { checkpoint: 16_384, ceiling: 65_536 });
        assert_eq!(LogLimits::for_page_size(4096), LogLimits { checkpoint: 8192, ceiling: 32_768 });
        // Outside SQLite's range (never answered by it): no division by zero, no overflow.
        assert_eq!(LogLimits::for_page_size(0), LogLimits::for_page_size(512));
        assert_eq!(LogLimits::for_page_size(1 << 40), LogLimits::for_page_size(65_536));
    }

    #[derive(Clone, Default)]
    struct LogBuffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for LogBuffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn upgrading_a_database_an_earlier_build_wrote_logs_each_step_and_a_new_one_logs_none() {
        let buffer = LogBuffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt().with_ansi(false).with_writer(move || writer.clone()).finish();
        // `open` migrates on this thread, which logs through this default subscriber.
        let _guard = tracing::subscriber::set_default(subscriber);
        let dir = tempfile::tempdir().unwrap();
        // a database with every step but the last, as the build before that step left it
        let old = dir.path().join("old.db");
        let conn = Connection::open(&old).unwrap();
        let last = MIGRATIONS.len();
        for step in &MIGRATIONS[..last - 1] {
            conn.execute_batch(step).unwrap();
        }
        conn.pragma_update(None, "user_version", i64::try_from(last - 1).unwrap()).unwrap();
        drop(conn);
        drop(Db::open(&old).unwrap());
        let log = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let upgrading = format!(
            "upgrading the database schema: a step that rebuilds a table may take a while step={last} of={last}"
        );
        assert!(log.contains(&upgrading), "{log}");
        assert!(
            log.contains("database schema step applied") && log.contains(&format!("step={last} of={last} ms=")),
            "{log}"
        );
        assert_eq!(log.matches("upgrading the database schema").count(), 1, "only the missing step: {log}");
        // a new database applies every step without a word
        buffer.0.lock().unwrap().clear();
        drop(Db::open(&dir.path().join("new.db")).unwrap());
        assert!(!String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap().contains("schema"));
    }

    #[tokio::test]
    async fn a_new_database_has_small_pages_a_small_cache_and_one_made_with_other_pages_keeps_them() {
        let dir = tempfile::tempdir().unwrap();
        let page_size = |file: &Path| -> i64 {
            Connection::open(file).unwrap().pragma_query_value(None, "page_size", |r| r.get(0)).unwrap()
        };
        let fresh = dir.path().join("new.db");
        let db = Db::open(&fresh).unwrap();
        assert_eq!(page_size(&fresh), i64::from(PAGE_SIZE));
        assert_eq!(db.log_limits(), LogLimits::for_page_size(i64::from(PAGE_SIZE)));
        let cache: i64 = db.call(|c| Ok(c.pragma_query_value(None, "cache_size", |r| r.get(0))?)).await.unwrap();
        assert_eq!(cache, -PAGE_CACHE_KIB, "the connection's page cache, in KiB");

        // A data directory written by an earlier build, with SQLite's default pages and a row.
        let old = dir.path().join("old.db");
        let conn = Connection::open(&old).unwrap();
        conn.execute_batch(
            "PRAGMA page_size = 4096; PRAGMA journal_mode = WAL; CREATE TABLE t (v INTEGER); INSERT INTO t VALUES (7);",
        )
        .unwrap();
        drop(conn);
        let db = Db::open(&old).unwrap();
        assert_eq!(page_size(&old), 4096);
        assert_eq!(db.log_limits(), LogLimits { checkpoint: 8192, ceiling: 32_768 });
        assert_eq!(values(&db).await.unwrap(), vec![7]);
        db.call(|c| Ok(c.execute("INSERT INTO t VALUES (8)", [])?)).await.unwrap();
        assert_eq!(values(&db).await.unwrap(), vec![7, 8]);
    }

    #[tokio::test]
    async fn a_database_is_made_with_incremental_vacuum_and_one_made_without_is_converted_once() {
        let dir = tempfile::tempdir().unwrap();
        let auto_vacuum = |file: &Path| -> i64 {
            Connection::open(file).unwrap().pragma_query_value(None, "auto_vacuum", |r| r.get(0)).unwrap()
        };
        let fresh = dir.path().join("new.db");
        drop(Db::open(&fresh).unwrap());
        assert_eq!(auto_vacuum(&fresh), 2, "INCREMENTAL");
        // a data directory written by an earlier build: no auto-vacuum, rows, and pages freed
        let old = dir.path().join("old.db");
        let conn = Connection::open(&old).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; CREATE TABLE t (v INTEGER, pad BLOB);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200)
             INSERT INTO t SELECT i, zeroblob(3000) FROM n;
             DELETE FROM t WHERE v > 1;",
        )
        .unwrap();
        let free: i64 = conn.pragma_query_value(None, "freelist_count", |r| r.get(0)).unwrap();
        assert!(free > 100, "{free}");
        drop(conn);
        assert_eq!(auto_vacuum(&old), 0, "NONE");
        let db = Db::open(&old).unwrap();
        // converted, its rows kept, and its freed pages given back by the rewrite
        assert_eq!(auto_vacuum(&old), 2);
        assert_eq!(values(&db).await.unwrap(), vec![1]);
        let free: i64 = db.call(|c| Ok(c.pragma_query_value(None, "freelist_count", |r| r.get(0))?)).await.unwrap();
        assert_eq!(free, 0);
    }

    #[tokio::test]
    async fn a_savepoint_dropped_without_commit_undoes_only_its_own_writes() {
        let (_dir, db) = open();
        db.call(|c| Ok(c.execute_batch("CREATE TABLE t (v INTEGER)")?)).await.unwrap();
        db.call(|c| {
            c.execute("INSERT INTO t VALUES (1)", [])?;
            {
                let tx = atomic(c)?;
                tx.execute("INSERT INTO t VALUES (2)", [])?;
            }
            let tx = atomic(c)?;
            tx.execute("INSERT INTO t VALUES (3)", [])?;
            tx.commit()?;
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!(values(&db).await.unwrap(), [1, 3]);
    }

    #[tokio::test]
    async fn a_call_whose_caller_stopped_waiting_still_happens() {
        let (_dir, db) = open();
        db.call(|c| Ok(c.execute_batch("CREATE TABLE t (v INTEGER)")?)).await.unwrap();
        drop(db.call(|c| Ok(c.execute("INSERT INTO t VALUES (7)", [])?)));
        assert_eq!(values(&db).await.unwrap(), [7]);
    }
}
