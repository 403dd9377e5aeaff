//! internal-api Lambda: the internal HTTP API (`crates/api`) behind API Gateway with `AWS_IAM`
//! auth (see `switchboard_functions::api`). Builds the SDK config and clients once.

use lambda_runtime::Error;
use switchboard_functions::{FunctionEnv, Wiring, api, env::init_only};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let env = FunctionEnv::from_env()?;
    let sdk = switchboard_functions::env::load_sdk_config().await;
    let wiring = Wiring::new(&sdk, &env)?;
    if init_only() {
        return Ok(());
    }
    api::serve(&wiring).await
}
