//! Retention on the embedded profile: how long the store keeps execution records, sessions that
//! ended, the event log and the conversation log, and the sweep that deletes what is older —
//! in bounded batches, each batch first written to the archive directory when there is one (the
//! AWS archiver's files: `switchboard_domain::archive`), then the freed pages handed back to the
//! file system (incremental vacuum). A `Sweeper` runs the sweep on a period, on the runtime.
//!
//! Never deleted: an active session, a session through which a human operator owns its
//! conversation (handed to a human and still the conversation's newest), tenants and their
//! configuration, API keys, usage and activity counts, the work queue and its dead letters.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use switchboard_domain::archive::{self, ArchiveBatch, ArchiveKind};
use switchboard_domain::limits::{CONTENT_TTL_DAYS, EXECUTION_TTL_DAYS};
use switchboard_engine::{Clock, StoreError};
use tokio::sync::watch;

use crate::store::{Cursor, DueRow, Pages, SqliteStore};

/// How many days each kind is kept by default: the AWS profile's TTL (execution records and the
/// event log expire after [`EXECUTION_TTL_DAYS`] there).
pub const DEFAULT_PERIOD_DAYS: i64 = EXECUTION_TTL_DAYS;

/// [`DEFAULT_PERIOD_DAYS`] as a period.
pub const DEFAULT_PERIOD: TimeDelta = TimeDelta::days(DEFAULT_PERIOD_DAYS);

/// How often the sweeper runs by default.
pub const DEFAULT_SWEEP_EVERY: Duration = Duration::from_secs(3600);

/// How long after the sweeper starts it sweeps first: soon, so that a server restarted more
/// often than the period still sweeps, but not in the middle of starting up.
pub const FIRST_SWEEP_AFTER: Duration = Duration::from_secs(60);

/// Rows read, archived and deleted per database call by default: a call holds the write lock
/// for a few milliseconds at most, so turns committing meanwhile wait no longer than that, and
/// an archived batch holds at most this many records in memory (a session can be ~200 KB).
pub const DEFAULT_BATCH: usize = 64;

/// Pages the vacuum moves per database call (4 MiB of 2 KiB pages).
pub const VACUUM_PAGES: u32 = 2048;

/// What is kept, for how long, and where deleted rows are archived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// Execution records are deleted this long after they were created (`None`: never). At 30
    /// days, the default, exactly when their `expiresAt` passes and reads stop showing them.
    pub executions: Option<TimeDelta>,
    /// Sessions that are no longer active are deleted this long after their last write.
    pub sessions: Option<TimeDelta>,
    /// The event log's events are deleted this long after they were logged.
    pub events: Option<TimeDelta>,
    /// The conversation log's messages are deleted this long after they were logged.
    pub messages: Option<TimeDelta>,
    /// Where each batch is written before it is deleted (`<dir>/<kind>/tenant=…/date=…/…`);
    /// `None`: deleted without a copy.
    pub archive_dir: Option<PathBuf>,
    /// How often the sweeper runs.
    pub every: Duration,
    /// Rows per database call.
    pub batch: usize,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            executions: Some(DEFAULT_PERIOD),
            sessions: Some(DEFAULT_PERIOD),
            events: Some(DEFAULT_PERIOD),
            messages: Some(DEFAULT_PERIOD),
            archive_dir: None,
            every: DEFAULT_SWEEP_EVERY,
            batch: DEFAULT_BATCH,
        }
    }
}

impl Retention {
    fn period(&self, kind: ArchiveKind) -> Option<TimeDelta> {
        match kind {
            // Recorded content goes with the records that point at it.
            ArchiveKind::Executions | ArchiveKind::Content => self.executions,
            ArchiveKind::Sessions => self.sessions,
            ArchiveKind::Events => self.events,
            ArchiveKind::Messages => self.messages,
        }
    }
}

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    pub executions: usize,
    pub sessions: usize,
    pub events: usize,
    pub messages: usize,
    /// Pieces of recorded model content.
    pub content: usize,
    /// Archive files written.
    pub files: usize,
    /// Pages the vacuum handed back.
    pub pages_freed: u64,
    /// The file's pages after the sweep.
    pub pages: Pages,
}

impl Swept {
    pub fn deleted(&self) -> usize {
        self.executions + self.sessions + self.events + self.messages + self.content
    }

