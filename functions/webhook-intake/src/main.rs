//! webhook-intake Lambda: webhook triggers' deliveries (`POST /hooks/{tenant}/{trigger}`), the
//! one route of the API that the internet reaches without SigV4 — each request authenticated by
//! its Standard Webhooks signature under the tenant's secret in Secrets Manager. A function of
//! its own so that only this role reads tenants' secrets beside the agent-executor, and the
//! IAM-authenticated halves of the API stay without them (`Wiring::hooks_from_env`).

use switchboard_lambda::{Wiring, api, run_with};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    run_with(Wiring::hooks_from_env, api::serve_hooks).await
}
