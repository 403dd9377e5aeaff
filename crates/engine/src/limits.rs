//! Tenant limits where work enters: every inbound message an agent would answer and every
//! `invoke` asks [`Limits::admit`] first. Three limits are enforced, in this order: tokens per UTC
//! day (the tenant's recorded usage of the day, so a refusal costs no count), concurrent sessions
//! (a slot per conversation an agent is answering, leased until the conversation has been idle
//! for the tenant's `sessionIdleMinutes`, freed when its session ends or goes to a human) and
//! invocations per UTC minute (an atomic windowed count). Counts and slots live in the profile's
//! store, exact across workers and Lambda containers. The first refusal of a window (a UTC minute
//! for the sessions cap) publishes `tenant.limit.reached`; later ones in the same window do not. What a refused message becomes (its record, the customer's answer) is the executor's
//! business: intake queues it with the [`Refusal`], so it keeps its place in the conversation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::{DateTime, Duration, DurationRound, NaiveDate, Utc};
use serde_json::json;
use switchboard_domain::event::detail_type;
use switchboard_domain::{AgentId, LimitName, OutboundEvent, Refusal, SessionId, Tenant, TenantId};
use tracing::{info, warn};

use crate::ports::{
    Admit, Clock, Counters, DayTokens, Deps, EventBus, ExecutionLog, Metrics, SlotAndCount, StoreError,
};

/// Whether a piece of work may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Admitted, with what the day's token limit leaves of the day for it.
    Admitted(DayTokens),
    Refused(Refusal),
    /// A human operator owns the conversation: nothing counted or held (only when asked
    /// `unless_human`, from counters that [see the owner](Limits::sees_human_owner)).
    HumanOwned {
        session_id: SessionId,
        agent_id: AgentId,
    },
}

/// [`Limits::prepare`]'s answer.
#[derive(Debug)]
pub enum AdmitStep {
    /// Decided without the counts (the day's tokens are spent).
    Decided(Admission),
    /// The counts are to be taken.
    Count(Counting),
}

/// An admission the day's tokens allow, waiting for the counts: a conversation's session slot and
/// one more invocation of the minute.
#[derive(Debug, Clone)]
pub struct Counting {
    tenant: TenantId,
    conversation: String,
    sessions: u64,
    now: DateTime<Utc>,
    until: DateTime<Utc>,
    /// The UTC minute counted, and its window's key.
    minute: DateTime<Utc>,
    window: String,
    limit: u64,
    likely_held: Option<bool>,
    unless_human: bool,
    day: DayTokens,
}

impl Counting {
    /// What the counters are asked.
    pub fn ask(&self) -> SlotAndCount<'_> {
        SlotAndCount {
            tenant: &self.tenant,
            conversation: &self.conversation,
            sessions: self.sessions,
            now: self.now,
            until: self.until,
            window: &self.window,
            limit: self.limit,
            // Kept a minute past its window, so that a slow clock elsewhere never recounts it.
            expires: self.reopens() + Duration::minutes(1),
            likely_held: self.likely_held,
            unless_human: self.unless_human,
        }
    }

    /// When the minute's count starts over.
    fn reopens(&self) -> DateTime<Utc> {
        self.minute + Duration::minutes(1)
    }

    /// What the day's token limit leaves of the day for the work, once admitted.
    pub fn day_tokens(&self) -> DayTokens {
        self.day
    }
}

#[derive(Clone)]
pub struct Limits {
    counters: Arc<dyn Counters>,
    executions: Arc<dyn ExecutionLog>,
    bus: Arc<dyn EventBus>,
    clock: Arc<dyn Clock>,
    metrics: Arc<dyn Metrics>,
    day_usage: Option<Arc<DayUsageCache>>,
}

/// The tokens a tenant used on a day, as last read, kept for a while.
struct DayUsageCache {
    ttl: std::time::Duration,
    entries: Mutex<HashMap<(TenantId, NaiveDate), (Instant, u64)>>,
}

