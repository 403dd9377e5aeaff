//! Idle sessions: a session whose agent has waited on its customer for the tenant's
//! `sessionIdleMinutes` closes as abandoned when the tenant's limits say `closeIdleSessions`
//! (docs/decisions.md, "Abandoned conversations"). A turn that leaves its session waiting sets
//! when ([`Session::rest`]); each profile's tick closes the sessions due
//! ([`Operator::close_idle_sessions`]), each in one commit conditional on the version read, so a
//! message committed meanwhile keeps its session open.

use std::collections::HashMap;
use std::time::Instant;

use chrono::{DateTime, Utc};
use serde_json::json;
use switchboard_domain::{ExecutionStatus, Session, Tenant, TenantId};
use tracing::warn;

use super::{Operator, OperatorError};
use crate::execute::record;
use crate::limits::Limits;
use crate::moves;
use crate::ports::{IdleSession, SessionWrite, StoreError, TurnCommit};

/// Most sessions one tick closes; the rest are due at the next.
pub const IDLE_PER_TICK: usize = 500;

/// What one tick of the idle sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Closed {
    /// Sessions closed as abandoned.
    pub closed: usize,
    /// Sessions listed as due that were not: a message came meanwhile, another process closed
    /// them, or their tenant no longer closes idle sessions (taken off the list).
    pub kept: usize,
    /// Sessions whose close failed: the next tick tries again.
    pub failed: usize,
}

impl Closed {
    pub fn any(&self) -> bool {
        self.closed + self.kept + self.failed > 0
    }
}

/// What became of one session listed as due.
enum Outcome {
    Closed,
    Kept,
}

impl Operator {
    /// Closes every tenant's sessions whose idle time has passed (at most [`IDLE_PER_TICK`]):
    /// what each profile's tick runs. A session that failed to close is counted and left for the
    /// next tick; only the list's own read fails the call.
    pub async fn close_idle_sessions(&self) -> Result<Closed, OperatorError> {
        let now = self.deps.clock.now();
        let mut done = Closed::default();
        let mut tenants: HashMap<TenantId, Option<Tenant>> = HashMap::new();
        for due in self.deps.sessions.idle_sessions(now, IDLE_PER_TICK).await? {
            match self.close_idle(&due, now, &mut tenants).await {
                Ok(Outcome::Closed) => done.closed += 1,
                // Changed since it was read (a message, another process): not idle any more, or
                // the next tick sees it again.
                Ok(Outcome::Kept) | Err(OperatorError::Conflict) => done.kept += 1,
                Err(e) => {
                    warn!(session_id = %due.session_id, error = %e, "an idle session could not be closed; the next tick tries again");
                    done.failed += 1;
                }
            }
        }
        Ok(done)
    }

    async fn close_idle(
        &self,
        due: &IdleSession,
        now: DateTime<Utc>,
        tenants: &mut HashMap<TenantId, Option<Tenant>>,
    ) -> Result<Outcome, OperatorError> {
        let deps = &self.deps;
        // Read again: the list may come from an index a moment behind.
        let Some(mut session) = deps.sessions.get_session(&due.tenant_id, due.session_id).await? else {
            return Ok(Outcome::Kept);
        };
        if session.idle_due().is_none_or(|at| at > now) {
            return Ok(Outcome::Kept);
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
            return Ok(Outcome::Kept);
        }
        let started = Instant::now();
        self.commit_abandoned(session, started).await?;
        Ok(Outcome::Closed)
    }

    /// Commits `session` closed as abandoned with its record (status `abandoned`, nothing ran),
    /// once: the record's source is the session's, so a second close of it is refused.
    async fn commit_abandoned(&self, mut session: Session, started: Instant) -> Result<(), StoreError> {
        let deps = &self.deps;
        let key = format!("idle-{}", session.session_id);
        let idle = session.idle.clone();
        let mut events = Vec::new();
        moves::abandon(deps, &mut events, &mut session, &key);
        let expected = session.version;
        session.version += 1;
        session.updated_at = deps.clock.now();
        let input = json!({ "idle": { "dueAt": idle.as_ref().map(|i| i.at) } });
        let mut execution = record::of_request(deps, &session, key, input, ExecutionStatus::Abandoned, vec![], started);
        execution.trigger_id = idle.and_then(|i| i.trigger_id);
        let (tenant, conversation) = (session.tenant_id.clone(), session.conversation_id.clone());
        let sessions = vec![SessionWrite { session, expected_version: Some(expected) }];
        let commit = TurnCommit { sessions, execution, events, content: vec![], resumes: None, coalesced: vec![] };
        deps.sessions.commit_turn(&commit).await?;
        deps.bus.relay(&commit.events).await;
        // The conversation's slot has lapsed by now (it is leased for the same idle time); freed
        // all the same, in case the tenant's idle minutes changed.
        Limits::new(deps).release(&tenant, &conversation).await;
        Ok(())
    }
}
