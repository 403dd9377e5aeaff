//! Items ⇄ records (`serde_dynamo`), and SDK failures as store errors.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use serde::de::DeserializeOwned;
use switchboard_domain::SessionStatus;
use switchboard_engine::{ConfigKind, ConfigRecord, StoreError};

use crate::errors::logged;

use super::Item;

pub(super) fn encode<T: Serialize>(v: &T) -> Result<AttributeValue, StoreError> {
    serde_dynamo::to_attribute_value(v).map_err(|e| StoreError::Corrupt(format!("encode: {e}")))
}

pub(super) fn decode<T: DeserializeOwned>(item: &Item) -> Result<T, StoreError> {
    let body = item.get("body").cloned().ok_or_else(|| StoreError::Corrupt("item has no body".into()))?;
    serde_dynamo::from_attribute_value(body).map_err(|e| StoreError::Corrupt(e.to_string()))
}

pub(super) fn attr_s<'a>(item: &'a Item, name: &str) -> Result<&'a str, StoreError> {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
        .ok_or_else(|| StoreError::Corrupt(format!("item has no string '{name}'")))
}

pub(super) fn decode_config(kind: ConfigKind, item: &Item) -> Result<ConfigRecord, StoreError> {
    Ok(match kind {
        ConfigKind::Agent => ConfigRecord::Agent(decode(item)?),
        ConfigKind::Trigger => ConfigRecord::Trigger(decode(item)?),
        ConfigKind::Tool => ConfigRecord::Tool(decode(item)?),
        ConfigKind::Skill => ConfigRecord::Skill(decode(item)?),
    })
}

pub(super) fn status_str(s: SessionStatus) -> &'static str {
    match s {
        SessionStatus::Active => "active",
        SessionStatus::HandedOff => "handed_off",
        SessionStatus::Completed => "completed",
        SessionStatus::Failed => "failed",
        SessionStatus::Abandoned => "abandoned",
    }
}

pub(super) fn unavailable<E>(operation: &str, err: &SdkError<E>) -> StoreError
where
    E: aws_smithy_types::error::metadata::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let f = logged(operation, err, "dynamodb call failed");
    StoreError::Unavailable { message: f.message, retryable: f.retryable }
}

/// A conditional write's answer: `true` written, `false` when its condition did not hold.
pub(super) fn conditional<T, E>(operation: &str, result: Result<T, SdkError<E>>) -> Result<bool, StoreError>
where
    E: aws_smithy_types::error::metadata::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match result {
        Ok(_) => Ok(true),
        Err(e) if e.as_service_error().and_then(|e| e.code()) == Some("ConditionalCheckFailedException") => Ok(false),
        Err(e) => Err(unavailable(operation, &e)),
    }
}

/// A conditional `TransactWriteItems`' answer: `true` written, `false` when its first item's
/// condition did not hold (the transaction was cancelled for it).
pub(super) fn transact_conditional<T>(
    result: Result<T, SdkError<aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError>>,
) -> Result<bool, StoreError> {
    use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
    match result {
        Ok(_) => Ok(true),
        Err(e) => {
            let refused = matches!(e.as_service_error(), Some(TransactWriteItemsError::TransactionCanceledException(c))
                if c.cancellation_reasons().first().and_then(|r| r.code()) == Some("ConditionalCheckFailed"));
            if refused { Ok(false) } else { Err(unavailable("TransactWriteItems", &e)) }
        }
    }
}

pub(super) fn build_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable { message: format!("building a request: {e}"), retryable: false }
}

/// Rounds of resending what `BatchWriteItem` left unprocessed (throttling) before giving up.
pub(super) const UNPROCESSED_ROUNDS: u32 = 5;

/// Writes `requests` (at most 25, one table) with `BatchWriteItem`, sending again what DynamoDB
/// leaves unprocessed after a growing, jittered pause, [`UNPROCESSED_ROUNDS`] times at most;
/// whether everything was written.
pub(super) async fn batch_write(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    mut requests: Vec<aws_sdk_dynamodb::types::WriteRequest>,
) -> Result<bool, StoreError> {
    for round in 0..UNPROCESSED_ROUNDS {
        if requests.is_empty() {
            return Ok(true);
        }
        if round > 0 {
            let pause = fastrand::u64(10..=50 << round);
            tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
        }
        let out = client
            .batch_write_item()
            .request_items(table, requests)
            .send()
            .await
            .map_err(|e| unavailable("BatchWriteItem", &e))?;
        requests = out.unprocessed_items.and_then(|mut u| u.remove(table)).unwrap_or_default();
    }
    Ok(requests.is_empty())
}

/// Reads `wanted` (table → keys, 100 keys at most) with `BatchGetItem`, asking again for what
/// DynamoDB leaves unread after a growing, jittered pause, [`UNPROCESSED_ROUNDS`] times at most:
/// every item found, by table. Keys still unread after that fail the read (retryable).
pub(super) async fn batch_get(
    client: &aws_sdk_dynamodb::Client,
    mut wanted: std::collections::HashMap<String, aws_sdk_dynamodb::types::KeysAndAttributes>,
) -> Result<std::collections::HashMap<String, Vec<super::Item>>, StoreError> {
    let mut found: std::collections::HashMap<String, Vec<super::Item>> = std::collections::HashMap::new();
    for round in 0..UNPROCESSED_ROUNDS {
        if wanted.is_empty() {
            return Ok(found);
        }
        if round > 0 {
            let pause = fastrand::u64(5..=25 * u64::from(round));
            tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
        }
        let out = client
            .batch_get_item()
            .set_request_items(Some(wanted))
            .send()
            .await
            .map_err(|e| unavailable("BatchGetItem", &e))?;
        for (table, items) in out.responses.unwrap_or_default() {
            found.entry(table).or_default().extend(items);
        }
        wanted = out.unprocessed_keys.unwrap_or_default();
    }
    if wanted.is_empty() {
        return Ok(found);
    }
    Err(StoreError::Unavailable { message: "BatchGetItem kept leaving keys unprocessed".into(), retryable: true })
}
