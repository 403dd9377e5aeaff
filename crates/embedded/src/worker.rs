//! The embedded profile's consumers: a pool of tokio tasks that take items from the
//! [`SqliteWorkQueue`], hand them to an [`ItemHandler`] and ack or release them — what the SQS
//! event source mapping does for a Lambda. Ordering and the one-in-flight-per-group rule come
//! from the queue; this module neither reorders nor batches.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::futures::OwnedNotified;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::queue::{Delivery, Due, SqliteWorkQueue};

/// How long a worker whose receive failed (the database busy or failing) waits before it looks
/// again.
const RECEIVE_RETRY: Duration = Duration::from_millis(500);

/// Why an item failed. `retry_after` overrides the pool's backoff (a rate limit's Retry-After).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemFailure {
    pub message: String,
    pub retry_after: Option<Duration>,
}

/// Processes one delivery. `Ok` acks it; `Err` releases it for a later retry, and after the
/// queue's `max_receives` it lands in the dead letters. Deliveries are at least once: a handler
/// must tolerate seeing an item again (and `receive_count` tells it when it does). A panic fails
/// only its own item, like an `Err` without `retry_after`.
#[async_trait]
pub trait ItemHandler: Send + Sync + 'static {
    async fn handle(&self, delivery: &Delivery) -> Result<(), ItemFailure>;
}

/// Running workers. Dropping the pool without [`WorkerPool::shutdown`] also stops them, but
/// without waiting.
#[derive(Debug)]
pub struct WorkerPool {
    queue: SqliteWorkQueue,
    stop: watch::Sender<bool>,
    workers: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    /// Starts `workers` tokio tasks (call it inside a tokio runtime); each loops: receive →
    /// handle → ack on Ok, release(retry_after or a backoff of min(2^(receive_count-1) s, 60 s)
    /// on Err). When nothing is deliverable a worker waits for a wake-up and nothing else: an
    /// enqueue, ack or release that makes a head deliverable wakes one, and one more task, the
    /// pool's watch, wakes them when a head comes due that nobody announces — a visibility timeout
    /// or a release's delay ending (see `watch_dues`). `idle_poll` is the longest the watch goes
    /// without looking while items are queued (at most half the visibility timeout is used); with
    /// the queue empty it does not look until an item arrives, so an idle pool makes no database
    /// call at all.
    pub fn start(queue: SqliteWorkQueue, handler: Arc<dyn ItemHandler>, workers: usize, idle_poll: Duration) -> Self {
        let (stop, _) = watch::channel(false);
        let mut tasks: Vec<JoinHandle<()>> = (0..workers)
            .map(|id| {
                let worker = Worker { queue: queue.clone(), handler: Arc::clone(&handler), stop: stop.subscribe() };
                tokio::spawn(worker.run().instrument(tracing::info_span!("worker", id)))
            })
            .collect();
        let look_every = idle_poll.min(queue.half_visibility());
        tasks.push(tokio::spawn(watch_dues(queue.clone(), look_every, stop.subscribe())));
        Self { queue, stop, workers: tasks }
    }

