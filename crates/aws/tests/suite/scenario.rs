//! One message end to end on the AWS adapters: the engine's executor with DynamoDB and SQS on
//! the emulator (its events published from the table's stream, not by it), Bedrock on the fake Converse server and an in-test
//! Conversations fake. Also counts the AWS requests the executor makes for that message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use switchboard_testkit::aws as common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use common::{FakeBedrock, ManualClock, Reply, RequestCounter};
use serde_json::json;
use switchboard_aws::{AwsSettings, BedrockModel, DynamoStore, SqsWorkQueue, StreamRelay};
use switchboard_domain::message::ContentBlock;
use switchboard_domain::{Action, Agent, AgentId, ExecutionStatus, SessionStatus, TenantId};
use switchboard_engine::{
    ConfigRecord, ConfigService, ConversationError, Conversations, Deps, ExecOutcome, ExecutionLog, Executor,
    HistoryMessage, Sender, Sent, SessionStore, WorkItem,
};
use switchboard_models::{RetryPolicy, Retrying};

/// The Conversations Service as the engine needs it: replies kept per idempotency key.
#[derive(Debug, Default)]
struct FakeConversations {
    sent: Mutex<Vec<(String, String, String)>>,
    by_key: Mutex<HashMap<String, String>>,
}

#[async_trait]
impl Conversations for FakeConversations {
    async fn send_reply(
        &self,
        _tenant: &TenantId,
        conversation_id: &str,
        text: &str,
        idempotency_key: &str,
    ) -> Result<Sent, ConversationError> {
        let mut by_key = self.by_key.lock().unwrap();
        if let Some(id) = by_key.get(idempotency_key) {
            return Ok(Sent { message_id: id.clone(), duplicate: true });
        }
        let id = format!("out-{}", by_key.len() + 1);
        by_key.insert(idempotency_key.to_owned(), id.clone());
        self.sent.lock().unwrap().push((conversation_id.to_owned(), text.to_owned(), idempotency_key.to_owned()));
        Ok(Sent { message_id: id, duplicate: false })
    }

    async fn send_human(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        text: &str,
        _operator: &str,
        idempotency_key: &str,
    ) -> Result<Sent, ConversationError> {
        self.send_reply(tenant, conversation_id, text, idempotency_key).await
    }

    /// What this fake has: the replies it took.
    async fn history(
        &self,
        _tenant: &TenantId,
        conversation_id: &str,
        limit: usize,
    ) -> Result<Vec<HistoryMessage>, ConversationError> {
        let sent = self.sent.lock().unwrap();
        let mine: Vec<HistoryMessage> = sent
            .iter()
            .enumerate()
            .filter(|(_, (c, _, _))| c == conversation_id)
            .map(|(i, (_, text, _))| HistoryMessage {
                message_id: format!("out-{}", i + 1),
                sender: Sender::Agent,
                text: text.clone(),
                sent_at: chrono::Utc::now(),
            })
            .collect();
        Ok(mine[mine.len().saturating_sub(limit)..].to_vec())
    }
}

