//! Recorded model content (see `switchboard_domain::recording`): one item per piece, in the
//! partition of its session's execution records (`SESSION#<s>`, `CONTENT#<sha-256>`), with the
//! JSON under `content` and the TTL attribute `expiresAt`. Written in the turn's transaction while
//! it has room (so recording costs no round trip); what does not fit (a long turn of many tool
//! calls, or large pieces) is written with `BatchWriteItem` just before it — pieces are keyed by
//! their hash, so a commit that then fails leaves only content that expires. Only the session's
//! own turns write its partition's pieces, one at a time, so they meet no concurrent transaction.
//! Read with `BatchGetItem`. Erased with the tenant's sessions (their partitions go whole).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{KeysAndAttributes, Put, PutRequest, TransactWriteItem, WriteRequest};
use chrono::{DateTime, Utc};
use switchboard_domain::limits::CONTENT_TTL_DAYS;
use switchboard_domain::{Blob, SessionId, TenantId};
use switchboard_engine::StoreError;

use super::codec::*;
use super::keys::*;
use super::{DynamoStore, Item};

/// Largest piece kept: DynamoDB's 400 KB item less room for the key and attributes. A larger one
/// (a tool result of several hundred kilobytes) is left out, and reads back as no longer kept.
pub(super) const MAX_CONTENT_ITEM_BYTES: usize = 380 * 1024;

/// Items in one `TransactWriteItems` (DynamoDB's limit), and the room kept in it for the turn's
/// outbox events and usage counters, which are added after the content.
const TRANSACTION_ITEMS: usize = 100;
const ROOM_FOR_EVENTS_AND_USAGE: usize = 24;
/// Bytes of content a turn's transaction carries at most (of DynamoDB's 4 MB a transaction).
const TRANSACTION_CONTENT_BYTES: usize = 1024 * 1024;

fn content_sk(sha256: &str) -> String {
    format!("CONTENT#{sha256}")
}

/// The item of one piece, or `None` for one too large to keep (logged).
fn content_item(tenant: &TenantId, session: SessionId, blob: &Blob, expires: i64) -> Option<Item> {
    if blob.body.len() > MAX_CONTENT_ITEM_BYTES {
        tracing::warn!(bytes = blob.body.len(), sha256 = %blob.sha256, "recorded content too large for an item; left out");
        return None;
    }
    let mut item = key(execution_pk(session), content_sk(&blob.sha256));
    item.insert("tenantId".into(), s(tenant.to_string()));
    item.insert("expiresAt".into(), n(expires));
    item.insert("content".into(), s(String::from_utf8_lossy(&blob.body).into_owned()));
    Some(item)
}

impl DynamoStore {
    /// The transaction puts of as much of `content` as a turn's transaction holding `taken` items
    /// has room for, and the rest, to write before it.
    pub(super) fn content_in_transaction<'a>(
        &self,
        tenant: &TenantId,
        session: SessionId,
        content: &'a [Blob],
        now: DateTime<Utc>,
        taken: usize,
    ) -> Result<(Vec<TransactWriteItem>, &'a [Blob]), StoreError> {
        let room = TRANSACTION_ITEMS.saturating_sub(taken + ROOM_FOR_EVENTS_AND_USAGE);
        let expires = ttl_seconds(now + chrono::Duration::days(CONTENT_TTL_DAYS));
        let (mut puts, mut bytes) = (Vec::new(), 0);
        let mut fitted = 0;
        for blob in content {
            if puts.len() == room || bytes + blob.body.len() > TRANSACTION_CONTENT_BYTES {
                break;
            }
            fitted += 1;
            let Some(item) = content_item(tenant, session, blob, expires) else { continue };
            bytes += blob.body.len();
            let put = Put::builder().table_name(&self.names.executions_table).set_item(Some(item)).build();
            puts.push(TransactWriteItem::builder().put(put.map_err(build_err)?).build());
        }
        Ok((puts, &content[fitted..]))
    }

    /// Keeps `content` under `session` until [`CONTENT_TTL_DAYS`] after `now`, 25 pieces a call.
    pub(super) async fn put_content(
        &self,
        tenant: &TenantId,
        session: SessionId,
        content: &[Blob],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let table = &self.names.executions_table;
        let expires = ttl_seconds(now + chrono::Duration::days(CONTENT_TTL_DAYS));
        let items: Vec<Item> = content.iter().filter_map(|b| content_item(tenant, session, b, expires)).collect();
        for chunk in items.chunks(25) {
            let requests: Vec<WriteRequest> = chunk
                .iter()
                .map(|item| {
                    let put = PutRequest::builder().set_item(Some(item.clone())).build().map_err(build_err)?;
                    Ok(WriteRequest::builder().put_request(put).build())
                })
                .collect::<Result<_, StoreError>>()?;
            if !batch_write(&self.client, table, requests).await? {
                return Err(StoreError::Unavailable {
                    message: "BatchWriteItem kept leaving recorded content unprocessed".into(),
                    retryable: true,
                });
            }
        }
        Ok(())
    }

    /// The pieces of `session` under `hashes` that are kept and belong to `tenant`, 100 keys a
    /// call, strongly consistent.
    pub(super) async fn read_content(
        &self,
        tenant: &TenantId,
        session: SessionId,
        hashes: &[String],
    ) -> Result<Vec<Blob>, StoreError> {
        let table = &self.names.executions_table;
        let now = self.clock.now().timestamp();
        let mut found = Vec::with_capacity(hashes.len());
        for chunk in hashes.chunks(100) {
            let keys: Vec<Item> = chunk.iter().map(|h| key(execution_pk(session), content_sk(h))).collect();
            let wanted = HashMap::from([(
                table.clone(),
                KeysAndAttributes::builder().set_keys(Some(keys)).consistent_read(true).build().map_err(build_err)?,
            )]);
            for item in batch_get(&self.client, wanted).await?.remove(table).unwrap_or_default() {
                let owned = attr_s(&item, "tenantId").is_ok_and(|t| t == tenant.as_str());
                let live = item
                    .get("expiresAt")
                    .and_then(|v| v.as_n().ok())
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|at| at > now);
                let sha256 = attr_s(&item, "SK")?.strip_prefix("CONTENT#").map(str::to_owned);
                if let (true, true, Some(sha256)) = (owned, live, sha256) {
                    found.push(Blob { sha256, body: attr_s(&item, "content")?.as_bytes().to_vec() });
                }
            }
        }
        Ok(found)
    }
}
