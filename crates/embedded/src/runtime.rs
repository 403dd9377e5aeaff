//! The embedded profile assembled: one data directory, one SQLite file, the engine's event
//! intake and executor wired to the SQLite adapters, and a worker pool draining the FIFO queue.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use switchboard_domain::{ErrorKind, ExecutionRecord, InboundEvent, PriceTable, TenantId, TenantStatus};
use switchboard_engine::{
    Attempt, Clock, ConfigStore, ConversationLog, CountAndEnqueue, Counters, Deps, Engine, Enqueued, ExecOutcome,
    ExecutionLog, Executor, Follower, Ingest, Intake, Invoker, Model, NoSecrets, NoWebhooks, Operator, PortLayer,
    QueueError, RouteError, RouteOutcome, Secrets, SlotAndCount, StoreError, WebhookCaller, WorkItem, WorkQueue,
};
use tokio::sync::broadcast;
use tracing::{error, info, warn};

use crate::bus::InProcessBus;
use crate::conversations::LocalConversations;
use crate::db::{Db, DbError};
use crate::follow::Followers;
use crate::metrics::PrometheusMetrics;
use crate::queue::{Delivery, QueueConfig, SqliteWorkQueue};
use crate::retention::{Retention, SweepError, Sweeper, Swept};
use crate::store::{SqliteStore, Taken};
use crate::worker::{ItemFailure, ItemHandler, WorkerPool};

/// The database file inside the data directory.
pub const DB_FILE: &str = "switchboard.db";

/// Worker tasks by default. A worker holds one conversation's turn for as long as its model and
/// tools take — seconds with a real model — so the pool is how many turns wait on models at once:
/// with 4 workers and a model answering in 0.5 s, `serve` ran 7.4 messages a second; with 32, 60.
/// A worker costs nothing while it waits, and the scripted pipeline runs the same with 4 or 64
/// (docs/benchmarks.md, "Workers wait on models"; docs/decisions.md, "Workers").
pub const DEFAULT_WORKERS: u16 = 32;

#[derive(Clone)]
pub struct EmbeddedOptions {
    /// Worker tasks draining the queue (different conversations run in parallel).
    pub workers: usize,
    pub queue: QueueConfig,
    /// The longest the pool's watch goes without looking for heads coming due (visibility
    /// timeouts, release delays) while items are queued; at most half the visibility timeout is
    /// used, so every timeout is seen before it ends and woken on time. Idle workers never poll,
    /// and with the queue empty the watch does not look either ([`WorkerPool::start`]).
    pub idle_poll: Duration,
    /// Calls tenant webhook tools; without one, webhook tools answer the model with an error.
    pub webhooks: Arc<dyn WebhookCaller>,
    /// Tenant secrets the API verifies webhook triggers' deliveries with (the webhook caller
    /// holds its own, usually the same).
    pub secrets: Arc<dyn Secrets>,
    /// How long one item may run before its turn stops with status `timeout`
    /// ([`Executor::with_budget`]); keep it under the queue's visibility timeout.
    pub turn_budget: Option<Duration>,
    /// What model calls cost (the shipped table unless the model configuration adds prices).
    pub prices: Arc<PriceTable>,
    /// How long records are kept, and where deleted ones are archived
    /// ([`Embedded::start_sweeper`], [`Embedded::sweep_expired`]).
    pub retention: Retention,
    /// Wraps every port the engine calls before it is built (fault injection in tests); `None`
    /// in every deployment.
    pub ports: Option<Arc<dyn PortLayer>>,
}

impl std::fmt::Debug for EmbeddedOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedOptions")
            .field("workers", &self.workers)
            .field("queue", &self.queue)
            .field("idle_poll", &self.idle_poll)
            .field("turn_budget", &self.turn_budget)
            .field("price_version", &self.prices.version)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        Self {
            workers: usize::from(DEFAULT_WORKERS),
            queue: QueueConfig::default(),
            idle_poll: Duration::from_secs(5),
            webhooks: Arc::new(NoWebhooks),
            secrets: Arc::new(NoSecrets),
            turn_budget: None,
            prices: Arc::new(PriceTable::builtin()),
            retention: Retention::default(),
            ports: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot create data directory {path}: {source}")]
    DataDir { path: String, source: std::io::Error },
    #[error("cannot open database {path}: {source}")]
    Db { path: String, source: DbError },
}

