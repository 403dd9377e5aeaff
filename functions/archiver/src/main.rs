//! archiver Lambda: the executions table's DynamoDB stream → gzip JSON Lines in S3 (handler in
//! `switchboard_lambda::archiver`). Builds the SDK config and the S3 client once.

use switchboard_lambda::{FunctionEnv, archiver, run_with};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    run_with(async |sdk| FunctionEnv::archive_from_env(sdk), archiver::serve).await
}
