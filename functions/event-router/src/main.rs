//! event-router Lambda: EventBridge `conversations-service` / `message.new` → the engine's router,
//! and its schedule's tick → the approvals' sweep (handler in `switchboard_lambda::event_router`).
//! Builds the SDK config and its clients once: the store, the work queue and the bus only
//! (`switchboard_lambda::wiring::event_router`).

use switchboard_lambda::{event_router, run_with, wiring};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    run_with(wiring::event_router_from_env, event_router::serve).await
}
