//! One contract for every HTTP provider, run against each adapter through the registry as a
//! profile uses it (`Models` → `Retrying` → adapter) and a local fake of its wire protocol: plain
//! reply, tool loop, parallel tool calls, refusal, 429 then success, 5xx until the attempts run
//! out, bad request and bad key refused at once, timeout. Then each wire's own request shape.
//! Bedrock's adapter has the same cases against its fake Converse server in
//! `crates/aws/tests/suite/bedrock.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use switchboard_domain::message::{ContentBlock, Message, Role};
use switchboard_domain::{ModelConfig, TokenUsage};
use switchboard_engine::{Model, ModelError, ModelRequest, StopReason, ToolSpec};
use switchboard_models::{BreakerPolicy, ModelSettings, Models, RetryPolicy};
use switchboard_testkit::providers::{Answer, FakeProvider, Wire, chat, messages};
use switchboard_testkit::{ManualClock, Pieces};

const KEY: &str = "sk-test-0123456789abcdef";

/// One wire protocol: its fake's answers and how a profile reaches it.
struct Kit {
    wire: Wire,
    prefix: &'static str,
    model: &'static str,
    /// The model id the fake reports as having answered.
    answered_by: &'static str,
    text: fn(&str) -> Answer,
    tools: fn(&[(&str, &str, Value)]) -> Answer,
    refusal: fn() -> Answer,
    throttled: fn(Option<&'static str>) -> Answer,
    unavailable: fn() -> Answer,
    bad_request: fn() -> Answer,
    bad_key: fn() -> Answer,
}

fn kits() -> [Kit; 2] {
    [
        Kit {
            wire: Wire::ChatCompletions,
            prefix: "openai",
            model: "gpt-4o-mini",
            answered_by: "gpt-4o-mini-2024-07-18",
            text: chat::text,
            tools: |uses| {
                let args: Vec<String> = uses.iter().map(|(_, _, input)| input.to_string()).collect();
                let calls: Vec<(&str, &str, &str)> =
                    uses.iter().zip(&args).map(|((id, name, _), a)| (*id, *name, a.as_str())).collect();
                chat::tool_calls(&calls)
            },
            refusal: || chat::refusal("I can't help with that."),
            throttled: |after| {
                chat::error(429, "requests", "rate_limit_exceeded", "Rate limit reached for gpt-4o-mini", after)
            },
            unavailable: || chat::error(503, "server_error", "server_error", "The server is overloaded", None),
            bad_request: || {
                chat::error(400, "invalid_request_error", "invalid_value", "Invalid 'messages[1].role'", None)
            },
            bad_key: || {
                chat::error(401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided", None)
            },
        },
        Kit {
            wire: Wire::Messages,
            prefix: "anthropic",
            model: "claude-3-5-haiku-latest",
            answered_by: "claude-3-5-haiku-20241022",
            text: messages::text,
            tools: messages::tool_uses,
            refusal: messages::refusal,
            throttled: |after| messages::error(429, "rate_limit_error", "Number of request tokens has exceeded", after),
            unavailable: || messages::error(529, "overloaded_error", "Overloaded", None),
            bad_request: || messages::error(400, "invalid_request_error", "messages: roles must alternate", None),
            bad_key: || messages::error(401, "authentication_error", "invalid x-api-key", None),
        },
    ]
}

impl Kit {
    /// The registry pointed at `fake` through the provider's environment variables.
    fn models(&self, fake: &FakeProvider, attempts: u32, timeout: Option<Duration>) -> Models {
        let vars: HashMap<&str, String> = match self.wire {
            Wire::ChatCompletions => [("OPENAI_API_KEY", KEY.to_owned()), ("OPENAI_BASE_URL", fake.base_url.clone())],
            Wire::Messages => [("ANTHROPIC_API_KEY", KEY.to_owned()), ("ANTHROPIC_BASE_URL", fake.base_url.clone())],
            Wire::Converse => unreachable!("Bedrock's contract runs in crates/aws/tests/suite/bedrock.rs"),
        }
        .into_iter()
        .collect();
        let mut settings = ModelSettings::from_env(&|name| vars.get(name).cloned()).unwrap();
        settings.retry = RetryPolicy {
            max_attempts: attempts,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(4),
            ..RetryPolicy::default()
        };
        for endpoint in [&mut settings.openai, &mut settings.anthropic].into_iter().flatten() {
            if let Some(t) = timeout {
                endpoint.timeout = t;
            }
        }
        settings.breaker = BreakerPolicy { failures: 2, cooldown: Duration::from_secs(30) };
        Models::from_settings(&settings).unwrap()
    }

    fn reference(&self) -> String {
        format!("{}:{}", self.prefix, self.model)
    }

    fn request(&self, messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            model: self.reference(),
            system: "You are the support agent.".into(),
            messages,
            tools: vec![ToolSpec {
                name: "lookup_order".into(),
                description: "Finds an order.".into(),
                input_schema: json!({"type": "object", "properties": {"orderId": {"type": "string"}}}),
            }],
            config: ModelConfig { temperature: 0.2, max_tokens: 300, ..ModelConfig::default() },
            deadline: None,
            recording: switchboard_domain::Recording::Full,
        }
    }
}

async fn start(kit: &Kit, script: Vec<Answer>) -> FakeProvider {
    FakeProvider::start(kit.wire, script).await
}

#[tokio::test]
async fn a_plain_reply_comes_back_as_text_with_usage_and_the_model_that_answered() {
    for kit in kits() {
        let fake = start(&kit, vec![(kit.text)("Your order ships today.")]).await;
        let r = kit.models(&fake, 1, None).converse(&kit.request(vec![Message::user_text("hi")])).await.unwrap();
        assert_eq!(r.content, vec![ContentBlock::Text { text: "Your order ships today.".into() }], "{}", kit.prefix);
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        assert!(r.usage.input_tokens > 0 && r.usage.output_tokens > 0, "{:?}", r.usage);
        assert_eq!(r.model, format!("{}:{}", kit.prefix, kit.answered_by));
        let sent = fake.received();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].body["model"], kit.model, "the provider prefix is not sent");
    }
}

