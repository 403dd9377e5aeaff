//! Schedule triggers: the work their due slots start. Each slot is owned by whoever moves the
//! trigger's next slot on ([`ScheduleStore::move_slot`]), so a slot runs once however many
//! processes tick; a slot whose work could not be queued is given back for the next tick.

use chrono::{DateTime, Utc};
use serde_json::json;
use switchboard_domain::schedule::{LATE_AFTER, slot_label};
use switchboard_domain::{EventType, Missed, TenantStatus, Trigger};
use tracing::{info, warn};

use super::{Intake, RouteOutcome};
use crate::limits::Admission;
use crate::ports::{DueSchedule, Enqueued, ScheduleStore, StoreError, WorkItem};

/// Most slots one tick fires; the rest are due at the next.
pub const SLOTS_PER_TICK: usize = 500;

/// What one tick of the schedules did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Fired {
    /// Slots whose work was queued (a refusal by a tenant limit included: it is recorded).
    pub queued: usize,
    /// Slots this tick owned and did not run: missed under `skip`, the tenant suspended, the
    /// agent not active, the conditions not held, or a person owning the conversation.
    pub skipped: usize,
    /// Slots whose work could not be queued: given back to the next tick.
    pub failed: usize,
}

impl Fired {
    pub fn any(&self) -> bool {
        self.queued + self.skipped + self.failed > 0
    }
}

/// What became of a slot this tick owned.
enum Outcome {
    Queued,
    Skipped(&'static str),
}

impl Intake {
    /// Starts the work of every schedule slot due at `now`: what the embedded profile's scheduler
    /// runs on its period. A slot another process owns is left to it; a slot whose work could not
    /// be queued is given back (and counted `failed`).
    pub async fn fire_schedules(&self, store: &dyn ScheduleStore, now: DateTime<Utc>) -> Result<Fired, StoreError> {
        let mut fired = Fired::default();
        for due in store.due_schedules(now, SLOTS_PER_TICK).await? {
            let Some(trigger) = self.schedule_trigger(&due).await? else { continue };
            let Some(schedule) = &trigger.schedule else { continue };
            let Ok(Some(next)) = schedule.slots("/schedule").map(|s| s.next_after(now)) else {
                warn!(trigger_id = %due.trigger_id, "a stored schedule does not compile; not fired");
                continue;
            };
            if !store.move_slot(&due.tenant_id, due.trigger_id, due.slot, next).await? {
                continue; // another process owns this slot
            }
            match self.start_slot(&due, &trigger, now).await {
                Ok(Outcome::Queued) => fired.queued += 1,
                Ok(Outcome::Skipped(why)) => {
                    info!(trigger_id = %due.trigger_id, slot = %due.slot, why, "schedule slot not run");
                    fired.skipped += 1;
                }
                Err(e) => {
                    warn!(trigger_id = %due.trigger_id, slot = %due.slot, error = %e,
                        "schedule slot not queued; the next tick tries again");
                    fired.failed += 1;
                    if let Err(e) = store.move_slot(&due.tenant_id, due.trigger_id, next, due.slot).await {
                        warn!(trigger_id = %due.trigger_id, error = %e, "the slot could not be given back; it is lost");
                    }
                }
            }
        }
        Ok(fired)
    }

    /// The due slot's trigger, if it is still an active schedule trigger (the store's trigger
    /// cache may be a moment behind the slot).
    async fn schedule_trigger(&self, due: &DueSchedule) -> Result<Option<Trigger>, StoreError> {
        let triggers = self.config.active_triggers(&due.tenant_id, EventType::Schedule).await?;
        Ok(triggers.iter().find(|t| t.trigger_id == due.trigger_id).cloned())
    }

    async fn start_slot(
        &self,
        due: &DueSchedule,
        trigger: &Trigger,
        now: DateTime<Utc>,
    ) -> Result<Outcome, StoreError> {
        let Some(schedule) = &trigger.schedule else { return Ok(Outcome::Skipped("no schedule")) };
        if schedule.missed == Missed::Skip && now - due.slot > LATE_AFTER {
            return Ok(Outcome::Skipped("missed, and the schedule skips missed slots"));
        }
        let Some(tenant) = self.tenant(&due.tenant_id).await? else { return Ok(Outcome::Skipped("no tenant")) };
        if tenant.status == TenantStatus::Suspended {
            return Ok(Outcome::Skipped("the tenant is suspended"));
        }
        let source_id = format!("schedule-{}-{}", trigger.trigger_id, slot_label(due.slot));
        let conversation = schedule.conversation_id.clone().unwrap_or_else(|| source_id.clone());
        let detail = json!({
            "tenantId": due.tenant_id, "conversationId": conversation,
            "schedule": {
                "triggerId": trigger.trigger_id, "slot": due.slot,
                "expression": schedule.expression, "timeZone": schedule.time_zone,
            },
        });
        if !trigger.conditions.matches_in(&detail, now, &tenant.calendars) {
            return Ok(Outcome::Skipped("the trigger's conditions do not hold"));
        }
        let Some((agent, variant)) = crate::config::trigger_agent(self.config.as_ref(), trigger, &conversation).await?
        else {
            return Ok(Outcome::Skipped("the trigger's agent is missing or not active"));
        };
        let latest = self.sessions.latest_session_for_routing(&due.tenant_id, &conversation).await?;
        if latest.as_ref().is_some_and(|s| s.is_human_owned()) {
            return Ok(Outcome::Skipped("a person owns the conversation"));
        }
        let mut item = WorkItem {
            tenant_id: due.tenant_id.clone(),
            source_id: source_id.clone(),
            event_id: None,
            conversation_id: conversation.clone(),
            message_id: source_id,
            text: schedule.input.clone(),
            trigger_id: Some(trigger.trigger_id),
            trigger_version: Some(trigger.version),
            variant,
            agent_id: agent.agent_id,
            continuation: false,
            detail,
            refused: None,
            day_tokens: None,
            follow: false,
            resume: None,
            arrived_at: None,
            earlier: vec![],
            recording: tenant.recording,
            close_idle_after: tenant.limits.close_idle_after(),
            closes_idle: None,
        };
        if let Some(limits) = &self.limits {
            let held = latest.as_ref().is_some_and(|s| s.is_active());
            match limits.admit(&tenant, &conversation, Some(held), true).await? {
                Admission::Admitted(day) => item.day_tokens = Some(day),
                Admission::HumanOwned { .. } => return Ok(Outcome::Skipped("a person owns the conversation")),
                // Recorded as refused, like a message a limit refuses.
                Admission::Refused(refusal) => item.refused = Some(refusal),
            }
        }
        let queued = self.queue.enqueue(&item).await.map_err(|e| StoreError::Unavailable {
            message: format!("the schedule's work could not be queued: {e}"),
            retryable: true,
        })?;
        let outcome = RouteOutcome::Enqueued {
            trigger_id: trigger.trigger_id,
            agent_id: agent.agent_id,
            duplicate: queued == Enqueued::Duplicate,
        };
        self.count(&due.tenant_id, &outcome);
        Ok(Outcome::Queued)
    }
}
