//! `SqsWorkQueue`: the router's side of the SQS FIFO work queue. Items go to their
//! conversation's message group with a hash of tenant and source id as deduplication id (a FIFO
//! queue deduplicates queue-wide, across every tenant's groups), and SQS's limits are
//! checked here (the emulator is lenient). Receiving is the Lambda event source mapping's job,
//! not this adapter's.

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use switchboard_engine::{Enqueued, QueueError, WorkItem, WorkQueue};

use crate::errors::{describe, logged};

/// SQS's largest message body (256 KiB).
pub const MAX_BODY_BYTES: usize = 256 * 1024;
/// SQS's longest `MessageGroupId` and `MessageDeduplicationId`.
pub const MAX_ID_LEN: usize = 128;

#[derive(Debug, Clone)]
pub struct SqsWorkQueue {
    client: Client,
    queue_url: String,
}

impl SqsWorkQueue {
    /// A queue with an SQS client of its own, made from `config`.
    pub fn from_config(config: &aws_config::SdkConfig, queue_url: impl Into<String>) -> Self {
        Self::new(Client::new(config), queue_url)
    }

    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self { client, queue_url: queue_url.into() }
    }

    /// Keeps a received message invisible for `delay` (at most SQS's 12 hours): its group waits
    /// behind it until then (`ChangeMessageVisibility`).
    pub async fn hold(&self, receipt: &str, delay: std::time::Duration) -> Result<(), QueueError> {
        const MAX_VISIBILITY_SECONDS: u64 = 12 * 60 * 60;
        // Rounded up: held a moment too short, the item would come back before it is due.
        let seconds = u64::try_from(delay.as_millis().div_ceil(1000)).unwrap_or(u64::MAX);
        let seconds = i32::try_from(seconds.clamp(1, MAX_VISIBILITY_SECONDS)).unwrap_or(i32::MAX);
        self.client
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(seconds)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| {
                let f = describe("ChangeMessageVisibility", &e);
                QueueError { message: f.message, retryable: f.retryable }
            })
    }
}

/// SQS accepts 1–128 characters of printable ASCII in group and deduplication ids.
fn check_id(what: &str, id: &str) -> Result<(), QueueError> {
    let ok = !id.is_empty() && id.len() <= MAX_ID_LEN && id.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(QueueError {
            message: format!("{what} must be 1 to {MAX_ID_LEN} printable ASCII characters"),
            retryable: false,
        })
    }
}

#[async_trait]
impl WorkQueue for SqsWorkQueue {
    /// Always answers [`Enqueued::Queued`]: SQS accepts a deduplicated send without saying so.
    /// Once-only processing rests on the store's idempotency records, not on this answer.
    async fn enqueue(&self, item: &WorkItem) -> Result<Enqueued, QueueError> {
        let body = serde_json::to_string(item)
            .map_err(|e| QueueError { message: format!("encode work item: {e}"), retryable: false })?;
        if body.len() > MAX_BODY_BYTES {
            return Err(QueueError {
                message: format!("work item is {} bytes, more than SQS's {MAX_BODY_BYTES}", body.len()),
                retryable: false,
            });
        }
        let group = item.group_id();
        check_id("message group id", &group)?;
        let dedup_id = item.dedup_id();
        check_id("deduplication id", &dedup_id)?;
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_group_id(group)
            .message_deduplication_id(dedup_id)
            .message_body(body)
            .send()
            .await
            .map_err(|e| {
                let f = logged("SendMessage", &e, "sqs send failed");
                QueueError { message: f.message, retryable: f.retryable }
            })?;
        Ok(Enqueued::Queued)
    }
}
