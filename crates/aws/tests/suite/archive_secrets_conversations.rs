//! The S3 archive and the Secrets Manager reader against the emulator, and the Conversations
//! Service client against a fake HTTP server that checks its SigV4 header and idempotency key.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use switchboard_testkit::aws as common;

use std::time::Duration;

use common::FakeConversations;
use switchboard_aws::{AwsSettings, ConversationsApi, ConversationsLimits, S3Archive, SecretsManagerSecrets};
use switchboard_domain::TenantId;
use switchboard_engine::{Conversations, Secrets, Sender};

fn quick() -> ConversationsLimits {
    ConversationsLimits { backoff: Duration::from_millis(5), ..ConversationsLimits::default() }
}

#[tokio::test]
async fn the_archive_puts_and_gets_bytes_under_its_prefix() {
    // given a bucket on the emulator
    let sdk = AwsSettings::emulator(common::moto().endpoint.clone()).load().await;
    let bucket = common::create_bucket(&sdk).await;
    let archive = S3Archive::new(S3Archive::client(&sdk, true), bucket.clone(), "executions/");
    // when bytes are put, then put again under the same key
    archive.put("t-1/a.json", b"first".to_vec(), "application/json").await.unwrap();
    archive.put("t-1/a.json", b"second".to_vec(), "application/json").await.unwrap();
    // then the last write is read back, under the prefix, and a missing key is None
    assert_eq!(archive.get("t-1/a.json").await.unwrap().unwrap(), b"second");
    assert_eq!(archive.object_key("t-1/a.json"), "executions/t-1/a.json");
    let raw = S3Archive::client(&sdk, true).get_object().bucket(&bucket).key("executions/t-1/a.json").send().await;
    assert!(raw.is_ok());
    assert_eq!(archive.get("t-1/missing.json").await.unwrap(), None);
}

#[tokio::test]
async fn secrets_are_read_by_tenant_and_name_and_cached() {
    // given a tenant secret in Secrets Manager
    let sdk = AwsSettings::emulator(common::moto().endpoint.clone()).load().await;
    let client = aws_sdk_secretsmanager::Client::new(&sdk);
    let prefix = format!("sb-{}/", ulid::Ulid::generate().to_string().to_lowercase());
    let secrets = SecretsManagerSecrets::with_prefix(client.clone(), prefix.clone());
    let tenant: TenantId = "t-1".parse().unwrap();
    let id = secrets.secret_id(&tenant, "crm-hook");
    assert_eq!(id, format!("{prefix}t-1/crm-hook"));
    client.create_secret().name(&id).secret_string("s3cr3t").send().await.unwrap();
    // when it is read, changed, and read again within the cache lifetime
    assert_eq!(secrets.get_secret(&tenant, "crm-hook").await.unwrap().as_deref(), Some("s3cr3t"));
    client.put_secret_value().secret_id(&id).secret_string("rotated").send().await.unwrap();
    // then the cached value is served; a reader with no cache sees the new one
    assert_eq!(secrets.get_secret(&tenant, "crm-hook").await.unwrap().as_deref(), Some("s3cr3t"));
    let fresh = SecretsManagerSecrets::with_prefix(client.clone(), prefix).with_ttl(Duration::ZERO);
    assert_eq!(fresh.get_secret(&tenant, "crm-hook").await.unwrap().as_deref(), Some("rotated"));
    // and a secret that does not exist is None, not an error
    assert_eq!(secrets.get_secret(&tenant, "missing").await.unwrap(), None);
    // and the Debug output never shows a value
    assert!(!format!("{secrets:?}").contains("s3cr3t"));
}

