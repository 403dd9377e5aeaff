#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The SQLite FIFO queue and its worker pool, against a real file and a manual clock: time moves
//! only when a test says so, and tests wait on notifications, never on sleeps.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use switchboard_embedded::db::Db;
use switchboard_embedded::queue::{Delivery, QueueConfig, QueueStats, SqliteWorkQueue};
use switchboard_embedded::worker::{ItemFailure, ItemHandler, WorkerPool};
use switchboard_engine::{Clock, Enqueued};
use switchboard_testkit::ManualClock;
use tempfile::TempDir;
use tokio::sync::{Barrier, oneshot};

const VISIBILITY: Duration = Duration::from_secs(30);
/// Long enough that a pool test passing proves the wake-ups work, not the polling.
const IDLE_POLL: Duration = Duration::from_secs(3600);
/// A guard against hangs only: no test expects to come near it.
const HANG_GUARD: Duration = Duration::from_secs(30);

struct Fixture {
    dir: TempDir,
    clock: Arc<ManualClock>,
    queue: SqliteWorkQueue,
}

impl Fixture {
    fn new() -> Self {
        Self::with(QueueConfig::default())
    }

    fn with(config: QueueConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new();
        let queue = open(&db_path(dir.path()), &clock, config);
        Self { dir, clock, queue }
    }

    async fn enqueue(&self, group: &str, body: &str) {
        let outcome = self.queue.enqueue_raw(group, body, body).await.unwrap();
        assert_eq!(outcome, Enqueued::Queued, "{body} was not queued");
    }

    async fn receive(&self) -> Delivery {
        self.queue.receive().await.unwrap().expect("an item should be deliverable")
    }

    async fn receive_nothing(&self) {
        let delivery = self.queue.receive().await.unwrap();
        assert_eq!(delivery, None, "nothing should be deliverable");
    }

    async fn stats(&self) -> QueueStats {
        self.queue.stats().await.unwrap()
    }
}

fn db_path(dir: &Path) -> PathBuf {
    dir.join("switchboard.db")
}

fn open(path: &Path, clock: &Arc<ManualClock>, config: QueueConfig) -> SqliteWorkQueue {
    let db = Db::open(path).unwrap();
    SqliteWorkQueue::new(db, Arc::clone(clock) as Arc<dyn Clock>, config)
}

fn stats(ready: u64, in_flight: u64, delayed: u64, dead: u64) -> QueueStats {
    QueueStats { ready, in_flight, delayed, dead }
}

#[tokio::test]
async fn it_delivers_a_groups_items_in_order() {
    // given three items of one conversation
    let f = Fixture::new();
    for body in ["a1", "a2", "a3"] {
        f.enqueue("A", body).await;
    }

    // when a consumer receives and acks them one by one
    let mut seen = Vec::new();
    while let Some(delivery) = f.queue.receive().await.unwrap() {
        seen.push(delivery.body.clone());
        assert!(f.queue.ack(&delivery.receipt).await.unwrap());
    }

    // then they came in enqueue order and the queue is empty
    assert_eq!(seen, ["a1", "a2", "a3"]);
    assert_eq!(f.stats().await, QueueStats::default());
}

#[tokio::test]
async fn ack_and_receive_settles_an_item_and_takes_the_next_one_in_one_call() {
    let f = Fixture::new();
    for body in ["a1", "a2", "b1"] {
        f.enqueue(if body.starts_with('a') { "A" } else { "B" }, body).await;
    }
    let a1 = f.receive().await;
    let b1 = f.receive().await;
    assert_eq!((a1.body.as_str(), b1.body.as_str()), ("a1", "b1"));
    // acking a1 frees A's next item, which the same call delivers
    let (acked, next) = f.queue.ack_and_receive(&a1.receipt).await.unwrap();
    assert!(acked);
    assert_eq!(next.map(|d| d.body), Some("a2".to_owned()));
    // a stale receipt acks nothing, and the receive still happens (nothing is deliverable here)
    assert_eq!(f.queue.ack_and_receive(&a1.receipt).await.unwrap(), (false, None));
    assert!(f.queue.ack(&b1.receipt).await.unwrap());
    assert_eq!(f.stats().await, stats(0, 1, 0, 0));
}

