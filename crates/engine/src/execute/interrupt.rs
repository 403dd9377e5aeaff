//! Interrupting a turn for an agent whose `bursts` is `interrupt`: a turn that has not replied
//! yet looks for a newer customer message of its conversation when it starts and before it would
//! reply. When one is queued, the turn stops there: what it did (model and tool calls) is kept
//! and recorded, status `interrupted`; nothing is said; its message stays in the transcript and
//! in the session's `interrupted`, and the conversation's next turn — the newer message's —
//! answers both, its record listing the messages it also answered.
//!
//! Where the newer message is seen: in what the consumer holds of the group behind the item (an
//! SQS batch's), in the queue itself where it can be read (the embedded queue), else in the
//! note event intake keeps of each conversation's newest queued message
//! ([`crate::ports::SessionStore::note_arrival`], the AWS profile: SQS hides a FIFO group's
//! later messages while one is in flight). A noted message counts only if it came later than
//! the item and is not recorded yet, so a note that lost a race with another cannot stop a
//! turn for a message already answered.

use std::time::Instant;

use switchboard_domain::burst::BurstMode;
use switchboard_domain::{Agent, CoalescedMessage, ErrorKind, ExecutionRecord, ExecutionStatus, Session};

use super::record;
use crate::fault::ExecError;
use crate::ports::{Deps, SessionWrite, TurnCommit, WorkItem};

/// The most items behind a turn's own that are read looking for a customer's message.
const LOOK_BEHIND: usize = 10;

/// The newer customer message that interrupts the turn of `item` in `session`, if `agent`
/// interrupts, the turn has its own message to give up (a customer's, run as it came), the
/// session may still take one more into its next turn (`maxMessages`), and one is queued:
/// looked for in `behind` (the consumer's batch), else the queue, else the intake's note.
pub(crate) async fn newer(
    deps: &Deps,
    item: &WorkItem,
    agent: &Agent,
    session: &Session,
    behind: Option<&[WorkItem]>,
) -> Result<Option<CoalescedMessage>, ExecError> {
    let policy = &agent.bursts;
    let room = usize::try_from(policy.max_messages).unwrap_or(usize::MAX).saturating_sub(1);
    if policy.mode != BurstMode::Interrupt
        || !item.may_coalesce()
        || !session.is_active()
        || session.interrupted.len() >= room
    {
        return Ok(None);
    }
    let is_newer = |b: &&WorkItem| b.may_coalesce() && b.conversation_id == item.conversation_id;
    let message = |b: &WorkItem| CoalescedMessage { message_id: b.message_id.clone(), source_id: b.source_id.clone() };
    if let Some(held) = behind {
        if let Some(b) = held.iter().find(is_newer) {
            return Ok(Some(message(b)));
        }
    } else {
        let queued = deps.queue.queued_behind(item, LOOK_BEHIND).await.map_err(|e| {
            ExecError::new(ErrorKind::Store, format!("looking for a newer message: {}", e.message), true)
        })?;
        if let Some(b) = queued.iter().find(is_newer) {
            return Ok(Some(message(b)));
        }
    }
    let Some(noted) = deps.sessions.newest_arrival(&item.tenant_id, &item.conversation_id).await? else {
        return Ok(None);
    };
    let later = item.arrived_at.is_some_and(|own| noted.arrived_at > own);
    if noted.source_id == item.source_id || !later {
        return Ok(None);
    }
    if deps.executions.execution_for_source(&item.tenant_id, &noted.source_id).await?.is_some() {
        return Ok(None);
    }
    Ok(Some(CoalescedMessage { message_id: noted.message_id, source_id: noted.source_id }))
}

/// The message of `item` as the session keeps it until a turn answers it.
pub(crate) fn own_message(item: &WorkItem) -> CoalescedMessage {
    CoalescedMessage { message_id: item.message_id.clone(), source_id: item.source_id.clone() }
}

/// What a turn interrupted as it starts commits: its message joins the transcript and the
/// session's interrupted messages, and its record says which message stopped it. No model ran.
pub(super) fn at_start(
    deps: &Deps,
    item: &WorkItem,
    mut session: Session,
    expected: Option<u64>,
    by: CoalescedMessage,
    started: Instant,
) -> (TurnCommit, ExecutionRecord) {
    let mut record = record::blank(deps, item, &session, started);
    record.status = ExecutionStatus::Interrupted;
    record.interrupted_by = Some(by);
    tracing::info!(by = %record.interrupted_by.as_ref().map_or("", |b| b.message_id.as_str()),
        "a newer message is queued: the turn stops before it starts, and the next answers both");
    session.append_transcript([item.user_message()]);
    session.interrupted.push(own_message(item));
    session.version += 1;
    session.updated_at = deps.clock.now();
    let write = SessionWrite { session, expected_version: expected };
    (TurnCommit::of(write, record.clone(), vec![]), record)
}
