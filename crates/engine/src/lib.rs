//! The engine: ports (the traits adapters implement) and the work itself — taking in inbound
//! events (`intake`) and running one agent turn (`execute`). Same code in the AWS and embedded
//! profiles. See `docs/architecture.md` for where each behaviour lives.
//!
//! Rooms, lower ones never importing higher ones (`config`, the rules of writing tenant
//! configuration, needs ports only): `ports` and `fault` (errors of a turn); `moves` (the
//! session moves: reply, publish, end, hand off to a human or an agent); `model_call` (one
//! model-call step); `tools` (the toolbox and its one dispatcher, a file per tool family);
//! `patterns` (router classification, supervisor sub-agents); `execute` (the executor, the turn
//! loop, records, context); `operator` (operators' claims, replies and ends, handoffs over the
//! API). `intake` needs ports only; `profile` is what a profile's runtime offers the internal API
//! (ingest, invoke, live events).
//!
//! No SDK, database, HTTP server or async-runtime specifics here: only domain types and ports.

pub mod bundle;
pub mod config;
pub mod execute;
mod fault;
mod hooks;
pub mod intake;
pub mod limits;
mod model_call;
mod moves;
pub mod operator;
mod patterns;
pub mod ports;
pub mod profile;
pub mod recorded;
mod tools;

pub use bundle::{ApplyChange, ApplyReport, Bundle, BundleError, Change};
pub use config::{ConfigService, ConfigWriteError, DEFAULT_WRITER, TenantChanges};
pub use execute::{Attempt, ExecError, ExecOutcome, Executor};
pub use intake::{Intake, RouteError, RouteOutcome};
pub use limits::{Admission, AdmitStep, Counting, Limits};
pub use operator::{
    Decision, HandoffDone, HandoffTo, IDLE_PER_TICK, IdleSweep, Operator, OperatorError, OperatorReply, REQUEUE_AFTER,
    Swept, TurnCancelled,
};
pub use patterns::supervisor::SUB_AGENT_HEADING;
pub use ports::*;
pub use profile::{EventFeed, Ingest, Invoker, LiveEvents};

/// The engine as a profile assembles it: event intake, the executor and the operator service
/// over one set of ports.
#[derive(Debug, Clone)]
pub struct Engine {
    pub intake: Intake,
    pub executor: Executor,
    pub operator: Operator,
}

impl Engine {
    pub fn new(deps: Deps) -> Self {
        let queue = deps.queue.clone();
        Self::with_intake_queue(deps, queue)
    }

    /// [`Engine::new`], with the intake enqueueing through `queue` instead of `deps.queue` (the
    /// embedded profile's logs each routed message in the enqueue's own database call).
    pub fn with_intake_queue(deps: Deps, queue: std::sync::Arc<dyn WorkQueue>) -> Self {
        let intake = Intake::new(deps.config.clone(), deps.sessions.clone(), queue)
            .with_clock(deps.clock.clone())
            .with_metrics(deps.metrics.clone())
            .with_limits(Limits::new(&deps));
        Self { intake, operator: Operator::new(deps.clone()), executor: Executor::new(deps) }
    }
}