#[tokio::test]
async fn a_tool_loop_sends_the_call_and_its_result_back_and_reads_parallel_calls() {
    for kit in kits() {
        let fake = start(
            &kit,
            vec![(kit.tools)(&[
                ("call_1", "lookup_order", json!({"orderId": "A-1"})),
                ("call_2", "lookup_order", json!({"orderId": "B-2"})),
            ])],
        )
        .await;
        let transcript = vec![
            Message::user_text("where are A-0 and my refund?"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Text { text: "Checking.".into() },
                    ContentBlock::ToolUse {
                        tool_use_id: "call_0".into(),
                        name: "lookup_order".into(),
                        input: json!({"orderId": "A-0"}),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "call_0".into(),
                    content: json!({"status": "shipped"}),
                    is_error: false,
                }],
            },
        ];
        let r = kit.models(&fake, 1, None).converse(&kit.request(transcript)).await.unwrap();
        let uses: Vec<(&str, &Value)> = r
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { tool_use_id, input, .. } => Some((tool_use_id.as_str(), input)),
                _ => None,
            })
            .collect();
        assert_eq!(
            uses,
            [("call_1", &json!({"orderId": "A-1"})), ("call_2", &json!({"orderId": "B-2"}))],
            "{}",
            kit.prefix
        );
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        // the earlier call and its result went out in the wire's own shape
        let body = &fake.received()[0].body;
        let text = body.to_string();
        assert!(text.contains("call_0") && text.contains("shipped"), "{}: {body}", kit.prefix);
    }
}

#[tokio::test]
async fn a_refusal_is_content_filtered() {
    for kit in kits() {
        let fake = start(&kit, vec![(kit.refusal)()]).await;
        let r = kit.models(&fake, 1, None).converse(&kit.request(vec![Message::user_text("…")])).await.unwrap();
        assert_eq!(r.stop_reason, StopReason::ContentFiltered, "{}", kit.prefix);
    }
}

