//! The embedded profile's durable work queue: a FIFO queue in the SQLite file with the semantics
//! of an SQS FIFO queue, so that the engine behaves the same on one machine and on AWS. It does
//! not run work itself (see [`crate::worker`]) and does not inspect item bodies.
//!
//! # Semantics (SQS FIFO parity)
//!
//! - **Groups.** Items of a group are delivered in enqueue order, one at a time: only the oldest
//!   item of a group (its head) can be delivered, and while the head is in flight or delayed
//!   nothing else of the group is. Groups are independent; [`SqliteWorkQueue::receive`] returns
//!   the head that has been deliverable the longest (for heads never received, the oldest
//!   enqueued), ties broken by enqueue order.
//! - **Visibility timeout.** A received item is invisible for `visibility_timeout` and carries a
//!   fresh receipt; its receive count goes up by one. Unacked in time (the worker crashed, or
//!   the process died and reopened the file), it becomes deliverable again with a new receipt,
//!   and the old receipt goes stale. A receipt stays good until the item is received again, as
//!   with SQS.
//! - **Release** is `ChangeMessageVisibility`: the item becomes deliverable after the delay and
//!   its group stays blocked until then.
//! - **Dead letters.** An item already received `max_receives` times is moved, in the same
//!   transaction, to the dead-letter table instead of being delivered again; its group's next
//!   item then becomes the head.
//! - **Deduplication.** A dedup id seen within `dedup_window` makes the enqueue a no-op that
//!   returns [`Enqueued::Duplicate`]. The window lives in its own table, so it holds after the
//!   original was acked (unlike some SQS emulators), and is queue-wide as with SQS's default
//!   deduplication scope. The engine's items use a tenant-scoped dedup id
//!   ([`WorkItem::dedup_id`]), so only one tenant's own ids can collide.
//! - **Time** comes from the injected [`Clock`], stored as integer milliseconds.
//!
//! # Why receive is cheap
//!
//! Only heads can be delivered, so each non-empty group has one row in `queue_groups` holding its
//! head and the instant it is next deliverable (`visible_at`): the enqueue time for a fresh head,
//! the end of the visibility timeout while in flight, the end of the delay when released. An
//! index on `(visible_at, head_seq)` makes picking the next head one index seek, whatever the
//! depth of the queue or the number of blocked groups. Every operation is one short immediate
//! transaction on the shared connection.
//!
//! A receipt is the item's `seq` and a fresh ULID (`<seq>.<ulid>`): an ack or a release finds the
//! item by its rowid and checks that the receipt is still the item's current one, so no index of
//! receipts has to be written at every receive and ack.
//!
//! The statements that run on the database thread are in `rows`; the ack made by the database
//! call that commits a turn in `settle`; wake-ups, the hand-over to idle workers and the pool's
//! watch here.

mod rows;
mod settle;

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};
use switchboard_engine::{Clock, Enqueued, QueueError, WorkItem, WorkQueue};
use tokio::sync::Notify;
use tokio::sync::futures::{Notified, OwnedNotified};

use crate::db::{Db, DbError, atomic};
pub use rows::Delivery;
pub(crate) use rows::{DEAD_LETTERS, forget_tenant};
use rows::{Enqueue, Limits, Received, ack_in, any_queued, enqueue_in, held_by, receive_now, time};
// The store's tests check that this statement keeps its plan.
#[cfg(test)]
pub(crate) use rows::NEXT_IN_GROUP;
pub(crate) use settle::SettleOnCommit;
use settle::lock;

#[derive(Debug, Clone)]
pub struct QueueConfig {
    /// How long a received item stays invisible. Keep it well above the handler's own timeout
    /// (six times, as on AWS), or slow items get delivered twice.
    pub visibility_timeout: Duration,
    /// Receives after which an item goes to the dead letters instead (at least 1).
    pub max_receives: u32,
    pub dedup_window: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self { visibility_timeout: Duration::from_secs(30), max_receives: 5, dedup_window: Duration::from_secs(5 * 60) }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    pub group_id: String,
    pub dedup_id: String,
    pub body: String,
    pub receive_count: u32,
    pub enqueued_at: DateTime<Utc>,
    pub dead_at: DateTime<Utc>,
}

