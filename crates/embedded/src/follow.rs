//! Who follows which turn: a streamed invoke registers a follower for its item's source before
//! the item is queued, and the executor asks here when it starts the turn. A registration ends
//! when its guard is dropped (the invoke answered, or its client went away).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use switchboard_domain::TenantId;
use switchboard_engine::{Follower, Progress, WorkItem};

type Key = (TenantId, String);

/// The followers of the turns under way, by tenant and source id.
#[derive(Debug, Default)]
pub struct Followers {
    next: AtomicU64,
    by_source: Mutex<HashMap<Key, Vec<(u64, Follower)>>>,
}

impl Followers {
    /// Follows the turn of `source_id` until the guard is dropped.
    pub fn follow(self: &Arc<Self>, tenant: &TenantId, source_id: &str, follower: Follower) -> FollowGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let key = (tenant.clone(), source_id.to_owned());
        if let Ok(mut map) = self.by_source.lock() {
            map.entry(key.clone()).or_default().push((id, follower));
        }
        FollowGuard { followers: Arc::clone(self), key, id }
    }
}

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

/// Ends one registration when dropped.
#[derive(Debug)]
pub struct FollowGuard {
    followers: Arc<Followers>,
    key: Key,
    id: u64,
}

impl Drop for FollowGuard {
    fn drop(&mut self) {
        if let Ok(mut map) = self.followers.by_source.lock()
            && let Some(list) = map.get_mut(&self.key)
        {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                map.remove(&self.key);
            }
        }
    }
}