#[tokio::test]
async fn throttling_is_retried_and_the_next_answer_returned() {
    for kit in kits() {
        let fake = start(&kit, vec![(kit.throttled)(Some("0")), (kit.text)("Sorry for the wait.")]).await;
        let r = kit.models(&fake, 3, None).converse(&kit.request(vec![Message::user_text("hi")])).await.unwrap();
        assert_eq!(r.content, vec![ContentBlock::Text { text: "Sorry for the wait.".into() }], "{}", kit.prefix);
        assert_eq!(fake.received().len(), 2);
    }
}

#[tokio::test]
async fn a_retry_after_longer_than_the_policy_allows_ends_the_call_at_once() {
    for kit in kits() {
        let fake = start(&kit, vec![(kit.throttled)(Some("3600")), (kit.text)("never sent")]).await;
        let err = kit.models(&fake, 3, None).converse(&kit.request(vec![Message::user_text("hi")])).await.unwrap_err();
        match &err {
            ModelError::Throttled { message, retry_after } => {
                assert_eq!(*retry_after, Some(Duration::from_secs(3600)), "{}", kit.prefix);
                assert!(message.contains("429") && message.contains("rate_limit"), "{message}");
            }
            other => panic!("{}: {other:?}", kit.prefix),
        }
        assert_eq!(fake.received().len(), 1);
    }
}

#[tokio::test]
async fn server_errors_are_retried_until_the_attempts_run_out() {
    for kit in kits() {
        let fake = start(&kit, vec![(kit.unavailable)(), (kit.unavailable)(), (kit.unavailable)()]).await;
        let err = kit.models(&fake, 3, None).converse(&kit.request(vec![Message::user_text("hi")])).await.unwrap_err();
        assert!(matches!(&err, ModelError::Unavailable(m) if m.contains("overloaded")), "{}: {err:?}", kit.prefix);
        assert!(err.retryable());
        assert_eq!(fake.received().len(), 3);
    }
}

#[tokio::test]
async fn a_bad_request_or_a_bad_key_is_refused_at_once_and_the_key_never_shows() {
    for kit in kits() {
        let fake = start(&kit, vec![(kit.bad_request)(), (kit.bad_key)()]).await;
        let models = kit.models(&fake, 4, None);
        let request = kit.request(vec![Message::user_text("hi")]);
        let rejected = models.converse(&request).await.unwrap_err();
        assert!(
            matches!(&rejected, ModelError::Rejected(m) if m.contains("400") && m.contains("invalid")),
            "{rejected:?}"
        );
        let unauthorized = models.converse(&request).await.unwrap_err();
        assert!(matches!(unauthorized, ModelError::Unauthorized(_)), "{}: {unauthorized:?}", kit.prefix);
        assert_eq!(fake.received().len(), 2, "neither was retried");
        for e in [&rejected, &unauthorized] {
            assert!(!e.to_string().contains(KEY) && !format!("{e:?}").contains(KEY), "{e}");
        }
        assert!(!format!("{models:?}").contains(KEY));
    }
}

#[tokio::test]
async fn a_call_that_outlasts_its_timeout_ends_as_a_timeout_after_every_attempt() {
    for kit in kits() {
        let fake = start(&kit, vec![Answer::Stall, Answer::Stall]).await;
        let models = kit.models(&fake, 2, Some(Duration::from_millis(200)));
        let err = models.converse(&kit.request(vec![Message::user_text("hi")])).await.unwrap_err();
        assert_eq!(err, ModelError::Timeout, "{}", kit.prefix);
        assert_eq!(fake.received().len(), 2);
    }
}