    /// Stops taking new items and waits for items in hand to finish. Items an enqueue received
    /// for a worker that no worker took are handed back to the queue.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        for worker in std::mem::take(&mut self.workers) {
            if let Err(e) = worker.await {
                tracing::error!(error = %e, "worker task ended abnormally");
            }
        }
        while let Some(delivery) = self.queue.take_handed() {
            if let Err(e) = self.queue.release(&delivery.receipt, Duration::ZERO).await {
                tracing::warn!(group_id = %delivery.group_id, dedup_id = %delivery.dedup_id, error = %e,
                    "release failed; the item will run again after the visibility timeout");
            }
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

struct Worker {
    queue: SqliteWorkQueue,
    handler: Arc<dyn ItemHandler>,
    stop: watch::Receiver<bool>,
}

/// What a worker does next.
enum Next {
    /// Run this item, taken in the same database call as the last ack.
    Item(Delivery),
    /// Look for work.
    Look,
    /// Wait for a wake-up: the last ack's receive found nothing, after this wake-up was
    /// registered, so looking again at once would find nothing either.
    Wait(Pin<Box<OwnedNotified>>),
}

impl Worker {
    async fn run(mut self) {
        let mut next = Next::Look;
        while !self.stopping() {
            let woken = match std::mem::replace(&mut next, Next::Look) {
                Next::Item(delivery) => {
                    next = self.process(delivery).await;
                    continue;
                }
                Next::Wait(woken) => woken,
                Next::Look => {
                    if let Some(delivery) = self.queue.take_handed() {
                        // Received for an idle worker by the enqueue that made it deliverable.
                        next = self.process(delivery).await;
                        continue;
                    }
                    let mut woken = Box::pin(self.queue.woken());
                    // Registered before receiving, so work that arrives while we look is not missed.
                    woken.as_mut().enable();
                    match self.queue.receive().await {
                        Ok(Some(delivery)) if self.stopping() => {
                            // Shutdown began while we were receiving: hand the item straight back.
                            self.release(&delivery, Duration::ZERO).await;
                            continue;
                        }
                        Ok(Some(delivery)) => {
                            next = self.process(delivery).await;
                            continue;
                        }
                        Ok(None) => woken,
                        Err(e) => {
                            tracing::warn!(error = %e, retryable = e.retryable, "receiving work failed");
                            tokio::select! {
                                () = tokio::time::sleep(RECEIVE_RETRY) => {}
                                _ = self.stop.changed() => {}
                            }
                            continue;
                        }
                    }
                }
            };
            // Counted as waiting, so that an enqueue may receive an item for this worker. No
            // timer: heads that come due unannounced are the pool's watch's to announce.
            let _idle = self.queue.idle();
            tokio::select! {
                () = woken => {}
                _ = self.stop.changed() => {}
            }
        }
        if let Next::Item(delivery) = next {
            // Taken with the last ack as the pool began to stop: handed straight back.
            self.release(&delivery, Duration::ZERO).await;
        }
    }

    fn stopping(&self) -> bool {
        // Copied out, so the watch's read lock is never held across an await.
        *self.stop.borrow()
    }

    /// Runs one item and settles it; after an ack, the next item if one was deliverable.
    async fn process(&self, delivery: Delivery) -> Next {
        // A task of its own, so that a panic in the handler fails this item and nothing else.
        let handler = Arc::clone(&self.handler);
        let item = delivery.clone();
        // The turn's commit acks the item and receives the next one in its own database call.
        let settle = self.queue.settle_on_commit(&delivery.receipt, !self.stopping());
        let outcome = tokio::spawn(settle.clone().scope(async move { handler.handle(&item).await })).await;
        let committed = self.queue.settled(&settle);
        if !matches!(outcome, Ok(Ok(()))) {
            // The turn failed although a commit of it settled the item: the item's own release
            // below then finds its receipt stale, and the next item taken with the commit goes
            // back (a no-op too when that commit was rolled back).
            if let Some((_, Some(next), _)) = &committed {
                self.release(next, Duration::ZERO).await;
            }
        }
        match outcome {
            Ok(Ok(())) => {
                if let Some(next) = self.after_success(&delivery, committed).await {
                    return next;
                }
            }
            Ok(Err(failure)) => {
                let delay = failure.retry_after.unwrap_or_else(|| backoff(delivery.receive_count));
                tracing::warn!(
                    group_id = %delivery.group_id,
                    dedup_id = %delivery.dedup_id,
                    receive_count = delivery.receive_count,
                    error = %failure.message,
                    retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    "work item failed"
                );
                self.release(&delivery, delay).await;
            }
            Err(e) => {
                tracing::error!(
                    group_id = %delivery.group_id,
                    dedup_id = %delivery.dedup_id,
                    receive_count = delivery.receive_count,
                    panicked = e.is_panic(),
                    "work item handler crashed"
                );
                self.release(&delivery, backoff(delivery.receive_count)).await;
            }
        }
        Next::Look
    }

    /// Acks an item that ran (unless its turn's commit did) and takes the next one; `None`
    /// when the ack failed, and the item will run again.
    async fn after_success(
        &self,
        delivery: &Delivery,
        committed: Option<(bool, Option<Delivery>, Pin<Box<OwnedNotified>>)>,
    ) -> Option<Next> {
        // Between two items, the ack and the next receive are one database call (the
        // wake-up registered before it): the commit's, or else this one; a stopping
        // worker only acks.
        let settled = match committed {
            Some((acked, next, woken)) => Ok((acked, next, woken)),
            None => {
                let mut woken = Box::pin(self.queue.woken());
                woken.as_mut().enable();
                if self.stopping() {
                    self.queue.ack(&delivery.receipt).await.map(|acked| (acked, None, woken))
                } else {
                    self.queue.ack_and_receive(&delivery.receipt).await.map(|(acked, next)| (acked, next, woken))
                }
            }
        };
        match settled {
            Ok((acked, next, woken)) => {
                if !acked {
                    tracing::warn!(
                        group_id = %delivery.group_id,
                        dedup_id = %delivery.dedup_id,
                        "receipt went stale before the ack (visibility timeout too short?); \
                         the item will run again"
                    );
                }
                Some(next.map_or(Next::Wait(woken), Next::Item))
            }
            Err(e) => {
                tracing::warn!(
                    group_id = %delivery.group_id,
                    dedup_id = %delivery.dedup_id,
                    error = %e,
                    "ack failed; the item will run again after the visibility timeout"
                );
                None
            }
        }
    }

    /// Failing to release is not fatal: the visibility timeout redelivers the item anyway.
    async fn release(&self, delivery: &Delivery, delay: Duration) {
        match self.queue.release(&delivery.receipt, delay).await {
            Ok(true) => {}
            Ok(false) => tracing::debug!(
                group_id = %delivery.group_id,
                dedup_id = %delivery.dedup_id,
                "receipt went stale before the release"
            ),
            Err(e) => tracing::warn!(
                group_id = %delivery.group_id,
                dedup_id = %delivery.dedup_id,
                error = %e,
                "release failed; the item will run again after the visibility timeout"
            ),
        }
    }
}

/// The pool's watch: wakes idle workers once a head has come due that no enqueue, ack or release
/// announced — a received item whose visibility timeout ended (its worker hung or crashed), or a
/// released item whose delay ended. It looks up the earliest such instant, sleeps until then (at
/// most `look_every`, so that the timeouts of items received meanwhile are seen before they end)
/// and, once it has passed, counts the heads that came due since its last wake-up and wakes as
/// many idle workers (each takes one with its receive; the others are spared a receive that
/// would find nothing). A release with a delay tells it at once. With nothing queued it sleeps
/// until the next new head tells it.
async fn watch_dues(queue: SqliteWorkQueue, look_every: Duration, mut stop: watch::Receiver<bool>) {
    // Instants up to here are dealt with: the workers were woken after them (or were looking).
    let mut seen = queue.now_ms();
    while !*stop.borrow() {
        let told = queue.watcher_woken();
        let now = queue.now_ms();
        let due = match queue.next_due(seen, now).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "looking for queued items coming due failed");
                Due { queued: true, at: None, come_due: 0 }
            }
        };
        if due.queued {
            queue.ignore_heads();
        }
        if due.at.is_some_and(|at| at <= now) {
            // One worker per head that came due, each to take one with its receive.
            seen = now;
            queue.wake_some(due.come_due);
            continue;
        }
        let wait = match (due.queued, due.at) {
            (_, Some(at)) => Duration::from_millis(u64::try_from(at - now).unwrap_or(0)).min(look_every),
            (true, None) => look_every,
            (false, None) => {
                // Nothing queued: the next new head or release tells the watch.
                tokio::select! {
                    () = told => {}
                    _ = stop.changed() => {}
                }
                continue;
            }
        };
        tokio::select! {
            () = told => {}
            () = tokio::time::sleep(wait) => {}
            _ = stop.changed() => {}
        }
    }
}

