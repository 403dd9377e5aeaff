//! archiver: the executions table's DynamoDB stream → S3, as gzip-compressed JSON Lines. Only
//! `INSERT` and `MODIFY` records with a `NewImage` of an execution item (`SK = EXEC#…`, which
//! carries the record under `body`) are archived; source and id pointers and `REMOVE`s (TTL
//! expiry) are skipped. A batch becomes one object per (tenant, day):
//! `tenant=<id>/date=<yyyy-mm-dd>/<first sequence number>.jsonl.gz`. The key depends only on
//! the batch's records, so a retried batch overwrites the same object instead of duplicating it.
//! The files' layout and encoding are `switchboard_domain::archive`'s, which the embedded
//! profile's retention sweep writes too.

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use lambda_runtime::{LambdaEvent, service_fn};
use switchboard_aws::{ArchiveError, S3Archive};
use switchboard_domain::archive::{ArchiveBatch, ArchiveKind, day_of};

/// What one batch wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArchiveSummary {
    /// Object keys written, in key order.
    pub objects: Vec<String>,
    pub archived: usize,
    pub skipped: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ArchiverError {
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error("compress: {0}")]
    Compress(#[from] std::io::Error),
    #[error("answer: {0}")]
    Answer(#[from] serde_json::Error),
}

/// One archivable record: its (tenant, day) and JSON line.
fn line(record: &EventRecord) -> Result<Option<(String, String, String)>, String> {
    if !matches!(record.event_name.as_str(), "INSERT" | "MODIFY") || record.change.new_image.is_empty() {
        return Ok(None);
    }
    let image: serde_json::Value =
        serde_dynamo::from_item(record.change.new_image.clone()).map_err(|e| format!("NewImage: {e}"))?;
    let is_execution = image.get("SK").and_then(|v| v.as_str()).is_some_and(|sk| sk.starts_with("EXEC#"));
    let Some(body) = image.get("body").filter(|_| is_execution) else { return Ok(None) };
    let tenant = body.get("tenantId").and_then(|v| v.as_str()).ok_or("execution has no tenantId")?;
    // The day the execution was created (UTC), which is stable across retries of the batch.
    let created = body.get("createdAt").and_then(|v| v.as_str()).ok_or("execution has no createdAt")?;
    let day = day_of(created).ok_or("createdAt is not an RFC 3339 time")?;
    let sequence = record.change.sequence_number.as_deref();
    let line = switchboard_domain::archive::line(ArchiveKind::Executions, &record.event_name, sequence, body);
    Ok(Some((tenant.to_owned(), day.to_owned(), line)))
}

/// What the function consumes the executions table's stream for: archiving execution records,
/// and relaying the outbox's events to EventBridge ([`crate::relay`]). Each has its own event
/// source mapping, filtered, so that a batch is all of one kind.
#[derive(Debug)]
pub struct Streams {
    pub archive: S3Archive,
    pub outbox: switchboard_aws::EventBridgeBus,
}

/// The function's runtime loop: every stream batch to [`crate::relay::handle`] when it holds
/// outbox events, else to [`handle`], until the runtime stops. An archiving error goes back to
/// Lambda, which retries (bisecting) the batch; the relay reports the record to retry from.
pub async fn serve(streams: &Streams) -> Result<(), lambda_runtime::Error> {
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Event>| async move {
        if event.payload.records.iter().any(crate::relay::is_outbox) {
            let response = crate::relay::handle(&streams.outbox, event).await;
            return serde_json::to_value(response).map_err(ArchiverError::from);
        }
        handle(&streams.archive, event).await.map(|summary| serde_json::json!(summary.archived))
    }))
    .await
}

/// Archives one stream batch.
#[tracing::instrument(skip_all, fields(request_id = %event.context.request_id, records = event.payload.records.len()))]
pub async fn handle(archive: &S3Archive, event: LambdaEvent<Event>) -> Result<ArchiveSummary, ArchiverError> {
    let mut summary = ArchiveSummary::default();
    let mut batch = ArchiveBatch::new();
    for record in &event.payload.records {
        match line(record) {
            Ok(Some((tenant, day, json))) => {
                let sequence = record.change.sequence_number.as_deref().unwrap_or(&record.event_id);
                batch.push(&tenant, &day, sequence, json);
                summary.archived += 1;
            }
            Ok(None) => summary.skipped += 1,
            Err(why) => {
                // Not retryable: a record that cannot be read now never will be. Logged and
                // skipped so the shard is not blocked behind it.
                tracing::error!(event_id = %record.event_id, reason = %why, "stream record not archivable");
                summary.skipped += 1;
            }
        }
    }
    for file in batch.files()? {
        archive.put(&file.key, file.bytes, "application/gzip").await?;
        tracing::info!(key = %file.key, lines = file.lines, "archived");
        summary.objects.push(archive.object_key(&file.key));
    }
    Ok(summary)
}

impl From<ArchiverError> for lambda_runtime::Diagnostic {
    fn from(e: ArchiverError) -> Self {
        let error_type = match e {
            ArchiverError::Archive(_) => "ArchiveFailed",
            ArchiverError::Compress(_) => "CompressFailed",
            ArchiverError::Answer(_) => "AnswerFailed",
        };
        lambda_runtime::Diagnostic { error_type: error_type.into(), error_message: e.to_string() }
    }
}