#[tokio::test]
async fn an_outage_opens_the_circuit_and_a_probe_after_the_cooldown_closes_it() {
    for kit in kits() {
        let fake = start(&kit, vec![(kit.unavailable)(), (kit.unavailable)(), (kit.text)("Back.")]).await;
        let clock = ManualClock::new();
        let models = kit.models(&fake, 1, None).with_clock(clock.clone());
        let request = kit.request(vec![Message::user_text("hi")]);
        // two failed calls in a row open the circuit
        for _ in 0..2 {
            assert!(matches!(models.converse(&request).await, Err(ModelError::Unavailable(_))));
        }
        let err = models.converse(&request).await.unwrap_err();
        assert!(matches!(&err, ModelError::Unavailable(m) if m.contains("circuit open")), "{}: {err:?}", kit.prefix);
        assert_eq!(fake.received().len(), 2, "an open circuit sends nothing");
        // after the cooldown one probe goes out; it is answered, so the circuit closes
        clock.advance(chrono::Duration::seconds(30));
        let r = models.converse(&request).await.unwrap();
        assert_eq!(r.content, vec![ContentBlock::Text { text: "Back.".into() }]);
        assert_eq!(fake.received().len(), 3);
    }
}

#[tokio::test]
async fn a_provider_without_settings_says_which_variable_to_set() {
    let models = Models::from_settings(&ModelSettings::from_env(&|_| None).unwrap()).unwrap();
    let request = kits()[0].request(vec![Message::user_text("hi")]);
    let err = models.converse(&request).await.unwrap_err();
    assert!(matches!(&err, ModelError::Unauthorized(m) if m.contains("OPENAI_API_KEY")), "{err:?}");
    assert!(models.check("anthropic:claude-3-5-haiku-latest").unwrap_err().contains("ANTHROPIC_API_KEY"));
    assert!(models.check("gemini:pro").unwrap_err().contains("unknown provider"));
    assert!(models.check("ollama:llama3.1").is_ok(), "ollama needs no key");
}

// ---- each wire's own request shape --------------------------------------------------------------

fn tool_loop_request(model: &str) -> ModelRequest {
    ModelRequest {
        model: model.into(),
        system: "Be brief.".into(),
        messages: vec![
            Message::user_text("status of A-1?"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Text { text: " ".into() },
                    ContentBlock::ToolUse {
                        tool_use_id: "t1".into(),
                        name: "lookup_order".into(),
                        input: json!({"orderId": "A-1"}),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::ToolResult {
                        tool_use_id: "t1".into(),
                        content: json!("order service down"),
                        is_error: true,
                    },
                    ContentBlock::Text { text: "and?".into() },
                ],
            },
        ],
        tools: vec![ToolSpec {
            name: "lookup_order".into(),
            description: "Finds an order.".into(),
            input_schema: json!({"type": "object"}),
        }],
        config: ModelConfig {
            temperature: 0.7,
            max_tokens: 256,
            top_p: Some(0.9),
            stop_sequences: vec!["END".into()],
            ..ModelConfig::default()
        },
        deadline: None,
        recording: switchboard_domain::Recording::Full,
    }
}

#[tokio::test]
async fn chat_completions_gets_system_first_tool_calls_as_json_text_and_results_as_tool_messages() {
    let kit = &kits()[0];
    let fake = start(kit, vec![chat::text("ok")]).await;
    kit.models(&fake, 1, None).converse(&tool_loop_request("openai:gpt-4o-mini")).await.unwrap();
    let sent = &fake.received()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(
        sent.body,
        json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "status of A-1?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "t1", "type": "function", "function": {"name": "lookup_order", "arguments": "{\"orderId\":\"A-1\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "t1", "content": "Error: order service down"},
                {"role": "user", "content": "and?"}
            ],
            "max_tokens": 256, "temperature": 0.7, "top_p": 0.9, "stop": ["END"],
            "tools": [{"type": "function", "function": {"name": "lookup_order", "description": "Finds an order.", "parameters": {"type": "object"}}}]
        })
    );
}

