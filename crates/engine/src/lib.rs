//! The engine: ports (the traits adapters implement) and the work itself — routing inbound
//! events to agents and running one agent turn. Same code in the AWS and embedded profiles.
//!
//! No SDK, database, HTTP server or async-runtime specifics here: only domain types and ports.

pub mod ports;

pub use ports::*;

mod context;
pub mod executor;
pub mod handoff;
pub mod router;
mod router_agent;
mod supervisor;
mod system_tools;
mod toolbox;
mod webhook_tools;

pub use executor::{ExecError, ExecOutcome, Executor};
pub use handoff::{HandoffDone, HandoffError, HandoffTo};
pub use router::{RouteError, RouteOutcome, Router};