impl std::fmt::Debug for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limits").finish_non_exhaustive()
    }
}

impl Limits {
    pub fn new(deps: &Deps) -> Self {
        Self {
            counters: deps.counters.clone(),
            executions: deps.executions.clone(),
            bus: deps.bus.clone(),
            clock: deps.clock.clone(),
            metrics: deps.metrics.clone(),
            day_usage: None,
        }
    }

    /// Keeps each tenant's tokens used today for `ttl` instead of reading them for every
    /// message: a tenant that reaches its tokens per day is refused up to `ttl` later (on top
    /// of the turns already running, which no check before a turn can bound).
    pub fn with_day_usage_cache(mut self, ttl: std::time::Duration) -> Self {
        self.day_usage = Some(Arc::new(DayUsageCache { ttl, entries: Mutex::default() }));
        self
    }

    /// The tokens `tenant` used on `day`.
    async fn used_on(&self, tenant: &TenantId, day: NaiveDate) -> Result<u64, StoreError> {
        let k = (tenant.clone(), day);
        if let Some(cache) = &self.day_usage
            && let Some((_, used)) =
                cache.entries.lock().ok().and_then(|e| e.get(&k).filter(|(at, _)| at.elapsed() < cache.ttl).copied())
        {
            return Ok(used);
        }
        let used = self.executions.tokens_on(tenant, day).await?;
        if let Some(cache) = &self.day_usage
            && let Ok(mut entries) = cache.entries.lock()
        {
            // yesterday's entries go as the day turns
            entries.retain(|(_, d), _| *d >= day);
            entries.insert(k, (Instant::now(), used));
        }
        Ok(used)
    }

    /// Whether [`Limits::admit`] can answer [`Admission::HumanOwned`] (the counters read the
    /// conversation's owner in the same step as the slot and the count).
    pub fn sees_human_owner(&self) -> bool {
        self.counters.sees_human_owner()
    }

    /// Counts one invocation for `tenant` in `conversation` unless a limit refuses it. A refused
    /// piece of work is not counted and takes no new session slot. `likely_held`: whether the
    /// caller has just seen the conversation's active agent session (so it probably holds its
    /// slot), if it looked; it only decides which write is tried first. `unless_human`: count
    /// nothing for a conversation a human operator owns, and say so, if the counters
    /// [see the owner](Limits::sees_human_owner). A refusal by the day's tokens is decided before
    /// the owner is read, so it says nothing about the owner.
    pub async fn admit(
        &self,
        tenant: &Tenant,
        conversation: &str,
        likely_held: Option<bool>,
        unless_human: bool,
    ) -> Result<Admission, StoreError> {
        match self.prepare(tenant, conversation, likely_held, unless_human).await? {
            AdmitStep::Decided(admission) => Ok(admission),
            AdmitStep::Count(counting) => {
                let admit = self.counters.hold_slot_and_take(&counting.ask()).await?;
                self.conclude(tenant, &counting, admit).await
            }
        }
    }

    /// [`Limits::admit`] up to the counts: what the day's tokens decide, or what to ask the
    /// counters ([`Counting::ask`]; then [`Limits::conclude`] with their answer). For a caller that
    /// takes the counts together with another write ([`crate::WorkQueue::count_and_enqueue`]).
    pub async fn prepare(
        &self,
        tenant: &Tenant,
        conversation: &str,
        likely_held: Option<bool>,
        unless_human: bool,
    ) -> Result<AdmitStep, StoreError> {
        let now = self.clock.now();
        let limits = &tenant.limits;
        let today = now.date_naive();
        let used = self.used_on(&tenant.tenant_id, today).await?;
        if used >= limits.tokens_per_day {
            let reopens = (today + Duration::days(1)).and_time(chrono::NaiveTime::MIN).and_utc();
            let window = format!("DAY#{today}");
            let refused =
                self.refuse(tenant, LimitName::TokensPerDay, limits.tokens_per_day, &window, now, reopens).await?;
            return Ok(AdmitStep::Decided(refused));
        }
        let minute = now.duration_trunc(Duration::minutes(1)).unwrap_or(now);
        Ok(AdmitStep::Count(Counting {
            tenant: tenant.tenant_id.clone(),
            conversation: conversation.to_owned(),
            sessions: u64::from(limits.concurrent_sessions),
            now,
            until: now + Duration::minutes(i64::from(limits.session_idle_minutes)),
            window: format!("MIN#{}", minute_key(minute)),
            minute,
            limit: u64::from(limits.invocations_per_minute),
            likely_held,
            unless_human,
            day: DayTokens { day: today, left: limits.tokens_per_day - used },
        }))
    }

