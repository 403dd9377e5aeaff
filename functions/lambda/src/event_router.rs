//! event-router: one EventBridge event (`conversations-service` / `message.new`) → parsed as an
//! [`InboundEvent`] → [`Intake::route`]. A malformed event is logged with why and returned as an
//! error, so EventBridge retries it and then sends it to the rule target's dead-letter queue.
//! It runs no agent. Its schedule's tick (`aws.events` / `Scheduled Event`, every minute) does
//! the platform's timed work instead: it sweeps the approvals paused turns wait on (the overdue
//! ones expire, a denial, and the turn is queued to resume; decided ones whose resumption was
//! lost are queued again), and it queues the work of every schedule trigger's slot that is due
//! (each slot claimed once in DynamoDB, however many ticks run: `switchboard_aws::dynamo`).

use std::sync::Arc;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{LambdaEvent, service_fn};
use switchboard_aws::DynamoStore;
use switchboard_domain::InboundEvent;
use switchboard_engine::intake::Fired;
use switchboard_engine::{
    Clock, IdleSweep, Intake, Operator, OperatorError, RouteError, RouteOutcome, StoreError, Swept,
};

/// What the event-router function runs: the intake of inbound events, the operator its
/// schedule's tick sweeps approvals with, and the store whose schedule slots the tick fires
/// (one engine over the same ports), on the engine's clock.
#[derive(Debug, Clone)]
pub struct EventRouter {
    pub intake: Intake,
    pub operator: Operator,
    pub store: Arc<DynamoStore>,
    pub clock: Arc<dyn Clock>,
}

impl EventRouter {
    /// The router over a wiring's engine and store.
    pub fn over(wiring: &crate::Wiring) -> Self {
        EventRouter {
            intake: wiring.intake.clone(),
            operator: Operator::new(wiring.deps.clone()),
            store: wiring.store.clone(),
            clock: wiring.deps.clock.clone(),
        }
    }
}

/// What one event did.
#[derive(Debug, Clone, PartialEq)]
pub enum Handled {
    Routed(RouteOutcome),
    Ticked(Tick),
}

/// What the schedule's tick did: the approvals' sweep, the schedule slots it fired and the idle
/// sessions whose close it queued.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tick {
    pub swept: Swept,
    pub fired: Fired,
    pub idle: IdleSweep,
}

