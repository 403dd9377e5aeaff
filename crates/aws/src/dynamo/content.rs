//! Recorded model content (see `switchboard_domain::recording`): one item per piece, in the
//! partition of its session's execution records (`SESSION#<s>`, `CONTENT#<sha-256>`), with the
//! JSON under `content` and the TTL attribute `expiresAt`. Written with `BatchWriteItem` before a
//! turn's transaction (a turn may hold more pieces than a transaction has room for, and pieces
//! are keyed by their hash, so a commit that fails leaves only content that expires); read with
//! `BatchGetItem`. Erased with the tenant's sessions (their partitions go whole).

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{KeysAndAttributes, PutRequest, WriteRequest};
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

/// Rounds of `UnprocessedItems` / `UnprocessedKeys` asked again before giving up.
const ROUNDS: u32 = 5;

fn content_sk(sha256: &str) -> String {
    format!("CONTENT#{sha256}")
}

impl DynamoStore {
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
        let mut items = Vec::with_capacity(content.len());
        for blob in content {
            if blob.body.len() > MAX_CONTENT_ITEM_BYTES {
                tracing::warn!(bytes = blob.body.len(), sha256 = %blob.sha256, "recorded content too large for an item; left out");
                continue;
            }
            let text = String::from_utf8_lossy(&blob.body).into_owned();
            let mut item = key(execution_pk(session), content_sk(&blob.sha256));
            item.insert("tenantId".into(), s(tenant.to_string()));
            item.insert("expiresAt".into(), n(expires));
            item.insert("content".into(), s(text));
            items.push(item);
        }
        for chunk in items.chunks(25) {
            let mut requests: Vec<WriteRequest> = chunk
                .iter()
                .map(|item| {
                    let put = PutRequest::builder().set_item(Some(item.clone())).build().map_err(build_err)?;
                    Ok(WriteRequest::builder().put_request(put).build())
                })
                .collect::<Result<_, StoreError>>()?;
            for round in 0..ROUNDS {
                if requests.is_empty() {
                    break;
                }
                if round > 0 {
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(5..=25 * u64::from(round)))).await;
                }
                let out = self
                    .client
                    .batch_write_item()
                    .request_items(table, requests)
                    .send()
                    .await
                    .map_err(|e| unavailable("BatchWriteItem", &e))?;
                requests = out.unprocessed_items.and_then(|mut u| u.remove(table)).unwrap_or_default();
            }
            if !requests.is_empty() {
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
            let mut wanted = HashMap::from([(
                table.clone(),
                KeysAndAttributes::builder().set_keys(Some(keys)).consistent_read(true).build().map_err(build_err)?,
            )]);
            for round in 0..ROUNDS {
                if wanted.is_empty() {
                    break;
                }
                if round > 0 {
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(5..=25 * u64::from(round)))).await;
                }
                let out = self
                    .client
                    .batch_get_item()
                    .set_request_items(Some(wanted))
                    .send()
                    .await
                    .map_err(|e| unavailable("BatchGetItem", &e))?;
                for item in out.responses.and_then(|mut r| r.remove(table)).unwrap_or_default() {
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
                wanted = out.unprocessed_keys.unwrap_or_default();
            }
            if !wanted.is_empty() {
                return Err(StoreError::Unavailable {
                    message: "BatchGetItem kept leaving recorded content unread".into(),
                    retryable: true,
                });
            }
        }
        Ok(found)
    }
}
