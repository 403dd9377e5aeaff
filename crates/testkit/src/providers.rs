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
    /// 200 with this `text/event-stream` body, as it is (a stream cut short, an error event).
    Sse(String),
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
            let streamed = body["stream"] == Value::Bool(true);
            let path_is_chat = uri.path().ends_with("/chat/completions");
            let next = {
                let mut s = state.lock().unwrap();
                s.received.push(Received { path: uri.path().to_owned(), headers, body });
                s.script.pop_front()
            };
            match next {
                // A streamed call gets the same answer as the provider streams it.
                Some(Answer::Json(v)) if streamed => {
                    let stream = if path_is_chat { chat::stream_of(&v) } else { messages::stream_of(&v) };
                    ([("content-type", "text/event-stream")], stream).into_response()
                }
                Some(Answer::Json(v)) => axum::Json(v).into_response(),
                Some(Answer::Status { status, body, retry_after }) => {
                    let mut r = (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response();
                    if let Some(after) = retry_after {
                        r.headers_mut().insert("retry-after", after.parse().unwrap());
                    }
                    r
                }
                Some(Answer::Stall) => std::future::pending().await,
                Some(Answer::Sse(body)) => ([("content-type", "text/event-stream")], body).into_response(),
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

    /// The text pieces [`stream_of`] sends `text` in: a word at a time, each with the space
    /// before it.
    pub fn pieces(text: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (i, word) in text.split(' ').enumerate() {
            out.push(if i == 0 { word.to_owned() } else { format!(" {word}") });
        }
        out.retain(|p| !p.is_empty());
        out
    }

    /// A completion as `stream: true` sends it (`text/event-stream`): a role chunk, the text in
    /// [`pieces`], each tool call's id and name then its arguments in two halves, the finish
    /// reason, the usage chunk (`stream_options.include_usage`), `[DONE]`.
    pub fn stream_of(completion: &Value) -> String {
        let model = &completion["model"];
        let chunk = |choices: Value, usage: Value| {
            let c = json!({"id": "chatcmpl-AbC123", "object": "chat.completion.chunk", "created": 1_763_900_000,
                "model": model, "system_fingerprint": "fp_0ba0d124f1", "choices": choices, "usage": usage});
            format!("data: {c}\n\n")
        };
        let delta =
            |d: Value| chunk(json!([{"index": 0, "delta": d, "logprobs": null, "finish_reason": null}]), Value::Null);
        let choice = &completion["choices"][0];
        let message = &choice["message"];
        let mut out = delta(json!({"role": "assistant", "content": "", "refusal": null}));
        if let Some(text) = message["content"].as_str() {
            for piece in pieces(text) {
                out.push_str(&delta(json!({"content": piece})));
            }
        }
        if let Some(refusal) = message["refusal"].as_str() {
            out.push_str(&delta(json!({"refusal": refusal})));
        }
        for (i, call) in message["tool_calls"].as_array().into_iter().flatten().enumerate() {
            let f = &call["function"];
            out.push_str(&delta(json!({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                "function": {"name": f["name"], "arguments": ""}}]})));
            let args = f["arguments"].as_str().unwrap_or("");
            let half = args.char_indices().nth(args.chars().count() / 2).map_or(args.len(), |(at, _)| at);
            for part in [&args[..half], &args[half..]] {
                out.push_str(&delta(json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]})));
            }
        }
        out.push_str(&chunk(
            json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": choice["finish_reason"]}]),
            Value::Null,
        ));
        out.push_str(&chunk(json!([]), completion["usage"].clone()));
        out.push_str("data: [DONE]\n\n");
        out
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

    /// A message as `stream: true` sends it: `message_start` (no content, output tokens 1),
    /// each block's start, deltas (text in [`super::chat::pieces`], thinking whole, tool input
    /// JSON text in two halves) and stop, a `ping`, `message_delta` with the stop reason and
    /// output tokens, `message_stop`.
    pub fn stream_of(message: &Value) -> String {
        let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
        let mut start = message.clone();
        start["content"] = json!([]);
        start["stop_reason"] = Value::Null;
        start["usage"]["output_tokens"] = json!(1);
        let mut out = event("message_start", json!({"type": "message_start", "message": start}));
        out.push_str(&event("ping", json!({"type": "ping"})));
        for (i, block) in message["content"].as_array().into_iter().flatten().enumerate() {
            let delta =
                |d: Value| event("content_block_delta", json!({"type": "content_block_delta", "index": i, "delta": d}));
            let kind = block["type"].as_str().unwrap_or_default();
            let empty = match kind {
                "text" => json!({"type": "text", "text": ""}),
                "thinking" => json!({"type": "thinking", "thinking": ""}),
                "tool_use" => json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                _ => block.clone(),
            };
            out.push_str(&event(
                "content_block_start",
                json!({"type": "content_block_start", "index": i, "content_block": empty}),
            ));
            match kind {
                "text" => {
                    for piece in super::chat::pieces(block["text"].as_str().unwrap_or_default()) {
                        out.push_str(&delta(json!({"type": "text_delta", "text": piece})));
                    }
                }
                "thinking" => {
                    out.push_str(&delta(json!({"type": "thinking_delta", "thinking": block["thinking"]})));
                    out.push_str(&delta(json!({"type": "signature_delta", "signature": block["signature"]})));
                }
                "tool_use" => {
                    let args = block["input"].to_string();
                    let half = args.char_indices().nth(args.chars().count() / 2).map_or(args.len(), |(at, _)| at);
                    for part in [&args[..half], &args[half..]] {
                        out.push_str(&delta(json!({"type": "input_json_delta", "partial_json": part})));
                    }
                }
                _ => {}
            }
            out.push_str(&event("content_block_stop", json!({"type": "content_block_stop", "index": i})));
        }
        out.push_str(&event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": null},
                "usage": {"output_tokens": message["usage"]["output_tokens"]}}),
        ));
        out.push_str(&event("message_stop", json!({"type": "message_stop"})));
        out
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