#[tokio::test]
async fn chat_completions_arguments_that_are_not_a_json_object_are_a_malformed_answer() {
    let kit = &kits()[0];
    let fake =
        start(kit, vec![chat::tool_calls(&[("c1", "lookup_order", "{\"orderId\": ")]), chat::length("Your ord")]).await;
    let models = kit.models(&fake, 1, None);
    let request = kit.request(vec![Message::user_text("hi")]);
    let err = models.converse(&request).await.unwrap_err();
    assert!(matches!(&err, ModelError::Unavailable(m) if m.contains("not JSON")), "{err:?}");
    let cut = models.converse(&request).await.unwrap();
    assert_eq!(cut.stop_reason, StopReason::MaxTokens);
    assert_eq!(cut.usage, TokenUsage::new(20, 16));
}

#[tokio::test]
async fn messages_gets_the_version_header_the_system_field_and_tool_results_with_their_error_flag() {
    let kit = &kits()[1];
    let fake = start(kit, vec![messages::text("ok")]).await;
    kit.models(&fake, 1, None).converse(&tool_loop_request("anthropic:claude-3-5-haiku-latest")).await.unwrap();
    let sent = &fake.received()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some(KEY));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        sent.body,
        json!({
            "model": "claude-3-5-haiku-latest",
            "system": "Be brief.",
            "max_tokens": 256, "temperature": 0.7, "top_p": 0.9, "stop_sequences": ["END"],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "status of A-1?"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "lookup_order", "input": {"orderId": "A-1"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "order service down", "is_error": true},
                    {"type": "text", "text": "and?"}
                ]}
            ],
            "tools": [{"name": "lookup_order", "description": "Finds an order.", "input_schema": {"type": "object"}}]
        })
    );
}

#[tokio::test]
async fn messages_prompt_caching_puts_a_breakpoint_on_the_system_prompt_or_else_the_last_tool() {
    let kit = &kits()[1];
    let fake = start(kit, vec![messages::text("ok"), messages::text("ok")]).await;
    let models = kit.models(&fake, 1, None);
    let mut request = tool_loop_request("anthropic:claude-3-5-haiku-latest");
    request.config.prompt_caching = true;
    models.converse(&request).await.unwrap();
    request.system = String::new();
    models.converse(&request).await.unwrap();
    let sent = fake.received();
    let cache = json!({"type": "ephemeral"});
    assert_eq!(sent[0].body["system"], json!([{"type": "text", "text": "Be brief.", "cache_control": cache}]));
    assert!(sent[0].body["tools"][0].get("cache_control").is_none());
    assert!(sent[1].body.get("system").is_none());
    assert_eq!(sent[1].body["tools"][0]["cache_control"], cache);
}

#[tokio::test]
async fn messages_thinking_blocks_are_dropped_and_text_beside_tool_use_kept() {
    let kit = &kits()[1];
    let fake = start(kit, vec![messages::tool_uses(&[("toolu_1", "lookup_order", json!({"orderId": "A-1"}))])]).await;
    let r = kit.models(&fake, 1, None).converse(&kit.request(vec![Message::user_text("hi")])).await.unwrap();
    assert_eq!(
        r.content,
        vec![
            ContentBlock::Text { text: "Let me check.".into() },
            ContentBlock::ToolUse {
                tool_use_id: "toolu_1".into(),
                name: "lookup_order".into(),
                input: json!({"orderId": "A-1"})
            },
        ]
    );
}

#[tokio::test]
async fn prompt_cache_tokens_are_counted_apart_from_fresh_input() {
    // OpenAI: cached tokens are part of prompt_tokens
    let kit = &kits()[0];
    let Answer::Json(mut answer) = chat::text("ok") else { panic!() };
    answer["usage"]["prompt_tokens_details"]["cached_tokens"] = json!(10);
    let fake = start(kit, vec![Answer::Json(answer)]).await;
    let r = kit.models(&fake, 1, None).converse(&kit.request(vec![Message::user_text("hi")])).await.unwrap();
    assert_eq!((r.usage.input_tokens, r.usage.cache_read_tokens, r.usage.cache_write_tokens), (15, 10, 0));
    assert_eq!(r.usage.total(), 25 + 9);

    // Anthropic: cache reads and writes are reported beside input_tokens
    let kit = &kits()[1];
    let Answer::Json(mut answer) = messages::text("ok") else { panic!() };
    answer["usage"]["cache_read_input_tokens"] = json!(100);
    answer["usage"]["cache_creation_input_tokens"] = json!(50);
    let fake = start(kit, vec![Answer::Json(answer)]).await;
    let r = kit.models(&fake, 1, None).converse(&kit.request(vec![Message::user_text("hi")])).await.unwrap();
    assert_eq!((r.usage.input_tokens, r.usage.cache_read_tokens, r.usage.cache_write_tokens), (30, 100, 50));
}

