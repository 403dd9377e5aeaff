//! `DynamoMessageLog`: the conversation log of the Conversations Service stand-in (the optional
//! `conversations-standin` function), in a small table of its own: each conversation's messages
//! in the order they were written, and the idempotency keys they were sent under, both kept
//! [`STANDIN_RETENTION`] (the contract's window for keys, `contracts/conversations-service.md`).
//! It is not Switchboard's store: the engine reads it only through the stand-in's HTTP API, as
//! it would a real Conversations Service.
//!
//! | PK | SK | other attributes |
//! |---|---|---|
//! | `TENANT#<t>#CONV#<conversation>` | `MSG#<ulid>` | `body` (the message), `expiresAt` |
//! | `TENANT#<t>#KEYS` | `KEY#<idempotency key>` | `body` (the message first sent under it), `expiresAt` |

use std::sync::{Arc, Mutex, PoisonError};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use chrono::{DateTime, Utc};
use switchboard_domain::TenantId;
use switchboard_engine::{Clock, HistoryMessage, Sender, StoreError};

use super::Item;
use super::codec::{build_err, decode, encode, transact_conditional, unavailable};
use super::keys::{conversation_key, key, n, s, ttl_seconds};

/// How long messages and idempotency keys are kept: the 14 days the contract asks of keys (SQS
/// may redeliver a work item that long), and messages alike.
pub const STANDIN_RETENTION: chrono::Duration = chrono::Duration::days(14);

/// A message as the log holds it, and whether its key had been used before (then it is the
/// first message sent under that key, and nothing new was written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub message: HistoryMessage,
    pub duplicate: bool,
}

/// The stand-in's table. Cheap to clone; clones share the id generator, so that the messages one
/// container writes sort in the order it wrote them, even within one millisecond.
#[derive(Debug, Clone)]
pub struct DynamoMessageLog {
    client: Client,
    table: String,
    clock: Arc<dyn Clock>,
    ids: Arc<Mutex<ulid::Generator>>,
}

fn keys_pk(t: &TenantId) -> String {
    format!("TENANT#{t}#KEYS")
}

impl DynamoMessageLog {
    pub fn new(client: Client, table: impl Into<String>, clock: Arc<dyn Clock>) -> Self {
        Self { client, table: table.into(), clock, ids: Arc::default() }
    }

    /// A log with a DynamoDB client of its own, made from `config`.
    pub fn from_config(config: &aws_config::SdkConfig, table: impl Into<String>, clock: Arc<dyn Clock>) -> Self {
        Self::new(Client::new(config), table, clock)
    }

    /// A message id: a ULID of `at`, later than every id this log made before.
    fn next_id(&self, at: DateTime<Utc>) -> ulid::Ulid {
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        match ids.generate_from_datetime(at.into()) {
            Ok(id) => id,
            Err(overflow) => overflow.commit_overflow_increment(),
        }
    }

    /// Appends `text` from `sender` to the conversation. With a `key`, at most once per tenant: a
    /// key used before writes nothing and answers the message first sent under it
    /// (`duplicate`). The key and the message are written in one transaction.
    pub async fn append(
        &self,
        tenant: &TenantId,
        conversation: &str,
        sender: Sender,
        text: &str,
        idempotency_key: Option<&str>,
    ) -> Result<Recorded, StoreError> {
        let now = self.clock.now();
        let id = self.next_id(now);
        let message = HistoryMessage { message_id: id.to_string(), sender, text: text.to_owned(), sent_at: now };
        let expires = n(ttl_seconds(now + STANDIN_RETENTION));
        let body = encode(&message)?;
        let record = |pk: String, sk: String, condition: Option<&str>| -> Result<TransactWriteItem, StoreError> {
            let mut item: Item = key(pk, sk);
            item.insert("body".into(), body.clone());
            item.insert("expiresAt".into(), expires.clone());
            let put = Put::builder().table_name(&self.table).set_item(Some(item));
            let put = put.set_condition_expression(condition.map(str::to_owned)).build().map_err(build_err)?;
            Ok(TransactWriteItem::builder().put(put).build())
        };
        let mut writes = Vec::new();
        if let Some(k) = idempotency_key {
            writes.push(record(keys_pk(tenant), format!("KEY#{k}"), Some("attribute_not_exists(PK)"))?);
        }
        writes.push(record(conversation_key(tenant, conversation), format!("MSG#{id}"), None)?);
        let sent = self.client.transact_write_items().set_transact_items(Some(writes)).send().await;
        match (transact_conditional(sent)?, idempotency_key) {
            (true, _) | (false, None) => Ok(Recorded { message, duplicate: false }),
            (false, Some(k)) => self.first_under(tenant, k).await,
        }
    }

    /// The message first sent under `idempotency_key`.
    async fn first_under(&self, tenant: &TenantId, idempotency_key: &str) -> Result<Recorded, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(keys_pk(tenant), format!("KEY#{idempotency_key}"))))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("GetItem", &e))?;
        match out.item {
            Some(item) => Ok(Recorded { message: decode(&item)?, duplicate: true }),
            // Its key expired between the refused write and this read: a retry writes anew.
            None => Err(StoreError::Unavailable {
                message: format!("the message sent under key {idempotency_key} is gone"),
                retryable: true,
            }),
        }
    }

    /// The conversation's newest `limit` messages, oldest first.
    pub async fn newest(
        &self,
        tenant: &TenantId,
        conversation: &str,
        limit: usize,
    ) -> Result<Vec<HistoryMessage>, StoreError> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("PK = :pk AND begins_with(SK, :msg)")
            .expression_attribute_values(":pk", s(conversation_key(tenant, conversation)))
            .expression_attribute_values(":msg", s("MSG#"))
            .scan_index_forward(false)
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("Query", &e))?;
        let mut messages = out.items().iter().map(decode).collect::<Result<Vec<HistoryMessage>, _>>()?;
        messages.reverse();
        Ok(messages)
    }
}
