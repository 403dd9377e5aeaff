//! The AWS adapters' suite, one test binary sharing one emulator: the adapter contract run on
//! both profiles (`contract`), one message end to end on the AWS adapters (`scenario`), Bedrock
//! through the SDK against a fake Converse server (`bedrock`), and the archive, secrets and
//! Conversations clients (`archive_secrets_conversations`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod archive_secrets_conversations;
mod bedrock;
mod contract;
mod scenario;
