//! Fake model providers on 127.0.0.1, one per wire protocol: OpenAI Chat Completions
//! (`POST /v1/chat/completions`) and Anthropic Messages (`POST /v1/messages`). Each answers
//! from a script of [`Answer`]s and keeps every request it received, headers and body, so that a
//! test can assert the request's shape. The answer builders reproduce the shapes the real
//! services send (ids, usage, stop reasons, error bodies), trimmed of fields no adapter reads.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// The wire protocol a fake speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    ChatCompletions,
    Messages,
    /// Bedrock Converse (`POST /model/{modelId}/converse`), for tests without the AWS SDK; the
    /// `aws` feature's `FakeBedrock` adds Bedrock's error headers.
    Converse,
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Answer {
    /// 200 with this body.
    Json(Value),
    /// This status and body, with `Retry-After` when given.
    Status { status: u16, body: Value, retry_after: Option<&'static str> },
    /// Never answers (until the test ends): for timeouts.
    Stall,
}

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Default)]
struct State {
    script: VecDeque<Answer>,
    received: Vec<Received>,
}

/// A fake provider; the server task ends with the test's runtime.
#[derive(Debug, Clone)]
pub struct FakeProvider {
    /// What to set as the provider's base URL (`OPENAI_BASE_URL` is `…/v1`,
    /// `ANTHROPIC_BASE_URL` the root).
    pub base_url: String,
    state: Arc<Mutex<State>>,
}

impl FakeProvider {
    pub async fn start(wire: Wire, script: Vec<Answer>) -> Self {
        use axum::extract::State as Axs;
        use axum::http::{HeaderMap, StatusCode, Uri};
        use axum::response::{IntoResponse, Response};

        async fn answer(
            Axs(state): Axs<Arc<Mutex<State>>>,
            uri: Uri,
            headers: HeaderMap,
            body: axum::body::Bytes,
        ) -> Response {
            let body: Value = match serde_json::from_slice(&body) {
                Ok(v) => v,
                Err(e) => return (StatusCode::BAD_REQUEST, format!("not JSON: {e}")).into_response(),
            };
            let headers = headers
                .iter()
                .map(|(n, v)| (n.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
                .collect();
            let next = {
                let mut s = state.lock().unwrap();
                s.received.push(Received { path: uri.path().to_owned(), headers, body });
                s.script.pop_front()
            };
            match next {
                Some(Answer::Json(v)) => axum::Json(v).into_response(),
                Some(Answer::Status { status, body, retry_after }) => {
                    let mut r = (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response();
                    if let Some(after) = retry_after {
                        r.headers_mut().insert("retry-after", after.parse().unwrap());
                    }
                    r
                }
                Some(Answer::Stall) => std::future::pending().await,
                None => (StatusCode::INTERNAL_SERVER_ERROR, "script exhausted").into_response(),
            }
        }

        let state = Arc::new(Mutex::new(State { script: script.into(), received: vec![] }));
        let path = match wire {
            Wire::ChatCompletions => "/v1/chat/completions",
            Wire::Messages => "/v1/messages",
            Wire::Converse => "/model/{model_id}/converse",
        };
        let app = axum::Router::new().route(path, axum::routing::post(answer)).with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
        let root = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let base_url = match wire {
            Wire::ChatCompletions => format!("{root}/v1"),
            Wire::Messages | Wire::Converse => root,
        };
        Self { base_url, state }
    }

    /// Every request received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }
}

/// Chat Completions answers, shaped as OpenAI sends them.
pub mod chat {
    use super::*;

    fn completion(message: Value, finish_reason: &str, prompt: u64, completion: u64) -> Answer {
        Answer::Json(json!({
            "id": "chatcmpl-AbC123",
            "object": "chat.completion",
            "created": 1_763_900_000,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason}],
            "usage": {
                "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0}
            },
            "service_tier": "default",
            "system_fingerprint": "fp_0ba0d124f1"
        }))
    }

    pub fn text(text: &str) -> Answer {
        completion(json!({"role": "assistant", "content": text, "refusal": null, "annotations": []}), "stop", 25, 9)
    }

    /// One response holding these tool calls `(id, name, arguments as JSON text)`.
    pub fn tool_calls(calls: &[(&str, &str, &str)]) -> Answer {
        let calls: Vec<Value> = calls
            .iter()
            .map(
                |(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}),
            )
            .collect();
        completion(
            json!({"role": "assistant", "content": null, "tool_calls": calls, "refusal": null}),
            "tool_calls",
            60,
            30,
        )
    }

    pub fn refusal(text: &str) -> Answer {
        completion(json!({"role": "assistant", "content": null, "refusal": text}), "stop", 20, 8)
    }

    pub fn length(text: &str) -> Answer {
        completion(json!({"role": "assistant", "content": text, "refusal": null}), "length", 20, 16)
    }

    pub fn error(status: u16, kind: &str, code: &str, message: &str, retry_after: Option<&'static str>) -> Answer {
        Answer::Status {
            status,
            body: json!({"error": {"message": message, "type": kind, "param": null, "code": code}}),
            retry_after,
        }
    }
}

/// Messages answers, shaped as Anthropic sends them.
pub mod messages {
    use super::*;

    fn message(content: Value, stop_reason: &str, input: u64, output: u64) -> Answer {
        Answer::Json(json!({
            "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
            "type": "message",
            "role": "assistant",
            "model": "claude-3-5-haiku-20241022",
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": null,
            "usage": {
                "input_tokens": input, "output_tokens": output,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0
            }
        }))
    }

    pub fn text(text: &str) -> Answer {
        message(json!([{"type": "text", "text": text}]), "end_turn", 30, 10)
    }

    /// Thinking, some text, then these tool uses `(id, name, input)`.
    pub fn tool_uses(uses: &[(&str, &str, Value)]) -> Answer {
        let mut content = vec![
            json!({"type": "thinking", "thinking": "The customer wants…", "signature": "EqQBCgIYAhIM"}),
            json!({"type": "text", "text": "Let me check."}),
        ];
        content.extend(
            uses.iter().map(|(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input})),
        );
        message(Value::Array(content), "tool_use", 70, 40)
    }

    pub fn refusal() -> Answer {
        message(json!([]), "refusal", 20, 0)
    }

    pub fn error(status: u16, kind: &str, message: &str, retry_after: Option<&'static str>) -> Answer {
        Answer::Status {
            status,
            body: json!({"type": "error", "error": {"type": kind, "message": message}}),
            retry_after,
        }
    }
}

/// Converse answers, shaped as Bedrock sends them.
pub mod converse {
    use super::*;

    pub fn text(text: &str) -> Answer {
        Answer::Json(text_body(text))
    }

    /// The body of a plain text answer (also the `aws` feature's `FakeBedrock` replies).
    pub fn text_body(text: &str) -> Value {
        json!({
            "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 11, "outputTokens": 7, "totalTokens": 18},
            "metrics": {"latencyMs": 5}
        })
    }

    pub fn tool_use(id: &str, name: &str, input: Value) -> Answer {
        Answer::Json(json!({
            "output": {"message": {"role": "assistant", "content": [
                {"toolUse": {"toolUseId": id, "name": name, "input": input}}
            ]}},
            "stopReason": "tool_use",
            "usage": {"inputTokens": 20, "outputTokens": 9, "totalTokens": 29},
            "metrics": {"latencyMs": 5}
        }))
    }
}
