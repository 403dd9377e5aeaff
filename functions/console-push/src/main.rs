//! console-push Lambda: the operator console's live push on AWS — the WebSocket API's
//! `$connect` (tickets redeemed for a tenant) and the bus's `session.*` events posted to that
//! tenant's connections (handler in `switchboard_lambda::push`). Builds its clients once.

use switchboard_lambda::{FunctionEnv, push, run_with};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    run_with(async |sdk| FunctionEnv::push_from_env(sdk), push::serve).await
}
