//! agent-executor: an SQS FIFO batch → [`SqsBatchResponse`] with per-item failures
//! (`ReportBatchItemFailures`). Messages are grouped by `MessageGroupId`; groups run
//! concurrently, items of one group in order. When an item fails or panics, it and every later
//! item of its group in this batch are reported failed and the later ones are not run, so the
//! conversation's order holds on redelivery. A body that is not a work item fails only itself.
//! Each turn stops by the invocation's deadline less a margin (status `timeout`, recorded), and
//! no item starts after it, so the function is never killed mid-turn. A deferred message (the
//! tenant's `onLimit` is `defer` and a limit still refuses it) is reported failed with its
//! visibility set to when the limit's window reopens, so SQS holds it — and its conversation's
//! later messages, whose visibility in the batch is set the same — until then; a message that
//! opens a burst its agent coalesces waits so until the burst is complete. The turn of a
//! complete burst answers the messages behind it in the batch that belong to it: they are
//! acknowledged with it.
//! Once-only side effects rest on the engine's idempotency records, not on this module.

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use futures::FutureExt;
use lambda_runtime::{LambdaEvent, service_fn};
use switchboard_aws::SqsWorkQueue;
use switchboard_domain::ErrorKind;
use switchboard_engine::{Attempt, ExecOutcome, Executor, WorkItem};

use crate::wiring::Wiring;

/// What became of one message (kept for tests and logs; Lambda sees only the failures).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemResult {
    Done,
    Failed(String),
    /// Waiting for a tenant limit's window or for its burst to complete, or behind an earlier
    /// item of its group that waits: delivered again after this long.
    Deferred(Duration),
    /// Not run: an earlier item of the same group failed in this batch, or the invocation's
    /// time was up.
    Skipped,
}

/// The agent-executor's runtime loop: every SQS batch to [`handle`], until the runtime stops.
pub async fn serve(wiring: &Wiring) -> Result<(), lambda_runtime::Error> {
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        let answer = handle(wiring, event).await;
        crate::wiring::flush_traces().await;
        Ok::<_, lambda_runtime::Error>(answer)
    }))
    .await
}

/// Runs a batch and reports the failed items' message ids; deferred items get their visibility
/// set to their delay first (if that fails, SQS's visibility timeout brings them back sooner,
/// and they are deferred again).
#[tracing::instrument(skip_all, fields(request_id = %event.context.request_id, messages = event.payload.records.len()))]
pub async fn handle(wiring: &Wiring, event: LambdaEvent<SqsEvent>) -> SqsBatchResponse {
    // The runtime always sets a deadline; 0 means none is known (a hand-made context).
    let deadline =
        (event.context.deadline > 0).then(|| turn_deadline(event.context.deadline, SystemTime::now(), Instant::now()));
    let receipts: Vec<(String, String)> = event
        .payload
        .records
        .iter()
        .map(|m| (m.message_id.clone().unwrap_or_default(), m.receipt_handle.clone().unwrap_or_default()))
        .collect();
    let records = event.payload.records;
    let from_dead_letters = wiring
        .dead_letter_queue_arn
        .as_deref()
        .is_some_and(|arn| records.first().and_then(|r| r.event_source_arn.as_deref()) == Some(arn));
    let results = if from_dead_letters {
        give_up_batch(&wiring.executor, records).await
    } else {
        run_batch(&wiring.executor, records, deadline, wiring.max_receives).await
    };
    // Followed turns' last pages are written before the container may be frozen.
    wiring.turns.flush().await;
    let mut response = SqsBatchResponse::default();
    for (message_id, result) in results {
        if let ItemResult::Deferred(delay) = result
            && let Some((_, receipt)) = receipts.iter().find(|(id, _)| *id == message_id)
        {
            defer(&wiring.queue, &message_id, receipt, delay).await;
        }
        if result != ItemResult::Done {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = message_id;
            response.batch_item_failures.push(failure);
        }
    }
    response
}

async fn defer(queue: &SqsWorkQueue, message_id: &str, receipt: &str, delay: Duration) {
    if let Err(e) = queue.hold(receipt, delay).await {
        tracing::warn!(message_id, error = %e.message, "could not hold the deferred item; it comes back after the visibility timeout");
    }
}

/// Time kept back from the invocation's deadline for recording, acknowledging and reporting.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(10);

/// When turns must stop: the invocation's deadline (`deadline_ms`, milliseconds since the epoch,
/// as the runtime gives it) less [`DEADLINE_MARGIN`], on the monotonic clock.
pub fn turn_deadline(deadline_ms: u64, now: SystemTime, instant: Instant) -> Instant {
    let now_ms = now.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let left = Duration::from_millis(deadline_ms.saturating_sub(now_ms)).saturating_sub(DEADLINE_MARGIN);
    instant + left
}

