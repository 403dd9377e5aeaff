//! Recorded model content (see `switchboard_domain::recording`): one item per piece, in the
//! partition of its session's execution records (`SESSION#<s>`, `CONTENT#<sha-256>`), with the
//! JSON under `content` and the TTL attribute `expiresAt`. Written in the turn's transaction while
//! it has room (so recording costs no round trip); what does not fit (a long turn of many tool
//! calls, or large pieces) is written with `BatchWriteItem` just before it — pieces are keyed by
//! their hash, so a commit that then fails leaves only content that expires. Only the session's
//! own turns write its partition's pieces, one at a time, so they meet no concurrent transaction.
//! Read with `BatchGetItem`. Erased with the tenant's sessions (their partitions go whole).
//!
//! A piece over the item limit (a tool list of large schemas, a sub-agent's webhook answer of up
//! to 1 MiB) is put in S3 first, when the store has a bucket for them
//! ([`DynamoStore::with_large_content`]), at [`piece_key`]; its item then holds that key under
//! `s3Key` instead of `content`, and rides in the transaction like the others. It is read back
//! from S3 and checked against its hash. The object outlives the item (the bucket's lifecycle
//! rule), so the archive's line for the piece names it. When a tenant's deletion removes the
//! item, the archiver deletes the object (from the stream's `REMOVE`; a TTL expiry keeps it).

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

/// The key of a large piece's object in the bucket. Session ids are generated here, never chosen
/// by a client, so the key needs no tenant; it is what the item's key names, so that the
/// archiver can delete the object from a stream record that holds only the item's key.
pub fn piece_key(session: &str, sha256: &str) -> String {
    format!("pieces/session={session}/{sha256}.json")
}

/// Whether `blob` is over the item limit.
fn large(blob: &Blob) -> bool {
    blob.body.len() > MAX_CONTENT_ITEM_BYTES
}

impl DynamoStore {
    /// The item of one piece (and the bytes it holds), or `None` for one too large to keep here
    /// (logged): over the item limit with no bucket for large pieces.
    fn content_item(&self, tenant: &TenantId, session: SessionId, blob: &Blob, expires: i64) -> Option<(Item, usize)> {
        let mut item = key(execution_pk(session), content_sk(&blob.sha256));
        item.insert("tenantId".into(), s(tenant.to_string()));
        item.insert("expiresAt".into(), n(expires));
        let held = match (large(blob), &self.pieces) {
            (false, _) => {
                item.insert("content".into(), s(String::from_utf8_lossy(&blob.body).into_owned()));
                blob.body.len()
            }
            (true, Some(_)) => {
                let object = piece_key(&session.to_string(), &blob.sha256);
                let held = object.len();
                item.insert("s3Key".into(), s(object));
                held
            }
            (true, None) => {
                tracing::warn!(bytes = blob.body.len(), sha256 = %blob.sha256, "recorded content too large for an item; left out");
                return None;
            }
        };
        Some((item, held))
    }

    /// Puts the pieces of `content` that are over the item limit in the bucket for them (before
    /// any item names one). Without a bucket there is nothing to do: they are left out.
    pub(super) async fn put_large_content(&self, session: SessionId, content: &[Blob]) -> Result<(), StoreError> {
        let Some(bucket) = &self.pieces else { return Ok(()) };
        for blob in content.iter().filter(|b| large(b)) {
            bucket
                .put(&piece_key(&session.to_string(), &blob.sha256), blob.body.clone(), "application/json")
                .await
                .map_err(|e| StoreError::Unavailable { message: e.message, retryable: e.retryable })?;
        }
        Ok(())
    }

    /// The body of a large piece from its object, if it is there and is what its hash says.
    async fn large_piece(&self, object: &str, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let Some(bucket) = &self.pieces else {
            tracing::warn!(sha256, "recorded content kept in S3, and this function has no bucket for it");
            return Ok(None);
        };
        let body = bucket
            .get(object)
            .await
            .map_err(|e| StoreError::Unavailable { message: e.message, retryable: e.retryable })?;
        Ok(body.filter(|b| switchboard_domain::recording::sha256_hex(b) == sha256))
    }
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
            if puts.len() == room {
                break;
            }
            let Some((item, held)) = self.content_item(tenant, session, blob, expires) else {
                fitted += 1;
                continue;
            };
            if bytes + held > TRANSACTION_CONTENT_BYTES {
                break;
            }
            fitted += 1;
            bytes += held;
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
        let items: Vec<Item> = content
            .iter()
            .filter_map(|b| self.content_item(tenant, session, b, expires))
            .map(|(item, _)| item)
            .collect();
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
                let (true, true, Some(sha256)) = (owned, live, sha256) else { continue };
                let body = match item.get("s3Key").and_then(|v| v.as_s().ok()) {
                    Some(object) => self.large_piece(object, &sha256).await?,
                    None => Some(attr_s(&item, "content")?.as_bytes().to_vec()),
                };
                if let Some(body) = body {
                    found.push(Blob { sha256, body });
                }
            }
        }
        Ok(found)
    }
}