// ---- streaming ---------------------------------------------------------------------------------

#[tokio::test]
async fn a_streamed_call_answers_what_the_plain_call_does_and_hands_its_text_over_in_pieces() {
    for kit in kits() {
        let text = "Your order ships today, tracking follows.";
        let tools = (kit.tools)(&[("call_1", "lookup_order", json!({"orderId": "Ä-1"}))]);
        let fake = start(&kit, vec![(kit.text)(text), (kit.text)(text), tools.clone(), tools]).await;
        let models = kit.models(&fake, 1, None);
        for _ in 0..2 {
            let request = kit.request(vec![Message::user_text("hi")]);
            let plain = models.converse(&request).await.unwrap();
            let sink = Pieces::default();
            let streamed = models.converse_streaming(&request, &sink).await.unwrap();
            assert_eq!(streamed, plain, "{}", kit.prefix);
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
            assert_eq!(joined, expected, "{}: the pieces make the text", kit.prefix);
            if plain.stop_reason == StopReason::EndTurn {
                assert!(pieces.len() > 3, "{}: streamed a word at a time: {pieces:?}", kit.prefix);
            }
        }
        let sent = fake.received();
        assert_eq!(sent[1].body["stream"], true, "{}", kit.prefix);
        assert_eq!(sent[0].body.get("stream"), None, "{}: a plain call does not stream", kit.prefix);
        if kit.wire == Wire::ChatCompletions {
            assert_eq!(sent[1].body["stream_options"]["include_usage"], true, "usage comes in the last chunk");
        }
    }
}

#[tokio::test]
async fn a_streamed_call_that_is_retried_tells_its_sink_to_start_over() {
    for kit in kits() {
        let fake = start(&kit, vec![(kit.throttled)(None), (kit.text)("Hello there")]).await;
        let sink = Pieces::default();
        let r = kit.models(&fake, 2, None).converse_streaming(&kit.request(vec![]), &sink).await.unwrap();
        assert_eq!(r.content, vec![ContentBlock::Text { text: "Hello there".into() }]);
        assert_eq!(sink.taken(), vec![None, Some("Hello".into()), Some(" there".into())], "{}", kit.prefix);
    }
}

#[tokio::test]
async fn a_stream_cut_short_or_broken_off_is_unavailable_and_retryable() {
    let cut_chat = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n".to_owned();
    let broken_chat = format!("{cut_chat}data: {{\"error\":{{\"message\":\"upstream reset\"}}}}\n\n");
    let start_msg = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-3-5-haiku-20241022\",\"content\":[],\"usage\":{\"input_tokens\":3}}}\n\n";
    let cut_messages = format!(
        "{start_msg}event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n"
    );
    let broken_messages = format!(
        "{cut_messages}event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}}}\n\n"
    );
    for kit in kits() {
        let (cut, broken) = match kit.wire {
            Wire::ChatCompletions => (cut_chat.clone(), broken_chat.clone()),
            _ => (cut_messages.clone(), broken_messages.clone()),
        };
        for (body, says) in [(cut, "ended before the answer did"), (broken, "broke off")] {
            let fake = start(&kit, vec![Answer::Sse(body)]).await;
            let err = kit
                .models(&fake, 1, None)
                .converse_streaming(&kit.request(vec![]), &Pieces::default())
                .await
                .unwrap_err();
            assert!(matches!(&err, ModelError::Unavailable(m) if m.contains(says)), "{}: {err:?}", kit.prefix);
            assert!(err.retryable(), "another attempt may work");
        }
    }
}