    /// The admission, given what the counters answered to `counting`'s ask.
    pub async fn conclude(&self, tenant: &Tenant, counting: &Counting, admit: Admit) -> Result<Admission, StoreError> {
        let (t, now) = (&tenant.tenant_id, counting.now);
        match admit {
            Admit::Counted => return Ok(Admission::Admitted(counting.day)),
            Admit::HumanOwned { session_id, agent_id } => return Ok(Admission::HumanOwned { session_id, agent_id }),
            Admit::SessionsFull { frees_at } => {
                let window = format!("SES#{}", minute_key(counting.minute));
                let reopens = frees_at.max(now);
                let sessions = counting.sessions;
                return self.refuse(tenant, LimitName::ConcurrentSessions, sessions, &window, now, reopens).await;
            }
            // A slot taken for this message is given back: the message does not run.
            Admit::CountFull { took_slot: true } => self.release(t, &counting.conversation).await,
            Admit::CountFull { took_slot: false } => {}
        }
        let (limit, window, reopens) = (counting.limit, &counting.window, counting.reopens());
        self.refuse(tenant, LimitName::InvocationsPerMinute, limit, window, now, reopens).await
    }

    /// The counters this admits with.
    pub fn counters(&self) -> &dyn Counters {
        self.counters.as_ref()
    }

    /// Frees the conversation's session slot (its session ended or went to a human). A failure
    /// only costs the slot until it goes idle, so it is logged, not raised.
    pub async fn release(&self, tenant: &TenantId, conversation: &str) {
        if let Err(e) = self.counters.release_slot(tenant, conversation).await {
            warn!(tenant = %tenant, conversation_id = %conversation, error = %e, "session slot not freed; it frees when idle");
        }
    }

    async fn refuse(
        &self,
        tenant: &Tenant,
        limit: LimitName,
        value: u64,
        window: &str,
        now: DateTime<Utc>,
        reopens: DateTime<Utc>,
    ) -> Result<Admission, StoreError> {
        let retry_after_seconds = u64::try_from((reopens - now).num_seconds()).unwrap_or(0).max(1);
        let on_limit = tenant.limits.on_limit.clone();
        let refusal = Refusal { limit, value, retry_after_seconds, on_limit, reopens_at: Some(reopens) };
        let t = &tenant.tenant_id;
        self.metrics.limit_hit(t, limit);
        let event = OutboundEvent {
            id: format!("{t}/limit/{window}"),
            detail_type: detail_type::TENANT_LIMIT_REACHED.to_owned(),
            tenant_id: t.clone(),
            detail: json!({
                "tenantId": t,
                "limit": limit.as_str(),
                "value": value,
                "window": window,
                "retryAfterSeconds": retry_after_seconds,
            }),
        };
        // Claimed and logged in one write: the one caller that announces relays it.
        if self.counters.first(t, window, reopens + Duration::minutes(1), &event).await? {
            info!(tenant = %t, limit = limit.as_str(), value, window, "tenant limit reached");
            self.bus.relay(std::slice::from_ref(&event)).await;
        }
        Ok(Admission::Refused(refusal))
    }
}

/// A UTC minute as the counters' windows name it.
fn minute_key(minute: DateTime<Utc>) -> String {
    minute.format("%Y-%m-%dT%H:%M").to_string()
}
