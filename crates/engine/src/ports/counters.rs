//! Tenant counters: the atomic, windowed counts that tenant limits are enforced with. One count
//! per tenant and window, shared by every process of a profile (SQLite embedded, DynamoDB on
//! AWS), so that no number of workers or Lambda containers admits more than the limit. Also the
//! tenant's session slots: one per conversation an agent is answering, leased until idle.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use switchboard_domain::{AgentId, OutboundEvent, SessionId, TenantId};

use super::StoreError;

#[async_trait]
pub trait Counters: Send + Sync {
    /// Adds one to the tenant's count of `window` unless it has already reached `limit`: `true`
    /// when counted. Concurrent callers never take more than `limit` between them. The count
    /// may be forgotten after `expires`.
    async fn take(
        &self,
        tenant: &TenantId,
        window: &str,
        limit: u64,
        expires: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// `true` for exactly one caller per tenant and `window`, whoever asks first: that caller's
    /// `announce` (that a limit was reached) is kept in the event log in the same write, as a
    /// turn's events are (the outbox), for the bus to relay.
    async fn first(
        &self,
        tenant: &TenantId,
        window: &str,
        expires: DateTime<Utc>,
        announce: &OutboundEvent,
    ) -> Result<bool, StoreError>;

    /// Holds one of the tenant's `limit` session slots for `conversation` until `until`. A
    /// conversation that holds one (even past its `until`, while no one has taken it) keeps it
    /// and it is renewed; otherwise it takes a free one, freeing first the slots whose `until`
    /// has passed `now`. Concurrent callers never hold more than `limit` between them.
    async fn hold_slot(
        &self,
        tenant: &TenantId,
        conversation: &str,
        limit: u64,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Slot, StoreError>;

    /// Frees the conversation's slot, if it holds one.
    async fn release_slot(&self, tenant: &TenantId, conversation: &str) -> Result<(), StoreError>;

    /// Whether [`Counters::hold_slot_and_take`] answers [`Admit::HumanOwned`] when asked
    /// ([`SlotAndCount::unless_human`]): the adapter reads who owns the conversation in the same
    /// step, so that event intake need not read the conversation before admitting a message.
    fn sees_human_owner(&self) -> bool {
        false
    }

    /// [`Counters::hold_slot`], then (when the conversation holds its slot) [`Counters::take`]
    /// on `window`: what admitting a message asks. An adapter that can do both in one round trip
    /// overrides this; one that does may also give back, in the same step, a slot it just took
    /// for a count that was refused (and says so with `took_slot: false`). An adapter that
    /// [sees the human owner](Counters::sees_human_owner) takes nothing for a conversation a
    /// human operator owns when `unless_human` is asked.
    async fn hold_slot_and_take(&self, ask: &SlotAndCount<'_>) -> Result<Admit, StoreError> {
        match self.hold_slot(ask.tenant, ask.conversation, ask.sessions, ask.now, ask.until).await? {
            Slot::Full { frees_at } => Ok(Admit::SessionsFull { frees_at }),
            Slot::Held { new } => {
                if self.take(ask.tenant, ask.window, ask.limit, ask.expires).await? {
                    Ok(Admit::Counted)
                } else {
                    Ok(Admit::CountFull { took_slot: new })
                }
            }
        }
    }
}

/// What [`Counters::hold_slot_and_take`] is asked.
#[derive(Debug, Clone, Copy)]
pub struct SlotAndCount<'a> {
    pub tenant: &'a TenantId,
    pub conversation: &'a str,
    /// The tenant's session slots.
    pub sessions: u64,
    pub now: DateTime<Utc>,
    /// Until when the slot is held.
    pub until: DateTime<Utc>,
    pub window: &'a str,
    /// The window's limit.
    pub limit: u64,
    /// When the window's count may be forgotten.
    pub expires: DateTime<Utc>,
    /// Whether the conversation probably holds its slot already (its latest session is an
    /// agent's, still active), if the caller knows: which write an adapter tries first (`None`:
    /// the adapter guesses). A wrong guess costs a round trip, never a wrong answer.
    pub likely_held: Option<bool>,
    /// Take nothing if a human operator owns the conversation: [`Admit::HumanOwned`] (honoured
    /// by an adapter that [sees the owner](Counters::sees_human_owner), ignored by others).
    pub unless_human: bool,
}

/// What [`Counters::hold_slot_and_take`] gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// The conversation holds a slot and the window counted one more.
    Counted,
    /// Every slot is held (nothing counted); the first may come free at `frees_at`.
    SessionsFull { frees_at: DateTime<Utc> },
    /// The window is at its limit. `took_slot`: a slot was taken for this message and is still
    /// held (the caller gives it back).
    CountFull { took_slot: bool },
    /// A human operator owns the conversation (through `session_id`, handed over by `agent_id`):
    /// nothing taken. Only when [`SlotAndCount::unless_human`] was asked.
    HumanOwned { session_id: SessionId, agent_id: AgentId },
}

/// What [`Counters::hold_slot`] gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The conversation holds a slot; `new` when it was just taken (not renewed).
    Held { new: bool },
    /// Every slot is held; the first may come free at `frees_at`, unless it is renewed.
    Full { frees_at: DateTime<Utc> },
}

/// No counting at all: everything is admitted (tests of other parts of the engine).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCounters;

#[async_trait]
impl Counters for NoCounters {
    async fn take(&self, _: &TenantId, _: &str, _: u64, _: DateTime<Utc>) -> Result<bool, StoreError> {
        Ok(true)
    }

    async fn first(&self, _: &TenantId, _: &str, _: DateTime<Utc>, _: &OutboundEvent) -> Result<bool, StoreError> {
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
