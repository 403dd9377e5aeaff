//! The trigger tester: which trigger routing would pick for an event, and why each one it
//! considered did or did not match. It walks the triggers routing sees (the active ones of the
//! event's type, in evaluation order), judges each with the same evaluation routing uses, and
//! skips a matching trigger whose agent is not active, as routing does (for a traffic split: the
//! variant the conversation falls in, or the trigger's own agent after it). It queues nothing
//! and reads no store: the caller hands it the triggers and says which agents are active.

use serde::Serialize;
use serde_json::Value;

use super::{Choice, EventType, Trigger};
use crate::ids::{AgentId, TriggerId};

/// What the tester answers for one event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerTest {
    pub event_type: EventType,
    /// The trigger routing would pick; `None`: no trigger answers (the event would be recorded
    /// as not matched).
    pub matched: Option<TriggerId>,
    /// The agent that would answer.
    pub agent_id: Option<AgentId>,
    /// The variant of the matched trigger's traffic split that would answer the event's
    /// conversation (`detail.conversationId`), if the trigger splits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// Every trigger routing considers, in evaluation order.
    pub triggers: Vec<Considered>,
}

/// One trigger as the tester saw it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Considered {
    pub trigger_id: TriggerId,
    pub name: String,
    pub agent_id: AgentId,
    pub priority: i32,
    pub outcome: Outcome,
    /// Its conditions, each node with `held` and what the event holds there
    /// ([`Conditions::explain_in`](crate::condition::Conditions::explain_in)).
    pub conditions: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Its conditions hold and its agent is active: routing picks it.
    Matched,
    /// Its conditions do not hold.
    NoMatch,
    /// Its conditions hold but its agent is missing or not active: routing skips it.
    AgentNotActive,
    /// An earlier trigger was picked; shown with what its conditions would say.
    NotReached,
}

/// Tests `detail` (an event's `detail` object) of type `event_type` against `active`, the
/// active triggers of that type in evaluation order (what a store hands routing), at the moment
/// `now` (time conditions, and the tenant's `calendars` they may name), with `agent_active`
/// saying whether a trigger's agent may answer.
pub fn test_triggers(
    active: &[Trigger],
    event_type: EventType,
    detail: &Value,
    now: chrono::DateTime<chrono::Utc>,
    calendars: &crate::calendar::Calendars,
    agent_active: impl Fn(&AgentId) -> bool,
) -> TriggerTest {
    let conversation = detail["conversationId"].as_str().unwrap_or_default();
    let mut matched: Option<(&Trigger, Choice<'_>)> = None;
    let triggers = active
        .iter()
        .map(|trigger| {
            let conditions = trigger.conditions.explain_in(detail, now, calendars);
            let choice = trigger.choose(conversation);
            let answering = Some(choice)
                .filter(|c| agent_active(&c.agent_id))
                .or_else(|| trigger.fallback(&choice).filter(|c| agent_active(&c.agent_id)));
            let outcome = if matched.is_some() {
                Outcome::NotReached
            } else if conditions["held"] != Value::Bool(true) {
                Outcome::NoMatch
            } else if let Some(choice) = answering {
                matched = Some((trigger, choice));
                Outcome::Matched
            } else {
                Outcome::AgentNotActive
            };
            Considered {
                trigger_id: trigger.trigger_id,
                name: trigger.name.clone(),
                agent_id: trigger.agent_id,
                priority: trigger.priority,
                outcome,
                conditions,
            }
        })
        .collect();
    TriggerTest {
        event_type,
        matched: matched.map(|(t, _)| t.trigger_id),
        agent_id: matched.map(|(_, c)| c.agent_id),
        variant: matched.and_then(|(_, c)| c.variant_name()),
        triggers,
    }
}