#[tokio::test]
async fn the_oldest_items_age_is_the_backlog_until_it_is_acked() {
    let f = Fixture::new();
    assert_eq!(f.queue.oldest_item_age().await.unwrap(), Duration::ZERO, "empty");
    f.enqueue("A", "a1").await;
    f.clock.advance_std(Duration::from_secs(5));
    f.enqueue("B", "b1").await;
    f.clock.advance_std(Duration::from_secs(2));
    assert_eq!(f.queue.oldest_item_age().await.unwrap(), Duration::from_secs(7));
    // in flight still counts (it has not been answered); once acked, the next oldest does
    let first = f.receive().await;
    assert_eq!(first.body, "a1");
    assert_eq!(f.queue.oldest_item_age().await.unwrap(), Duration::from_secs(7));
    assert!(f.queue.ack(&first.receipt).await.unwrap());
    assert_eq!(f.queue.oldest_item_age().await.unwrap(), Duration::from_secs(2));
}

#[tokio::test]
async fn it_holds_back_a_groups_next_item_while_its_head_is_in_flight() {
    // given a conversation with two items, the first received and not yet acked
    let f = Fixture::new();
    f.enqueue("A", "a1").await;
    f.enqueue("A", "a2").await;
    let first = f.receive().await;
    assert_eq!(first.body, "a1");

    // then the second one waits
    f.receive_nothing().await;
    assert_eq!(f.stats().await, stats(1, 1, 0, 0));

    // until the first is acked
    assert!(f.queue.ack(&first.receipt).await.unwrap());
    assert_eq!(f.receive().await.body, "a2");
}

#[tokio::test]
async fn it_delivers_other_groups_while_one_group_is_in_flight() {
    // given two conversations, A's head in flight
    let f = Fixture::new();
    f.enqueue("A", "a1").await;
    f.enqueue("A", "a2").await;
    f.enqueue("B", "b1").await;
    assert_eq!(f.receive().await.body, "a1");

    // when another consumer asks for work
    let other = f.receive().await;

    // then it gets B's head, and nothing more is deliverable
    assert_eq!((other.group_id.as_str(), other.body.as_str()), ("B", "b1"));
    f.receive_nothing().await;
}

#[tokio::test]
async fn it_redelivers_an_item_whose_worker_died() {
    // given an item received by a worker that then dies without acking
    let f = Fixture::new();
    f.enqueue("A", "a1").await;
    let lost = f.receive().await;
    assert_eq!(lost.receive_count, 1);
    f.receive_nothing().await;

    // when the visibility timeout passes
    f.clock.advance_std(VISIBILITY + Duration::from_millis(1));

    // then the same item is delivered again, counted twice, under a new receipt
    let again = f.receive().await;
    assert_eq!((again.dedup_id.as_str(), again.body.as_str()), ("a1", "a1"));
    assert_eq!(again.receive_count, 2);
    assert_eq!(again.enqueued_at, lost.enqueued_at);
    assert_ne!(again.receipt, lost.receipt);

    // and the dead worker's receipt can neither ack nor release it
    assert!(!f.queue.ack(&lost.receipt).await.unwrap());
    assert!(!f.queue.release(&lost.receipt, Duration::ZERO).await.unwrap());
    // nor can a receipt made up from the current one's item, or one of another form
    let (seq, _) = again.receipt.split_once('.').unwrap();
    for forged in
        [format!("{seq}.01JD0000000000000000000000"), seq.to_owned(), "not a receipt".to_owned(), String::new()]
    {
        assert!(!f.queue.ack(&forged).await.unwrap(), "{forged:?}");
        assert!(!f.queue.release(&forged, Duration::ZERO).await.unwrap(), "{forged:?}");
    }
    assert!(f.queue.ack(&again.receipt).await.unwrap());
    assert_eq!(f.stats().await, QueueStats::default());
}

