//! The embedded profile's suite, one test binary: scenarios of the engine on the real embedded
//! adapters (`scenarios`, `patterns`, `limits`, `tenancy`), the SQLite store (`store`), its
//! retention sweep (`retention`) and the queue with its worker pool (`queue`). `common` is the world the scenario suites run in.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod approvals;
mod bursts;
mod common;
mod evaluation;
mod faults;
mod hooks;
mod idle;
mod interrupts;
mod limits;
mod patterns;
mod queue;
mod recording;
mod retention;
mod scenarios;
mod schedules;
mod store;
mod tenancy;