/// Runs every message, each turn stopping by `deadline`; an item whose turn would start past it
/// is not run (reported failed, so SQS delivers it again). `max_receives` is the queue's
/// `maxReceiveCount` (a deferred message's last delivery is the one that reaches it). Returns
/// `(message id, result)` in the batch's order.
pub async fn run_batch(
    executor: &Executor,
    records: Vec<SqsMessage>,
    deadline: Option<Instant>,
    max_receives: u32,
) -> Vec<(String, ItemResult)> {
    // Groups in order of first appearance; each keeps its messages' batch positions.
    let mut groups: Vec<(String, Vec<(usize, SqsMessage)>)> = Vec::new();
    let total = records.len();
    for (position, message) in records.into_iter().enumerate() {
        let group = message.attributes.get("MessageGroupId").cloned().unwrap_or_default();
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, items)) => items.push((position, message)),
            None => groups.push((group, vec![(position, message)])),
        }
    }
    let runs = groups.into_iter().map(|(group, items)| run_group(executor, group, items, deadline, max_receives));
    let mut results: Vec<Option<(String, ItemResult)>> = vec![None; total];
    for group_results in futures::future::join_all(runs).await {
        for (position, id, result) in group_results {
            if let Some(slot) = results.get_mut(position) {
                *slot = Some((id, result));
            }
        }
    }
    results.into_iter().flatten().collect()
}

async fn run_group(
    executor: &Executor,
    group: String,
    items: Vec<(usize, SqsMessage)>,
    deadline: Option<Instant>,
    max_receives: u32,
) -> Vec<(usize, String, ItemResult)> {
    // The group's work items in order, and where each message's is (or why it has none): the
    // items behind one are a slice of them, up to the next message that is not one.
    let mut good: Vec<WorkItem> = Vec::with_capacity(items.len());
    let parsed: Vec<Result<usize, String>> = items
        .iter()
        .map(|(_, m)| {
            parse_body(m).map(|item| {
                good.push(item);
                good.len() - 1
            })
        })
        .collect();
    let mut out = Vec::with_capacity(items.len());
    // Set once an item fails (the rest are not run) or waits (the rest wait with it).
    let mut stop: Option<ItemResult> = None;
    let mut next = 0;
    while let Some((position, message)) = items.get(next) {
        let at = next;
        next += 1;
        let id = message.message_id.clone().unwrap_or_default();
        // How close the item is to the dead-letter queue (the queue's maxReceiveCount).
        let receives = message.attributes.get("ApproximateReceiveCount").map_or("-", String::as_str);
        if let Some(after) = &stop {
            tracing::warn!(message_id = %id, group = %group, "not run: an earlier item of its group failed or waits");
            out.push((*position, id, after.clone()));
            continue;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            tracing::warn!(message_id = %id, group = %group, "not run: the invocation's time is up; SQS delivers it again");
            out.push((*position, id, ItemResult::Skipped));
            stop = Some(ItemResult::Skipped);
            continue;
        }
        let (item, index) = match &parsed[at] {
            Ok(index) => (&good[*index], *index),
            Err(why) => {
                // Its own failure only: it is not part of the conversation's order. After the
                // queue's maxReceiveCount it lands in the dead-letter queue.
                tracing::error!(message_id = %id, group = %group, receives = %receives, reason = %why, "malformed work item");
                out.push((*position, id, ItemResult::Failed(why.clone())));
                continue;
            }
        };
        // What a burst may gather: the items behind it in this batch, up to one that is not.
        let following = parsed[next..].iter().take_while(|p| p.is_ok()).count();
        let behind = &good[index + 1..index + 1 + following];
        let attempt = receives.parse().ok().map(|number| Attempt { number, of: max_receives });
        let (mut result, kind, answered) =
            run_item(executor, &id, &group, receives, (item, behind), deadline, attempt).await;
        if let ItemResult::Failed(why) = &result
            && attempt.is_some_and(Attempt::is_last)
        {
            // SQS will not deliver it again: the customer is answered as the agent's `onFailure`
            // says and the failure recorded; only what cannot be recorded reaches the dead-letter
            // queue (whose consumer tries the same once more).
            result = give_up(executor, &id, item, kind, why).await;
        }
        match &result {
            ItemResult::Done => {}
            ItemResult::Deferred(_) => stop = Some(result.clone()),
            _ => stop = Some(ItemResult::Skipped),
        }
        out.push((*position, id, result));
        // The messages its turn answered with it (the engine logged the burst): recorded, so done.
        for (position, message) in items.iter().skip(next).take(answered) {
            out.push((*position, message.message_id.clone().unwrap_or_default(), ItemResult::Done));
        }
        next += answered;
    }
    out
}