#[tokio::test]
async fn it_redelivers_in_flight_items_after_a_restart() {
    // given an item in flight when the process stops
    let f = Fixture::new();
    f.enqueue("A", "a1").await;
    f.receive().await;
    let Fixture { dir, clock, queue } = f;
    drop(queue);

    // when the process starts again on the same file
    let queue = open(&db_path(dir.path()), &clock, QueueConfig::default());

    // then the item is still invisible until its timeout, then delivered again
    assert_eq!(queue.receive().await.unwrap(), None);
    clock.advance_std(VISIBILITY);
    let again = queue.receive().await.unwrap().expect("redelivered");
    assert_eq!((again.body.as_str(), again.receive_count), ("a1", 2));
}

#[tokio::test]
async fn a_data_directory_from_before_receipts_carried_their_item_loses_the_receipt_index_and_keeps_its_items() {
    // given an item in flight under a receipt of the old form (a bare ULID, found by an index)
    let f = Fixture::new();
    f.enqueue("A", "a1").await;
    f.receive().await;
    let Fixture { dir, clock, queue } = f;
    drop(queue);
    let old = "01JD00000000000000000RECPT";
    let step = switchboard_embedded::schema::MIGRATIONS
        .iter()
        .position(|s| *s == switchboard_embedded::schema::queue::RECEIPTS_BY_SEQ)
        .unwrap();
    let conn = rusqlite::Connection::open(db_path(dir.path())).unwrap();
    conn.execute_batch(&format!(
        "CREATE UNIQUE INDEX queue_items_by_receipt ON queue_items (receipt) WHERE receipt IS NOT NULL;
         UPDATE queue_items SET receipt = '{old}';
         PRAGMA user_version = {step};"
    ))
    .unwrap();
    drop(conn);

    // when the process starts again on the same file
    let queue = open(&db_path(dir.path()), &clock, QueueConfig::default());

    // then the index is gone, the old receipt holds nothing, and the item comes again in time
    let conn = rusqlite::Connection::open(db_path(dir.path())).unwrap();
    let index: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master WHERE name = 'queue_items_by_receipt'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(index, 0);
    assert!(!queue.ack(old).await.unwrap());
    assert_eq!(queue.receive().await.unwrap(), None);
    clock.advance_std(VISIBILITY);
    let again = queue.receive().await.unwrap().expect("redelivered");
    assert_eq!((again.body.as_str(), again.receive_count), ("a1", 2));
    assert!(queue.ack(&again.receipt).await.unwrap());
}

