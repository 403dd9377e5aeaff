//! Kept versions of configuration records: an item per version beside the record in the config
//! table (`VERSION#<KIND>#<id>#<version, 20 digits>`), put in the same `TransactWriteItems` as
//! the write it keeps, on condition that it is new, so a kept version is never overwritten. The
//! store reads them newest first by a backwards query of the record's prefix (`config`).

use aws_sdk_dynamodb::types::Put;
use switchboard_engine::{Authorship, ConfigKind, ConfigRecord, ConfigVersion, StoreError};

use super::Item;
use super::codec::{attr_s, build_err, decode_config, encode};
use super::keys::{key, n, s, tenant_pk};

/// The prefix of every version of `kind`/`id`.
pub(super) fn prefix(kind: ConfigKind, id: &str) -> String {
    format!("VERSION#{}#{id}#", kind.as_str().to_uppercase())
}

/// Zero-padded, so that sort-key order is version order.
pub(super) fn version_sk(kind: ConfigKind, id: &str, version: u64) -> String {
    format!("{}{version:020}", prefix(kind, id))
}

/// The put that keeps `record` as version `version` (a deletion when `deleted`), refused if that
/// version is already kept.
pub(super) fn keep(
    table: &str,
    record: &ConfigRecord,
    version: u64,
    deleted: bool,
    by: &Authorship,
) -> Result<Put, StoreError> {
    let mut item = key(tenant_pk(record.tenant_id()), version_sk(record.kind(), &record.id(), version));
    item.insert("version".into(), n(version));
    item.insert("writtenAt".into(), s(by.at.to_rfc3339()));
    item.insert("writtenBy".into(), s(by.by.clone()));
    item.insert("deleted".into(), aws_sdk_dynamodb::types::AttributeValue::Bool(deleted));
    item.insert("body".into(), encode(record)?);
    Put::builder()
        .table_name(table)
        .set_item(Some(item))
        .condition_expression("attribute_not_exists(PK)")
        .build()
        .map_err(build_err)
}

/// A version item as the record it keeps.
pub(super) fn version(kind: ConfigKind, id: &str, item: &Item) -> Result<ConfigVersion, StoreError> {
    let number = item.get("version").and_then(|v| v.as_n().ok()).and_then(|v| v.parse().ok());
    Ok(ConfigVersion {
        kind,
        id: id.to_owned(),
        version: number.ok_or_else(|| StoreError::Corrupt("config version has no number".into()))?,
        written_at: attr_s(item, "writtenAt")?
            .parse()
            .map_err(|e| StoreError::Corrupt(format!("config version writtenAt: {e}")))?,
        written_by: attr_s(item, "writtenBy")?.to_owned(),
        deleted: item.get("deleted").and_then(|v| v.as_bool().ok()).copied().unwrap_or(false),
        record: decode_config(kind, item)?,
    })
}
