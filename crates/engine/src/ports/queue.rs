//! The work queue between event intake and the executor: one FIFO group per conversation.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use switchboard_domain::{AgentId, Recording, Refusal, SessionId, TenantId, TriggerId};

use super::{Admit, Counters, SlotAndCount, StoreError};

/// A unit of agent work: one inbound message for one conversation.
///
/// Unknown fields are ignored, not refused: during a deploy an older executor may read an item a
/// newer router wrote (a refused item would fail every delivery and end in the dead letters).
/// New fields are optional for the same reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkItem {
    pub tenant_id: TenantId,
    /// Idempotency root of everything this item causes: for a message, the message within its
    /// conversation ([`crate::intake::source_id`], whichever event brought it), plus `#h<n>` when
    /// the item continues a conversation handed to another agent; `invoke-<key>` for an invoke.
    pub source_id: String,
    /// The event that brought the message (a continuation keeps its message's), for logs and
    /// records: no longer the source id. None for an invoke, or an item queued before this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    pub conversation_id: String,
    pub message_id: String,
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger_id: Option<TriggerId>,
    /// The version of that trigger routing matched (the execution record keeps it). None without
    /// a trigger, or for an item queued before this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_version: Option<u64>,
    /// The variant of that trigger's traffic split that chose `agent_id`; a session the item
    /// starts keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// The agent the trigger chose; an active session of the conversation takes precedence.
    pub agent_id: AgentId,
    /// Set when the item continues a handoff: run only if this agent's session is active.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continuation: bool,
    /// The event detail, for the execution record's input.
    pub detail: serde_json::Value,
    /// Set when a tenant limit refused the item at intake: it is recorded as refused, not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,
    /// The tenant's tokens left on the day the item was admitted: the turn stops before a model
    /// call that would pass them. None when no limits apply (or for an item queued before this
    /// field existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day_tokens: Option<DayTokens>,
    /// Someone follows the turn as it runs (a streamed invoke): the executor hands its events to
    /// the profile's [`crate::Progress`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub follow: bool,
    /// What the execution record keeps of the model calls: the tenant's setting when the item
    /// was made (`full` for an item queued before the setting).
    #[serde(default, skip_serializing_if = "Recording::is_full")]
    pub recording: Recording,
    /// Set when the item resumes the turn of `source_id` that paused for this approval (by its
    /// id) once it is decided: the turn goes on in its own execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
    /// When event intake took the message in (its clock): what an agent that coalesces bursts
    /// gathers them by ([`switchboard_domain::burst`]). None for work that is not a customer's
    /// message, or an item queued before this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrived_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The earlier messages of the burst this item answers with its own, in order, each as it
    /// was queued: the item's turn is theirs too, and its commit records each as `coalesced`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<WorkItem>,
    /// After how many idle minutes the session the turn leaves waiting on its customer is
    /// closed as abandoned (the tenant's limits, read where the work was admitted); `None`: kept
    /// open (the tenant does not close idle sessions, or an item queued before this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close_idle_after: Option<u32>,
    /// Set on the idle sweep's item: it closes this session as abandoned if the session is still
    /// idle when the item runs (the conversation's earlier items have run), and does nothing else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closes_idle: Option<SessionId>,
}

/// What a tenant's `tokensPerDay` left of a UTC day when a piece of work was admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DayTokens {
    pub day: chrono::NaiveDate,
    pub left: u64,
}

impl DayTokens {
    /// Whether `spent` tokens of this turn plus a call of about `next` would pass what was left,
    /// on `today` (a turn that crossed midnight is in a new day's budget).
    pub fn would_pass(&self, today: chrono::NaiveDate, spent: u64, next: u64) -> bool {
        today == self.day && spent + next > self.left
    }
}

impl WorkItem {
    /// Whether a burst may gather this item: a customer's message that runs as it came (not a
    /// continuation, resumption, refusal, followed invoke or other start), with its arrival.
    pub fn may_coalesce(&self) -> bool {
        self.arrived_at.is_some()
            && self.event_id.is_some()
            && self.refused.is_none()
            && !self.continuation
            && !self.follow
            && self.resume.is_none()
            && self.earlier.is_empty()
    }

