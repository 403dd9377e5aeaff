//! Settling a worker's item in the database call that commits its turn: the ack (and the
//! receive of the worker's next item) made on the database thread right after the store's own
//! writes, in the same transaction. What the worker does with the outcome is its own business.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::Connection;
use switchboard_engine::Clock;
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

use super::rows::{Limits, Received, ack_in, receive_now};

/// A wake-up registered before a receive looked, so work that arrives meanwhile is not missed.
type Wakeup = Pin<Box<OwnedNotified>>;

/// The ack of a worker's item (and the receive of its next one), made by the database call that
/// commits the item's turn: the store's commit runs [`SettleOnCommit::run`] after its own writes,
/// in the same transaction, when the task committing was given one by its worker (a task-local,
/// [`SettleOnCommit::scope`]). So a turn's record and the removal of its item are kept together
/// or not at all (a crash between them no longer runs the item again), and a worker spends one
/// database call between two items instead of two. A turn that commits nothing (dropped, already
/// recorded, failed) leaves the item to the worker's own ack.
#[derive(Debug, Clone)]
pub(crate) struct SettleOnCommit(Arc<Settlement>);

#[derive(Debug)]
struct Settlement {
    receipt: String,
    receive_next: bool,
    clock: Arc<dyn Clock>,
    limits: Limits,
    woken: Arc<Notify>,
    /// Registered before the commit's receive looks, so work that arrives meanwhile is not missed.
    armed: Mutex<Option<Wakeup>>,
    /// Whether the ack deleted, and what the receive found (none when it did not look).
    done: Mutex<Option<(bool, Option<Received>)>>,
}

tokio::task_local! {
    static SETTLE: SettleOnCommit;
}

impl SettleOnCommit {
    /// A settlement of the item `receipt` holds; `woken` is the queue's wake-up for new work.
    pub(super) fn new(
        receipt: &str,
        receive_next: bool,
        clock: Arc<dyn Clock>,
        limits: Limits,
        woken: Arc<Notify>,
    ) -> Self {
        SettleOnCommit(Arc::new(Settlement {
            receipt: receipt.to_owned(),
            receive_next,
            clock,
            limits,
            woken,
            armed: Mutex::new(None),
            done: Mutex::new(None),
        }))
    }

    /// What the commit did, once: whether it acked, what it received, and the wake-up registered
    /// before it looked (if it was armed).
    pub(super) fn take(&self) -> Option<(bool, Option<Received>, Option<Wakeup>)> {
        let (deleted, received) = lock(&self.0.done).take()?;
        Some((deleted, received, lock(&self.0.armed).take()))
    }

    /// Runs `work` with this settlement available to the commits it makes.
    pub(crate) fn scope<F: Future>(self, work: F) -> impl Future<Output = F::Output> {
        SETTLE.scope(self, work)
    }

    /// The current task's settlement, if its worker gave it one and no commit has made it yet;
    /// its wake-up registered (call it before sending the commit).
    pub(crate) fn current() -> Option<Self> {
        let settle = SETTLE.try_with(Clone::clone).ok()?;
        if lock(&settle.0.done).is_some() {
            return None;
        }
        if settle.0.receive_next {
            let mut armed = lock(&settle.0.armed);
            if armed.is_none() {
                let mut woken = Box::pin(Arc::clone(&settle.0.woken).notified_owned());
                woken.as_mut().enable();
                *armed = Some(woken);
            }
        }
        Some(settle)
    }

    /// Acks the item (and receives the next one), on the database thread, after the commit's own
    /// writes were kept. A failure here leaves the commit as it is and the item to the worker's
    /// own ack.
    pub(crate) fn run(&self, conn: &mut Connection) {
        let s = &self.0;
        let deleted = match ack_in(conn, &s.receipt) {
            Ok(deleted) => deleted,
            Err(e) => return tracing::warn!(error = %e, "acking the item with its commit failed; the worker acks it"),
        };
        let received = match s.receive_next {
            true => receive_now(conn, s.clock.as_ref(), s.limits)
                .inspect_err(|e| tracing::warn!(error = %e, "receiving with the commit failed; a worker is woken"))
                .ok(),
            false => None,
        };
        *lock(&s.done) = Some((deleted, received));
    }
}

/// Takes a lock whether or not a panic poisoned it, as everywhere in the queue.
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
