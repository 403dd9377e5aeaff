//! event-router Lambda: EventBridge `conversations-service` / `message.new` → the engine's router
//! (handler in `switchboard_functions::router`). Builds the SDK config and clients once.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use switchboard_functions::{FunctionEnv, Wiring, env::init_only, router};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let env = FunctionEnv::from_env()?;
    let sdk = switchboard_functions::env::load_sdk_config().await;
    let wiring = Wiring::new(&sdk, &env)?;
    if init_only() {
        return Ok(());
    }
    let router = &wiring.router;
    run(service_fn(move |event: LambdaEvent<_>| async move { router::handle(router, event).await.map(|_| ()) })).await
}