/// Why an event was not routed.
#[derive(Debug, thiserror::Error)]
pub enum EventRouterError {
    #[error("malformed event: {0}")]
    Malformed(String),
    #[error("routing failed (retryable: {retryable}): {source}")]
    Route {
        #[source]
        source: RouteError,
        retryable: bool,
    },
    /// The sweep stopped at a failure; the next tick sweeps again (a scheduled event is not
    /// retried for long, and needs not be: nothing of it is lost).
    #[error("the approvals' sweep failed: {0}")]
    Sweep(#[source] OperatorError),
    /// The due schedules could not be read; the next tick reads them again (a slot not moved
    /// on is still due).
    #[error("the schedules could not be read: {0}")]
    Schedules(#[source] StoreError),
    /// The idle sessions could not be read; the next tick reads them again (a session not
    /// closed is still due).
    #[error("the idle sessions could not be read: {0}")]
    Idle(#[source] OperatorError),
}

/// The event-router's runtime loop: every EventBridge event to [`dispatch`], until the runtime
/// stops. An error goes back to Lambda, so EventBridge retries the event.
pub async fn serve(router: &EventRouter) -> Result<(), lambda_runtime::Error> {
    lambda_runtime::run(service_fn(move |event: LambdaEvent<EventBridgeEvent>| async move {
        let handled = dispatch(router, event).await.map(|_| ());
        crate::wiring::flush_traces().await;
        handled
    }))
    .await
}

/// Whether `event` is the tick of a schedule rule (EventBridge's own source and detail type;
/// no tenant can publish `aws.*` sources on a bus).
pub fn is_tick(event: &EventBridgeEvent) -> bool {
    event.source == "aws.events" && event.detail_type == "Scheduled Event"
}

/// One EventBridge event: the schedule's tick sweeps approvals, fires due schedules and queues
/// the close of idle sessions (each whether or not another failed), every other event is routed.
pub async fn dispatch(router: &EventRouter, event: LambdaEvent<EventBridgeEvent>) -> Result<Handled, EventRouterError> {
    if is_tick(&event.payload) {
        let swept = sweep(&router.operator).await;
        let fired = fire_schedules(router).await;
        let idle = close_idle(&router.operator).await;
        return Ok(Handled::Ticked(Tick { swept: swept?, fired: fired?, idle: idle? }));
    }
    handle(&router.intake, event).await.map(Handled::Routed)
}

/// Queues the work of every schedule slot due at the clock's time.
pub async fn fire_schedules(router: &EventRouter) -> Result<Fired, EventRouterError> {
    match router.intake.fire_schedules(router.store.as_ref(), router.clock.now()).await {
        Ok(fired) => {
            if fired.any() {
                tracing::info!(
                    queued = fired.queued,
                    skipped = fired.skipped,
                    failed = fired.failed,
                    "schedule slots fired"
                );
            }
            Ok(fired)
        }
        Err(e) => {
            tracing::error!(reason = %e, "the schedules could not be read; the next tick reads them again");
            Err(EventRouterError::Schedules(e))
        }
    }
}

/// Expires every tenant's overdue approvals and queues again the resumptions that were lost.
pub async fn sweep(operator: &Operator) -> Result<Swept, EventRouterError> {
    match operator.sweep_approvals(switchboard_engine::REQUEUE_AFTER).await {
        Ok(swept) => {
            // A line a minute only when the tick did something (as the embedded sweeper logs).
            if swept.expired + swept.requeued > 0 {
                tracing::info!(expired = swept.expired, requeued = swept.requeued, "approvals swept");
            }
            Ok(swept)
        }
        Err(e) => {
            tracing::error!(reason = %e, "the approvals' sweep failed; the next tick sweeps again");
            Err(EventRouterError::Sweep(e))
        }
    }
}

/// Queues the close of every tenant's sessions whose customers went quiet (tenants that close
/// them); the agent-executor commits each in its conversation's order.
pub async fn close_idle(operator: &Operator) -> Result<IdleSweep, EventRouterError> {
    match operator.close_idle_sessions().await {
        Ok(idle) => {
            if idle.any() {
                tracing::info!(
                    queued = idle.queued,
                    kept = idle.kept,
                    failed = idle.failed,
                    "idle sessions' closes queued"
                );
            }
            Ok(idle)
        }
        Err(e) => {
            tracing::error!(reason = %e, "the idle sessions could not be read; the next tick reads them again");
            Err(EventRouterError::Idle(e))
        }
    }
}

/// Routes one EventBridge event.
#[tracing::instrument(skip_all, fields(request_id = %event.context.request_id))]
pub async fn handle(intake: &Intake, event: LambdaEvent<EventBridgeEvent>) -> Result<RouteOutcome, EventRouterError> {
    // `InboundEvent::parse` validates the envelope as EventBridge sends it (`detail-type`, …).
    let envelope = serde_json::to_value(&event.payload).map_err(|e| {
        tracing::error!(reason = %e, "event could not be re-encoded");
        EventRouterError::Malformed(e.to_string())
    })?;
    let inbound = InboundEvent::parse(&envelope).map_err(|errors| {
        let why = errors.to_string();
        tracing::error!(event_id = event.payload.id.as_deref().unwrap_or("-"), reason = %why, "malformed event");
        EventRouterError::Malformed(why)
    })?;
    match intake.route(&inbound).await {
        Ok(outcome) => {
            tracing::info!(event_id = %inbound.id, outcome = ?outcome, "routed");
            Ok(outcome)
        }
        Err(source) => {
            let retryable = source.retryable();
            tracing::error!(event_id = %inbound.id, retryable, reason = %source, "routing failed");
            Err(EventRouterError::Route { source, retryable })
        }
    }
}

/// The error type Lambda logs and reports: `Malformed` or `Route` (with the retryable flag in
/// the message), never a bare "service error".
impl From<EventRouterError> for lambda_runtime::Diagnostic {
    fn from(e: EventRouterError) -> Self {
        let error_type = match e {
            EventRouterError::Malformed(_) => "MalformedEvent",
            EventRouterError::Route { .. } => "RouteFailed",
            EventRouterError::Sweep(_) => "SweepFailed",
            EventRouterError::Schedules(_) => "SchedulesFailed",
            EventRouterError::Idle(_) => "IdleSessionsFailed",
        };
        lambda_runtime::Diagnostic { error_type: error_type.into(), error_message: e.to_string() }
    }
}
