//! Kept versions of configuration records: a row written in the same transaction as the write it
//! keeps (a write whose version is already kept fails as a whole), read newest first. Rows are
//! never updated; they go with the tenant.

use rusqlite::{Connection, OptionalExtension, params};
use switchboard_domain::TenantId;
use switchboard_engine::{Authorship, ConfigKind, ConfigVersion, Page, StoreError};

use super::config::decode;
use super::{SqliteStore, store_err};

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

type Row = (i64, String, String, bool, String);

const COLUMNS: &str = "SELECT version, written_at, written_by, deleted, body FROM config_versions";

impl SqliteStore {
    pub(super) async fn versions_page(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Page<ConfigVersion>, StoreError> {
        let (t, k, i) = (tenant.to_string(), kind.as_str(), id.to_owned());
        let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let fetch = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
        let rows: Vec<Row> = self
            .db
            .call(move |c| {
                let sql = format!(
                    "{COLUMNS} WHERE tenant_id = ?1 AND kind = ?2 AND id = ?3 AND version < ?4
                     ORDER BY version DESC LIMIT ?5"
                );
                let mut stmt = c.prepare_cached(&sql)?;
                let rows = stmt
                    .query_map(params![t, k, i, before, fetch], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                    })?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        let items = rows.into_iter().map(|row| version(kind, id, row)).collect::<Result<Vec<_>, _>>()?;
        Ok(Page::from_overfetch(items, limit, |v| v.version.to_string()))
    }

    pub(super) async fn one_version(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
        number: u64,
    ) -> Result<Option<ConfigVersion>, StoreError> {
        let (t, k, i) = (tenant.to_string(), kind.as_str(), id.to_owned());
        let n = i64::try_from(number).unwrap_or(i64::MAX);
        let row: Option<Row> = self
            .db
            .call(move |c| {
                let sql = format!("{COLUMNS} WHERE tenant_id = ?1 AND kind = ?2 AND id = ?3 AND version = ?4");
                Ok(c.prepare_cached(&sql)?
                    .query_row(params![t, k, i, n], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
                    .optional()?)
            })
            .await
            .map_err(store_err)?;
        row.map(|row| version(kind, id, row)).transpose()
    }
}

fn version(kind: ConfigKind, id: &str, (number, at, by, deleted, body): Row) -> Result<ConfigVersion, StoreError> {
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
