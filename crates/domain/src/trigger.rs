//! Triggers: which agent answers which events, decided by conditions evaluated in priority order.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::condition::Conditions;
use crate::ids::{AgentId, TenantId, TriggerId};
use crate::schedule::Schedule;
use crate::validation::ValidationErrors;
use crate::validation::check_name;

/// The kind of event a trigger listens for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventType {
    #[serde(rename = "message.new")]
    MessageNew,
    /// An edit of a message (the detail carries its new text).
    #[serde(rename = "message.updated")]
    MessageUpdated,
    #[serde(rename = "schedule")]
    Schedule,
    #[serde(rename = "webhook")]
    Webhook,
    #[serde(rename = "manual")]
    Manual,
}

/// Active or not; used by triggers, tools and skills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TriggerStatus {
    #[default]
    Active,
    Inactive,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Trigger {
    pub tenant_id: TenantId,
    pub trigger_id: TriggerId,
    pub name: String,
    pub agent_id: AgentId,
    pub event_type: EventType,
    #[serde(default = "Conditions::always")]
    pub conditions: Conditions,
    /// Evaluation order: lower runs first.
    #[serde(default = "default_priority")]
    pub priority: i32,
    #[serde(default)]
    pub status: TriggerStatus,
    /// When a `schedule` trigger runs, on which conversation, with which input (only for that
    /// event type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// How a `webhook` trigger's requests are verified and which conversation they are on (only
    /// for that event type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookSource>,
    /// A traffic split: the agents that answer, chosen per conversation by weight ([`split`]);
    /// empty, the trigger's `agentId` answers every conversation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub split: Vec<Variant>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Bumped on every update; the API's `ETag`, checked against `If-Match`.
    #[serde(default)]
    pub version: u64,
}

fn default_priority() -> i32 {
    100
}

/// A `webhook` trigger's inbound side: the tenant secret its senders sign with (the Standard
/// Webhooks scheme, `whsec_…`), and where in the body the conversation is named.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookSource {
    /// Name of the tenant secret (Secrets Manager / the secrets file) requests are signed with.
    pub secret_ref: String,
    /// A JSON pointer into the body whose string or number names the conversation; absent, or
    /// absent from a body: each request has a conversation of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_pointer: Option<String>,
}

impl WebhookSource {
    fn check(&self, prefix: &str, errors: &mut ValidationErrors) {
        let name = &self.secret_ref;
        if name.is_empty() || name.len() > 128 || !name.bytes().all(|b| b.is_ascii_graphic()) {
            errors.push(format!("{prefix}/secretRef"), "must be a secret name of 1 to 128 characters");
        }
        if let Some(p) = &self.conversation_pointer
            && (!p.starts_with('/') || p.len() > 256)
        {
            errors.push(format!("{prefix}/conversationPointer"), "must be a JSON pointer such as '/ticket/id'");
        }
    }

    /// The conversation `body` names at the pointer, when it names one that is a valid id.
    pub fn conversation_in(&self, body: &serde_json::Value) -> Option<String> {
        let named = match body.pointer(self.conversation_pointer.as_deref()?)? {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            _ => return None,
        };
        crate::ids::check_external_id(&named).is_ok().then_some(named)
    }
}

impl Trigger {
    /// Writes `tenant_zone` wherever the trigger was written without a zone: its schedule (UTC
    /// when the tenant has none) and its time conditions (left without one when the tenant has
    /// none, which [`Trigger::missing_zones`] then refuses). Whether anything changed.
    pub fn fill_zone(&mut self, tenant_zone: Option<&str>) -> bool {
        let mut filled = false;
        if let Some(schedule) = &mut self.schedule {
            let zone = tenant_zone.unwrap_or(crate::schedule::DEFAULT_ZONE);
            filled |= crate::schedule::fill_zone(&mut schedule.time_zone, zone);
        }
        if let Some(zone) = tenant_zone
            && let Some(conditions) = self.conditions.fill_zone(zone)
        {
            self.conditions = conditions;
            filled = true;
        }
        filled
    }

    /// Whether storing the trigger needs its tenant's zone: something was written without one.
    pub fn needs_zone(&self) -> bool {
        self.schedule.as_ref().is_some_and(|s| s.time_zone.is_empty()) || !self.conditions.missing_zones().is_empty()
    }