/// The running embedded profile.
#[derive(Debug)]
pub struct Embedded {
    pub data_dir: PathBuf,
    pub store: SqliteStore,
    pub queue: SqliteWorkQueue,
    pub bus: InProcessBus,
    pub intake: Intake,
    pub executor: Executor,
    /// Operators' actions and handoffs over the API.
    pub operator: Operator,
    /// What `GET /metrics` renders.
    pub metrics: Arc<PrometheusMetrics>,
    options: EmbeddedOptions,
    clock: Arc<dyn Clock>,
    pool: Mutex<Option<WorkerPool>>,
    /// The retention sweeper, once started, and the count of its sweeps.
    sweeper: Mutex<Option<Sweeper>>,
    /// The approvals' sweeper, once started: its stop signal and task.
    approval_sweeper: Mutex<Option<Ticker>>,
    /// The schedule triggers' ticker, once started: its stop signal and task.
    scheduler: Mutex<Option<Ticker>>,
    sweeps: tokio::sync::watch::Sender<u64>,
    completions: broadcast::Sender<Completion>,
    /// Who follows which turn (streamed invokes).
    followers: Arc<Followers>,
}

/// A work item that finished (recorded, already recorded, or dropped).
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub tenant_id: TenantId,
    pub source_id: String,
    /// The source's execution record as committed (none when the item was dropped), so that a
    /// caller waiting for it need not read it back.
    pub record: Option<Arc<ExecutionRecord>>,
}

impl Completion {
    /// What became of `item`; none for an item that waits behind a paused turn (it completes
    /// when it runs).
    fn of(item: &WorkItem, outcome: &ExecOutcome) -> Self {
        let record = match outcome {
            ExecOutcome::Recorded(record) | ExecOutcome::AlreadyRecorded(record) => Some(Arc::new((**record).clone())),
            ExecOutcome::Dropped { .. } | ExecOutcome::Held => None,
        };
        Self { tenant_id: item.tenant_id.clone(), source_id: item.source_id.clone(), record }
    }
}

/// How often the approvals' sweeper looks for overdue approvals: an approval expires at most
/// this late.
pub const APPROVAL_SWEEP_EVERY: Duration = Duration::from_secs(30);

/// How often the scheduler looks for due schedule slots: a slot runs at most this late (plus
/// the queue's wait) while the process runs.
pub const SCHEDULE_TICK_EVERY: Duration = Duration::from_secs(10);

/// How long after a decision its turn's resumption may still be on its way before the sweeper
/// queues it again.
const APPROVAL_REQUEUE_GRACE: chrono::Duration = switchboard_engine::REQUEUE_AFTER;

/// Whether a caller waiting for a source's execution must look for a record first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queued {
    /// The item was queued by this call: its completion is still to come.
    Now,
    /// The item was queued before (a duplicate) and may have finished already.
    Before,
}