/// Items by state. `ready` includes items waiting behind their group's head;
/// `ready + in_flight + delayed` is everything still queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    pub ready: u64,
    /// Heads received and not acked, visibility not yet expired.
    pub in_flight: u64,
    /// Heads released with a delay that has not passed yet.
    pub delayed: u64,
    pub dead: u64,
}

/// The SQLite FIFO queue. Clones share the database and the wake-ups.
#[derive(Debug, Clone)]
pub struct SqliteWorkQueue {
    db: Db,
    clock: Arc<dyn Clock>,
    limits: Limits,
    signals: Arc<Signals>,
}

#[derive(Debug, Default)]
struct Signals {
    /// Something may have become deliverable.
    work: Arc<Notify>,
    /// Workers waiting for work (see [`SqliteWorkQueue::idle`]).
    idle: AtomicUsize,
    /// Items received for idle workers by the enqueue that made them deliverable, in the order
    /// received (see [`SqliteWorkQueue::enqueue_raw_with`]).
    handed: Mutex<VecDeque<Delivery>>,
    /// An item left the queue (acked or dead-lettered).
    settled: Notify,
    /// The pool's watch for heads coming due (see [`SqliteWorkQueue::next_due`]): told of a
    /// release's delay, and of a new head while it listens.
    watcher: Notify,
    /// Set while the watch waits on an empty queue: the next new head tells it.
    watcher_listens: AtomicBool,
}

impl Signals {
    fn handed(&self) -> std::sync::MutexGuard<'_, VecDeque<Delivery>> {
        lock(&self.handed)
    }

    fn waiting_more_than_handed(&self) -> bool {
        self.idle.load(Ordering::Acquire) > self.handed().len()
    }
}

/// A worker counted as waiting (see [`SqliteWorkQueue::idle`]).
#[derive(Debug)]
pub(crate) struct Idle(Arc<Signals>);

impl Drop for Idle {
    fn drop(&mut self) {
        self.0.idle.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the pool's watch learns from one look ([`SqliteWorkQueue::next_due`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Due {
    /// Whether any item is queued (ready, in flight or delayed).
    pub(crate) queued: bool,
    /// The earliest `visible_at` after the instant asked about.
    pub(crate) at: Option<i64>,
    /// How many heads became deliverable after that instant and by now: as many idle workers are
    /// woken, each to take one with its receive.
    pub(crate) come_due: usize,
}

impl SqliteWorkQueue {
    pub fn new(db: Db, clock: Arc<dyn Clock>, config: QueueConfig) -> Self {
        let limits = Limits {
            visibility_ms: millis(config.visibility_timeout),
            dedup_ms: millis(config.dedup_window),
            max_receives: config.max_receives.max(1),
        };
        Self { db, clock, limits, signals: Arc::default() }
    }

    /// Enqueues `body` at the tail of `group_id`, unless `dedup_id` was seen within the window.
    pub async fn enqueue_raw(&self, group_id: &str, dedup_id: &str, body: &str) -> Result<Enqueued, QueueError> {
        Ok(self.enqueue_raw_with(group_id, dedup_id, body, |_| Ok(())).await?.0)
    }

    /// [`SqliteWorkQueue::enqueue_raw`], with the write `with` made in the same database call and
    /// transaction: both are kept or neither (a duplicate keeps `with`'s write too).
    pub async fn enqueue_raw_with<T: Send + 'static>(
        &self,
        group_id: &str,
        dedup_id: &str,
        body: &str,
        with: impl FnOnce(&Connection) -> Result<T, DbError> + Send + 'static,
    ) -> Result<(Enqueued, T), QueueError> {
        let Ok(enqueued) = self
            .enqueue_raw_unless::<_, std::convert::Infallible>(group_id, dedup_id, body, |c, _| with(c).map(Ok))
            .await?;
        Ok(enqueued)
    }

