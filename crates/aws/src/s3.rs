//! `S3Archive`: bytes put, read back and deleted under one bucket and key prefix (execution
//! archives, recorded content too large for a DynamoDB item). Keys are the caller's; this adapter
//! only prefixes them. It never lists: the bucket's lifecycle rule expires objects, and the
//! archiver deletes the large pieces whose items a tenant's deletion removed.

use aws_config::SdkConfig;
use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;

use crate::errors::logged;

/// Bytes by key in a bucket: how the DynamoDB store keeps recorded content too large for an item
/// ([`crate::DynamoStore::with_large_content`]). A trait object there, so that the S3 client is
/// linked only into the functions that give the store a bucket (the agent-executor, which writes,
/// and the operations-api, which reads), not into every function that commits a turn or deletes
/// a tenant.
#[async_trait::async_trait]
pub trait Objects: std::fmt::Debug + Send + Sync {
    async fn put(&self, key: &str, bytes: Vec<u8>, content_type: &str) -> Result<(), ArchiveError>;
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ArchiveError>;
}

#[async_trait::async_trait]
impl Objects for S3Archive {
    async fn put(&self, key: &str, bytes: Vec<u8>, content_type: &str) -> Result<(), ArchiveError> {
        S3Archive::put(self, key, bytes, content_type).await
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ArchiveError> {
        S3Archive::get(self, key).await
    }
}

/// A failed archive operation, described with the AWS error code and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("archive: {message}")]
pub struct ArchiveError {
    pub message: String,
    pub retryable: bool,
}

#[derive(Debug, Clone)]
pub struct S3Archive {
    client: Client,
    bucket: String,
    prefix: String,
}

impl S3Archive {
    /// `prefix` is prepended to every key as given (use `""` or a value ending in `/`).
    pub fn new(client: Client, bucket: impl Into<String>, prefix: impl Into<String>) -> Self {
        Self { client, bucket: bucket.into(), prefix: prefix.into() }
    }

    /// An S3 client from the shared SDK config. `force_path_style` is for emulators (moto),
    /// which cannot serve virtual-host-style bucket names on 127.0.0.1.
    pub fn client(config: &SdkConfig, force_path_style: bool) -> Client {
        Client::from_conf(aws_sdk_s3::config::Builder::from(config).force_path_style(force_path_style).build())
    }

    /// The same bucket and client under another `prefix` (another kind's folder).
    pub fn with_prefix(&self, prefix: impl Into<String>) -> Self {
        Self { client: self.client.clone(), bucket: self.bucket.clone(), prefix: prefix.into() }
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The full object key of `key`.
    pub fn object_key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// Writes (or overwrites) the object: putting the same key twice is how retried batches
    /// stay idempotent.
    pub async fn put(&self, key: &str, bytes: Vec<u8>, content_type: &str) -> Result<(), ArchiveError> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(self.object_key(key))
            .content_type(content_type)
            .body(ByteStream::from(bytes))
            .send()
            .await
            .map_err(|e| {
                let f = logged("PutObject", &e, "s3 put failed");
                ArchiveError { message: f.message, retryable: f.retryable }
            })?;
        Ok(())
    }

    /// Deletes the objects, a thousand a `DeleteObjects` call (deleting a key that does not exist
    /// succeeds, as in S3). A key S3 could not delete fails the call, retryable.
    pub async fn delete_all(&self, keys: &[String]) -> Result<(), ArchiveError> {
        use aws_sdk_s3::types::{Delete, ObjectIdentifier};
        let build = |e: aws_sdk_s3::error::BuildError| ArchiveError {
            message: format!("DeleteObjects: {e}"),
            retryable: false,
        };
        for chunk in keys.chunks(1000) {
            let objects = chunk
                .iter()
                .map(|k| ObjectIdentifier::builder().key(self.object_key(k)).build().map_err(build))
                .collect::<Result<Vec<_>, _>>()?;
            let delete = Delete::builder().set_objects(Some(objects)).quiet(true).build().map_err(build)?;
            let out = self.client.delete_objects().bucket(&self.bucket).delete(delete).send().await.map_err(|e| {
                let f = logged("DeleteObjects", &e, "s3 delete failed");
                ArchiveError { message: f.message, retryable: f.retryable }
            })?;
            if let Some(failed) = out.errors().first() {
                let (key, code) = (failed.key().unwrap_or("-"), failed.code().unwrap_or("-"));
                return Err(ArchiveError { message: format!("DeleteObjects: {key}: {code}"), retryable: true });
            }
        }
        Ok(())
    }

    /// The object's bytes, or `None` when there is no such key.
    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ArchiveError> {
        let out = match self.client.get_object().bucket(&self.bucket).key(self.object_key(key)).send().await {
            Ok(out) => out,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => return Ok(None),
            Err(e) => {
                let f = logged("GetObject", &e, "s3 get failed");
                return Err(ArchiveError { message: f.message, retryable: f.retryable });
            }
        };
        let bytes = out
            .body
            .collect()
            .await
            .map_err(|e| ArchiveError { message: format!("GetObject: reading the body: {e}"), retryable: true })?;
        Ok(Some(bytes.into_bytes().to_vec()))
    }
}
