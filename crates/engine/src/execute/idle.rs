//! The close of a session its customer left (docs/decisions.md, "Abandoned conversations"): the
//! item the idle sweep queued ([`WorkItem::closes_idle`]) runs in the conversation's order, after
//! whatever the conversation had queued before it, and closes the session as abandoned only if it
//! is still idle then. Committed like a turn: conditional on the version read, once per source.

use std::time::Instant;

use serde_json::json;
use switchboard_domain::{ExecutionStatus, Session, SessionId};

use super::{ExecError, Executor, Ready, Run, record};
use crate::moves;
use crate::ports::{SessionWrite, TurnCommit, WorkItem};

impl Executor {
    /// What `item`, the idle sweep's, commits: `session_id` closed as abandoned (its status, a
    /// record of the close with status `abandoned` that ran nothing, `session.ended` with
    /// `endedBy: idle`), or nothing if the session is no longer the conversation's or not idle.
    pub(super) async fn close_idle(
        &self,
        item: &WorkItem,
        session_id: SessionId,
        latest: Option<Option<Session>>,
    ) -> Result<Run, ExecError> {
        let deps = &self.deps;
        let started = Instant::now();
        let latest = match latest {
            Some(read) => read,
            None => deps.sessions.latest_session(&item.tenant_id, &item.conversation_id).await?,
        };
        let now = deps.clock.now();
        let due = |s: &Session| s.session_id == session_id && s.is_idle_at(now);
        let Some(mut session) = latest.filter(due) else {
            return Ok(Run::Drop("the session is no longer idle (a message came, or it closed)".into()));
        };
        // Its idle time stays on it: when it was due, and what the close counts under.
        let idle = session.idle.clone();
        let mut events = Vec::new();
        moves::abandon(deps, &mut events, &mut session, &item.source_id);
        let expected = session.version;
        session.version += 1;
        session.updated_at = now;
        let input = json!({ "idle": { "dueAt": idle.as_ref().map(|i| i.at) } });
        let status = ExecutionStatus::Abandoned;
        let mut record = record::of_request(deps, &session, item.source_id.clone(), input, status, vec![], started);
        record.trigger_id = idle.and_then(|i| i.trigger_id);
        let write = SessionWrite { session, expected_version: Some(expected) };
        let commit = TurnCommit::of(write, record.clone(), events);
        Ok(Run::Ready(Box::new(Ready { commit, record, may_end: true, _follower: None })))
    }
}
