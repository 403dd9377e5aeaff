//! operations-api Lambda: the operations half of the internal HTTP API (`crates/api`: event
//! intake, invoke, conversations, sessions and operators' actions on them, approvals, executions,
//! reports, the event log) behind the same API Gateway as `internal-api`, with `AWS_IAM` auth
//! (see `switchboard_lambda::api`). Builds the SDK config and clients once, without the agents'
//! means: it runs no turn (`Wiring::api`).

use switchboard_lambda::{Wiring, api, run_with};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    run_with(Wiring::operations_from_env, api::serve_operations).await
}
