//! Who follows or waits for which turn, by tenant and source id. A streamed invoke registers a
//! follower for its item's source before the item is queued, and the executor asks here when it
//! starts the turn; a caller waiting for a source's execution (`POST /events?wait=`, an invoke)
//! registers before routing and is woken by that source's completion alone. A registration ends
//! when its guard is dropped (the caller answered, or its client went away) or, for a waiter,
//! when the completion takes it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use switchboard_domain::{ExecutionRecord, TenantId};
use switchboard_engine::{Follower, Progress, WorkItem};
use tokio::sync::oneshot;

type Key = (TenantId, String);

/// Registrations by tenant and source id.
#[derive(Debug)]
pub struct BySource<T> {
    next: AtomicU64,
    by_source: Mutex<HashMap<Key, Vec<(u64, T)>>>,
}

impl<T> Default for BySource<T> {
    fn default() -> Self {
        Self { next: AtomicU64::new(0), by_source: Mutex::new(HashMap::new()) }
    }
}

impl<T> BySource<T> {
    /// Registers `value` for `source_id` until the guard is dropped.
    pub fn register(self: &Arc<Self>, tenant: &TenantId, source_id: &str, value: T) -> Registration<T> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let key = (tenant.clone(), source_id.to_owned());
        if let Ok(mut map) = self.by_source.lock() {
            map.entry(key.clone()).or_default().push((id, value));
        }
        Registration { registry: Arc::clone(self), key, id }
    }

    /// Ends every registration of `source_id`, handing their values over.
    fn take(&self, tenant: &TenantId, source_id: &str) -> Vec<T> {
        let Ok(mut map) = self.by_source.lock() else { return Vec::new() };
        let list = map.remove(&(tenant.clone(), source_id.to_owned())).unwrap_or_default();
        list.into_iter().map(|(_, v)| v).collect()
    }

    /// How many sources have a registration.
    #[cfg(test)]
    fn sources(&self) -> usize {
        self.by_source.lock().map(|m| m.len()).unwrap_or(0)
    }
}

/// Ends one registration when dropped.
#[derive(Debug)]
pub struct Registration<T> {
    registry: Arc<BySource<T>>,
    key: Key,
    id: u64,
}

impl<T> Drop for Registration<T> {
    fn drop(&mut self) {
        if let Ok(mut map) = self.registry.by_source.lock()
            && let Some(list) = map.get_mut(&self.key)
        {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                map.remove(&self.key);
            }
        }
    }
}

/// The followers of the turns under way.
pub type Followers = BySource<Follower>;

impl Progress for Followers {
    fn follower(&self, item: &WorkItem) -> Option<Follower> {
        let map = self.by_source.lock().ok()?;
        let list = map.get(&(item.tenant_id.clone(), item.source_id.clone()))?;
        match list.as_slice() {
            [] => None,
            [(_, one)] => Some(one.clone()),
            many => {
                let all: Vec<Follower> = many.iter().map(|(_, f)| f.clone()).collect();
                Some(Follower::new(move |event| {
                    for f in &all {
                        f.send(event.clone());
                    }
                }))
            }
        }
    }
}

/// What a source's completion hands its waiters: its execution record as committed, or none
/// (the item was dropped).
pub type Done = Option<Arc<ExecutionRecord>>;

/// Callers waiting for a source's execution. A broadcast of every completion to every waiter
/// woke each waiting caller (a task, often on another thread) at every message; now only the
/// source's own waiters are woken.
pub type Waiters = BySource<oneshot::Sender<Done>>;

impl Waiters {
    /// Waits for the next completion of `source_id` from now on.
    pub fn wait_for(self: &Arc<Self>, tenant: &TenantId, source_id: &str) -> Waiting {
        let (tx, done) = oneshot::channel();
        Waiting { done, _registration: self.register(tenant, source_id, tx) }
    }

    /// Wakes the waiters of `source_id`, if any.
    pub fn complete(&self, tenant: &TenantId, source_id: &str, done: &Done) {
        for waiter in self.take(tenant, source_id) {
            // A waiter that stopped waiting is fine.
            let _ = waiter.send(done.clone());
        }
    }
}

/// One caller's wait for a source's next completion.
#[derive(Debug)]
pub struct Waiting {
    done: oneshot::Receiver<Done>,
    _registration: Registration<oneshot::Sender<Done>>,
}

impl Waiting {
    /// The completion. (Its sender lives as long as the registration this holds, and the
    /// completion that takes it sends: a dropped sender cannot be seen, and would read as an item
    /// without a record.)
    pub async fn done(self) -> Done {
        self.done.await.unwrap_or(None)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn tenant(t: &str) -> TenantId {
        t.parse().unwrap()
    }

    #[tokio::test]
    async fn a_completion_wakes_the_waiters_of_its_own_source_only() {
        let waiters = Arc::new(Waiters::default());
        let mut first = std::pin::pin!(waiters.wait_for(&tenant("acme"), "e-1").done());
        let second = waiters.wait_for(&tenant("acme"), "e-1");
        let other_tenant = waiters.wait_for(&tenant("globex"), "e-1");
        let other_source = waiters.wait_for(&tenant("acme"), "e-2");
        assert_eq!(waiters.sources(), 3);

        waiters.complete(&tenant("acme"), "e-3", &None);
        assert!(futures::poll!(&mut first).is_pending(), "woken by another source's completion");
        waiters.complete(&tenant("acme"), "e-1", &None);
        assert_eq!(first.await, None);
        assert_eq!(second.done().await, None);
        // The completion took both registrations of acme's e-1; the others are still waiting.
        assert_eq!(waiters.sources(), 2);
        drop((other_tenant, other_source));
        assert_eq!(waiters.sources(), 0);
    }

    #[tokio::test]
    async fn a_waiter_that_stops_waiting_leaves_nothing_behind_and_its_neighbours_still_wait() {
        let waiters = Arc::new(Waiters::default());
        let gone = waiters.wait_for(&tenant("acme"), "e-1");
        let staying = waiters.wait_for(&tenant("acme"), "e-1");
        drop(gone);
        assert_eq!(waiters.sources(), 1);
        let mut staying = std::pin::pin!(staying.done());
        assert!(futures::poll!(&mut staying).is_pending());
        waiters.complete(&tenant("acme"), "e-1", &None);
        assert_eq!(staying.await, None);
        assert_eq!(waiters.sources(), 0);
        // A completion nobody waits for changes nothing.
        waiters.complete(&tenant("acme"), "e-1", &None);
        assert_eq!(waiters.sources(), 0);
    }
}
