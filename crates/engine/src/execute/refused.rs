//! A work item a tenant limit refused at intake: nothing runs, the message joins the session's
//! transcript (so the agent sees it once the window reopens), the record says which limit
//! refused it, and the customer gets what the tenant's `onLimit` says — nothing, one fixed reply
//! (sent under the item's own idempotency key, so a redelivery sends it once), or a human.

use std::time::Instant;

use switchboard_domain::message::Message;
use switchboard_domain::{
    ErrorKind, ExecutionError, ExecutionRecord, HandoffCause, OnLimit, Priority, Refusal, Session,
};

use super::record;
use crate::fault::{ExecError, ToolFault};
use crate::moves::{self, HumanHandoff};
use crate::ports::{Deps, SessionWrite, TurnCommit, WorkItem};

/// The commit of a refused item in `session` (`is_new`: started for it).
pub(super) async fn commit(
    deps: &Deps,
    item: &WorkItem,
    mut session: Session,
    is_new: bool,
    refusal: &Refusal,
    started: Instant,
) -> Result<(TurnCommit, ExecutionRecord), ExecError> {
    let mut record = record::blank(deps, item, &session, started);
    let why = refusal.describe();
    record.status = refusal.limit.status();
    record.error = Some(ExecutionError::new(ErrorKind::Limit, why.clone()).with_reason(refusal.limit.as_str()));
    let expected = (!is_new).then_some(session.version);
    session.append_transcript([item.user_message()]);
    let mut events = vec![];
    // A conversation a human already owns gets nothing more from Switchboard.
    if !session.is_human_owned() {
        match &refusal.on_limit {
            // A deferred message is recorded here only at its last delivery (as `Nothing`).
            OnLimit::Nothing | OnLimit::Defer => {}
            OnLimit::Message { text } => {
                let key = format!("{}#limit", item.source_id);
                record.actions.push(moves::send(deps, &session, text, &key).await.map_err(ToolFault::from)?);
                session.append_transcript([Message::assistant_text(text.clone())]);
            }
            OnLimit::HandoffToHuman => {
                let key = &item.source_id;
                let handoff = HumanHandoff { reason: &why, priority: Priority::Normal, cause: HandoffCause::Limit };
                record.actions.push(moves::hand_off_to_human(deps, &mut events, &mut session, handoff, key));
            }
        }
    }
    session.version += 1;
    session.updated_at = deps.clock.now();
    let write = SessionWrite { session, expected_version: expected };
    Ok((TurnCommit::of(write, record.clone(), events), record))
}
