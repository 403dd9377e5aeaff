//! One module per resource of the API, each mapping HTTP onto the engine's services and stores.
//! A resource never uses another resource nor the router; what several share (the tenant of the
//! path, bodies, queries) is in `extract`.

pub(crate) mod approvals;
pub(crate) mod config;
pub(crate) mod conversations;
pub(crate) mod events;
pub(crate) mod executions;
pub(crate) mod insights;
pub(crate) mod invoke;
#[cfg(feature = "api-keys")]
pub(crate) mod keys;
pub(crate) mod mcp;
pub(crate) mod openapi;
pub(crate) mod reports;
pub(crate) mod sessions;
pub(crate) mod status;
pub(crate) mod tenants;
pub(crate) mod trigger_test;