#[tokio::test]
async fn one_message_is_answered_once_and_recorded_in_dynamodb() {
    // given the AWS adapters on the emulator, with every client counting its requests
    let clock = ManualClock::new();
    let sdk = AwsSettings::emulator(common::moto().endpoint.clone()).load().await;
    let names = common::provision(&sdk).await;
    let counter = RequestCounter::default();
    let dynamodb = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk).interceptor(counter.clone()).build(),
    );
    let sqs =
        aws_sdk_sqs::Client::from_conf(aws_sdk_sqs::config::Builder::from(&sdk).interceptor(counter.clone()).build());
    let store = Arc::new(DynamoStore::new(dynamodb, names.clone(), clock.clone()));
    // and a model that replies with send_message, then closes
    let fake = FakeBedrock::start(vec![
        Reply::tool_use("tu-1", "send_message", json!({"text": "Your order ships tomorrow."})),
        Reply::text("Done."),
    ])
    .await;
    let model =
        Retrying::new(Arc::new(BedrockModel::new(fake.client(Some(counter.clone())).await)), RetryPolicy::default());
    let conversations = Arc::new(FakeConversations::default());
    let tenant: TenantId = "t-1".parse().unwrap();
    store.create_tenant(&tenant, "Acme").await.unwrap();
    let agent: Agent = serde_json::from_value(json!({
        "tenantId": "t-1", "agentId": AgentId::generate(), "name": "Support", "systemPrompt": "Be brief.",
        "model": "anthropic.claude-3-haiku-20240307-v1:0", "tools": ["send_message"],
        "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
    }))
    .unwrap();
    let service = ConfigService::new(store.clone(), store.clone());
    service.upsert_all(&[ConfigRecord::Agent(agent.clone())]).await.unwrap();
    let executor = Executor::new(Deps {
        config: store.clone(),
        sessions: store.clone(),
        executions: store.clone(),
        queue: Arc::new(SqsWorkQueue::new(sqs, names.work_queue_url.clone())),
        bus: Arc::new(StreamRelay),
        conversations: conversations.clone(),
        model: Arc::new(model),
        webhooks: Arc::new(switchboard_engine::NoWebhooks),
        clock: clock.clone(),
        prices: Arc::new(switchboard_domain::PriceTable::builtin()),
        metrics: Arc::new(switchboard_engine::NoMetrics),
        counters: store.clone(),
    });
    let item = WorkItem {
        tenant_id: tenant.clone(),
        source_id: "message-c-1:m-1".into(),
        event_id: Some("evt-1".into()),
        conversation_id: "c-1".into(),
        message_id: "m-1".into(),
        text: "Where is my order?".into(),
        trigger_id: None,
        trigger_version: None,
        variant: None,
        agent_id: agent.agent_id,
        continuation: false,
        detail: json!({"message": {"text": "Where is my order?"}}),
        refused: None,
        day_tokens: None,
        follow: false,
        resume: None,
        arrived_at: None,
        earlier: vec![],
        recording: Default::default(),
        close_idle_after: None,
        closes_idle: None,
    };
    counter.take();

    // when the executor runs the item
    let outcome = executor.execute(&item).await.unwrap();

    // then one reply went out, under the first tool call's key
    let requests = counter.take();
    let ExecOutcome::Recorded(record) = outcome else { panic!("expected a new record, got {outcome:?}") };
    assert_eq!(record.status, ExecutionStatus::Success);
    let sent = conversations.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!((sent[0].0.as_str(), sent[0].1.as_str()), ("c-1", "Your order ships tomorrow."));
    assert!(matches!(&record.actions[..], [Action::Reply { text, .. }] if text == "Your order ships tomorrow."));
    // and the model saw the customer's message and, second time round, the tool's result
    let calls = fake.requests();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].1["messages"][0]["content"][0]["text"], json!("Where is my order?"));
    assert_eq!(calls[1].1["messages"][2]["content"][0]["toolResult"]["toolUseId"], json!("tu-1"));
    // and the session and the execution are in DynamoDB
    let session = store.latest_session(&tenant, "c-1").await.unwrap().unwrap();
    assert_eq!(session.status, SessionStatus::Active);
    assert_eq!(session.turn_count, 1);
    assert!(
        session.transcript.iter().any(|m| m
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolUse { name, .. } if name == "send_message")))
    );
    let stored = store.execution_for_source(&tenant, "message-c-1:m-1").await.unwrap().unwrap();
    assert_eq!(stored, *record);
    assert_eq!(stored.session_id, session.session_id);
    assert_eq!(stored.token_usage.total(), 29 + 18);

    // the AWS requests of this one message (executor only; the router is not involved here)
    let mut by_operation: Vec<(String, usize)> = Vec::new();
    for op in &requests {
        match by_operation.iter_mut().find(|(o, _)| o == op) {
            Some((_, n)) => *n += 1,
            None => by_operation.push((op.clone(), 1)),
        }
    }
    println!("AWS requests for one message (executor): {} {by_operation:?}", requests.len());
    assert!((3..=20).contains(&requests.len()), "{requests:?}");

    // when the same item is delivered again
    let again = executor.execute(&item).await.unwrap();
    // then nothing runs twice
    assert!(matches!(again, ExecOutcome::AlreadyRecorded(r) if r.execution_id == record.execution_id));
    assert_eq!(conversations.sent.lock().unwrap().len(), 1);
    assert_eq!(fake.requests().len(), 2);
    // nor when the message comes again under a new event id after SQS's five-minute
    // deduplication window (the queue takes it; its source is the message's, already recorded)
    let resent = WorkItem { event_id: Some("evt-2".into()), ..item };
    let late = executor.execute(&resent).await.unwrap();
    assert!(matches!(late, ExecOutcome::AlreadyRecorded(r) if r.execution_id == record.execution_id));
    assert_eq!(conversations.sent.lock().unwrap().len(), 1);
    assert_eq!(fake.requests().len(), 2);
}
