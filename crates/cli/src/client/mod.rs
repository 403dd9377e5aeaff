//! `switchboard agents|triggers|tools|skills|sessions|executions …`: the internal API from the
//! command line, against a running server (`--endpoint`, with an API key) or the AWS profile's
//! internal API behind API Gateway (`--aws-sigv4`). Input from `-f file.json|yaml`, output as a
//! table or `-o wide|json|yaml`; an API error is shown with every field at fault, and the exit
//! status is non-zero. Where flags leave out the endpoint, tenant or key, the configuration
//! file's context gives them (`contexts`). One file per command group over one HTTP client
//! (`api`) and one printer (`output`); the client never runs a server.

mod api;
pub mod apply;
pub mod approvals;
pub mod config;
pub mod contexts;
pub mod eval;
pub mod events;
pub mod executions;
mod invoke;
pub mod keys;
mod local_replay;
mod mcp;
mod output;
pub mod ready;
pub mod reports;
pub mod sessions;
mod tenant_record;
pub mod tenants;
mod trigger_test;
mod versions;
