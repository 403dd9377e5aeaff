//! event-router Lambda: EventBridge `conversations-service` / `message.new` → the engine's router
//! (handler in `switchboard_lambda::event_router`). Builds the SDK config and clients once.

use switchboard_lambda::{Wiring, event_router, run_with};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    run_with(Wiring::from_env, event_router::serve).await
}
