//! internal-api Lambda: the configuration half of the internal HTTP API (`crates/api`: health,
//! the contract, tenants, agents, triggers, tools, skills) behind API Gateway with `AWS_IAM` auth
//! (see `switchboard_lambda::api`); `operations-api` serves the other half. Builds the SDK config and clients once, without the
//! agents' means: it runs no turn (`Wiring::api`).

use switchboard_lambda::{Wiring, api, run_with};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    run_with(Wiring::api_from_env, api::serve_configuration).await
}