/// min(2^(receive_count-1) s, 60 s): quick first retries, then at most a minute apart.
fn backoff(receive_count: u32) -> Duration {
    let secs = 1u64.checked_shl(receive_count.saturating_sub(1)).unwrap_or(u64::MAX).min(60);
    Duration::from_secs(secs)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::db::Db;
    use crate::queue::{QueueConfig, QueueStats};
    use std::sync::Mutex;
    use switchboard_engine::{Clock, SystemClock};

    fn queue() -> (tempfile::TempDir, Db, SqliteWorkQueue) {
        queue_with(QueueConfig::default())
    }

    fn queue_with(config: QueueConfig) -> (tempfile::TempDir, Db, SqliteWorkQueue) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("q.db")).unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let queue = SqliteWorkQueue::new(db.clone(), clock, config);
        (dir, db, queue)
    }

    /// The longest a test waits for what it expects (a bound on failure, not a timing).
    async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(20), f).await.unwrap_or_else(|_| panic!("{what}: not within 20 s"))
    }

    /// Sends each delivery's body and receive count; fails the first delivery with `retry_after`
    /// when given one, and holds it for good when `hang_first`.
    struct Deliveries {
        seen: tokio::sync::mpsc::UnboundedSender<(String, u32)>,
        retry_after: Option<Duration>,
        hang_first: bool,
    }

    #[async_trait]
    impl ItemHandler for Deliveries {
        async fn handle(&self, delivery: &Delivery) -> Result<(), ItemFailure> {
            let _ = self.seen.send((delivery.body.clone(), delivery.receive_count));
            if delivery.receive_count == 1 {
                if self.hang_first {
                    std::future::pending::<()>().await;
                }
                if let Some(retry_after) = self.retry_after {
                    return Err(ItemFailure { message: "try later".into(), retry_after: Some(retry_after) });
                }
            }
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_pool_makes_no_database_call_however_long_it_waits() {
        // given a pool of 8 whose workers and watch have each looked once and found nothing
        let (_dir, db, queue) = queue();
        let pool = WorkerPool::start(queue.clone(), Arc::new(Nothing), 8, Duration::from_millis(500));
        // (Yielding, not sleeping: paused time does not move while a task is ready.)
        let mut yields = 0;
        while db.calls() < 9 || queue.waiting() < 8 {
            yields += 1;
            assert!(yields < 1_000_000, "the 8 workers' receives and the watch's look did not all happen");
            tokio::task::yield_now().await;
        }
        let calls = db.calls();

        // when a (virtual) minute passes with nothing queued
        tokio::time::sleep(Duration::from_secs(60)).await;

        // then nobody looked: workers wait for a wake-up, the watch for an item
        assert_eq!(db.calls(), calls);
        assert_eq!(queue.waiting(), 8);
        pool.shutdown().await;
    }

    /// Log lines, one message each, to a channel.
    #[derive(Clone)]
    struct LogLines(tokio::sync::mpsc::UnboundedSender<String>);

    impl std::io::Write for LogLines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _ = self.0.send(String::from_utf8_lossy(buf).into_owned());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_watch_and_a_worker_whose_database_calls_fail_say_so_and_keep_going() {
        // given a pool (whose tasks log through this thread's subscriber) on a queue whose table
        // of heads cannot be read
        let (lines, mut logged) = tokio::sync::mpsc::unbounded_channel();
        let writer = LogLines(lines);
        let subscriber = tracing_subscriber::fmt().with_ansi(false).with_writer(move || writer.clone()).finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let (_dir, db, queue) = queue();
        let rename = |from: &'static str, to: &'static str| {
            db.call(move |c| Ok(c.execute_batch(&format!("ALTER TABLE {from} RENAME TO {to}"))?))
        };
        rename("queue_groups", "queue_groups_away").await.unwrap();
        let (seen, mut deliveries) = tokio::sync::mpsc::unbounded_channel();
        let handler = Arc::new(Deliveries { seen, retry_after: Some(Duration::from_millis(50)), hang_first: false });
        let pool = WorkerPool::start(queue.clone(), handler, 1, Duration::from_millis(20));

        // when the watch's look and the worker's receive fail, then the table comes back
        within("both failures logged", async {
            let (mut look, mut receive) = (false, false);
            while !(look && receive) {
                let line = logged.recv().await.unwrap();
                look |= line.contains("looking for queued items coming due failed");
                receive |= line.contains("receiving work failed");
            }
        })
        .await;
        rename("queue_groups_away", "queue_groups").await.unwrap();

        // then both still run: the worker takes the item, and the watch wakes it when the
        // release's delay ends
        queue.enqueue_raw("g", "a", "a").await.unwrap();
        assert_eq!(within("first delivery", deliveries.recv()).await, Some(("a".to_owned(), 1)));
        assert_eq!(within("second delivery", deliveries.recv()).await, Some(("a".to_owned(), 2)));
        pool.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_item_released_with_a_delay_is_delivered_again_once_it_ends_with_no_worker_polling() {
        // given one worker that never looks on its own (an hour between the watch's looks)
        let (_dir, _db, queue) = queue();
        let (seen, mut deliveries) = tokio::sync::mpsc::unbounded_channel();
        let handler = Arc::new(Deliveries { seen, retry_after: Some(Duration::from_millis(50)), hang_first: false });
        let pool = WorkerPool::start(queue.clone(), handler, 1, Duration::from_secs(3600));

        // when its item fails and is released for 50 ms
        queue.enqueue_raw("g", "a", "a").await.unwrap();
        assert_eq!(within("first delivery", deliveries.recv()).await, Some(("a".to_owned(), 1)));

        // then the watch wakes the worker when the delay ends, and the item runs again
        assert_eq!(within("second delivery", deliveries.recv()).await, Some(("a".to_owned(), 2)));
        within("acked", queue.wait_idle()).await.unwrap();
        pool.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_item_whose_visibility_timeout_ends_goes_to_another_worker_with_no_worker_polling() {
        // given two workers that never look on their own, and a 200 ms visibility timeout
        let config = QueueConfig { visibility_timeout: Duration::from_millis(200), ..QueueConfig::default() };
        let (_dir, _db, queue) = queue_with(config);
        let (seen, mut deliveries) = tokio::sync::mpsc::unbounded_channel();
        let handler = Arc::new(Deliveries { seen, retry_after: None, hang_first: true });
        let pool = WorkerPool::start(queue.clone(), handler, 2, Duration::from_secs(3600));

        // when the first worker hangs on its item
        queue.enqueue_raw("g", "a", "a").await.unwrap();
        assert_eq!(within("first delivery", deliveries.recv()).await, Some(("a".to_owned(), 1)));

        // then the watch wakes the other one when the timeout ends, and it runs the item again
        assert_eq!(within("redelivery", deliveries.recv()).await, Some(("a".to_owned(), 2)));
        within("acked", queue.wait_idle()).await.unwrap();
        // (the hung worker keeps its task: dropped, not shut down)
        drop(pool);
    }

    /// Until `n` workers of the pool wait for work.
    async fn all_waiting(queue: &SqliteWorkQueue, n: usize) {
        within("all waiting", async {
            while queue.waiting() < n {
                tokio::task::yield_now().await;
            }
        })
        .await;
    }

    /// Receives each body it is given and holds its item until `release` is dropped.
    struct Hold {
        seen: tokio::sync::mpsc::UnboundedSender<String>,
        release: tokio::sync::watch::Receiver<bool>,
    }

    #[async_trait]
    impl ItemHandler for Hold {
        async fn handle(&self, delivery: &Delivery) -> Result<(), ItemFailure> {
            let _ = self.seen.send(delivery.body.clone());
            let mut release = self.release.clone();
            let _ = release.changed().await;
            Ok(())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_head_coming_due_wakes_one_idle_worker_not_the_whole_pool() {
        // given 32 idle workers (as `serve` runs) that never look on their own
        let (_dir, db, queue) = queue();
        let (seen, mut deliveries) = tokio::sync::mpsc::unbounded_channel();
        let handler = Arc::new(Deliveries { seen, retry_after: Some(Duration::from_millis(50)), hang_first: false });
        let pool = WorkerPool::start(queue.clone(), handler, 32, Duration::from_secs(3600));
        all_waiting(&queue, 32).await;

        // when an item fails and is released for 50 ms, then comes due
        queue.enqueue_raw("g", "a", "a").await.unwrap();
        assert_eq!(within("first delivery", deliveries.recv()).await, Some(("a".to_owned(), 1)));
        let calls = db.calls();
        assert_eq!(within("second delivery", deliveries.recv()).await, Some(("a".to_owned(), 2)));
        within("acked", queue.wait_idle()).await.unwrap();

        // then one worker was woken for it: the release, the watch's looks and count, one
        // receive, the ack (6 to 9 calls) — not a receive by each of the 32
        let made = db.calls() - calls;
        assert!(made < 16, "{made} database calls from the release to the ack");
        pool.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn heads_coming_due_together_wake_as_many_workers_and_run_side_by_side() {
        // given three items of three conversations received at one instant of a manual clock (so
        // that their visibility timeouts end together), and four idle workers that never look on
        // their own, each holding the item it gets until told
        let dir = tempfile::tempdir().unwrap();
        let clock = switchboard_testkit::ManualClock::new();
        let config = QueueConfig { visibility_timeout: Duration::from_millis(100), ..QueueConfig::default() };
        let queue = SqliteWorkQueue::new(Db::open(&dir.path().join("q.db")).unwrap(), clock.clone(), config);
        for g in ["g-1", "g-2", "g-3"] {
            queue.enqueue_raw(g, g, g).await.unwrap();
            queue.receive().await.unwrap().unwrap();
        }
        let (seen, mut deliveries) = tokio::sync::mpsc::unbounded_channel();
        let (release, held) = tokio::sync::watch::channel(false);
        let pool =
            WorkerPool::start(queue.clone(), Arc::new(Hold { seen, release: held }), 4, Duration::from_secs(3600));
        all_waiting(&queue, 4).await;

        // when their timeouts end
        clock.advance_std(Duration::from_millis(200));

        // then the watch wakes three workers, and the three items run side by side, each held by
        // a worker of its own
        let mut bodies = Vec::new();
        for _ in 0..3 {
            bodies.push(within("redelivery", deliveries.recv()).await.unwrap());
        }
        bodies.sort();
        assert_eq!(bodies, ["g-1", "g-2", "g-3"]);
        drop(release);
        within("acked", queue.wait_idle()).await.unwrap();
        pool.shutdown().await;
    }

    struct Nothing;

    #[async_trait]
    impl ItemHandler for Nothing {
        async fn handle(&self, _: &Delivery) -> Result<(), ItemFailure> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn an_enqueue_receives_a_new_head_for_a_waiting_worker_in_its_own_database_call() {
        let (_dir, db, queue) = queue();
        // nobody waiting: the item stays queued for a receive
        queue.enqueue_raw("g-1", "a", "a").await.unwrap();
        assert!(queue.take_handed().is_none());
        assert_eq!(queue.receive().await.unwrap().unwrap().body, "a");

        // a worker waiting: the enqueue's one call also receives the item, for that worker
        let waiting = queue.idle();
        let calls = db.calls();
        queue.enqueue_raw("g-2", "b", "b").await.unwrap();
        assert_eq!(db.calls() - calls, 1);
        let handed = queue.take_handed().expect("handed to the waiting worker");
        assert_eq!((handed.body.as_str(), handed.receive_count), ("b", 1));
        assert_eq!(queue.stats().await.unwrap(), QueueStats { in_flight: 2, ..QueueStats::default() });
        // one waiting worker, one item handed: the next new head is left for a receive
        queue.enqueue_raw("g-3", "c", "c").await.unwrap();
        queue.enqueue_raw("g-4", "d", "d").await.unwrap();
        assert!(queue.take_handed().is_some_and(|d| d.body == "c"));
        assert!(queue.take_handed().is_none(), "only as many handed as workers wait");
        drop(waiting);
        queue.enqueue_raw("g-5", "e", "e").await.unwrap();
        assert!(queue.take_handed().is_none(), "nobody waits any more");
        assert!(queue.ack(&handed.receipt).await.unwrap());
    }

    #[tokio::test]
    async fn items_handed_to_workers_that_stopped_go_back_to_the_queue_on_shutdown() {
        let (_dir, _db, queue) = queue();
        let pool = WorkerPool::start(queue.clone(), Arc::new(Nothing), 0, Duration::from_secs(3600));
        let waiting = queue.idle();
        queue.enqueue_raw("g-1", "a", "a").await.unwrap();
        drop(waiting);
        pool.shutdown().await;
        assert!(queue.take_handed().is_none());
        let again = queue.receive().await.unwrap().expect("released, deliverable again");
        assert_eq!((again.body.as_str(), again.receive_count), ("a", 2));
    }

    /// Commits like the store's turn commit: in one database call that also settles the item
    /// when the worker gave the task a settlement. Records what it saw, then answers `fail_on`'s
    /// item with an error after committing it.
    struct Committing {
        db: Db,
        fail_on: &'static str,
        seen: Mutex<Vec<(String, u32, u64, u64)>>,
        done: tokio::sync::mpsc::UnboundedSender<()>,
    }

    #[async_trait]
    impl ItemHandler for Committing {
        async fn handle(&self, delivery: &Delivery) -> Result<(), ItemFailure> {
            let before = self.db.calls();
            let settle = crate::queue::SettleOnCommit::current().expect("a worker's item has a settlement");
            self.db
                .call(move |c| {
                    settle.run(c);
                    Ok(())
                })
                .await
                .unwrap();
            let after = self.db.calls();
            self.seen.lock().unwrap().push((delivery.body.clone(), delivery.receive_count, before, after));
            let _ = self.done.send(());
            match delivery.body == self.fail_on {
                true => {
                    Err(ItemFailure { message: "failed after its commit".into(), retry_after: Some(Duration::ZERO) })
                }
                false => Ok(()),
            }
        }
    }

    fn committing(db: &Db, fail_on: &'static str) -> (Arc<Committing>, tokio::sync::mpsc::UnboundedReceiver<()>) {
        let (done, handled) = tokio::sync::mpsc::unbounded_channel();
        (Arc::new(Committing { db: db.clone(), fail_on, seen: Mutex::default(), done }), handled)
    }

    #[tokio::test]
    async fn a_turns_commit_acks_its_item_and_takes_the_next_one_in_the_same_database_call() {
        let (_dir, db, queue) = queue();
        queue.enqueue_raw("A", "a", "a").await.unwrap();
        queue.enqueue_raw("B", "b", "b").await.unwrap();
        let (handler, mut handled) = committing(&db, "none");
        let pool = WorkerPool::start(queue.clone(), handler.clone(), 1, Duration::from_secs(3600));
        handled.recv().await.unwrap();
        handled.recv().await.unwrap();
        let seen = handler.seen.lock().unwrap().clone();
        // b came with a's commit: no database call between a's commit and b's handler
        assert_eq!(seen.iter().map(|s| s.0.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(seen[1].2, seen[0].3, "b was received by a's commit");
        assert_eq!(seen[1].3 - seen[1].2, 1, "the commit is the only call");
        pool.shutdown().await;
        // both acked by their commits, nothing left over
        assert_eq!(queue.stats().await.unwrap(), QueueStats::default());
        assert!(queue.receive().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_turn_that_fails_after_its_commit_hands_back_the_next_item_its_commit_took() {
        let (_dir, db, queue) = queue();
        queue.enqueue_raw("A", "a", "a").await.unwrap();
        queue.enqueue_raw("B", "b", "b").await.unwrap();
        let (handler, mut handled) = committing(&db, "a");
        let pool = WorkerPool::start(queue.clone(), handler.clone(), 1, Duration::from_secs(3600));
        // a guard against a hang only (b left in flight would wait out its visibility timeout)
        let guard = Duration::from_secs(20);
        tokio::time::timeout(guard, async {
            handled.recv().await.unwrap();
            handled.recv().await.unwrap();
            queue.wait_idle().await.unwrap();
        })
        .await
        .expect("b ran again");
        pool.shutdown().await;
        let seen: Vec<(String, u32)> = handler.seen.lock().unwrap().iter().map(|s| (s.0.clone(), s.1)).collect();
        // a was acked by its commit, so it does not run again; b, taken by that commit, went back
        // to the queue and ran on its second delivery
        assert_eq!(seen, [("a".to_owned(), 1), ("b".to_owned(), 2)]);
        assert_eq!(queue.stats().await.unwrap(), QueueStats::default());
    }

    #[test]
    fn it_backs_off_exponentially_up_to_a_minute() {
        let secs: Vec<u64> = [0, 1, 2, 3, 6, 7, 64, 200].map(|n| backoff(n).as_secs()).to_vec();
        assert_eq!(secs, [1, 1, 2, 4, 32, 60, 60, 60]);
    }
}
