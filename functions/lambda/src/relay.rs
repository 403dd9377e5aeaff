//! The outbox's relay on AWS: the executions table's DynamoDB stream → EventBridge. A turn's
//! events are written to the tenant's event log in the turn's own transaction, marked `outbox`
//! (`crates/aws/src/dynamo/event_log.rs`); the stream's `INSERT` of each such item is published
//! here, after the commit and only if it committed (and its `MODIFY` in the one case where an
//! event overwrites the burned mark of its number). Delivery is at least once (a retried batch
//! publishes again); each event keeps its stable `id`, which consumers drop repeats by. A record
//! whose publication fails is reported as a batch-item failure, so Lambda retries from it (the
//! records before it stay published); a record that cannot be read is logged and skipped, as it
//! never will be.

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use lambda_runtime::LambdaEvent;
use switchboard_aws::EventBridgeBus;
use switchboard_domain::OutboundEvent;

/// Whether `record` belongs to the outbox (its item is marked `outbox`), without decoding it:
/// how the stream's consumer tells this mapping's batches from the archive's.
pub fn is_outbox(record: &EventRecord) -> bool {
    record.change.new_image.contains_key("outbox")
}

/// The event an outbox record carries, if it is one: `Ok(None)` for any other record.
pub fn outbox_event(record: &EventRecord) -> Result<Option<OutboundEvent>, String> {
    // A MODIFY is one only where an event overwrote the burned mark of its number (its
    // transaction committed after its writer had given the number up: event_log.rs's `burn`).
    let written = match record.event_name.as_str() {
        "INSERT" => true,
        "MODIFY" => !record.change.old_image.contains_key("outbox"),
        _ => false,
    };
    if !written || record.change.new_image.is_empty() {
        return Ok(None);
    }
    let image: serde_json::Value =
        serde_dynamo::from_item(record.change.new_image.clone()).map_err(|e| format!("NewImage: {e}"))?;
    let is_event = image.get("SK").and_then(|v| v.as_str()).is_some_and(|sk| sk.starts_with("EVENT#"));
    let in_outbox = image.get("outbox").and_then(serde_json::Value::as_bool) == Some(true);
    if !is_event || !in_outbox {
        return Ok(None);
    }
    let body = image.get("body").ok_or("an outbox event without a body")?;
    let body = match body {
        // The store keeps bodies as JSON text.
        serde_json::Value::String(text) => serde_json::from_str(text).map_err(|e| format!("body: {e}"))?,
        other => serde_json::from_value(other.clone()).map_err(|e| format!("body: {e}"))?,
    };
    Ok(Some(body))
}

/// Publishes the outbox events of one stream batch; the failures to retry from.
#[tracing::instrument(skip_all, fields(request_id = %event.context.request_id, records = event.payload.records.len()))]
pub async fn handle(bus: &EventBridgeBus, event: LambdaEvent<Event>) -> DynamoDbEventResponse {
    let mut response = DynamoDbEventResponse::default();
    for record in &event.payload.records {
        let published = match outbox_event(record) {
            Ok(Some(outbound)) => bus.publish(&outbound).await.map(|()| Some(outbound)),
            Ok(None) => Ok(None),
            Err(why) => {
                tracing::error!(event_id = %record.event_id, reason = %why, "outbox record not readable; skipped");
                Ok(None)
            }
        };
        match published {
            Ok(Some(outbound)) => {
                tracing::info!(event_id = %outbound.id, detail_type = %outbound.detail_type, "relayed")
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(event_id = %record.event_id, error = %e.message, "relay failed; the batch is retried from here");
                let mut failure = DynamoDbBatchItemFailure::default();
                failure.item_identifier = record.change.sequence_number.clone();
                response.batch_item_failures.push(failure);
                break;
            }
        }
    }
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::{Value, json};

    use super::*;

    fn record(name: &str, old: Value, new: Value) -> EventRecord {
        serde_json::from_value(json!({
            "eventID": "1", "eventName": name, "eventVersion": "1.1", "eventSource": "aws:dynamodb",
            "awsRegion": "us-east-1",
            "dynamodb": { "Keys": {}, "OldImage": old, "NewImage": new, "SequenceNumber": "1", "SizeBytes": 1,
                          "StreamViewType": "NEW_AND_OLD_IMAGES" }
        }))
        .unwrap()
    }

    #[test]
    fn an_event_is_relayed_when_written_and_when_it_overwrites_a_burned_number_only() {
        let body =
            json!({ "id": "t-1/k/session.ended", "detailType": "session.ended", "tenantId": "t-1", "detail": {} });
        let event = json!({ "PK": {"S": "TENANT#t-1#EVENTS"}, "SK": {"S": "EVENT#0000000000000000007"},
                            "outbox": {"BOOL": true}, "body": {"S": body.to_string()} });
        let burned = json!({ "PK": {"S": "TENANT#t-1#EVENTS"}, "SK": {"S": "EVENT#0000000000000000007"},
                             "burned": {"BOOL": true} });
        let relayed = |r: EventRecord| outbox_event(&r).unwrap().map(|e| e.id);
        assert_eq!(relayed(record("INSERT", json!({}), event.clone())).as_deref(), Some("t-1/k/session.ended"));
        assert_eq!(relayed(record("MODIFY", burned.clone(), event.clone())).as_deref(), Some("t-1/k/session.ended"));
        assert_eq!(relayed(record("MODIFY", event.clone(), event.clone())), None, "rewritten: relayed when written");
        assert_eq!(relayed(record("INSERT", json!({}), burned)), None, "a burned number carries nothing");
        assert_eq!(relayed(record("REMOVE", event, json!({}))), None);
    }
}
