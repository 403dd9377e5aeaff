//! Gathering a burst for an agent that coalesces them ([`switchboard_domain::burst`]): the
//! message at the head of its conversation's queue waits until its burst is complete, then one
//! turn answers it and the messages queued behind it that belong to the burst. That turn is the
//! burst's last message's (its source keys the turn's side effects); the earlier ones ride in it
//! ([`WorkItem::earlier`]) and its commit records each of them as `coalesced`. Membership is a
//! function of arrival times, so a turn run again after a crash gathers the same messages.

use switchboard_domain::Agent;
use switchboard_domain::burst::{self, BurstMode};

use super::Attempt;
use crate::fault::ExecError;
use crate::ports::{Deps, WorkItem};

/// What the head of the queue does about its burst.
pub(super) enum Gathered {
    /// It runs alone: its agent does not coalesce, or nothing joined it.
    Alone,
    /// Its burst is not complete: it (and its group) waits.
    Wait(ExecError),
    /// Its burst is complete: this item, the burst's last message carrying the others, runs.
    Merged(Box<WorkItem>),
}

/// The burst `item` opens for `agent`, gathered from `behind` (what the consumer holds of the
/// group behind it, an SQS batch's) or, without, from the queue. A last delivery does not wait.
pub(super) async fn gather(
    deps: &Deps,
    item: &WorkItem,
    agent: &Agent,
    behind: Option<&[WorkItem]>,
    attempt: Option<Attempt>,
) -> Result<Gathered, ExecError> {
    let policy = &agent.bursts;
    if policy.mode != BurstMode::Coalesce || !item.may_coalesce() {
        return Ok(Gathered::Alone);
    }
    let max = usize::try_from(policy.max_messages).unwrap_or(usize::MAX).saturating_sub(1);
    let queued;
    let behind = match behind {
        Some(held) => &held[..held.len().min(max)],
        None => {
            queued = deps.queue.queued_behind(item, max).await.map_err(|e| {
                ExecError::new(switchboard_domain::ErrorKind::Store, format!("gathering a burst: {}", e.message), true)
            })?;
            &queued[..]
        }
    };
    let joins = |b: &WorkItem| b.may_coalesce() && b.conversation_id == item.conversation_id;
    let arrivals: Vec<_> = std::iter::once(item.arrived_at)
        .chain(behind.iter().map(|b| if joins(b) { b.arrived_at } else { None }))
        .collect();
    let gathered = burst::gather(policy, &arrivals);
    let now = deps.clock.now();
    if let Some(until) = gathered.wait_until(now, attempt.map(|a| a.number))
        && !attempt.is_some_and(Attempt::is_last)
    {
        let wait = (until - now).to_std().unwrap_or_default();
        return Ok(Gathered::Wait(ExecError::gathering(wait, gathered.members)));
    }
    let Some(last) = gathered.members.checked_sub(2).and_then(|i| behind.get(i)) else {
        return Ok(Gathered::Alone);
    };
    let mut merged = last.clone();
    merged.earlier = std::iter::once(item).chain(&behind[..gathered.members - 2]).cloned().collect();
    tracing::info!(messages = gathered.members, source = %merged.source_id, "a burst of messages is answered in one turn");
    Ok(Gathered::Merged(Box::new(merged)))
}