    fn count(&mut self, kind: ArchiveKind) -> &mut usize {
        match kind {
            ArchiveKind::Executions => &mut self.executions,
            ArchiveKind::Sessions => &mut self.sessions,
            ArchiveKind::Events => &mut self.events,
            ArchiveKind::Messages => &mut self.messages,
            ArchiveKind::Content => &mut self.content,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A batch could not be archived; it was not deleted.
    #[error("archive {path}: {source}")]
    Archive { path: String, source: std::io::Error },
}

/// Deletes what is due at `now` under `retention`, kind by kind, batch by batch; between batches
/// it asks `stopping` and ends early when it says so (what was deleted stays deleted). Then
/// vacuums the file's free pages.
pub async fn sweep(
    store: &SqliteStore,
    retention: &Retention,
    now: DateTime<Utc>,
    stopping: impl Fn() -> bool,
) -> Result<Swept, SweepError> {
    let mut swept = Swept::default();
    let batch = retention.batch.max(1);
    for kind in ArchiveKind::ALL {
        let Some(period) = retention.period(kind) else { continue };
        let due_ms = match kind {
            // A record expires `EXECUTION_TTL_DAYS` after it was created (the engine's rule).
            ArchiveKind::Executions => now - period + TimeDelta::days(EXECUTION_TTL_DAYS),
            // Content is kept `CONTENT_TTL_DAYS` from its last write: that much longer than the
            // records, which may point at content an earlier turn wrote.
            ArchiveKind::Content => now - period + TimeDelta::days(CONTENT_TTL_DAYS),
            _ => now - period,
        }
        .timestamp_millis();
        let archive = retention.archive_dir.as_deref();
        let mut after = Cursor::START;
        while !stopping() {
            let read = store.retention_batch(kind, after, due_ms, batch, archive.is_some()).await?;
            let Some(last) = read.due.last().map(|r| r.seq) else {
                // Rows in row order come due in that order: a batch with none due means the
                // rest is younger (sessions are read through their index, due ones only).
                if kind == ArchiveKind::Sessions && read.read == batch {
                    after = read.next;
                    continue;
                }
                break;
            };
            if let Some(dir) = archive {
                swept.files += write_archive(dir, kind, &read.due).await?;
            }
            let due = read.due.len();
            let deleted = store.retention_delete(kind, read.due).await?;
            *swept.count(kind) += deleted;
            if deleted < due {
                tracing::info!(
                    kind = kind.field(),
                    due,
                    deleted,
                    last,
                    "rows changed between their read and their delete were kept"
                );
            }
            if read.read < batch {
                break;
            }
            after = read.next;
        }
    }
    // Free pages are vacuumed whoever freed them (a sweep stopped before its vacuum, say).
    swept.pages = store.pages().await?;
    while swept.pages.free > 0 && !stopping() {
        let (moved, pages) = store.vacuum_step(VACUUM_PAGES).await?;
        swept.pages_freed += moved;
        swept.pages = pages;
        if moved == 0 {
            // Not an incremental-vacuum database (its conversion failed): the pages stay free.
            break;
        }
    }
    Ok(swept)
}

/// Writes `rows` as one batch of `kind`'s archive files under `dir`; how many files.
async fn write_archive(dir: &Path, kind: ArchiveKind, rows: &[DueRow]) -> Result<usize, SweepError> {
    let mut batch = ArchiveBatch::new(kind);
    let time_field = match kind {
        ArchiveKind::Executions => "createdAt",
        ArchiveKind::Sessions => "startedAt",
        ArchiveKind::Events => "loggedAt",
        ArchiveKind::Messages => "createdAt",
        // The day of its last write (a turn that writes a piece again moves its expiry on).
        ArchiveKind::Content => "storedAt",
    };
    for row in rows {
        let Some(record) = &row.record else { continue };
        let day = record.get(time_field).and_then(|t| t.as_str()).and_then(archive::day_of).unwrap_or("unknown");
        // Zero-padded, so that file names sort in row order, as DynamoDB's sequence numbers do.
        let sequence = format!("{:020}", row.seq);
        // Records are archived once, as the store last held them.
        let line = archive::line(kind, "INSERT", Some(&sequence), record);
        batch.push(&row.tenant, day, &sequence, line);
    }
    let folder = dir.join(kind.prefix());
    let files = batch.files().map_err(|source| SweepError::Archive { path: folder.display().to_string(), source })?;
    let count = files.len();
    tokio::task::spawn_blocking(move || {
        for file in files {
            let path = folder.join(&file.key);
            write_durably(&path, &file.bytes)
                .map_err(|source| SweepError::Archive { path: path.display().to_string(), source })?;
        }
        Ok(count)
    })
    .await
    .map_err(|e| SweepError::Archive { path: dir.display().to_string(), source: std::io::Error::other(e) })?
}

/// Writes `bytes` to `path` whole or not at all, on disk before the rows are deleted: a temporary
/// file beside it, synced, renamed over it (a batch archived again replaces its file), and the
/// folder synced.
fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let folder = path.parent().ok_or_else(|| std::io::Error::other("an archive file needs a folder"))?;
    std::fs::create_dir_all(folder)?;
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".tmp");
    let temporary = folder.join(name);
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temporary, path)?;
    std::fs::File::open(folder)?.sync_all()
}

/// The sweep on a period, on the runtime: the first [`FIRST_SWEEP_AFTER`] after it starts, then
/// every [`Retention::every`]. A failed sweep is logged and tried again at the next period. Each
/// sweep that ends, done or failed, adds one to the count it was given, which a caller can wait on.
#[derive(Debug)]
pub struct Sweeper {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Sweeper {
    /// Starts sweeping `store` under `retention`, at `clock`'s time, counting sweeps in `sweeps`.
    pub fn start(
        store: SqliteStore,
        clock: std::sync::Arc<dyn Clock>,
        retention: Retention,
        sweeps: watch::Sender<u64>,
    ) -> Self {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let first = tokio::time::Instant::now() + FIRST_SWEEP_AFTER.min(retention.every);
            let mut ticks = tokio::time::interval_at(first, retention.every.max(Duration::from_secs(1)));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut wait = stopped.clone();
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = wait.changed() => return,
                }
                let stopping = || *stopped.borrow();
                match sweep(&store, &retention, clock.now(), stopping).await {
                    Ok(s) if s.deleted() > 0 => tracing::info!(
                        executions = s.executions,
                        sessions = s.sessions,
                        events = s.events,
                        messages = s.messages,
                        files = s.files,
                        pages_freed = s.pages_freed,
                        pages = s.pages.count,
                        "retention: expired rows deleted"
                    ),
                    Ok(_) => tracing::debug!("retention: nothing expired"),
                    Err(e) => tracing::warn!(error = %e, "retention sweep failed; the next one tries again"),
                }
                sweeps.send_modify(|n| *n += 1);
            }
        });
        Self { stop, task }
    }

    /// Stops the sweeper: a sweep under way ends after its current batch.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        if let Err(e) = self.task.await {
            tracing::warn!(error = %e, "the retention sweeper ended abnormally");
        }
    }
}
