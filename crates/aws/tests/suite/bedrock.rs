//! `BedrockModel` through the real `aws-sdk-bedrockruntime` client against a fake Converse
//! server: the request shape, the mapping of the answer, retries of throttling and 5xx (by the
//! shared `switchboard_models::Retrying`), and which failures end as `Throttled` and `Rejected`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use switchboard_testkit::aws as common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{FakeBedrock, Reply};
use serde_json::json;
use std::sync::Arc;
use switchboard_testkit::Pieces;

use switchboard_aws::BedrockModel;
use switchboard_domain::message::{ContentBlock, Message, Role};
use switchboard_domain::{ModelConfig, TokenUsage};
use switchboard_engine::{Model, ModelError, ModelRequest, StopReason, ToolSpec};
use switchboard_models::{RetryPolicy, Retrying};

const MODEL_ID: &str = "anthropic.claude-3-haiku-20240307-v1:0";

/// Millisecond backoff, so that retry tests take no noticeable time.
fn fast(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        base: Duration::from_millis(1),
        cap: Duration::from_millis(4),
        ..RetryPolicy::default()
    }
}

fn simple_request() -> ModelRequest {
    ModelRequest {
        model: MODEL_ID.into(),
        system: String::new(),
        messages: vec![Message::user_text("hi")],
        tools: vec![],
        config: ModelConfig::default(),
        deadline: None,
        recording: switchboard_domain::Recording::Full,
    }
}

/// The adapter as every profile uses it: one attempt each, retried by the shared policy.
async fn model(fake: &FakeBedrock, retry: RetryPolicy) -> Retrying {
    Retrying::new(Arc::new(BedrockModel::new(fake.client(None).await)), retry)
}

#[tokio::test]
async fn it_sends_the_converse_shape_and_maps_a_tool_use_answer() {
    // given a fake Converse server that asks for a tool
    let fake = FakeBedrock::start(vec![Reply::tool_use(
        "tu-9",
        "lookup_order",
        json!({"orderId": "A-1", "qty": 2, "w": 0.5}),
    )])
    .await;
    let schema = json!({
        "type": "object",
        "properties": {"orderId": {"type": "string", "maxLength": 64}, "qty": {"type": "integer", "minimum": -5},
                       "w": {"type": "number", "multipleOf": 0.25}},
        "required": ["orderId"], "additionalProperties": false
    });
    let request = ModelRequest {
        model: MODEL_ID.into(),
        system: "You are the support agent.".into(),
        messages: vec![
            Message::user_text("where is my order?"),
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    tool_use_id: "tu-1".into(),
                    name: "get_context".into(),
                    input: json!({"key": "order", "n": -3, "big": 18_446_744_073_709_551_615u64, "f": 1.5}),
                }],
            },
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::ToolResult {
                        tool_use_id: "tu-1".into(),
                        content: json!({"value": null, "found": false}),
                        is_error: false,
                    },
                    ContentBlock::Text { text: "any news?".into() },
                ],
            },
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    tool_use_id: "tu-2".into(),
                    name: "lookup_order".into(),
                    input: json!({}),
                }],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "tu-2".into(),
                    content: json!("order service down"),
                    is_error: true,
                }],
            },
        ],
        tools: vec![ToolSpec {
            name: "lookup_order".into(),
            description: "Finds an order.".into(),
            input_schema: schema.clone(),
        }],
        config: ModelConfig {
            temperature: 0.25,
            max_tokens: 512,
            top_p: Some(0.5),
            stop_sequences: vec!["STOP".into()],
            ..ModelConfig::default()
        },
        deadline: None,
        recording: switchboard_domain::Recording::Full,
    };
    // when the model is called
    let response = model(&fake, fast(1)).await.converse(&request).await.unwrap();
    // then the answer is mapped block by block
    assert_eq!(
        response.content,
        vec![
            ContentBlock::Text { text: "Let me reply.".into() },
            ContentBlock::ToolUse {
                tool_use_id: "tu-9".into(),
                name: "lookup_order".into(),
                input: json!({"orderId": "A-1", "qty": 2, "w": 0.5}),
            },
        ]
    );
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(response.usage, TokenUsage::new(20, 9));
    assert_eq!(response.model, MODEL_ID);
    // and the request had the Converse shape
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let (model_id, body) = &requests[0];
    assert_eq!(model_id, MODEL_ID);
    assert_eq!(body["system"], json!([{"text": "You are the support agent."}]));
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"text": "where is my order?"}]},
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "tu-1", "name": "get_context",
                "input": {"key": "order", "n": -3, "big": 18_446_744_073_709_551_615u64, "f": 1.5}}}]},
            {"role": "user", "content": [
                {"toolResult": {"toolUseId": "tu-1", "content": [{"json": {"value": null, "found": false}}],
                                "status": "success"}},
                {"text": "any news?"}
            ]},
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "tu-2", "name": "lookup_order", "input": {}}}]},
            {"role": "user", "content": [{"toolResult": {"toolUseId": "tu-2",
                "content": [{"text": "order service down"}], "status": "error"}}]}
        ])
    );
    assert_eq!(
        body["toolConfig"],
        json!({"tools": [{"toolSpec": {"name": "lookup_order", "description": "Finds an order.",
                                        "inputSchema": {"json": schema}}}]})
    );
    assert_eq!(
        body["inferenceConfig"],
        json!({"maxTokens": 512, "temperature": 0.25, "topP": 0.5, "stopSequences": ["STOP"]})
    );
}

