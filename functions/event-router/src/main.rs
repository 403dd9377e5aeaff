//! event-router Lambda: EventBridge `conversations-service` / `message.new` → the engine's router
//! (handler in `switchboard_functions::router`). Builds the SDK config and clients once.

use switchboard_functions::{Wiring, router, run_with};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    run_with(Wiring::from_env, router::serve).await
}
