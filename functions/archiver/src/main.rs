//! archiver Lambda: the executions table's DynamoDB stream → the archive in S3 (Parquet, JSON Lines), and the
//! outbox's events → EventBridge (handlers in `switchboard_lambda::{archiver, relay}`). Builds
//! the SDK config and the S3 and EventBridge clients once.

use switchboard_lambda::{FunctionEnv, archiver, run_with};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    run_with(async |sdk| FunctionEnv::streams_from_env(sdk), archiver::serve).await
}
