//! An item whose last delivery failed: the queue will not deliver it again, so its message is
//! answered as the agent's `onFailure` says (a human by default), the attempt is recorded
//! `failed` and `execution.failed` is published — as for a turn that failed while it ran. The
//! workers call it at the queue's receive limit (embedded: `--max-receives`; AWS: the queue's
//! `maxReceiveCount`), and the AWS dead-letter queue's consumer for an item whose process died
//! on its last delivery. Once recorded, a repeat finds the record and does nothing.

use std::time::Instant;

use switchboard_domain::event::detail_type;
use switchboard_domain::{ErrorKind, ExecutionError, ExecutionStatus, OnFailure};
use tracing::warn;

use super::{ExecOutcome, Executor, MAX_COMMIT_ATTEMPTS, Ready, new_session, record, turn};
use crate::fault::ExecError;
use crate::moves;
use crate::ports::{SessionWrite, TurnCommit, WorkItem};

/// The error reason of a record written by [`Executor::give_up`].
pub const LAST_DELIVERY: &str = "last-delivery";

impl Executor {
    /// Gives `item` up after its last delivery failed with an error of `kind` saying `why` (see
    /// the module docs). Safe to call again: a recorded source is left as it is.
    pub async fn give_up(&self, item: &WorkItem, kind: ErrorKind, why: &str) -> Result<ExecOutcome, ExecError> {
        let mut last_conflict = String::new();
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            let ready = match self.failed_attempt(item, kind, why).await? {
                Ok(ready) => ready,
                Err(done) => return Ok(done),
            };
            match self.commit(item, ready).await? {
                Ok(outcome) => return Ok(outcome),
                Err(conflict) => last_conflict = conflict,
            }
        }
        Err(ExecError::new(
            kind,
            format!("could not record the failed item: the session kept changing ({last_conflict})"),
            true,
        ))
    }

    /// The commit of `item` given up, or what became of it already.
    async fn failed_attempt(
        &self,
        item: &WorkItem,
        kind: ErrorKind,
        why: &str,
    ) -> Result<Result<Ready, ExecOutcome>, ExecError> {
        let deps = &self.deps;
        let started = Instant::now();
        if let Some(done) = deps.executions.execution_for_source(&item.tenant_id, &item.source_id).await? {
            return Ok(Err(ExecOutcome::AlreadyRecorded(Box::new(done))));
        }
        let latest = deps.sessions.latest_session(&item.tenant_id, &item.conversation_id).await?;
        let (mut session, expected) = match latest {
            Some(s) if item.continuation && !(s.is_active() && s.agent_id == item.agent_id) => {
                let reason = format!("handoff target {} is no longer active", item.agent_id);
                return Ok(Err(ExecOutcome::Dropped { reason }));
            }
            None if item.continuation => {
                return Ok(Err(ExecOutcome::Dropped { reason: "the handed-off session is no longer active".into() }));
            }
            Some(s) if s.is_active() || s.is_human_owned() => {
                let version = s.version;
                (s, Some(version))
            }
            _ => (new_session(item, deps.clock.now()), None),
        };
        let mut record = record::blank(deps, item, &session, started);
        record.status = ExecutionStatus::Failed;
        let message = format!("its last delivery failed: {why}");
        record.error = Some(ExecutionError::new(kind, message.clone()).with_reason(LAST_DELIVERY));
        session.append_transcript([item.user_message()]);
        let may_end = !session.is_human_owned();
        let mut events = vec![];
        if session.is_active() {
            // The agent's setting if it can be read (a missing agent may be why the item failed).
            let on_failure = match deps.config.get_agent(&item.tenant_id, session.agent_id).await {
                Ok(Some(agent)) => agent.on_failure,
                Ok(None) | Err(_) => OnFailure::default(),
            };
            let reason = format!("the agent could not answer (failed): {message}");
            let key = format!("{}/on-failure", item.source_id);
            let answered = moves::answer_failure(deps, &mut events, &mut session, &on_failure, &reason, &key).await?;
            record.actions.extend(answered);
        }
        let key = format!("{}/failed", item.source_id);
        moves::announce(&mut events, &key, detail_type::EXECUTION_FAILED, &session, turn::failed_event(&record));
        warn!(tenant = %item.tenant_id, source = %item.source_id, error = %why, "work item given up at its last delivery");
        record.latency_ms = crate::model_call::elapsed_ms(started);
        session.version += 1;
        session.updated_at = deps.clock.now();
        let write = SessionWrite { session, expected_version: expected };
        let commit = TurnCommit::of(write, record.clone(), events);
        Ok(Ok(Ready { commit, record, may_end, _follower: None }))
    }
}