#[tokio::test]
async fn it_leaves_out_an_empty_system_prompt_and_tool_list() {
    let fake = FakeBedrock::start(vec![Reply::text("Hello!")]).await;
    let response = model(&fake, fast(1)).await.converse(&simple_request()).await.unwrap();
    assert_eq!(response.content, vec![ContentBlock::Text { text: "Hello!".into() }]);
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    let (_, body) = &fake.requests()[0];
    assert!(body.get("system").is_none(), "{body}");
    assert!(body.get("toolConfig").is_none(), "{body}");
    assert_eq!(body["inferenceConfig"]["maxTokens"], json!(1024));
}

#[tokio::test]
async fn throttling_and_5xx_are_retried_until_an_answer_comes() {
    // given a server that throttles, then is unavailable, then answers
    let fake = FakeBedrock::start(vec![
        Reply::Error(429, "ThrottlingException", "Too many requests, please wait before trying again."),
        Reply::Error(503, "ServiceUnavailableException", "Service unavailable"),
        Reply::text("Finally."),
    ])
    .await;
    // when the model is called with room for four attempts
    let response = model(&fake, fast(4)).await.converse(&simple_request()).await.unwrap();
    // then the third attempt's answer is returned
    assert_eq!(response.content, vec![ContentBlock::Text { text: "Finally.".into() }]);
    assert_eq!(fake.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_throttle_that_persists_ends_as_throttled_after_every_attempt() {
    let throttle = Reply::Error(429, "ThrottlingException", "Too many requests");
    let fake = FakeBedrock::start(vec![throttle.clone(), throttle.clone(), throttle.clone(), throttle]).await;
    let err = model(&fake, fast(3)).await.converse(&simple_request()).await.unwrap_err();
    assert!(matches!(&err, ModelError::Throttled { message: m, .. } if m.contains("ThrottlingException")), "{err:?}");
    assert!(err.retryable());
    assert_eq!(fake.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_validation_error_is_rejected_at_once() {
    let fake = FakeBedrock::start(vec![
        Reply::Error(400, "ValidationException", "The provided model identifier is invalid."),
        Reply::text("never reached"),
    ])
    .await;
    let err = model(&fake, fast(4)).await.converse(&simple_request()).await.unwrap_err();
    // the code and message are kept, not a bare "service error"
    assert!(
        matches!(&err, ModelError::Rejected(m) if m.contains("ValidationException") && m.contains("model identifier")),
        "{err:?}"
    );
    assert!(!err.retryable());
    assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_unknown_5xx_is_unavailable_and_retried() {
    let fake = FakeBedrock::start(vec![]).await; // every call: 500 "script exhausted"
    let err = model(&fake, fast(2)).await.converse(&simple_request()).await.unwrap_err();
    assert!(matches!(err, ModelError::Unavailable(_)), "{err:?}");
    assert_eq!(fake.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn prompt_cache_tokens_are_counted_apart_from_fresh_input() {
    let Reply::Ok(mut answer) = Reply::text("cached") else { panic!() };
    answer["usage"]["cacheReadInputTokens"] = json!(300);
    answer["usage"]["cacheWriteInputTokens"] = json!(40);
    let fake = FakeBedrock::start(vec![Reply::Ok(answer)]).await;
    let response = model(&fake, fast(1)).await.converse(&simple_request()).await.unwrap();
    let u = response.usage;
    assert_eq!((u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens), (11, 7, 300, 40));
}

#[tokio::test]
async fn prompt_caching_adds_cache_points_and_a_guardrail_goes_with_every_call() {
    let fake = FakeBedrock::start(vec![Reply::text("ok")]).await;
    let mut request = simple_request();
    request.system = "You help.".into();
    request.tools = vec![ToolSpec {
        name: "lookup_order".into(),
        description: "Finds an order.".into(),
        input_schema: json!({"type": "object"}),
    }];
    request.config.prompt_caching = true;
    request.config.guardrail =
        Some(switchboard_domain::GuardrailConfig { id: "gr1abc".into(), version: "3".into(), trace: true });
    model(&fake, fast(1)).await.converse(&request).await.unwrap();
    let (_, body) = &fake.requests()[0];
    // the checkpoint follows the system prompt and the tool definitions
    assert_eq!(body["system"], json!([{"text": "You help."}, {"cachePoint": {"type": "default"}}]), "{body}");
    let tools = body["toolConfig"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[1], json!({"cachePoint": {"type": "default"}}));
    assert_eq!(
        body["guardrailConfig"],
        json!({"guardrailIdentifier": "gr1abc", "guardrailVersion": "3", "trace": "enabled"}),
        "{body}"
    );
    // and without either, neither is sent
    let plain = FakeBedrock::start(vec![Reply::text("ok")]).await;
    request.config.prompt_caching = false;
    request.config.guardrail = None;
    model(&plain, fast(1)).await.converse(&request).await.unwrap();
    let (_, body) = &plain.requests()[0];
    assert_eq!(body["system"], json!([{"text": "You help."}]));
    assert!(body.get("guardrailConfig").is_none(), "{body}");
}

#[tokio::test]
async fn reasoning_is_dropped_and_the_text_of_a_cited_answer_kept() {
    let Reply::Ok(mut answer) = Reply::text("unused") else { panic!() };
    answer["output"]["message"]["content"] = json!([
        {"reasoningContent": {"reasoningText": {"text": "The customer wants order status.", "signature": "sig"}}},
        {"citationsContent": {
            "content": [{"text": "Orders ship in 2 days."}],
            "citations": [{"title": "policy", "location": {"documentChar": {"documentIndex": 0, "start": 0, "end": 10}},
                           "sourceContent": [{"text": "ship in 2 days"}]}]
        }},
        {"text": "Anything else?"}
    ]);
    let fake = FakeBedrock::start(vec![Reply::Ok(answer)]).await;
    let response = model(&fake, fast(1)).await.converse(&simple_request()).await.unwrap();
    assert_eq!(
        response.content,
        vec![
            ContentBlock::Text { text: "Orders ship in 2 days.".into() },
            ContentBlock::Text { text: "Anything else?".into() },
        ]
    );
}

// ---- ConverseStream ----------------------------------------------------------------------------

#[tokio::test]
async fn converse_stream_answers_what_converse_does_with_the_text_in_pieces() {
    let text = "Your order ships today.";
    let tool = Reply::tool_use("tu-1", "lookup_order", json!({"orderId": "Ä-1", "items": [1, 2]}));
    let fake = FakeBedrock::start(vec![Reply::text(text), Reply::text(text), tool.clone(), tool]).await;
    let m = model(&fake, fast(1)).await;
    for _ in 0..2 {
        let plain = m.converse(&simple_request()).await.unwrap();
        let sink = Pieces::default();
        let streamed = m.converse_streaming(&simple_request(), &sink).await.unwrap();
        assert_eq!(streamed, plain);
        let pieces = sink.taken();
        let joined: String = pieces.iter().flatten().map(String::as_str).collect();
        let expected: String = plain
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(joined, expected);
        assert!(pieces.len() >= 2, "a word at a time: {pieces:?}");
    }
    assert_eq!(fake.calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn converse_stream_is_retried_like_converse_and_its_sink_starts_over() {
    let fake = FakeBedrock::start(vec![
        Reply::Error(429, "ThrottlingException", "Too many requests, please wait before trying again."),
        Reply::text("Hello there"),
    ])
    .await;
    let sink = Pieces::default();
    let r = model(&fake, fast(2)).await.converse_streaming(&simple_request(), &sink).await.unwrap();
    assert_eq!(r.content, vec![ContentBlock::Text { text: "Hello there".into() }]);
    assert_eq!(sink.taken(), vec![None, Some("Hello".into()), Some(" there".into())]);
    let fake = FakeBedrock::start(vec![Reply::Error(400, "ValidationException", "The model id is invalid.")]).await;
    let err = model(&fake, fast(3)).await.converse_streaming(&simple_request(), &Pieces::default()).await.unwrap_err();
    assert!(matches!(&err, ModelError::Rejected(m) if m.contains("invalid")), "{err:?}");
    assert_eq!(fake.calls.load(Ordering::SeqCst), 1, "a bad request is not retried");
}

#[tokio::test]
async fn a_converse_stream_cut_short_or_broken_off_is_unavailable() {
    // the answer's frames without its stop and metadata events
    let whole = common::converse_stream_frames(&switchboard_testkit::providers::converse::text_body("Hello there"));
    let stop = whole.windows(11).position(|w| w == b"messageStop").unwrap();
    // back to the start of the frame holding `messageStop`: its prelude's total length
    let mut at = 0;
    while at + 4 <= whole.len() {
        let len = u32::from_be_bytes(whole[at..at + 4].try_into().unwrap()) as usize;
        if at + len > stop {
            break;
        }
        at += len;
    }
    let cut = whole[..at].to_vec();
    // an error event (`modelStreamErrorException`) after the first text
    let error = {
        use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
        let message = Message::new(br#"{"message":"The model stopped"}"#.to_vec())
            .add_header(Header::new(":exception-type", HeaderValue::String("modelStreamErrorException".into())))
            .add_header(Header::new(":content-type", HeaderValue::String("application/json".into())))
            .add_header(Header::new(":message-type", HeaderValue::String("exception".into())));
        let mut frames = cut[..at.min(cut.len())].to_vec();
        aws_smithy_eventstream::frame::write_message_to(&message, &mut frames).unwrap();
        frames
    };
    for (frames, says) in [(cut, "ended before the answer did"), (error, "stopped")] {
        let fake = FakeBedrock::start(vec![Reply::Frames(frames)]).await;
        let err =
            model(&fake, fast(1)).await.converse_streaming(&simple_request(), &Pieces::default()).await.unwrap_err();
        assert!(matches!(&err, ModelError::Unavailable(m) if m.contains(says)), "{err:?}");
        assert!(err.retryable());
    }
}
