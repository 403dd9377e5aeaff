//! archiver: the executions table's DynamoDB stream → S3: execution records as Parquet, recorded
//! model content as gzip JSON Lines. Only `INSERT` and `MODIFY` records with a `NewImage` of an
//! execution item (`SK = EXEC#…`, which carries the record under `body`) or of recorded model
//! content (`SK = CONTENT#…`, its JSON under `content`) are archived; source and id pointers and
//! `REMOVE`s are skipped (but see below). A batch becomes one object per kind, tenant and day:
//! `executions/tenant=<id>/date=<yyyy-mm-dd>/<first sequence number>.parquet` and
//! `content/…/<first sequence number>.jsonl.gz`. The key depends only on
//! the batch's records, so a retried batch overwrites the same object instead of duplicating it.
//! The files' layout and encoding are `switchboard_domain::archive`'s, which the embedded
//! profile's retention sweep writes too.
//!
//! A `REMOVE` of recorded content that is not a TTL expiry (a tenant's deletion) deletes the
//! piece's object under `pieces/`, where the store keeps pieces too large for an item: the
//! record holds only the item's key, which names the object. An expiry keeps it, for the archive's
//! line that names it.

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use lambda_runtime::{LambdaEvent, service_fn};
use switchboard_aws::{ArchiveError, S3Archive};
use switchboard_domain::archive::{ArchiveBatch, ArchiveKind, day_of};
use switchboard_domain::limits::CONTENT_TTL_DAYS;

/// What one batch wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArchiveSummary {
    /// Object keys written, in key order.
    pub objects: Vec<String>,
    pub archived: usize,
    pub skipped: usize,
    /// Removed pieces of recorded content whose objects were deleted (if there were any).
    pub deleted: usize,
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

/// DynamoDB's own principal in a stream record: the removal is a TTL expiry.
const TTL_PRINCIPAL: &str = "dynamodb.amazonaws.com";

/// The object of a piece of recorded content whose item was deleted other than by its TTL (a
/// tenant's deletion), from the item's key, which is all a `REMOVE` record holds; `None` for any
/// other record. Most pieces have no object (they fit in their item); deleting a key that is not
/// there succeeds.
fn removed_piece(record: &EventRecord) -> Option<String> {
    if record.event_name != "REMOVE" || record.user_identity.as_ref().is_some_and(|u| u.principal_id == TTL_PRINCIPAL) {
        return None;
    }
    let keys: serde_json::Value = serde_dynamo::from_item(record.change.keys.clone()).ok()?;
    let sha256 = keys.get("SK")?.as_str()?.strip_prefix("CONTENT#")?;
    let session = keys.get("PK")?.as_str()?.strip_prefix("SESSION#")?;
    Some(switchboard_aws::piece_key(session, sha256))
}

/// One archivable record: its kind, (tenant, day) and JSON line.
fn line(record: &EventRecord) -> Result<Option<(ArchiveKind, String, String, serde_json::Value)>, String> {
    if !matches!(record.event_name.as_str(), "INSERT" | "MODIFY") || record.change.new_image.is_empty() {
        return Ok(None);
    }
    let image: serde_json::Value =
        serde_dynamo::from_item(record.change.new_image.clone()).map_err(|e| format!("NewImage: {e}"))?;
    let sk = image.get("SK").and_then(|v| v.as_str()).unwrap_or_default();
    let sequence = record.change.sequence_number.as_deref();
    if let Some(sha256) = sk.strip_prefix("CONTENT#") {
        return content_line(&image, sha256, &record.event_name, sequence).map(Some);
    }
    let Some(body) = image.get("body").filter(|_| sk.starts_with("EXEC#")) else { return Ok(None) };
    let tenant = body.get("tenantId").and_then(|v| v.as_str()).ok_or("execution has no tenantId")?;
    // The day the execution was created (UTC), which is stable across retries of the batch.
    let created = body.get("createdAt").and_then(|v| v.as_str()).ok_or("execution has no createdAt")?;
    let day = day_of(created).ok_or("createdAt is not an RFC 3339 time")?;
    let line = switchboard_domain::archive::line(ArchiveKind::Executions, &record.event_name, sequence, body);
    Ok(Some((ArchiveKind::Executions, tenant.to_owned(), day.to_owned(), line)))
}

/// A piece of recorded content as the embedded profile's retention archives it: its key, the
/// session, when it was last stored (its expiry less the content's retention, the day it is filed
/// under) and the content as JSON — or, for a piece kept in S3 because it was too large for an
/// item, `contentKey`, the object's key in the same bucket.
fn content_line(
    image: &serde_json::Value,
    sha256: &str,
    event_name: &str,
    sequence: Option<&str>,
) -> Result<(ArchiveKind, String, String, serde_json::Value), String> {
    let tenant = image.get("tenantId").and_then(|v| v.as_str()).ok_or("content has no tenantId")?;
    let session = image.get("PK").and_then(|v| v.as_str()).and_then(|pk| pk.strip_prefix("SESSION#"));
    let expires = image.get("expiresAt").and_then(serde_json::Value::as_i64).ok_or("content has no expiresAt")?;
    let expires_at = chrono::DateTime::<chrono::Utc>::from_timestamp(expires, 0).ok_or("expiresAt is out of range")?;
    let stored_at = (expires_at - chrono::Duration::days(CONTENT_TTL_DAYS)).to_rfc3339();
    let mut record = serde_json::json!({
        "tenantId": tenant, "sessionId": session, "sha256": sha256, "storedAt": stored_at,
        "expiresAt": expires_at.to_rfc3339(),
    });
    // A piece too large for an item is in the bucket already: its line names the object.
    match (image.get("content").and_then(|v| v.as_str()), image.get("s3Key").and_then(|v| v.as_str())) {
        (Some(text), _) => {
            record["content"] = serde_json::from_str(text).map_err(|e| format!("content: {e}"))?;
        }
        (None, Some(object)) => record["contentKey"] = object.into(),
        (None, None) => return Err("content has neither content nor s3Key".into()),
    }
    let day = day_of(&stored_at).ok_or("storedAt is not an RFC 3339 time")?.to_owned();
    let line = switchboard_domain::archive::line(ArchiveKind::Content, event_name, sequence, &record);
    Ok((ArchiveKind::Content, tenant.to_owned(), day, line))
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
    let (mut executions, mut content) =
        (ArchiveBatch::new(ArchiveKind::Executions), ArchiveBatch::new(ArchiveKind::Content));
    let mut removed = Vec::new();
    for record in &event.payload.records {
        if let Some(object) = removed_piece(record) {
            removed.push(object);
            continue;
        }
        match line(record) {
            Ok(Some((kind, tenant, day, json))) => {
                let sequence = record.change.sequence_number.as_deref().unwrap_or(&record.event_id);
                let batch = if kind == ArchiveKind::Content { &mut content } else { &mut executions };
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
    // Content files sit beside the execution records', under their own folder.
    let content_archive = archive.with_prefix(ArchiveKind::Content.prefix());
    for (archive, batch) in [(archive, executions), (&content_archive, content)] {
        for file in batch.files()? {
            archive.put(&file.key, file.bytes, "application/gzip").await?;
            tracing::info!(key = %file.key, lines = file.lines, "archived");
            summary.objects.push(archive.object_key(&file.key));
        }
    }
    if !removed.is_empty() {
        archive.with_prefix("").delete_all(&removed).await?;
        tracing::info!(objects = removed.len(), "removed pieces' objects deleted");
        summary.deleted = removed.len();
    }
    summary.objects.sort();
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