impl Embedded {
    /// Opens (or creates) the data directory and wires everything; workers are not started.
    pub fn open(
        data_dir: &Path,
        model: Arc<dyn Model>,
        clock: Arc<dyn Clock>,
        options: EmbeddedOptions,
    ) -> Result<Self, OpenError> {
        std::fs::create_dir_all(data_dir)
            .map_err(|source| OpenError::DataDir { path: data_dir.display().to_string(), source })?;
        let path = data_dir.join(DB_FILE);
        let db = Db::open(&path).map_err(|source| OpenError::Db { path: path.display().to_string(), source })?;
        let store = SqliteStore::new(db.clone(), Arc::clone(&clock));
        let queue = SqliteWorkQueue::new(db, Arc::clone(&clock), options.queue.clone());
        let bus = InProcessBus::new(store.clone());
        let store_arc = Arc::new(store.clone());
        let metrics = Arc::new(PrometheusMetrics::default());
        let queue_arc = Arc::new(queue.clone());
        let deps = Deps {
            config: store_arc.clone(),
            sessions: store_arc.clone(),
            executions: store_arc.clone(),
            queue: queue_arc.clone(),
            bus: Arc::new(bus.clone()),
            conversations: Arc::new(LocalConversations::new(store.clone())),
            model,
            webhooks: Arc::clone(&options.webhooks),
            clock: Arc::clone(&clock),
            prices: Arc::clone(&options.prices),
            metrics: metrics.clone(),
            counters: store_arc.clone(),
        };
        // The intake enqueues through `LoggingQueue`: an inbound message is logged in the
        // enqueue's own database call.
        let logging: Arc<dyn WorkQueue> = Arc::new(LoggingQueue { store: store.clone(), queue: queue.clone() });
        let (deps, logging) = match &options.ports {
            Some(layer) => (layer.deps(deps), layer.queue(logging)),
            None => (deps, logging),
        };
        let Engine { intake, executor, operator } = Engine::with_intake_queue(deps, logging);
        let followers = Arc::new(Followers::default());
        let completions = broadcast::channel(1024).0;
        let executor =
            executor.with_budget(options.turn_budget).with_progress(followers.clone()).with_held_done(Arc::new({
                let completions: broadcast::Sender<Completion> = completions.clone();
                move |item: &WorkItem, outcome: &ExecOutcome| {
                    let _ = completions.send(Completion::of(item, outcome));
                }
            }));
        Ok(Self {
            data_dir: data_dir.to_owned(),
            store,
            queue,
            bus,
            intake,
            executor,
            operator,
            metrics,
            options,
            clock,
            pool: Mutex::new(None),
            sweeper: Mutex::new(None),
            approval_sweeper: Mutex::new(None),
            scheduler: Mutex::new(None),
            sweeps: tokio::sync::watch::Sender::new(0),
            completions,
            followers,
        })
    }

    /// What the workers run for each delivery: parse the work item, execute it.
    pub fn item_handler(&self) -> Arc<dyn ItemHandler> {
        Arc::new(ExecuteItems {
            executor: self.executor.clone(),
            completions: self.completions.clone(),
            max_receives: self.options.queue.max_receives.max(1),
        })
    }

    /// Starts the worker pool (once).
    pub fn start_workers(&self) {
        let Ok(mut pool) = self.pool.lock() else { return };
        if pool.is_none() {
            let handler = self.item_handler();
            *pool = Some(WorkerPool::start(self.queue.clone(), handler, self.options.workers, self.options.idle_poll));
        }
    }

    /// Whether workers are started and not stopped.
    pub fn workers_running(&self) -> bool {
        self.pool.lock().is_ok_and(|p| p.is_some())
    }

    /// Starts the retention sweeper (once): what [`EmbeddedOptions::retention`] lets go is
    /// deleted on its period, at the clock's time ([`crate::retention::Sweeper`]).
    pub fn start_sweeper(&self) {
        let Ok(mut sweeper) = self.sweeper.lock() else { return };
        if sweeper.is_none() {
            let retention = self.options.retention.clone();
            let (store, clock, sweeps) = (self.store.clone(), Arc::clone(&self.clock), self.sweeps.clone());
            *sweeper = Some(Sweeper::start(store, clock, retention, sweeps));
        }
    }