    /// [`SqliteWorkQueue::enqueue_raw_with`], with `with` told whether the item is new (not a
    /// duplicate) and able to stop the enqueue: when it answers `Err(stop)` nothing is written,
    /// neither its writes nor the item, and the call answers `Err(stop)`.
    pub async fn enqueue_raw_unless<T: Send + 'static, S: Send + 'static>(
        &self,
        group_id: &str,
        dedup_id: &str,
        body: &str,
        with: impl FnOnce(&Connection, bool) -> Result<Result<T, S>, DbError> + Send + 'static,
    ) -> Result<Result<(Enqueued, T), S>, QueueError> {
        let (group_id, dedup_id, body) = (group_id.to_owned(), dedup_id.to_owned(), body.to_owned());
        let clock = Arc::clone(&self.clock);
        let limits = self.limits;
        let signals = Arc::clone(&self.signals);
        let called = self
            .db
            .call(move |conn| {
                let now = clock.now().timestamp_millis();
                let item = (group_id.as_str(), dedup_id.as_str(), body.as_str());
                enqueue_in(conn, now, limits, item, with, || signals.waiting_more_than_handed())
            })
            .await
            .map_err(queue_error)?;
        let Enqueue { outcome, head, received, done } = match called {
            Ok(enqueued) => enqueued,
            Err(stop) => return Ok(Err(stop)),
        };
        if let Some(delivery) = received.and_then(|r| self.after_receive(r)) {
            self.signals.handed().push_back(delivery);
        }
        // Only a new head is deliverable now. An item behind others of its group becomes
        // deliverable when the ack before it advances the group, and that ack wakes a worker
        // (or takes the item itself): waking one now would only buy a receive that finds nothing.
        if head {
            self.wake_one();
            // Its visibility timeout will need watching; a watch that found the queue empty
            // waits to hear of it (one load per head while it does not).
            if self.signals.watcher_listens.load(Ordering::Relaxed)
                && self.signals.watcher_listens.swap(false, Ordering::AcqRel)
            {
                self.signals.watcher.notify_one();
            }
        }
        Ok(Ok((outcome, done)))
    }

    /// Next deliverable item or None. SQS FIFO rules: see the module docs.
    pub async fn receive(&self) -> Result<Option<Delivery>, QueueError> {
        let clock = Arc::clone(&self.clock);
        let limits = self.limits;
        let received =
            self.db.call(move |conn| receive_now(conn, clock.as_ref(), limits)).await.map_err(queue_error)?;
        Ok(self.after_receive(received))
    }

    /// Logs and signals what a receive dead-lettered; the delivery, if any.
    fn after_receive(&self, received: Received) -> Option<Delivery> {
        let limits = self.limits;
        for (group_id, dedup_id) in &received.dead {
            tracing::warn!(
                group_id = %group_id,
                dedup_id = %dedup_id,
                max_receives = limits.max_receives,
                "work item moved to the dead letters"
            );
        }
        if !received.dead.is_empty() {
            self.signals.settled.notify_waiters();
            // The dead items' groups may have deliverable heads now.
            self.wake();
        }
        received.delivery
    }

    /// Deletes the item if `receipt` is still its current receipt (a receipt goes stale when the
    /// visibility timeout passed and the item was received again). Returns whether it deleted.
    pub async fn ack(&self, receipt: &str) -> Result<bool, QueueError> {
        let receipt = receipt.to_owned();
        let deleted = self.db.call(move |conn| ack_in(conn, &receipt)).await.map_err(queue_error)?;
        if deleted {
            self.signals.settled.notify_waiters();
            // At most one item (the group's next head) became deliverable.
            self.wake_one();
        }
        Ok(deleted)
    }

    /// [`SqliteWorkQueue::ack`] then [`SqliteWorkQueue::receive`], in one database call: what a
    /// worker does between two items. The receive happens whether or not the ack deleted.
    pub async fn ack_and_receive(&self, receipt: &str) -> Result<(bool, Option<Delivery>), QueueError> {
        let receipt = receipt.to_owned();
        let clock = Arc::clone(&self.clock);
        let limits = self.limits;
        let (deleted, received) = self
            .db
            .call(move |conn| {
                let deleted = ack_in(conn, &receipt)?;
                Ok((deleted, receive_now(conn, clock.as_ref(), limits)?))
            })
            .await
            .map_err(queue_error)?;
        Ok((deleted, self.after_ack_and_receive(deleted, Some(received))))
    }

