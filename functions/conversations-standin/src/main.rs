//! conversations-standin Lambda: the Conversations Service stand-in behind its own API Gateway
//! REST API (`switchboard_lambda::standin`), deployed only when the stack's
//! `ConversationsStandIn` is `true`. Builds the SDK config and its DynamoDB, EventBridge and
//! Secrets Manager clients once.

use std::sync::Arc;

use switchboard_lambda::{run_with, standin};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    run_with(async |sdk| standin::StandIn::from_env(sdk).map(Arc::new), standin::serve).await
}