    /// Starts the approvals' sweeper (once): every [`APPROVAL_SWEEP_EVERY`], approvals past
    /// their timeout expire (a denial, and the turn resumes) and decided ones whose resumption
    /// was not queued are queued again ([`Embedded::sweep_approvals`]); and the closes of
    /// sessions whose customers went quiet are queued, for tenants that close them
    /// ([`Embedded::close_idle_sessions`]).
    pub fn start_approval_sweeper(&self) {
        let operator = self.operator.clone();
        Ticker::start(&self.approval_sweeper, APPROVAL_SWEEP_EVERY, move || {
            let operator = operator.clone();
            async move {
                match operator.sweep_approvals(APPROVAL_REQUEUE_GRACE).await {
                    Ok(s) if s.expired + s.requeued > 0 => {
                        info!(expired = s.expired, requeued = s.requeued, "approvals swept");
                    }
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "approval sweep failed; the next one tries again"),
                }
                match operator.close_idle_sessions().await {
                    Ok(c) if c.any() => {
                        info!(queued = c.queued, kept = c.kept, failed = c.failed, "idle sessions' closes queued");
                    }
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "the idle sessions could not be read; the next sweep tries again"),
                }
            }
        });
    }

    /// Starts the scheduler (once): every [`SCHEDULE_TICK_EVERY`], the work of each schedule
    /// trigger's due slot is queued ([`Embedded::fire_schedules`]). Several processes over one
    /// data directory may all run it: each slot is claimed in the database, so it runs once.
    pub fn start_scheduler(&self) {
        let (intake, store, clock) = (self.intake.clone(), self.store.clone(), Arc::clone(&self.clock));
        Ticker::start(&self.scheduler, SCHEDULE_TICK_EVERY, move || {
            let (intake, store, clock) = (intake.clone(), store.clone(), Arc::clone(&clock));
            async move {
                match intake.fire_schedules(&store, clock.now()).await {
                    Ok(f) if f.any() => {
                        info!(queued = f.queued, skipped = f.skipped, failed = f.failed, "schedule slots fired");
                    }
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "the schedules could not be read; the next tick tries again"),
                }
            }
        });
    }

    /// The tenant secrets the options gave.
    pub fn secrets(&self) -> Arc<dyn Secrets> {
        Arc::clone(&self.options.secrets)
    }

    /// Queues the work of every schedule slot due at the clock's time, once (what the scheduler
    /// does on its period).
    pub async fn fire_schedules(&self) -> Result<switchboard_engine::intake::Fired, StoreError> {
        self.intake.fire_schedules(&self.store, self.clock.now()).await
    }

    /// Expires the approvals past their timeout and queues again the resumptions that were lost,
    /// once (what the approvals' sweeper does on its period).
    pub async fn sweep_approvals(&self) -> Result<switchboard_engine::Swept, switchboard_engine::OperatorError> {
        self.operator.sweep_approvals(APPROVAL_REQUEUE_GRACE).await
    }

    /// Queues the close of the sessions whose customers went quiet, of tenants that close idle
    /// sessions, once (what the approvals' sweeper also does on its period); the workers (or a
    /// test draining the queue) run them.
    pub async fn close_idle_sessions(
        &self,
    ) -> Result<switchboard_engine::IdleSweep, switchboard_engine::OperatorError> {
        self.operator.close_idle_sessions().await
    }

    /// How many sweeps the sweeper has ended (done or failed), to wait on.
    pub fn sweeps(&self) -> tokio::sync::watch::Receiver<u64> {
        self.sweeps.subscribe()
    }

    /// Deletes (archiving first, when configured) what is due at `now` under
    /// [`EmbeddedOptions::retention`], and vacuums; what the sweeper does on its period.
    pub async fn sweep_expired(&self, now: chrono::DateTime<chrono::Utc>) -> Result<Swept, SweepError> {
        crate::retention::sweep(&self.store, &self.options.retention, now, || false).await
    }

    /// Stops taking new items and waits for the ones in hand; stops the sweeper (a sweep under
    /// way ends after its current batch).
    pub async fn shutdown(&self) {
        let pool = self.pool.lock().ok().and_then(|mut p| p.take());
        if let Some(pool) = pool {
            pool.shutdown().await;
        }
        let sweeper = self.sweeper.lock().ok().and_then(|mut s| s.take());
        if let Some(sweeper) = sweeper {
            sweeper.stop().await;
        }
        for ticker in [&self.approval_sweeper, &self.scheduler] {
            let running = ticker.lock().ok().and_then(|mut s| s.take());
            if let Some(ticker) = running {
                ticker.stop().await;
            }
        }
    }

    /// Stops the workers (see [`Embedded::shutdown`]), lets go of this handle and waits, at most
    /// `timeout`, for the database to close: the log copied into the database file and deleted,
    /// nothing left for the next start to replay. False if other handles (a request still being
    /// answered) kept it open that long; it then closes when they are gone.
    pub async fn close(self: Arc<Self>, timeout: Duration) -> bool {
        self.shutdown().await;
        let closed = self.store.closed();
        drop(self);
        tokio::time::timeout(timeout, closed).await.is_ok()
    }

    /// Completions from now on; subscribe before routing to wait for an item without polling.
    pub fn subscribe_completions(&self) -> broadcast::Receiver<Completion> {
        self.completions.subscribe()
    }

    /// Waits (at most `timeout`) until the source has an execution record, using a completion
    /// subscription taken before the event was routed. The record comes with the source's
    /// completion; it is read from the store only for an item queued before (which may have
    /// finished before the subscription) or when completions were missed.
    pub async fn wait_for_execution(
        &self,
        mut completions: broadcast::Receiver<Completion>,
        tenant: &TenantId,
        source_id: &str,
        queued: Queued,
        timeout: Duration,
    ) -> Result<Option<ExecutionRecord>, StoreError> {
        let wait = async {
            let mut look = queued == Queued::Before;
            loop {
                if look && let Some(r) = self.store.execution_for_source(tenant, source_id).await? {
                    return Ok(Some(r));
                }
                look = true;
                // Only this source's completion counts: with many callers waiting, every
                // completion would otherwise cost each of them a database call.
                loop {
                    match completions.recv().await {
                        Ok(done) if done.tenant_id != *tenant || done.source_id != source_id => {}
                        Ok(Completion { record: Some(record), .. }) => return Ok(Some(Arc::unwrap_or_clone(record))),
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => break,
                        Err(broadcast::error::RecvError::Closed) => return Ok(None),
                    }
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.unwrap_or(Ok(None))
    }

    /// Takes in one `message.new` event: logs the message in the conversation log (the customer's,
    /// or a human operator's when outbound) and routes it. An unknown tenant is refused before
    /// anything is stored (and checked only here). An inbound message that is queued is logged in
    /// the enqueue's database call (`LoggingQueue`: both are kept or neither); one that is not
    /// (no trigger matched, the tenant is suspended) is logged on its own.
    pub async fn ingest(&self, event: &InboundEvent) -> Result<RouteOutcome, RouteError> {
        let d = &event.detail;
        let Some(tenant) = self.store.get_tenant(&d.tenant_id).await? else {
            return Err(RouteError::UnknownTenant(d.tenant_id.clone()));
        };
        let inbound = d.direction == switchboard_domain::event::Direction::Inbound;
        if !inbound {
            // Not an agent's (those are logged as they are sent): a human operator's.
            let fresh = self.store.record_human(&d.tenant_id, &d.conversation_id, &d.message_id, &d.text).await?;
            log_repeated(fresh, &d.tenant_id, &d.conversation_id, &d.message_id, &event.id);
        }
        if tenant.status == TenantStatus::Suspended {
            // Logged (the message did arrive), not answered.
            if inbound {
                self.log_inbound(event).await?;
            }
            tracing::info!(tenant = %d.tenant_id, event_id = %event.id, "tenant suspended; the message is not answered");
            self.intake.count(&d.tenant_id, &RouteOutcome::Suspended);
            return Ok(RouteOutcome::Suspended);
        }
        let outcome = self.intake.route_known_tenant(event, &tenant).await?;
        let queued = matches!(
            outcome,
            RouteOutcome::Enqueued { .. } | RouteOutcome::HumanOwned { .. } | RouteOutcome::Limited { .. }
        );
        if inbound && !queued {
            self.log_inbound(event).await?;
        }
        Ok(outcome)
    }

    /// Logs an inbound message that nothing queued (a queued one is logged by `LoggingQueue`).
    async fn log_inbound(&self, event: &InboundEvent) -> Result<(), StoreError> {
        let d = &event.detail;
        let fresh = self.store.record_inbound(&d.tenant_id, &d.conversation_id, &d.message_id, &d.text).await?;
        log_repeated(fresh, &d.tenant_id, &d.conversation_id, &d.message_id, &event.id);
        Ok(())
    }
}

/// Says so when a message was in the conversation log already (a repeated event).
fn log_repeated(fresh: bool, tenant: &TenantId, conversation_id: &str, message_id: &str, event_id: &str) {
    if !fresh {
        info!(tenant = %tenant, conversation_id, message_id, event_id,
            "message already in the conversation log; not logged twice");
    }
}

/// The intake's queue on the embedded profile: each item the intake queues is an inbound
/// message routed just now, and it is logged in the conversation log in the same database call
/// and transaction as the enqueue — one call fewer per message, and a message is never queued
/// without being logged (or logged, queued and then lost to a failed second call). The
/// admission's counts are taken in that transaction too (`count_and_enqueue`).
#[derive(Debug)]
struct LoggingQueue {
    store: SqliteStore,
    queue: SqliteWorkQueue,
}

#[async_trait]
impl WorkQueue for LoggingQueue {
    async fn queued_behind(&self, item: &WorkItem, max: usize) -> Result<Vec<WorkItem>, QueueError> {
        self.queue.queued_behind(item, max).await
    }

    async fn enqueue(&self, item: &WorkItem) -> Result<Enqueued, QueueError> {
        // Work no inbound event brought (a schedule's slot) has no message to log.
        if item.event_id.is_none() {
            return self.queue.enqueue(item).await;
        }
        let log = self.store.inbound_write(&item.tenant_id, &item.conversation_id, &item.message_id, &item.text);
        let body = crate::queue::body_of(item)?;
        let (queued, fresh) = self.queue.enqueue_raw_with(&item.group_id(), &item.dedup_id(), &body, log).await?;
        log_repeated(fresh, &item.tenant_id, &item.conversation_id, &item.message_id, &item.source_id);
        Ok(queued)
    }

    /// One database call and transaction for the counts, the log and the enqueue. The counts are
    /// this profile's only ones, its store's (which the engine hands in as `counters`), so they
    /// are taken here, after the duplicate check: a repeated event is not counted again, and a
    /// message that is not counted leaves nothing (the intake then queues it refused or for the
    /// human owner, through `enqueue`).
    async fn count_and_enqueue(
        &self,
        _counters: &dyn Counters,
        ask: &SlotAndCount<'_>,
        item: &WorkItem,
    ) -> Result<CountAndEnqueue, QueueError> {
        let counts = self.store.counts(ask);
        let log = self.store.inbound_write(&item.tenant_id, &item.conversation_id, &item.message_id, &item.text);
        let body = crate::queue::body_of(item)?;
        let with = move |c: &rusqlite::Connection, new: bool| {
            if new {
                let taken = counts.take(c)?;
                if !matches!(taken, Taken::Counted(true)) {
                    return Ok(Err(taken));
                }
            }
            log(c).map(Ok)
        };
        match self.queue.enqueue_raw_unless(&item.group_id(), &item.dedup_id(), &body, with).await? {
            Ok((queued, fresh)) => {
                log_repeated(fresh, &item.tenant_id, &item.conversation_id, &item.message_id, &item.source_id);
                Ok(CountAndEnqueue::Enqueued(queued))
            }
            Err(taken) => Ok(CountAndEnqueue::NotCounted(self.store.admit_of(taken).map_err(QueueError::from_store)?)),
        }
    }
}

#[async_trait]
impl Ingest for Embedded {
    async fn ingest(&self, event: &InboundEvent) -> Result<RouteOutcome, RouteError> {
        Embedded::ingest(self, event).await
    }

    async fn ingest_and_wait(
        &self,
        event: &InboundEvent,
        wait: Duration,
    ) -> Result<(RouteOutcome, Option<ExecutionRecord>), RouteError> {
        let completions = self.subscribe_completions();
        let outcome = Embedded::ingest(self, event).await?;
        let queued = match outcome {
            RouteOutcome::Enqueued { duplicate: false, .. } => Some(Queued::Now),
            RouteOutcome::Enqueued { duplicate: true, .. } => Some(Queued::Before),
            // Queued too (a human-owned conversation's message is recorded, skipped, in the
            // transcript); whether as a duplicate is not said, so the record is looked for first.
            RouteOutcome::Limited { .. } | RouteOutcome::HumanOwned { .. } => Some(Queued::Before),
            _ => None,
        };
        // The execution is the message's, whichever event brought it: a repeat under a new
        // event id is answered with the first one's.
        let source = switchboard_engine::intake::source_id(event);
        let record = match queued {
            Some(queued) => {
                self.wait_for_execution(completions, &event.detail.tenant_id, &source, queued, wait).await?
            }
            None => None,
        };
        Ok((outcome, record))
    }
}

#[async_trait]
impl Invoker for Embedded {
    async fn invoke(&self, item: WorkItem, wait: Duration) -> Result<Option<ExecutionRecord>, RouteError> {
        // Queued in the conversation's group like any message, so it runs in turn; the source id
        // deduplicates a retried call with the same Idempotency-Key.
        let completions = self.subscribe_completions();
        let queued = match self.queue.enqueue(&item).await? {
            Enqueued::Queued => Queued::Now,
            Enqueued::Duplicate => Queued::Before,
        };
        Ok(self.wait_for_execution(completions, &item.tenant_id, &item.source_id, queued, wait).await?)
    }

    fn follows_turns(&self) -> bool {
        true
    }

    async fn invoke_following(
        &self,
        item: WorkItem,
        wait: Duration,
        follower: Follower,
    ) -> Result<Option<ExecutionRecord>, RouteError> {
        // Registered before the item is queued, so that no event of its turn is missed; ended
        // when this returns (or is dropped with a client that went away).
        let _following = self.followers.follow(&item.tenant_id, &item.source_id, follower);
        self.invoke(item, wait).await
    }
}

/// A job run every period on a task of its own until stopped (a run under way finishes first).
#[derive(Debug)]
struct Ticker {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Ticker {
    /// Starts `job` in `slot`, unless one runs there already. The first run is at once.
    fn start<F, Fut>(slot: &Mutex<Option<Ticker>>, every: Duration, job: F)
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let Ok(mut slot) = slot.lock() else { return };
        if slot.is_some() {
            return;
        }
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = stopped.changed() => return,
                }
                job().await;
            }
        });
        *slot = Some(Ticker { stop, task });
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Runs queued work items through the executor.
struct ExecuteItems {
    executor: Executor,
    completions: broadcast::Sender<Completion>,
    /// The queue's receive limit: a deferred message's last delivery is the one that reaches it.
    max_receives: u32,
}