    /// Signals what an ack and the receive after it (if one was made) did; the delivery.
    fn after_ack_and_receive(&self, deleted: bool, received: Option<Received>) -> Option<Delivery> {
        let looked = received.is_some();
        let delivery = received.and_then(|r| self.after_receive(r));
        if deleted {
            self.signals.settled.notify_waiters();
            // The ack may have made the group's next head deliverable. A caller that looked took
            // an item already (perhaps that one), so another worker may find more; one that did
            // not look leaves it to another worker.
            if delivery.is_some() || !looked {
                self.wake_one();
            }
        }
        delivery
    }

    /// A settlement of the item `receipt` holds that the database call committing the item's
    /// turn makes in its own transaction (see [`SettleOnCommit`]); `receive_next` also receives
    /// the worker's next item there, as [`SqliteWorkQueue::ack_and_receive`] does.
    pub(crate) fn settle_on_commit(&self, receipt: &str, receive_next: bool) -> SettleOnCommit {
        SettleOnCommit::new(receipt, receive_next, Arc::clone(&self.clock), self.limits, Arc::clone(&self.signals.work))
    }

    /// What `settle`'s commit did, if it ran: whether it acked, the next item if it received
    /// one, and the wake-up registered before it looked. Signals as
    /// [`SqliteWorkQueue::ack_and_receive`] does. Only for a turn that committed: a settlement
    /// run in a group whose commit then failed was rolled back with it.
    pub(crate) fn settled(&self, settle: &SettleOnCommit) -> Option<(bool, Option<Delivery>, Pin<Box<OwnedNotified>>)> {
        let (deleted, received, armed) = settle.take()?;
        let woken = armed.unwrap_or_else(|| Box::pin(self.woken()));
        Some((deleted, self.after_ack_and_receive(deleted, received), woken))
    }

    /// Makes the item visible again after `delay` (like ChangeMessageVisibility); false if the
    /// receipt is stale. The receipt stays good until the item is received again.
    pub async fn release(&self, receipt: &str, delay: Duration) -> Result<bool, QueueError> {
        let receipt = receipt.to_owned();
        let clock = Arc::clone(&self.clock);
        let delay_ms = millis(delay);
        let released = self
            .db
            .call(move |conn| {
                let now = clock.now().timestamp_millis();
                let tx = atomic(conn)?;
                let Some((_, group_id)) = held_by(&tx, &receipt)? else {
                    return Ok(false);
                };
                let state = if delay_ms > 0 { "delayed" } else { "ready" };
                tx.prepare_cached("UPDATE queue_groups SET visible_at = ?2, state = ?3 WHERE group_id = ?1")?
                    .execute(params![group_id, now.saturating_add(delay_ms), state])?;
                tx.commit()?;
                Ok(true)
            })
            .await
            .map_err(queue_error)?;
        match (released, delay_ms > 0) {
            (false, _) => {}
            // Deliverable when the delay ends: the pool's watch wakes a worker then.
            (true, true) => self.signals.watcher.notify_one(),
            (true, false) => self.wake_one(),
        }
        Ok(released)
    }

