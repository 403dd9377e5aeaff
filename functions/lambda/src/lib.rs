//! The handler logic of Switchboard's Lambda functions, kept out of the thin `main`s in
//! `functions/*` so that it can be driven in tests with real event JSON
//! (`LambdaEvent::new(payload, Context::default())`). It builds adapters from the environment
//! once per container; it does not start the Lambda runtime (the binaries do).

pub mod api;
pub mod archiver;
pub mod emf;
pub mod event_router;
pub mod executor;
pub mod push;
pub mod relay;
pub mod standin;
pub mod wiring;

pub use wiring::{FunctionEnv, Wiring, model_settings, run_with};
