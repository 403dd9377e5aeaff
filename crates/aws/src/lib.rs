//! The AWS profile's adapters: DynamoDB store, SQS FIFO work queue, EventBridge bus and the
//! Bedrock Converse model, behind the engine's ports. The only crate that names `aws-sdk-*`;
//! the engine never sees an SDK type. Lambda entry points, S3, Secrets Manager and the
//! Conversations Service client are not here yet.

pub mod bedrock;
pub mod config;
pub mod dynamo;
mod errors;
pub mod eventbridge;
pub mod sqs;

pub use bedrock::{BedrockModel, RetryPolicy};
pub use config::{AwsClients, AwsNames, AwsSettings, Timeouts};
pub use dynamo::{ConfigWriteError, DynamoStore};
pub use eventbridge::EventBridgeBus;
pub use sqs::SqsWorkQueue;