    /// Dead letters in the order they died, oldest first.
    pub async fn dead_letters(&self, limit: usize) -> Result<Vec<DeadLetter>, QueueError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.db
            .call(move |conn| {
                let mut stmt = conn.prepare_cached(DEAD_LETTERS)?;
                let rows = stmt.query_map([limit], |row| {
                    Ok(DeadLetter {
                        group_id: row.get(0)?,
                        dedup_id: row.get(1)?,
                        body: row.get(2)?,
                        receive_count: row.get(3)?,
                        enqueued_at: time(row.get(4)?)?,
                        dead_at: time(row.get(5)?)?,
                    })
                })?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .await
            .map_err(queue_error)
    }

    /// How many of `tenant`'s items are in the dead letters (its groups are `<tenant>:<conversation>`).
    pub async fn dead_letters_of(&self, tenant: &switchboard_domain::TenantId) -> Result<u64, QueueError> {
        // `:` and the next character bound the tenant's groups (tenant ids have no `:`).
        let (from, to) = (format!("{tenant}:"), format!("{tenant};"));
        self.db
            .call(move |conn| {
                let mut stmt = conn
                    .prepare_cached("SELECT count(*) FROM queue_dead_letters WHERE group_id >= ?1 AND group_id < ?2")?;
                Ok(stmt.query_row([from, to], |row| row.get::<_, i64>(0))?)
            })
            .await
            .map(|n| u64::try_from(n).unwrap_or(0))
            .map_err(queue_error)
    }

    /// Counts by state. Counts every queued item: meant for operators and tests, not hot paths.
    /// How long the oldest item still queued (ready, in flight or delayed) has waited since it
    /// was enqueued; zero when the queue is empty. The backlog signal, like SQS's
    /// `ApproximateAgeOfOldestMessage`.
    pub async fn oldest_item_age(&self) -> Result<Duration, QueueError> {
        let clock = Arc::clone(&self.clock);
        self.db
            .call(move |conn| {
                let now = clock.now().timestamp_millis();
                let oldest: Option<i64> =
                    conn.prepare_cached("SELECT min(enqueued_at) FROM queue_items")?.query_row([], |r| r.get(0))?;
                let ms = oldest.map_or(0, |t| u64::try_from(now.saturating_sub(t)).unwrap_or(0));
                Ok(Duration::from_millis(ms))
            })
            .await
            .map_err(queue_error)
    }

    pub async fn stats(&self) -> Result<QueueStats, QueueError> {
        let clock = Arc::clone(&self.clock);
        self.db
            .call(move |conn| {
                let now = clock.now().timestamp_millis();
                let counts: [i64; 4] = conn
                    .prepare_cached(
                        "SELECT (SELECT count(*) FROM queue_items),
                                (SELECT count(*) FROM queue_groups
                                 WHERE visible_at > ?1 AND state = 'in_flight'),
                                (SELECT count(*) FROM queue_groups
                                 WHERE visible_at > ?1 AND state = 'delayed'),
                                (SELECT count(*) FROM queue_dead_letters)",
                    )?
                    .query_row([now], |r| Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?]))?;
                let [queued, in_flight, delayed, dead] = counts.map(|n| u64::try_from(n).unwrap_or(0));
                Ok(QueueStats { ready: queued.saturating_sub(in_flight + delayed), in_flight, delayed, dead })
            })
            .await
            .map_err(queue_error)
    }

    /// An item an enqueue received for an idle worker, if one is waiting to be taken: look here
    /// before receiving. The oldest first.
    pub(crate) fn take_handed(&self) -> Option<Delivery> {
        self.signals.handed().pop_front()
    }

    /// Counts a worker as waiting for work until the guard is dropped: while more workers wait
    /// than items were handed to them, an enqueue that makes a new head deliverable receives it
    /// in its own database call and hands it over ([`SqliteWorkQueue::take_handed`]).
    pub(crate) fn idle(&self) -> Idle {
        self.signals.idle.fetch_add(1, Ordering::AcqRel);
        Idle(Arc::clone(&self.signals))
    }

    /// Wakes idle workers (called after enqueue/ack/release internally; public so that a test
    /// which advanced a manual clock can wake them).
    pub fn wake(&self) {
        self.signals.work.notify_waiters();
    }

    /// Wakes one idle worker (or lets the next one to wait go straight on): enough when one item
    /// became deliverable, and it spares the others a receive that would find nothing.
    fn wake_one(&self) {
        self.signals.work.notify_one();
    }

    /// Workers counted as waiting (see [`SqliteWorkQueue::idle`]).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.signals.idle.load(Ordering::Acquire)
    }

    /// The queue's clock, in the milliseconds `visible_at` holds.
    pub(crate) fn now_ms(&self) -> i64 {
        self.clock.now().timestamp_millis()
    }

    /// What the pool's watch needs: whether any item is queued, the earliest instant after
    /// `after_ms` at which a head becomes deliverable again — the end of a visibility timeout or
    /// of a release's delay, which no enqueue or ack announces — and how many did in
    /// `(after_ms, now_ms]`. Index seeks only.
    pub(crate) async fn next_due(&self, after_ms: i64, now_ms: i64) -> Result<Due, QueueError> {
        self.db
            .call(move |conn| {
                let queued = any_queued(conn)?;
                let at: Option<i64> = conn
                    .prepare_cached(
                        "SELECT visible_at FROM queue_groups WHERE visible_at > ?1 ORDER BY visible_at LIMIT 1",
                    )?
                    .query_row([after_ms], |r| r.get(0))
                    .optional()?;
                let come_due = match at {
                    Some(at) if at <= now_ms => conn
                        .prepare_cached("SELECT count(*) FROM queue_groups WHERE visible_at > ?1 AND visible_at <= ?2")?
                        .query_row([after_ms, now_ms], |r| r.get::<_, i64>(0))?,
                    _ => 0,
                };
                Ok(Due { queued, at, come_due: usize::try_from(come_due).unwrap_or(0) })
            })
            .await
            .map_err(queue_error)
    }

    /// Wakes `n` idle workers, or all of them when no more than `n` wait.
    pub(crate) fn wake_some(&self, n: usize) {
        if n >= self.signals.idle.load(Ordering::Acquire) {
            self.wake();
        } else {
            for _ in 0..n {
                self.wake_one();
            }
        }
    }

    /// Registers the watch's wake-up and has the next new head send it; call it before
    /// [`SqliteWorkQueue::next_due`], and [`SqliteWorkQueue::ignore_heads`] when that look found
    /// items queued (then the watch's own timer will do).
    pub(crate) fn watcher_woken(&self) -> Pin<Box<Notified<'_>>> {
        let mut woken = Box::pin(self.signals.watcher.notified());
        woken.as_mut().enable();
        self.signals.watcher_listens.store(true, Ordering::Release);
        woken
    }

    /// New heads stop telling the watch (see [`SqliteWorkQueue::watcher_woken`]).
    pub(crate) fn ignore_heads(&self) {
        self.signals.watcher_listens.store(false, Ordering::Release);
    }

    /// Half the visibility timeout: a watch that looks at least this often sees every receive's
    /// timeout before it ends.
    pub(crate) fn half_visibility(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.limits.visibility_ms / 2).unwrap_or(0).max(1))
    }

    /// A wake-up to wait for. Enable it before looking for work, or a wake in between is lost.
    pub(crate) fn woken(&self) -> OwnedNotified {
        Arc::clone(&self.signals.work).notified_owned()
    }

    /// Resolves when nothing is ready, in flight or delayed: every item was acked or
    /// dead-lettered. Driven by the ack and dead-letter notifications, never by polling.
    pub async fn wait_idle(&self) -> Result<(), QueueError> {
        loop {
            let settled = self.signals.settled.notified();
            tokio::pin!(settled);
            // Registered before the check, so an ack between the check and the wait still counts.
            settled.as_mut().enable();
            if self.is_empty().await? {
                return Ok(());
            }
            settled.await;
        }
    }

    async fn is_empty(&self) -> Result<bool, QueueError> {
        self.db.call(|conn| Ok(!any_queued(conn)?)).await.map_err(queue_error)
    }
}

#[async_trait]
impl WorkQueue for SqliteWorkQueue {
    async fn enqueue(&self, item: &WorkItem) -> Result<Enqueued, QueueError> {
        self.enqueue_raw(&item.group_id(), &item.dedup_id(), &body_of(item)?).await
    }

    async fn queued_behind(&self, item: &WorkItem, max: usize) -> Result<Vec<WorkItem>, QueueError> {
        let (group, dedup, max) = (item.group_id(), item.dedup_id(), i64::try_from(max).unwrap_or(i64::MAX));
        let bodies = self.db.call(move |c| rows::bodies_behind(c, &group, &dedup, max)).await.map_err(queue_error)?;
        // A body that does not parse ends the look: it fails on its own delivery.
        Ok(bodies.iter().map_while(|b| serde_json::from_str(b).ok()).collect())
    }
}

/// A work item as the queue stores it.
pub(crate) fn body_of(item: &WorkItem) -> Result<String, QueueError> {
    serde_json::to_string(item)
        .map_err(|e| QueueError { message: format!("work item does not serialise: {e}"), retryable: false })
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn queue_error(e: DbError) -> QueueError {
    QueueError { message: e.to_string(), retryable: e.retryable() }
}
