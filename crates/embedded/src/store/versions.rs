//! Kept versions of configuration records: a row written in the same transaction as the write it
//! keeps (a write whose version is already kept fails as a whole), and read back. Rows are never
//! updated; they go with the tenant. The queries are the store's (`config`).

use rusqlite::{Connection, params};
use switchboard_engine::{Authorship, ConfigKind, ConfigVersion, StoreError};

use super::config::decode;

/// A version about to be kept: the record's key, its number and who wrote it.
pub(super) struct Keep<'a> {
    pub tenant: &'a str,
    pub kind: &'a str,
    pub id: &'a str,
    pub version: i64,
    pub deleted: bool,
    pub body: &'a str,
}

/// Keeps `v` inside the caller's transaction; a version already kept is a constraint failure.
pub(super) fn keep(c: &Connection, v: &Keep<'_>, by: &Authorship) -> rusqlite::Result<usize> {
    c.prepare_cached(
        "INSERT INTO config_versions (tenant_id, kind, id, version, written_at, written_by, deleted, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![v.tenant, v.kind, v.id, v.version, by.at.to_rfc3339(), by.by, v.deleted, v.body])
}

/// A row as [`COLUMNS`] reads it.
pub(super) type Row = (i64, String, String, bool, String);

/// Reads a row of [`COLUMNS`].
pub(super) fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

/// What a version is read from.
pub(super) const COLUMNS: &str = "SELECT version, written_at, written_by, deleted, body FROM config_versions";

pub(super) fn version(
    kind: ConfigKind,
    id: &str,
    (number, at, by, deleted, body): Row,
) -> Result<ConfigVersion, StoreError> {
    Ok(ConfigVersion {
        kind,
        id: id.to_owned(),
        version: u64::try_from(number).map_err(|e| StoreError::Corrupt(format!("config version: {e}")))?,
        written_at: at.parse().map_err(|e| StoreError::Corrupt(format!("config version writtenAt: {e}")))?,
        written_by: by,
        deleted,
        record: decode(kind, &body)?,
    })
}