    /// What the customer said in this item, as one user message: the burst's messages in order,
    /// one text block each (one block for an item of one message).
    pub fn user_message(&self) -> switchboard_domain::message::Message {
        let mut message = switchboard_domain::message::Message::user_text(self.text.clone());
        if !self.earlier.is_empty() {
            let texts = self.earlier.iter().chain(std::iter::once(self)).map(|i| i.text.clone());
            message.content = texts.map(|text| switchboard_domain::message::ContentBlock::Text { text }).collect();
        }
        message
    }

    /// The first message this item answers (its own, or its burst's first).
    pub fn first_message_id(&self) -> &str {
        self.earlier.first().map_or(&self.message_id, |e| &e.message_id)
    }

    /// Whether this item answers `source_id` (its own or one of its burst's).
    pub fn answers(&self, source_id: &str) -> bool {
        self.source_id == source_id || self.earlier.iter().any(|e| e.source_id == source_id)
    }

    /// The FIFO group: one conversation of one tenant.
    pub fn group_id(&self) -> String {
        format!("{}:{}", self.tenant_id, self.conversation_id)
    }

    /// The queue's deduplication id: the source id within its tenant (for a message, tenant +
    /// conversation + message id), hashed so that it fits SQS's `MessageDeduplicationId` (the
    /// deduplication scope of a FIFO queue is the whole queue, so a bare id would let one
    /// tenant's message silence another's).
    /// A resumption is deduplicated apart from the message whose turn it resumes.
    pub fn dedup_id(&self) -> String {
        match &self.resume {
            None => switchboard_domain::ids::tenant_scoped_key(&self.tenant_id, &self.source_id),
            Some(approval) => {
                let key = format!("{}#approval/{approval}", self.source_id);
                switchboard_domain::ids::tenant_scoped_key(&self.tenant_id, &key)
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    Queued,
    /// The deduplication id was seen within the queue's deduplication window.
    Duplicate,
}

/// Where the router puts work. Consuming is profile-specific (Lambda event source mapping on AWS,
/// a worker pool in the embedded profile), so it is not part of the port.
#[async_trait]
pub trait WorkQueue: Send + Sync {
    /// Up to `max` items queued in `item`'s group behind it, in order, read without taking them
    /// (what a turn that coalesces a burst gathers). A queue that cannot look into a group
    /// (SQS) answers none: its consumer hands the executor what its batch holds instead.
    async fn queued_behind(&self, item: &WorkItem, max: usize) -> Result<Vec<WorkItem>, QueueError> {
        let _ = (item, max);
        Ok(vec![])
    }

    /// Enqueues `item` in its conversation's group ([`WorkItem::group_id`]), deduplicated on
    /// [`WorkItem::dedup_id`] (its source id, scoped by its tenant).
    async fn enqueue(&self, item: &WorkItem) -> Result<Enqueued, QueueError>;

    /// Takes the admission's count for `item` ([`Counters::hold_slot_and_take`] with `ask`) and,
    /// when it counted, enqueues `item`: what event intake does with a message an agent will
    /// answer. The default makes the two calls in turn (the AWS profile: a DynamoDB transaction,
    /// then SQS). A queue kept in the same database as the counts (the embedded profile) does both
    /// in one transaction instead, looking for a duplicate first: then a repeated event is not
    /// counted again, and no count is kept for an item that was not queued.
    async fn count_and_enqueue(
        &self,
        counters: &dyn Counters,
        ask: &SlotAndCount<'_>,
        item: &WorkItem,
    ) -> Result<CountAndEnqueue, QueueError> {
        match counters.hold_slot_and_take(ask).await.map_err(QueueError::from_store)? {
            Admit::Counted => Ok(CountAndEnqueue::Enqueued(self.enqueue(item).await?)),
            refused => Ok(CountAndEnqueue::NotCounted(refused)),
        }
    }
}

/// What [`WorkQueue::count_and_enqueue`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountAndEnqueue {
    /// Counted and queued, or found queued already ([`Enqueued::Duplicate`], which a queue that
    /// looks first has not counted).
    Enqueued(Enqueued),
    /// Not counted (never [`Admit::Counted`]): nothing queued.
    NotCounted(Admit),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("queue: {message}")]
pub struct QueueError {
    pub message: String,
    pub retryable: bool,
}

impl QueueError {
    /// A store's failure met while queueing (the counts taken with an enqueue).
    pub fn from_store(e: StoreError) -> Self {
        Self { retryable: e.retryable(), message: e.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use chrono::{DateTime, Utc};

    use super::*;
    use crate::ports::{NoCounters, Slot};

    /// Counts as `NoCounters` does, but the minute's count is full.
    struct FullMinute;

    #[async_trait]
    impl Counters for FullMinute {
        async fn take(&self, _: &TenantId, _: &str, _: u64, _: DateTime<Utc>) -> Result<bool, StoreError> {
            Ok(false)
        }
        async fn first(
            &self,
            _: &TenantId,
            _: &str,
            _: DateTime<Utc>,
            _: &switchboard_domain::OutboundEvent,
        ) -> Result<bool, StoreError> {
            Ok(false)
        }
        async fn hold_slot(
            &self,
            _: &TenantId,
            _: &str,
            _: u64,
            _: DateTime<Utc>,
            _: DateTime<Utc>,
        ) -> Result<Slot, StoreError> {
            Ok(Slot::Held { new: false })
        }
        async fn release_slot(&self, _: &TenantId, _: &str) -> Result<(), StoreError> {
            Ok(())
        }
    }

    /// The source ids enqueued.
    #[derive(Default)]
    struct Queued(Mutex<Vec<String>>);

    #[async_trait]
    impl WorkQueue for Queued {
        async fn enqueue(&self, item: &WorkItem) -> Result<Enqueued, QueueError> {
            let mut queued = self.0.lock().unwrap();
            let seen = queued.contains(&item.source_id);
            queued.push(item.source_id.clone());
            Ok(if seen { Enqueued::Duplicate } else { Enqueued::Queued })
        }
    }

    #[tokio::test]
    async fn by_default_the_counts_are_taken_first_and_only_a_counted_item_is_queued() {
        let item: WorkItem = serde_json::from_value(serde_json::json!({
            "tenantId": "t-1", "sourceId": "evt-1", "conversationId": "c-1", "messageId": "m-1", "text": "hi",
            "agentId": "01JD0000SVPP0RT0AGENT00001", "detail": {}
        }))
        .unwrap();
        let now = Utc::now();
        let ask = SlotAndCount {
            tenant: &item.tenant_id,
            conversation: "c-1",
            sessions: 10,
            now,
            until: now,
            window: "MIN#x",
            limit: 1,
            expires: now,
            likely_held: None,
            unless_human: true,
        };
        let queue = Queued::default();
        let refused = queue.count_and_enqueue(&FullMinute, &ask, &item).await.unwrap();
        assert_eq!(refused, CountAndEnqueue::NotCounted(Admit::CountFull { took_slot: false }));
        assert!(queue.0.lock().unwrap().is_empty(), "nothing queued");
        let counted = queue.count_and_enqueue(&NoCounters, &ask, &item).await.unwrap();
        assert_eq!(counted, CountAndEnqueue::Enqueued(Enqueued::Queued));
        // the default counts a repeat before the queue finds it (two steps, no transaction)
        let again = queue.count_and_enqueue(&NoCounters, &ask, &item).await.unwrap();
        assert_eq!(again, CountAndEnqueue::Enqueued(Enqueued::Duplicate));
        assert_eq!(*queue.0.lock().unwrap(), ["evt-1", "evt-1"]);
    }

    #[test]
    fn an_item_from_a_newer_or_older_writer_still_reads() {
        // a field this version does not know (a newer router's), and none of the optional ones
        // (an older router's): the item runs either way
        let body = serde_json::json!({
            "tenantId": "t-1", "sourceId": "evt-1", "conversationId": "c-1", "messageId": "m-1", "text": "hi",
            "agentId": "01JD0000SVPP0RT0AGENT00001", "detail": {}, "someFutureField": { "x": 1 }
        });
        let item: WorkItem = serde_json::from_value(body).unwrap();
        assert_eq!((item.day_tokens, &item.refused, item.continuation), (None, &None, false));
        // and what this version writes reads back the same
        let again: WorkItem = serde_json::from_str(&serde_json::to_string(&item).unwrap()).unwrap();
        assert_eq!(again, item);
    }
}