#[tokio::test]
async fn a_reply_is_posted_signed_with_its_idempotency_key_and_retried_on_5xx_and_429() {
    // given a Conversations Service that fails twice (503, then 429) before accepting
    let fake = FakeConversations::start(vec![503, 429]).await;
    let sdk = AwsSettings::emulator("http://127.0.0.1:9").load().await;
    let api = ConversationsApi::new(&sdk, fake.base_url.clone(), quick()).unwrap();
    let tenant: TenantId = "t-1".parse().unwrap();
    // when a reply is sent
    let sent = api.send_reply(&tenant, "c 1/x", "Hello there", "evt-1#0").await.unwrap();
    // then the third attempt was accepted, SigV4-signed for execute-api with the key signed
    assert_eq!(fake.attempts(), 3);
    assert!(!sent.duplicate);
    let got = fake.accepted();
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].tenant_id.as_str(), got[0].conversation_id.as_str(), got[0].text.as_str()),
        ("t-1", "c 1/x", "Hello there")
    );
    // the key is sent with its tenant: the service's key space may be shared by every tenant
    assert_eq!(got[0].idempotency_key, "t-1/evt-1#0");
    assert!(got[0].authorization.starts_with("AWS4-HMAC-SHA256 Credential=test/"), "{}", got[0].authorization);
    assert!(got[0].authorization.contains("/us-east-1/execute-api/aws4_request"));
    assert_eq!(got[0].amz_date.len(), 16);
    // when the same key is sent again, then the service's first message id comes back
    let again = api.send_reply(&tenant, "c 1/x", "Hello there", "evt-1#0").await.unwrap();
    assert!(again.duplicate);
    assert_eq!(again.message_id, sent.message_id);
    assert_eq!(fake.accepted().len(), 1);
}

#[tokio::test]
async fn a_4xx_is_not_retried_and_exhausted_retries_stay_retryable() {
    // given a service that answers 400 once
    let fake = FakeConversations::start(vec![400]).await;
    let sdk = AwsSettings::emulator("http://127.0.0.1:9").load().await;
    let api = ConversationsApi::new(&sdk, fake.base_url.clone(), quick()).unwrap();
    let tenant: TenantId = "t-1".parse().unwrap();
    let err = api.send_reply(&tenant, "c-1", "Hi", "k-1").await.unwrap_err();
    assert!(!err.retryable, "{err}");
    assert_eq!(fake.attempts(), 1);
    // given one that is down for longer than the retries
    let fake = FakeConversations::start(vec![502, 502, 502]).await;
    let api = ConversationsApi::new(&sdk, fake.base_url.clone(), quick()).unwrap();
    let err = api.send_reply(&tenant, "c-1", "Hi", "k-2").await.unwrap_err();
    assert!(err.retryable, "{err}");
    assert!(err.message.contains("502"), "{err}");
    assert_eq!(fake.attempts(), 3);
    assert!(fake.accepted().is_empty());
}

#[tokio::test]
async fn the_history_is_read_signed_newest_last_and_a_refusal_is_an_error() {
    // given a conversation the service knows, three messages before Switchboard answered
    let fake = FakeConversations::start(vec![]).await;
    fake.seed(
        "t-1",
        "c-1",
        &[("m-1", "customer", "hi"), ("m-2", "human", "Hello, how can I help?"), ("m-3", "customer", "refund")],
    );
    fake.seed("t-2", "c-1", &[("m-1", "customer", "another tenant's")]);
    let sdk = AwsSettings::emulator("http://127.0.0.1:9").load().await;
    let api = ConversationsApi::new(&sdk, fake.base_url.clone(), quick()).unwrap();
    let tenant: TenantId = "t-1".parse().unwrap();
    api.send_reply(&tenant, "c-1", "On it.", "evt-3#0").await.unwrap();
    // when the newest three are read
    let history = api.history(&tenant, "c-1", 3).await.unwrap();
    // then they come oldest first, each with its sender, the reply included, the other tenant's not
    let got: Vec<(&str, Sender, &str)> =
        history.iter().map(|m| (m.message_id.as_str(), m.sender, m.text.as_str())).collect();
    assert_eq!(
        got,
        [
            ("m-2", Sender::Human, "Hello, how can I help?"),
            ("m-3", Sender::Customer, "refund"),
            ("out-1", Sender::Agent, "On it.")
        ]
    );
    assert_eq!(fake.history_reads(), 1);
    // and a 5xx is retried, a 4xx is an error that is not
    fake.fail_history(&[503]);
    assert_eq!(api.history(&tenant, "c-1", 1).await.unwrap().len(), 1);
    assert_eq!(fake.history_reads(), 3);
    fake.fail_history(&[404]);
    let err = api.history(&tenant, "c-1", 1).await.unwrap_err();
    assert!(!err.retryable && err.message.contains("404"), "{err}");
    assert_eq!(fake.history_reads(), 4);
}
