//! The schema of the profile's one SQLite file: every step, in the order it is applied, and the
//! upgrade that applies the ones a database has not had. The steps' SQL lives here, one file per
//! owner of the tables (`store`, `queue`); running calls against the file is `crate::db`'s job.

pub mod queue;
pub mod store;

use std::time::Instant;

use rusqlite::Connection;

/// The schema, applied in order; the index of the last applied step is kept in `user_version`.
/// Steps are never edited once released: a data directory written by an older build replays only
/// the steps after its own.
pub const MIGRATIONS: &[&str] = &[
    store::SCHEMA,
    queue::SCHEMA,
    store::SCOPE_CLIENT_IDS,
    store::USAGE,
    store::TENANT_STATUS,
    store::TENANT_LIMITS,
    store::SESSION_SLOTS,
    store::MESSAGE_SENDER,
    store::ACTIVITY,
    store::SLOT_COUNTS,
    queue::RECEIPTS_BY_SEQ,
    store::LEANER_MESSAGES,
    store::LEANER_SESSIONS,
    store::SESSION_UPDATES,
    store::CONFIG_VERSIONS,
    store::RECORDED_CONTENT,
    store::API_KEY_GRANTS,
    store::SCHEDULES,
    store::SPLIT_ACTIVITY,
    store::CALENDARS,
    store::TENANT_ZONES,
    store::INSIGHTS,
    store::IDLE_SESSIONS,
];

/// Applies the schema steps the database has not had. Upgrading a database an earlier build
/// wrote says so in the log, step by step: a step that rebuilds a table (step 12 rebuilds the
/// conversation log) takes a while on a large database, and would otherwise look like a hang.
pub(crate) fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    let applied: usize = conn.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0))?.try_into().unwrap_or(0);
    let upgrading = applied > 0;
    for (i, step) in MIGRATIONS.iter().enumerate().skip(applied) {
        let (number, of) = (i + 1, MIGRATIONS.len());
        if upgrading {
            tracing::info!(
                step = number,
                of,
                "upgrading the database schema: a step that rebuilds a table may take a while"
            );
        }
        let started = Instant::now();
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(step)?;
        tx.pragma_update(None, "user_version", i64::try_from(number).unwrap_or(i64::MAX))?;
        tx.commit()?;
        if upgrading {
            let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            tracing::info!(step = number, of, ms, "database schema step applied");
        }
    }
    Ok(())
}
