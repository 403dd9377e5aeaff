//! The internal HTTP API as an axum `Router`, mounted by `switchboard serve` (and, on AWS, by the
//! internal-api Lambda). Tenant-scoped routes live under `/tenants/{tenantId}/…` so that a
//! gateway policy can scope a caller to its tenants; every lookup is keyed by the tenant of the
//! path, so another tenant's ids answer 404.
//!
//! Every request passes one gate before routing (`middleware::read_request`): its path must be in
//! canonical form (no percent-encoding, no dot segments), so that authorisation, the rate limiter
//! and the handlers read the same tenant; an announced oversize body is refused at once and a
//! body must arrive within [`ApiState::body_timeout`].
//!
//! Layout: `routes` assembles the routes, `middleware` is the gate around them, `extract` reads
//! the tenant, bodies and queries, and `resources/` holds one module per resource. Resources never
//! use each other or `routes`.

pub mod access;
pub mod auth;
#[cfg(feature = "console")]
pub mod console;
mod extract;
/// The `bodies` fuzz target's checks (`fuzz/`), shared with the replay of its corpus; not an API.
#[doc(hidden)]
pub mod fuzzing;
mod middleware;
pub mod problem;
mod resources;
mod routes;
mod state;

pub use auth::{Authenticator, Caller, KeyGrant, KeyInfo, RateLimiter};
pub use problem::Problem;
pub use routes::{configuration_api, hooks_api, operations_api, routes};
pub use state::{
    ApiState, DEFAULT_BODY_TIMEOUT, DeadLetters, MetricsText, Readiness, ReplayOptions, ReplayRefused, Replayer,
};
// What a profile offers the routes; defined by the engine, implemented beside each profile.
pub use switchboard_engine::{EventFeed, Ingest, Invoker, LiveEvents};
