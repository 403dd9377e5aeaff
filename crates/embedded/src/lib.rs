//! The embedded profile: everything Switchboard needs on one machine with no AWS account — one
//! SQLite file for records and the FIFO work queue, an in-process event bus, a local
//! conversation log, and the scripted model (a labelled test double, not an AI).
//!
//! The modules use each other one way only, from the file up: `schema` (the tables' steps) ←
//! `db` (the database thread) ← `queue` ← `store` ← `bus`, `conversations`, `retention`; `queue` ←
//! `metrics`, `worker`; `runtime` (the assembly) uses those and `follow`; `api` uses `runtime`, `store`,
//! `queue` and `keys`. `follow`, `keys`, `scripted` and `secrets` use no other module here.

pub mod api;
pub mod bus;
pub mod conversations;
pub mod db;
pub mod eval;
pub mod follow;
pub mod keys;
pub mod metrics;
pub mod queue;
pub mod replay;
pub mod retention;
pub mod runtime;
pub mod sandbox;
pub mod schema;
pub mod scripted;
pub mod secrets;
pub mod store;
pub mod worker;

pub use bus::InProcessBus;
pub use conversations::LocalConversations;
pub use db::Db;
pub use metrics::PrometheusMetrics;
pub use queue::{QueueConfig, SqliteWorkQueue};
pub use retention::{Retention, Swept};
pub use runtime::{DEFAULT_WORKERS, Embedded, EmbeddedOptions};
pub use scripted::{SCRIPTED_MODEL_ID, ScriptedModel};
pub use secrets::FileSecrets;
pub use store::SqliteStore;
pub use switchboard_engine::Bundle;
