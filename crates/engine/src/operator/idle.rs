//! Idle sessions: a session whose agent has waited on its customer for the tenant's
//! `sessionIdleMinutes` closes as abandoned when the tenant's limits say `closeIdleSessions`
//! (docs/decisions.md, "Abandoned conversations"). A turn that leaves its session waiting sets
//! when ([`Session::rest`]); each profile's tick finds the sessions due
//! ([`Operator::close_idle_sessions`]) and queues each one's close in its conversation's order, so
//! that a message queued before it is answered first (and keeps the session open); the executor
//! commits the close if the session is still idle then.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use switchboard_domain::{Session, Tenant, TenantId};
use tracing::warn;

use super::{Operator, OperatorError};
use crate::ports::{IdleSession, SessionWrite, StoreError, WorkItem};

/// Most sessions one tick looks at; the rest are due at the next.
pub const IDLE_PER_TICK: usize = 500;

/// What one tick of the idle sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IdleSweep {
    /// Closes queued (each runs after what its conversation queued before it).
    pub queued: usize,
    /// Sessions listed as due that were not: a message came meanwhile, or their tenant no
    /// longer closes idle sessions (then taken off the list).
    pub kept: usize,
    /// Sessions whose close could not be queued: the next tick tries again.
    pub failed: usize,
}

impl IdleSweep {
    pub fn any(&self) -> bool {
        self.queued + self.kept + self.failed > 0
    }
}

impl Operator {
    /// Queues the close of every tenant's sessions whose idle time has passed (at most
    /// [`IDLE_PER_TICK`]): what each profile's tick runs. A session whose close could not be
    /// queued is counted and left for the next tick; only the list's own read fails the call. A
    /// close queued again before the first has run is the same item (its deduplication id).
    pub async fn close_idle_sessions(&self) -> Result<IdleSweep, OperatorError> {
        let now = self.deps.clock.now();
        let mut done = IdleSweep::default();
        let mut tenants: HashMap<TenantId, Option<Tenant>> = HashMap::new();
        for due in self.deps.sessions.idle_sessions(now, IDLE_PER_TICK).await? {
            match self.queue_close(&due, now, &mut tenants).await {
                Ok(true) => done.queued += 1,
                // Changed since it was read: not idle any more, or the next tick sees it again.
                Ok(false) | Err(OperatorError::Conflict) => done.kept += 1,
                Err(e) => {
                    warn!(session_id = %due.session_id, error = %e, "an idle session's close could not be queued; the next tick tries again");
                    done.failed += 1;
                }
            }
        }
        Ok(done)
    }

    /// Queues the close of `due` if it is still idle and its tenant still closes idle sessions;
    /// takes it off the list if the tenant no longer does.
    async fn queue_close(
        &self,
        due: &IdleSession,
        now: DateTime<Utc>,
        tenants: &mut HashMap<TenantId, Option<Tenant>>,
    ) -> Result<bool, OperatorError> {
        let deps = &self.deps;
        // Read again: the list may come from an index a moment behind.
        let Some(mut session) = deps.sessions.get_session(&due.tenant_id, due.session_id).await? else {
            return Ok(false);
        };
        if !session.is_idle_at(now) {
            return Ok(false);
        }
        let tenant = match tenants.get(&due.tenant_id) {
            Some(t) => t.clone(),
            None => {
                let t = deps.config.get_tenant(&due.tenant_id).await?;
                tenants.insert(due.tenant_id.clone(), t.clone());
                t
            }
        };
        if !tenant.is_some_and(|t| t.limits.close_idle_sessions) {
            // The tenant stopped closing idle sessions (or is gone): the session leaves the list.
            let expected = session.version;
            session.idle = None;
            session.version += 1;
            deps.sessions.write_session(&SessionWrite { session, expected_version: Some(expected) }).await?;
            return Ok(false);
        }
        deps.queue.enqueue(&close_item(&session)).await.map_err(|e| {
            OperatorError::Store(StoreError::Unavailable {
                message: format!("an idle session's close could not be queued: {e}"),
                retryable: true,
            })
        })?;
        Ok(true)
    }
}

/// The work item that closes `session` (at the version read) in its conversation's order. Its
/// source names the version, so that the close of a later idle time of the same session is a new
/// item, not a repeat of one dropped because a message came.
fn close_item(session: &Session) -> WorkItem {
    let source_id = format!("idle-{}-{}", session.session_id, session.version);
    WorkItem {
        tenant_id: session.tenant_id.clone(),
        source_id: source_id.clone(),
        event_id: None,
        conversation_id: session.conversation_id.clone(),
        message_id: source_id,
        text: String::new(),
        trigger_id: session.idle.as_ref().and_then(|i| i.trigger_id),
        trigger_version: None,
        variant: session.split.as_ref().map(|s| s.variant.clone()),
        agent_id: session.agent_id,
        continuation: false,
        detail: serde_json::Value::Null,
        refused: None,
        day_tokens: None,
        follow: false,
        recording: Default::default(),
        resume: None,
        arrived_at: None,
        earlier: vec![],
        close_idle_after: None,
        closes_idle: Some(session.session_id),
    }
}
