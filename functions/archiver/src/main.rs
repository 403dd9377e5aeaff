//! archiver Lambda: the executions table's DynamoDB stream → gzip JSON Lines in S3 (handler in
//! `switchboard_functions::archiver`). Builds the SDK config and the S3 client once.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use switchboard_functions::{FunctionEnv, archiver, env::init_only};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let sdk = switchboard_functions::env::load_sdk_config().await;
    let archive = FunctionEnv::archive_from_env(&sdk)?;
    if init_only() {
        return Ok(());
    }
    let archive = &archive;
    run(service_fn(move |event: LambdaEvent<_>| async move {
        archiver::handle(archive, event).await.map(|summary| summary.archived)
    }))
    .await
}