#[tokio::test]
async fn it_dead_letters_an_item_after_max_receives_and_unblocks_its_group() {
    // given a queue that allows two receives, and a conversation whose first item keeps failing
    let f = Fixture::with(QueueConfig { max_receives: 2, ..QueueConfig::default() });
    f.enqueue("A", "poison").await;
    f.enqueue("A", "a2").await;
    let first = f.receive().await;
    assert!(f.queue.release(&first.receipt, Duration::ZERO).await.unwrap());
    let second = f.receive().await;
    assert_eq!((second.body.as_str(), second.receive_count), ("poison", 2));

    // when its second visibility timeout passes too
    f.clock.advance_std(VISIBILITY);

    // then the next receive moves it to the dead letters and delivers the group's next item
    let next = f.receive().await;
    assert_eq!(next.body, "a2");
    let dead = f.queue.dead_letters(10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!((dead[0].group_id.as_str(), dead[0].body.as_str()), ("A", "poison"));
    assert_eq!(dead[0].receive_count, 2);
    assert_eq!(dead[0].enqueued_at, first.enqueued_at);
    assert_eq!(dead[0].dead_at, f.clock.now());
    assert_eq!(f.stats().await, stats(0, 1, 0, 1));

    // and the dead item's receipt is stale
    assert!(!f.queue.ack(&second.receipt).await.unwrap());
}

#[tokio::test]
async fn dead_letters_are_counted_per_tenant_and_no_tenant_counts_a_neighbours() {
    // given one receive allowed, and items of tenants whose ids share a prefix
    let f = Fixture::with(QueueConfig { max_receives: 1, ..QueueConfig::default() });
    let groups = ["acme:c-1", "acme:c-2", "acme-x:c-1", "acme.x:c-1", "acme_x:c-1", "acme0:c-1", "acm:c-1", "acmf:c-1"];
    for g in groups {
        f.enqueue(g, &format!("poison {g}")).await;
    }
    // when each is received and never answered
    for _ in groups {
        let _ = f.receive().await;
    }
    f.clock.advance_std(VISIBILITY);
    f.receive_nothing().await;
    assert_eq!(f.stats().await.dead, 8);
    // then each tenant counts its own only
    for (tenant, n) in
        [("acme", 2), ("acme-x", 1), ("acme.x", 1), ("acme_x", 1), ("acme0", 1), ("acm", 1), ("acmf", 1), ("other", 0)]
    {
        let tenant: switchboard_domain::TenantId = tenant.parse().unwrap();
        assert_eq!(f.queue.dead_letters_of(&tenant).await.unwrap(), n, "{tenant}");
    }
}

#[tokio::test]
async fn it_drops_a_duplicate_within_the_dedup_window() {
    // given an event enqueued once
    let f = Fixture::new();
    f.enqueue("A", "evt-1").await;

    // when the same event arrives again a minute later, even in another group
    f.clock.advance_std(Duration::from_secs(60));
    let again = f.queue.enqueue_raw("B", "evt-1", "other").await.unwrap();

    // then it is reported as a duplicate and nothing more is queued
    assert_eq!(again, Enqueued::Duplicate);
    assert_eq!(f.stats().await, stats(1, 0, 0, 0));
}

#[tokio::test]
async fn it_accepts_a_dedup_id_again_after_the_window() {
    // given an event enqueued once
    let f = Fixture::new();
    f.enqueue("A", "evt-1").await;

    // when it arrives again once the five minute window has passed
    f.clock.advance_std(Duration::from_secs(5 * 60));
    let again = f.queue.enqueue_raw("A", "evt-1", "evt-1").await.unwrap();

    // then it is queued again
    assert_eq!(again, Enqueued::Queued);
    assert_eq!(f.stats().await, stats(2, 0, 0, 0));
}

#[tokio::test]
async fn it_still_drops_a_duplicate_after_the_original_was_acked() {
    // given an event enqueued, processed and acked
    let f = Fixture::new();
    f.enqueue("A", "evt-1").await;
    let delivery = f.receive().await;
    assert!(f.queue.ack(&delivery.receipt).await.unwrap());

    // when it arrives again within the window
    f.clock.advance_std(Duration::from_secs(4 * 60));
    let again = f.queue.enqueue_raw("A", "evt-1", "evt-1").await.unwrap();

    // then it is still a duplicate
    assert_eq!(again, Enqueued::Duplicate);
    assert_eq!(f.stats().await, QueueStats::default());
}

#[tokio::test]
async fn it_blocks_a_group_while_its_head_is_delayed() {
    // given a conversation whose head was released with a ten second delay, and another one
    let f = Fixture::new();
    f.enqueue("A", "a1").await;
    f.enqueue("A", "a2").await;
    f.enqueue("B", "b1").await;
    let head = f.receive().await;
    assert!(f.queue.release(&head.receipt, Duration::from_secs(10)).await.unwrap());

    // then only the other conversation is served while the delay runs
    assert_eq!(f.receive().await.body, "b1");
    f.receive_nothing().await;
    assert_eq!(f.stats().await, stats(1, 1, 1, 0));
    f.clock.advance_std(Duration::from_millis(9_999));
    f.receive_nothing().await;

    // and once it has passed the head comes back, before the rest of its group
    f.clock.advance_std(Duration::from_millis(1));
    let again = f.receive().await;
    assert_eq!((again.body.as_str(), again.receive_count), ("a1", 2));
}

/// Records what it handled; optionally waits at a barrier or panics once on chosen bodies.
#[derive(Default)]
struct Recorder {
    handled: Mutex<Vec<String>>,
    attempts: Mutex<HashMap<String, u32>>,
    panic_once_on: Option<String>,
    rendezvous: Option<Arc<Barrier>>,
}

impl Recorder {
    fn handled(&self) -> Vec<String> {
        self.handled.lock().unwrap().clone()
    }
}

#[async_trait]
impl ItemHandler for Recorder {
    async fn handle(&self, delivery: &Delivery) -> Result<(), ItemFailure> {
        let attempt = {
            let mut attempts = self.attempts.lock().unwrap();
            let n = attempts.entry(delivery.body.clone()).or_default();
            *n += 1;
            *n
        };
        if self.panic_once_on.as_deref() == Some(delivery.body.as_str()) && attempt == 1 {
            panic!("handler bug on {}", delivery.body);
        }
        if let Some(barrier) = &self.rendezvous {
            barrier.wait().await;
        }
        self.handled.lock().unwrap().push(delivery.body.clone());
        Ok(())
    }
}

async fn guarded<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(HANG_GUARD, future).await.unwrap_or_else(|_| panic!("hung: {what}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_runs_different_groups_at_the_same_time() {
    // given two conversations, each with one item, whose handlers can only finish together
    let f = Fixture::new();
    f.enqueue("A", "a1").await;
    f.enqueue("B", "b1").await;
    let handler = Arc::new(Recorder { rendezvous: Some(Arc::new(Barrier::new(2))), ..Recorder::default() });

    // when a pool of two workers runs them
    let pool = WorkerPool::start(f.queue.clone(), handler.clone(), 2, IDLE_POLL);

    // then both complete, which needs both handlers in progress at once
    guarded("both groups in parallel", f.queue.wait_idle()).await.unwrap();
    let mut handled = handler.handled();
    handled.sort();
    assert_eq!(handled, ["a1", "b1"]);
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_worker_is_woken_by_each_new_item_and_the_ack_takes_an_item_behind_its_head() {
    // given one worker (its idle poll an hour: only a wake-up gets it going) that has drained
    // the queue, so its last ack's receive found nothing
    let f = Fixture::new();
    let barrier = Arc::new(Barrier::new(2));
    let handler = Arc::new(Recorder { rendezvous: Some(Arc::clone(&barrier)), ..Recorder::default() });
    let pool = WorkerPool::start(f.queue.clone(), handler.clone(), 1, IDLE_POLL);

    // when items come one at a time, each a new head in an empty group
    for i in 0..10 {
        f.enqueue(&format!("G{}", i % 3), &format!("m{i}")).await;
        guarded(&format!("m{i} handled"), barrier.wait()).await;
        guarded(&format!("m{i} acked"), f.queue.wait_idle()).await.unwrap();
    }
    // and one arrives behind its group's head while the head is in the handler (its enqueue
    // wakes nobody: the head's ack takes it)
    f.enqueue("A", "a1").await;
    guarded("a1 in the handler", async {
        while f.stats().await.in_flight == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    f.enqueue("A", "a2").await;
    guarded("a1 handled", barrier.wait()).await;
    guarded("a2 handled", barrier.wait()).await;
    guarded("a2 acked", f.queue.wait_idle()).await.unwrap();

    // then every item ran, in order
    let mut expected: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    expected.extend(["a1".to_owned(), "a2".to_owned()]);
    assert_eq!(handler.handled(), expected);
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_processes_every_item_in_group_order_and_then_is_idle() {
    // given three conversations with several items each
    let f = Fixture::new();
    for i in 0..5 {
        for group in ["A", "B", "C"] {
            f.enqueue(group, &format!("{group}{i}")).await;
        }
    }
    let handler = Arc::new(Recorder::default());

    // when a pool of three workers drains the queue
    let pool = WorkerPool::start(f.queue.clone(), handler.clone(), 3, IDLE_POLL);
    guarded("draining", f.queue.wait_idle()).await.unwrap();

    // then every item was handled once, each conversation in order, and nothing is left
    let handled = handler.handled();
    assert_eq!(handled.len(), 15);
    for group in ["A", "B", "C"] {
        let mine: Vec<_> = handled.iter().filter(|b| b.starts_with(group)).collect();
        let expected: Vec<_> = (0..5).map(|i| format!("{group}{i}")).collect();
        assert_eq!(mine, expected.iter().collect::<Vec<_>>());
    }
    assert_eq!(f.stats().await, QueueStats::default());
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_fails_only_the_item_whose_handler_panicked() {
    // given a handler with a bug that panics the first time it sees one item
    let f = Fixture::new();
    for (group, body) in [("P", "poison"), ("A", "a1"), ("B", "b1"), ("C", "c1")] {
        f.enqueue(group, body).await;
    }
    let handler = Arc::new(Recorder { panic_once_on: Some("poison".to_owned()), ..Recorder::default() });

    // when a pool runs them
    let pool = WorkerPool::start(f.queue.clone(), handler.clone(), 2, IDLE_POLL);

    // then the other groups' items are acked, and the panicked item is released with a backoff
    guarded("the others acked, poison released", async {
        // The release is not announced, so look for it; yielding, not sleeping.
        while f.stats().await != stats(0, 0, 1, 0) {
            tokio::task::yield_now().await;
        }
    })
    .await;
    let mut handled = handler.handled();
    handled.sort();
    assert_eq!(handled, ["a1", "b1", "c1"]);

    // and once the backoff has passed it is delivered again and succeeds
    f.clock.advance_std(Duration::from_secs(1));
    f.queue.wake();
    guarded("poison retried", f.queue.wait_idle()).await.unwrap();
    assert_eq!(handler.handled().last().map(String::as_str), Some("poison"));
    assert!(f.queue.dead_letters(10).await.unwrap().is_empty());
    pool.shutdown().await;
}

/// Signals when it starts an item, then holds it until the test lets go.
struct Gate {
    started: Mutex<Option<oneshot::Sender<String>>>,
    open: tokio::sync::Mutex<Option<oneshot::Receiver<()>>>,
}

#[async_trait]
impl ItemHandler for Gate {
    async fn handle(&self, delivery: &Delivery) -> Result<(), ItemFailure> {
        if let Some(started) = self.started.lock().unwrap().take() {
            started.send(delivery.body.clone()).unwrap();
        }
        if let Some(open) = self.open.lock().await.take() {
            open.await.unwrap();
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_finishes_the_item_in_hand_on_shutdown_and_leaves_the_rest_queued() {
    // given one worker busy with the first of three items
    let f = Fixture::new();
    for (group, body) in [("A", "a1"), ("B", "b1"), ("C", "c1")] {
        f.enqueue(group, body).await;
    }
    let (started_tx, started_rx) = oneshot::channel();
    let (open_tx, open_rx) = oneshot::channel();
    let handler =
        Arc::new(Gate { started: Mutex::new(Some(started_tx)), open: tokio::sync::Mutex::new(Some(open_rx)) });
    let pool = WorkerPool::start(f.queue.clone(), handler, 1, IDLE_POLL);
    assert_eq!(guarded("first item", started_rx).await.unwrap(), "a1");

    // when shutdown begins while the item is in hand
    let shutdown = pool.shutdown();
    tokio::pin!(shutdown);
    tokio::select! {
        biased;
        () = &mut shutdown => panic!("shutdown returned while an item was in hand"),
        () = std::future::ready(()) => {}
    }
    open_tx.send(()).unwrap();

    // then shutdown returns once that item is done, and the others stay queued
    guarded("shutdown", shutdown).await;
    assert_eq!(f.stats().await, stats(2, 0, 0, 0));
    let next = f.receive().await;
    assert_eq!(next.body, "b1");
}