    /// The faults of the time conditions still without a zone once the tenant's was filled in
    /// (the tenant has none), at their pointers.
    pub fn missing_zones(&self) -> ValidationErrors {
        let mut errors = ValidationErrors::default();
        for fault in self.conditions.missing_zones() {
            errors.push(format!("/conditions{}", fault.pointer), fault.message);
        }
        errors
    }

    /// Checks the record on its own (conditions are validated when parsed). Whether `agentId`
    /// names an agent of the same tenant is checked by whoever stores the trigger.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errors = ValidationErrors::default();
        check_name(&mut errors, "/name", &self.name);
        self.check_split(&mut errors);
        for fault in self.conditions.zone_faults() {
            errors.push(format!("/conditions{}", fault.pointer), fault.message);
        }
        match (self.event_type, &self.schedule) {
            (EventType::Schedule, Some(schedule)) => schedule.check("/schedule", &mut errors),
            (EventType::Schedule, None) => errors.push("/schedule", "a schedule trigger needs a schedule"),
            (_, Some(_)) => errors.push("/schedule", "only a schedule trigger has a schedule"),
            (_, None) => {}
        }
        match (self.event_type, &self.webhook) {
            (EventType::Webhook, Some(webhook)) => webhook.check("/webhook", &mut errors),
            (EventType::Webhook, None) => errors.push("/webhook", "a webhook trigger needs a webhook (its secretRef)"),
            (_, Some(_)) => errors.push("/webhook", "only a webhook trigger has a webhook"),
            (_, None) => {}
        }
        errors.into_result()
    }

    /// The schedule's next slot after `at`, and its spec: what the store keeps for an active
    /// schedule trigger (None for any other trigger, or a schedule that does not compile).
    pub fn next_slot_after(&self, at: DateTime<Utc>) -> Option<(String, DateTime<Utc>)> {
        let schedule = self
            .schedule
            .as_ref()
            .filter(|_| self.status == TriggerStatus::Active && self.event_type == EventType::Schedule)?;
        let next = schedule.slots("/schedule").ok()?.next_after(at)?;
        Some((schedule.spec(), next))
    }
}

/// Checks the `conditions` of a trigger body (JSON) on their own, so that a bad condition is
/// reported with its full pointer (`/conditions/all/1/operator`) rather than as a whole.
pub fn check_conditions(body: &serde_json::Value, prefix: &str) -> Result<(), ValidationErrors> {
    let Some(c) = body.get("conditions") else { return Ok(()) };
    let conditions = Conditions::parse(c)
        .map_err(|e| ValidationErrors::single(format!("{prefix}/conditions{}", e.pointer), e.message))?;
    let mut errors = ValidationErrors::default();
    for fault in conditions.zone_faults() {
        errors.push(format!("{prefix}/conditions{}", fault.pointer), fault.message);
    }
    errors.into_result()
}

/// Sorts triggers into evaluation order: priority, then creation (ULID order) so that ties are
/// broken the same way every time.
pub fn sort_for_evaluation(triggers: &mut [Trigger]) {
    triggers.sort_by(|a, b| a.priority.cmp(&b.priority).then(a.trigger_id.cmp(&b.trigger_id)));
}

/// What a store hands the router for one tenant and event type (and caches as such): the active
/// triggers of `event_type` among the tenant's `records`, in evaluation order. The first record
/// that could not be read stops the selection with its error: routing on part of a tenant's
/// triggers would answer with the wrong agent.
pub fn active_in_order<E>(
    records: impl IntoIterator<Item = Result<Trigger, E>>,
    event_type: EventType,
) -> Result<Arc<[Trigger]>, E> {
    let records = records.into_iter();
    let mut active = Vec::with_capacity(records.size_hint().0);
    for trigger in records {
        let trigger = trigger?;
        if trigger.status == TriggerStatus::Active && trigger.event_type == event_type {
            active.push(trigger);
        }
    }
    sort_for_evaluation(&mut active);
    Ok(active.into())
}

/// The first active trigger for `event_type` whose conditions match `detail`.
pub fn first_match<'a>(
    sorted: &'a [Trigger],
    event_type: EventType,
    detail: &serde_json::Value,
) -> Option<&'a Trigger> {
    sorted
        .iter()
        .find(|t| t.status == TriggerStatus::Active && t.event_type == event_type && t.conditions.matches(detail))
}

mod index;
pub mod split;
mod tester;
pub use index::TriggerIndex;
pub use split::{Assignment, Choice, Variant};
pub use tester::{Considered, Outcome, TriggerTest, test_triggers};
