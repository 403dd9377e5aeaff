//! agent-executor Lambda: SQS FIFO batches → the engine's executor, with per-item failures
//! (handler in `switchboard_lambda::executor`). Builds the SDK config and clients once.

use switchboard_lambda::{Wiring, executor, run_with};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    run_with(Wiring::from_env, executor::serve).await
}