/// The dead-letter queue's consumer: gives up every item of the batch ([`Executor::give_up`]),
/// which answers its customer as the agent's `onFailure` says. An item lands there when its last
/// receive did not report back (the function timed out or its process died) or giving it up
/// failed then; one recorded already is left as it is. What cannot be given up (a body that is
/// not a work item, a store that keeps failing) stays in the dead-letter queue for an operator.
pub async fn give_up_batch(executor: &Executor, records: Vec<SqsMessage>) -> Vec<(String, ItemResult)> {
    let mut out = Vec::with_capacity(records.len());
    for message in records {
        let id = message.message_id.clone().unwrap_or_default();
        let result = match parse_body(&message) {
            Ok(item) => {
                let why = "dead-lettered: the queue's last delivery of it did not finish";
                give_up(executor, &id, &item, ErrorKind::Internal, why).await
            }
            Err(why) => {
                tracing::error!(message_id = %id, reason = %why, "malformed work item in the dead-letter queue; left there");
                ItemResult::Failed(why)
            }
        };
        out.push((id, result));
    }
    out
}

/// Runs one item: what to tell SQS of it, and the kind of error that failed it (`internal` for
/// a panic).
async fn run_item(
    executor: &Executor,
    id: &str,
    group: &str,
    receives: &str,
    (item, behind): (&WorkItem, &[WorkItem]),
    deadline: Option<Instant>,
    attempt: Option<Attempt>,
) -> (ItemResult, ErrorKind, usize) {
    match AssertUnwindSafe(executor.execute_batch(item, behind, deadline, attempt)).catch_unwind().await {
        Ok(Ok((outcome, answered))) => {
            log_outcome(id, &outcome);
            (ItemResult::Done, ErrorKind::Internal, answered)
        }
        Ok(Err(e)) if e.is_deferral() => {
            let delay = e.retry_after.unwrap_or_default();
            tracing::info!(message_id = %id, group = %group, receives = %receives, delay_s = delay.as_secs(), reason = %e.message, "item deferred");
            (ItemResult::Deferred(delay), e.kind, 0)
        }
        Ok(Err(e)) => {
            tracing::error!(message_id = %id, group = %group, receives = %receives, kind = ?e.kind, retryable = e.retryable, reason = %e.message, "item failed");
            (ItemResult::Failed(e.to_string()), e.kind, 0)
        }
        Err(panic) => {
            let why = panic_message(panic.as_ref());
            tracing::error!(message_id = %id, group = %group, receives = %receives, reason = %why, "item panicked");
            (ItemResult::Failed(format!("panic: {why}")), ErrorKind::Internal, 0)
        }
    }
}

/// Gives up `item`, whose last delivery failed with an error of `kind` saying `why`
/// ([`Executor::give_up`]): done once recorded.
pub async fn give_up(executor: &Executor, id: &str, item: &WorkItem, kind: ErrorKind, why: &str) -> ItemResult {
    match AssertUnwindSafe(executor.give_up(item, kind, why)).catch_unwind().await {
        Ok(Ok(outcome)) => {
            log_outcome(id, &outcome);
            ItemResult::Done
        }
        Ok(Err(e)) => {
            tracing::error!(message_id = %id, kind = ?e.kind, reason = %e.message, "item could not be given up");
            ItemResult::Failed(format!("{why}; giving it up failed too: {}", e.message))
        }
        Err(panic) => ItemResult::Failed(format!("{why}; giving it up panicked: {}", panic_message(panic.as_ref()))),
    }
}

fn parse_body(message: &SqsMessage) -> Result<WorkItem, String> {
    let body = message.body.as_deref().ok_or("message has no body")?;
    serde_json::from_str(body).map_err(|e| format!("body is not a work item: {e}"))
}

fn log_outcome(message_id: &str, outcome: &ExecOutcome) {
    match outcome {
        ExecOutcome::Recorded(r) => {
            tracing::info!(message_id, execution_id = %r.execution_id, status = ?r.status, "item executed");
        }
        ExecOutcome::AlreadyRecorded(r) => {
            tracing::info!(message_id, execution_id = %r.execution_id, "item already recorded; nothing done again");
        }
        ExecOutcome::Dropped { reason } => tracing::info!(message_id, reason = %reason, "item dropped"),
        ExecOutcome::Held => tracing::info!(message_id, "item held behind its conversation's paused turn"),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_turn_deadline_is_the_invocations_less_the_margin() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let instant = Instant::now();
        let deadline_ms = 1_000_000 + 120_000;
        assert_eq!(turn_deadline(deadline_ms, now, instant), instant + Duration::from_secs(110));
        // less time left than the margin: now, not earlier
        assert_eq!(turn_deadline(1_000_000 + 5_000, now, instant), instant);
        assert_eq!(turn_deadline(1, now, instant), instant);
    }
}
