//! event-router: one EventBridge event (`conversations-service` / `message.new`) → parsed as an
//! [`InboundEvent`] → [`Intake::route`]. A malformed event is logged with why and returned as an
//! error, so EventBridge retries it and then sends it to the rule target's dead-letter queue.
//! It runs no agent.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{LambdaEvent, service_fn};
use switchboard_domain::InboundEvent;
use switchboard_engine::{Intake, RouteError, RouteOutcome};

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
}

/// The event-router's runtime loop: every EventBridge event to [`handle`], until the runtime
/// stops. An error goes back to Lambda, so EventBridge retries the event.
pub async fn serve(intake: &Intake) -> Result<(), lambda_runtime::Error> {
    lambda_runtime::run(service_fn(move |event: LambdaEvent<EventBridgeEvent>| async move {
        let routed = handle(intake, event).await.map(|_| ());
        crate::wiring::flush_traces().await;
        routed
    }))
    .await
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
        };
        lambda_runtime::Diagnostic { error_type: error_type.into(), error_message: e.to_string() }
    }
}
