//! The spans of one message, collected in memory through the same layer that exports over OTLP:
//! an `invoke_agent` span with the turn's `chat` spans and its `execute_tool` span beneath it,
//! named and attributed as OpenTelemetry's GenAI conventions say. The only test of its binary: a
//! scoped subscriber misses callsites that a test without one registered first.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::Arc;

use opentelemetry::trace::{SpanId, Status};
use opentelemetry::{Key, Value as OtelValue};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use serde_json::json;
use switchboard_embedded::{Bundle, Embedded, EmbeddedOptions, ScriptedModel};
use switchboard_engine::{ExecOutcome, WorkItem};
use switchboard_telemetry::Traces;
use switchboard_testkit::ManualClock;
use tracing_subscriber::layer::SubscriberExt;

const AGENT: &str = "01JD0000SVPP0RT0AGENT00001";

/// Routes and runs one message on a fresh embedded profile whose scripted model stores a fact
/// with `set_context`, then answers.
async fn one_message() -> switchboard_domain::ExecutionRecord {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    let script = json!({ "rules": [
        { "when": { "afterTool": "set_context" }, "then": { "text": "Noted." } },
        { "when": {}, "then": { "toolCalls": [ { "name": "set_context", "input": { "key": "k", "value": "v" } } ] } }
    ] });
    let model = Arc::new(ScriptedModel::from_json(&script.to_string()).unwrap());
    let embedded = Embedded::open(dir.path(), model, clock.clone(), EmbeddedOptions::default()).unwrap();
    let bundle = json!({
        "tenantId": "t-1", "name": "Traced",
        "agents": [{ "agentId": AGENT, "name": "Front", "systemPrompt": "You help.", "model": "test-model",
                     "tools": ["send_message", "set_context"] }],
        "triggers": [{ "triggerId": "01JD0000TR1GGER0CHAT000001", "name": "all", "agentId": AGENT,
                       "eventType": "message.new", "priority": 10, "conditions": {} }]
    });
    Bundle::parse(&bundle.to_string(), clock.as_ref()).unwrap().install(&embedded.store).await.unwrap();
    let event = switchboard_domain::InboundEvent::parse(&json!({
        "id": "evt-1", "source": "conversations-service", "detail-type": "message.new",
        "detail": { "tenantId": "t-1", "conversationId": "c-1", "messageId": "m-1",
                    "channel": {"platform": "webchat"}, "conversation": {"status": "open"},
                    "message": {"direction": "inbound", "text": "remember this"} }
    }))
    .unwrap();
    embedded.ingest(&event).await.unwrap();
    let delivery = embedded.queue.receive().await.unwrap().unwrap();
    let item: WorkItem = serde_json::from_str(&delivery.body).unwrap();
    let ExecOutcome::Recorded(record) = embedded.executor.execute(&item).await.unwrap() else {
        panic!("the message was not recorded");
    };
    *record
}

fn attr(span: &SpanData, key: &str) -> Option<OtelValue> {
    span.attributes.iter().find(|kv| kv.key == Key::new(key.to_owned())).map(|kv| kv.value.clone())
}

fn text(span: &SpanData, key: &str) -> String {
    attr(span, key).map(|v| v.as_str().into_owned()).unwrap_or_default()
}

fn int(span: &SpanData, key: &str) -> i64 {
    match attr(span, key) {
        Some(OtelValue::I64(n)) => n,
        other => panic!("{key}: {other:?} on {}", span.name),
    }
}

#[test]
fn one_message_is_an_invoke_agent_span_over_its_chat_and_execute_tool_spans() {
    let exporter = InMemorySpanExporter::default();
    let traces = Traces::simple(exporter.clone(), "switchboard-test".into());
    let subscriber = tracing_subscriber::registry().with(traces.layer());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // Everything of the turn runs on this thread, where the subscriber is the default.
    let record = tracing::subscriber::with_default(subscriber, || runtime.block_on(one_message()));
    traces.flush();
    let spans = exporter.get_finished_spans().unwrap();
    let named = |prefix: &str| spans.iter().filter(|s| s.name.starts_with(prefix)).collect::<Vec<_>>();

    // one invoke_agent span for the execution
    let invoke = named("invoke_agent");
    assert_eq!(invoke.len(), 1, "{:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    let invoke = invoke[0];
    assert_eq!(invoke.name, format!("invoke_agent {AGENT}"));
    assert_eq!(text(invoke, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(text(invoke, "gen_ai.agent.id"), AGENT);
    assert_eq!(text(invoke, "gen_ai.conversation.id"), "c-1");
    assert_eq!(text(invoke, "execution_id"), record.execution_id.to_string());
    let root = invoke.span_context.span_id();

    // its two model calls, each with the model, the provider and the usage the record shows
    let chats = named("chat");
    assert_eq!(chats.len(), 2);
    for (chat, call) in chats.iter().zip(&record.model_calls) {
        assert_eq!(chat.parent_span_id, root, "a chat span is a child of invoke_agent");
        assert_eq!(chat.name, "chat test-model");
        assert_eq!(chat.span_kind, opentelemetry::trace::SpanKind::Client);
        assert_eq!(text(chat, "gen_ai.operation.name"), "chat");
        assert_eq!(text(chat, "gen_ai.request.model"), "test-model");
        assert_eq!(text(chat, "gen_ai.provider.name"), "aws.bedrock", "a bare model id is Bedrock's");
        assert_eq!(int(chat, "gen_ai.usage.input_tokens"), i64::try_from(call.usage.input_tokens).unwrap());
        assert_eq!(int(chat, "gen_ai.usage.output_tokens"), i64::try_from(call.usage.output_tokens).unwrap());
        assert_eq!(text(chat, "gen_ai.response.finish_reasons"), call.stop_reason);
    }

    // its tool call, between the two model calls
    let tools = named("execute_tool");
    assert_eq!(tools.len(), 1);
    let tool = tools[0];
    assert_eq!(tool.parent_span_id, root);
    assert_eq!(tool.name, "execute_tool set_context");
    assert_eq!(text(tool, "gen_ai.tool.name"), "set_context");
    assert_eq!(text(tool, "gen_ai.tool.call.id"), record.tool_calls[0].tool_use_id);
    assert_eq!(text(tool, "gen_ai.tool.type"), "extension");
    assert!(chats[0].end_time <= tool.start_time && tool.end_time <= chats[1].start_time, "in the order they ran");
    assert!(spans.iter().all(|s| s.status != Status::error("")), "nothing failed");
    // every span of the turn is in the one trace
    let trace = invoke.span_context.trace_id();
    let in_trace: HashMap<SpanId, &str> = spans
        .iter()
        .filter(|s| s.span_context.trace_id() == trace)
        .map(|s| (s.span_context.span_id(), &*s.name))
        .collect();
    assert!(in_trace.len() >= 4, "{in_trace:?}");
}
