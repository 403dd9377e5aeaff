//! Where schedule triggers' next slots are kept, and claimed once each.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use switchboard_domain::{TenantId, TriggerId};

use super::store::StoreError;

/// A schedule trigger whose next slot has come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueSchedule {
    pub tenant_id: TenantId,
    pub trigger_id: TriggerId,
    /// The slot's time, to the millisecond as kept.
    pub slot: DateTime<Utc>,
}

/// The next slot of every active schedule trigger, kept by the configuration store with the
/// trigger (written with it, gone with it). Whoever moves a slot on owns it: that is how each
/// slot runs once, whatever number of processes tick.
#[async_trait]
pub trait ScheduleStore: Send + Sync {
    /// Every tenant's schedules whose next slot is at or before `now`, oldest slot first, at most
    /// `limit`.
    async fn due_schedules(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<DueSchedule>, StoreError>;

    /// Moves the next slot of `trigger` from `from` to `to` if it is still `from`: `true` when this
    /// call moved it (the caller owns slot `from`), `false` when another did or the trigger is
    /// gone.
    async fn move_slot(
        &self,
        tenant: &TenantId,
        trigger: TriggerId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
}
