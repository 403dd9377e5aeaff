//! agent-executor Lambda: SQS FIFO batches → the engine's executor, with per-item failures
//! (handler in `switchboard_functions::executor`). Builds the SDK config and clients once.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use switchboard_functions::{FunctionEnv, Wiring, env::init_only, executor};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let env = FunctionEnv::from_env()?;
    let sdk = switchboard_functions::env::load_sdk_config().await;
    let wiring = Wiring::new(&sdk, &env)?;
    if init_only() {
        return Ok(());
    }
    let executor = &wiring.executor;
    run(service_fn(move |event: LambdaEvent<_>| async move { Ok::<_, Error>(executor::handle(executor, event).await) }))
        .await
}
