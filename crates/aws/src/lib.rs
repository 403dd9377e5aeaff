//! The AWS profile's adapters: DynamoDB store, SQS FIFO work queue, EventBridge bus and the
//! Bedrock Converse model, behind the engine's ports. The only crate that names `aws-sdk-*`;
//! the engine never sees an SDK type. Also the S3 archive, Secrets Manager reader and the
//! SigV4-signed Conversations Service client, with the SigV4 signer it shares with the CLI, and
//! the console push (API Gateway WebSocket connections).
//! Lambda entry points live in `functions/`.

pub mod bedrock;
pub mod conversations;
pub mod dynamo;
mod errors;
pub mod eventbridge;
pub mod push;
pub mod s3;
pub mod sdk;
pub mod secrets;
pub mod sigv4;
pub mod sqs;

pub use bedrock::BedrockModel;
pub use conversations::{ConversationsApi, ConversationsLimits};
pub use dynamo::{DynamoMessageLog, DynamoStore, EVENT_SETTLE, TurnLog, TurnPages, piece_key};
pub use eventbridge::{EventBridgeBus, StreamRelay};
pub use push::{ConsolePush, Delivery, DynamoPushTickets, ManagementApi, PushReport};
pub use s3::{ArchiveError, S3Archive};
pub use sdk::{AwsClients, AwsNames, AwsSettings, Timeouts};
pub use secrets::{SecretsManagerSecrets, secret_variables};
pub use sqs::SqsWorkQueue;