#[async_trait]
impl ItemHandler for ExecuteItems {
    async fn handle(&self, delivery: &Delivery) -> Result<(), ItemFailure> {
        let item: WorkItem = serde_json::from_str(&delivery.body).map_err(|e| {
            // A body that does not parse will never parse: it goes to the dead letters after
            // the queue's receive limit, like on SQS.
            error!(dedup_id = %delivery.dedup_id, error = %e, "work item body is not a valid work item");
            ItemFailure { message: format!("malformed work item: {e}"), retry_after: None }
        })?;
        let attempt = Attempt { number: delivery.receive_count, of: self.max_receives };
        // The source is the message; the event that brought it is said beside it.
        let event_id = item.event_id.as_deref().unwrap_or("-");
        let mut result = self.executor.execute_attempt(&item, None, Some(attempt)).await;
        if let Err(e) = &result
            && !e.is_deferral()
            && attempt.is_last()
        {
            // Not delivered again: the customer is answered as the agent's `onFailure` says and
            // the failure recorded; only what cannot even be recorded goes to the dead letters.
            error!(tenant = %item.tenant_id, source = %item.source_id, event_id, kind = ?e.kind, error = %e.message,
                "work item failed at its last delivery; giving it up");
            result = self.executor.give_up(&item, e.kind, &e.message).await;
        }
        match result {
            Ok(outcome) => {
                let record = match outcome {
                    ExecOutcome::Recorded(record) | ExecOutcome::AlreadyRecorded(record) => Some(Arc::new(*record)),
                    // It completes when it runs, behind the paused turn.
                    ExecOutcome::Held => return Ok(()),
                    ExecOutcome::Dropped { reason } => {
                        warn!(tenant = %item.tenant_id, source = %item.source_id, event_id, conversation_id = %item.conversation_id,
                            %reason, "work item dropped");
                        None
                    }
                };
                // Nobody waiting is fine.
                let _ =
                    self.completions.send(Completion { tenant_id: item.tenant_id, source_id: item.source_id, record });
                Ok(())
            }
            Err(e) if e.is_deferral() => {
                // Waiting for a tenant limit's window, not failing: held until then.
                info!(tenant = %item.tenant_id, source = %item.source_id, event_id, error = %e.message, "work item deferred");
                Err(ItemFailure { message: e.message, retry_after: e.retry_after })
            }
            Err(e) => {
                let level_error = !e.retryable || e.kind == ErrorKind::Config;
                if level_error {
                    error!(tenant = %item.tenant_id, source = %item.source_id, event_id, kind = ?e.kind, error = %e.message, "work item failed");
                } else {
                    warn!(tenant = %item.tenant_id, source = %item.source_id, event_id, kind = ?e.kind, error = %e.message,
                        "work item failed; will retry");
                }
                Err(ItemFailure { message: e.message, retry_after: None })
            }
        }
    }
}
