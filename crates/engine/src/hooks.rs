//! Calls an agent's hooks (`switchboard_domain::hook`) through the webhook port, so they are
//! signed, bounded in time and fenced like tools. Each hook answers `{}` or
//! `{"action": "continue"}` to let the turn go on, a change (the fields of its point, see
//! [`Target`]) to change it, or `{"action": "stop", "reason": "…"}` to stop the turn. A hook that
//! cannot be called, or answers what cannot be used, follows its `onError`. Every call is in the
//! execution record (`hookCalls`). An agent without hooks pays for none of this.

use std::time::Instant;

use serde_json::{Map, Value, json};
use switchboard_domain::hook::{Hook, HookCall, HookOnError, HookOutcome, HookPoint};
use switchboard_domain::message::{ContentBlock, Message};
use switchboard_domain::{Agent, limits::MAX_MESSAGE_TEXT_BYTES};
use tracing::info;

use crate::model_call::elapsed_ms;
use crate::ports::{ModelRequest, WebhookRequest};
use crate::tools::{CallContext, ToolCall};

/// Longest reason a stopping hook may give.
const MAX_REASON_CHARS: usize = 1000;

/// Where the hooks are called: the turn, the agent, the point, and at a tool point the call.
pub(crate) struct Point<'a> {
    pub cx: CallContext<'a>,
    pub agent: &'a Agent,
    pub at: HookPoint,
    /// At a tool point: the tool's name and the call's id.
    pub tool: Option<(&'a str, &'a str)>,
    /// Model calls the execution had made.
    pub after_model_call: usize,
}

/// What a point shows its hooks and lets them change.
pub(crate) trait Target: Send {
    /// The point's fields in the hook's request body.
    fn show(&self) -> Value;
    /// Applies a hook's change (its answer without `action`); why it cannot be, if so.
    fn change(&mut self, change: &Map<String, Value>) -> Result<(), String>;
}

/// Calls each of the agent's hooks for `point` in turn, each seeing what the ones before it
/// changed; `Some(reason)` when one stopped the turn.
pub(crate) async fn run(point: &Point<'_>, calls: &mut Vec<HookCall>, target: &mut dyn Target) -> Option<String> {
    let tool = point.tool.map(|(name, _)| name);
    for hook in point.agent.hooks.iter().filter(|h| h.applies(point.at, tool)) {
        if let Some(reason) = call(point, hook, calls, target).await {
            return Some(reason);
        }
    }
    None
}

/// One hook's call: recorded, and its answer applied to `target`.
async fn call(point: &Point<'_>, hook: &Hook, calls: &mut Vec<HookCall>, target: &mut dyn Target) -> Option<String> {
    let started = Instant::now();
    let (cx, at) = (point.cx, point.at.as_str());
    let key = format!("{}/hook/{}", cx.item.source_id, calls.len());
    let mut body = json!({
        "hook": at,
        "tenantId": cx.item.tenant_id,
        "agentId": point.agent.agent_id,
        "executionId": cx.execution_id,
        "idempotencyKey": key,
    });
    if hook.handler.include_pii {
        body["conversationId"] = json!(cx.item.conversation_id);
    }
    if let (Value::Object(b), Value::Object(shown)) = (&mut body, target.show()) {
        b.extend(shown);
    }
    let request = WebhookRequest {
        tenant_id: cx.item.tenant_id.clone(),
        tool_name: format!("hook:{at}"),
        handler: hook.handler.clone(),
        body: body.to_string().into_bytes(),
        idempotency_key: key,
    };
    let mut record = HookCall {
        at: point.at,
        host: host(&hook.handler.url),
        status: None,
        outcome: HookOutcome::Continued,
        detail: None,
        tool_use_id: point.tool.map(|(_, id)| id.to_owned()),
        latency_ms: 0,
        after_model_call: u32::try_from(point.after_model_call).unwrap_or(u32::MAX),
    };
    let answer = match cx.deps.webhooks.call(&request).await {
        Ok(res) => {
            record.status = Some(res.status);
            record.host = res.host;
            read_answer(res.status, res.truncated, &res.body)
        }
        Err(e) => Err(format!("could not be called: {e}")),
    };
    let verdict = match answer.and_then(|answer| decide(point.at, answer, target)) {
        Ok(Decided::Go) => None,
        Ok(Decided::Changed) => {
            record.outcome = HookOutcome::Changed;
            None
        }
        Ok(Decided::Stop(reason)) => {
            record.outcome = HookOutcome::Stopped;
            record.detail = Some(reason.clone());
            Some(format!("the {at} hook stopped the turn: {reason}"))
        }
        Err(why) => {
            record.outcome = HookOutcome::Failed;
            record.detail = Some(why.clone());
            match hook.on_error {
                HookOnError::Continue => None,
                HookOnError::Stop => Some(format!("the {at} hook failed ({why}) and its onError is stop")),
            }
        }
    };
    record.latency_ms = elapsed_ms(started);
    info!(hook = at, host = %record.host, outcome = ?record.outcome, "hook called");
    calls.push(record);
    verdict
}

enum Decided {
    Go,
    Changed,
    Stop(String),
}

/// A hook's answer as an object: `{}` (or no body) lets the turn go on.
fn read_answer(status: u16, truncated: bool, body: &[u8]) -> Result<Map<String, Value>, String> {
    if !(200..300).contains(&status) {
        return Err(format!("answered HTTP {status}"));
    }
    if truncated {
        return Err("its answer was larger than 1 MiB".into());
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice(body) {
        Ok(Value::Object(answer)) => Ok(answer),
        _ => Err("its answer is not a JSON object".into()),
    }
}

/// What the turn does after `answer`: go on, go on changed, or stop.
fn decide(at: HookPoint, mut answer: Map<String, Value>, target: &mut dyn Target) -> Result<Decided, String> {
    let action = answer.remove("action");
    match action.as_ref().map(|a| a.as_str()) {
        None | Some(Some("continue")) => {}
        Some(Some("stop")) if at == HookPoint::TurnEnd => {
            return Err("a turn_end hook observes only: the turn is already decided".into());
        }
        Some(Some("stop")) => {
            let reason = answer.get("reason").and_then(Value::as_str).map(str::trim).unwrap_or_default();
            if reason.is_empty() || reason.chars().count() > MAX_REASON_CHARS {
                return Err(format!("a stop needs a reason of 1 to {MAX_REASON_CHARS} characters"));
            }
            return Ok(Decided::Stop(reason.to_owned()));
        }
        _ => return Err("its action must be \"continue\" or \"stop\"".into()),
    }
    if answer.is_empty() {
        return Ok(Decided::Go);
    }
    if at == HookPoint::TurnEnd {
        return Err("a turn_end hook observes only: nothing is left to change".into());
    }
    target.change(&answer)?;
    Ok(Decided::Changed)
}

/// The host of `url`, for the record (never the path or the query).
fn host(url: &str) -> String {
    let host = url.split("://").nth(1).and_then(|rest| rest.split(['/', '?', '#']).next()).unwrap_or("");
    host.rsplit('@').next().unwrap_or(host).to_owned()
}

/// Refuses a change naming a field its point does not let hooks change.
fn only(change: &Map<String, Value>, fields: &[&str]) -> Result<(), String> {
    match change.keys().find(|k| !fields.contains(&k.as_str())) {
        Some(k) => Err(format!("'{k}' is not something this hook may change (it may change {})", fields.join(", "))),
        None => Ok(()),
    }
}

/// `before_model`: the request's system prompt and messages. A change of the messages keeps
/// their shape — as many, the same roles, the same tool calls and results — so that what the
/// model is sent stays a conversation a provider accepts; only what they say may change.
impl Target for ModelRequest {
    fn show(&self) -> Value {
        json!({ "request": { "system": self.system, "messages": self.messages } })
    }

    fn change(&mut self, change: &Map<String, Value>) -> Result<(), String> {
        only(change, &["system", "messages"])?;
        let system = match change.get("system") {
            None => None,
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
            Some(_) => return Err("'system' must be a text, not blank".into()),
        };
        let messages = match change.get("messages") {
            None => None,
            Some(v) => {
                let new: Vec<Message> =
                    serde_json::from_value(v.clone()).map_err(|e| format!("'messages' are not messages: {e}"))?;
                same_shape(&self.messages, &new)?;
                Some(new)
            }
        };
        if let Some(system) = system {
            self.system = system;
        }
        if let Some(messages) = messages {
            self.messages = messages;
        }
        Ok(())
    }
}

/// Whether `new` is `old` with only texts and tool inputs changed.
fn same_shape(old: &[Message], new: &[Message]) -> Result<(), String> {
    let shape = |m: &Message| -> Vec<String> {
        m.content
            .iter()
            .map(|b| match b {
                ContentBlock::Text { .. } => "text".to_owned(),
                ContentBlock::ToolUse { tool_use_id, name, .. } => format!("toolUse {tool_use_id} {name}"),
                ContentBlock::ToolResult { tool_use_id, is_error, .. } => {
                    format!("toolResult {tool_use_id} {is_error}")
                }
            })
            .collect()
    };
    if old.len() != new.len() {
        return Err(format!("'messages' must keep all {} messages (got {})", old.len(), new.len()));
    }
    for (i, (o, n)) in old.iter().zip(new).enumerate() {
        if o.role != n.role || shape(o) != shape(n) {
            return Err(format!("'messages/{i}' must keep its role and its blocks (texts may change)"));
        }
        let too_long =
            n.content.iter().any(|b| matches!(b, ContentBlock::Text { text } if text.len() > MAX_MESSAGE_TEXT_BYTES));
        if too_long {
            return Err(format!("'messages/{i}' has a text over {MAX_MESSAGE_TEXT_BYTES} bytes"));
        }
    }
    Ok(())
}

/// `after_model`: the model's answer; a hook may change its text.
pub(crate) struct Answer<'a>(pub &'a mut Message);

impl Target for Answer<'_> {
    fn show(&self) -> Value {
        json!({ "response": { "message": self.0 } })
    }

    fn change(&mut self, change: &Map<String, Value>) -> Result<(), String> {
        only(change, &["text"])?;
        let Some(Value::String(text)) = change.get("text") else { return Err("'text' must be a text".into()) };
        if text.len() > MAX_MESSAGE_TEXT_BYTES {
            return Err(format!("'text' is over {MAX_MESSAGE_TEXT_BYTES} bytes"));
        }
        let content = &mut self.0.content;
        content.retain(|b| !matches!(b, ContentBlock::Text { .. }));
        if !text.is_empty() {
            content.insert(0, ContentBlock::Text { text: text.clone() });
        }
        Ok(())
    }
}

/// `before_tool`: the call about to run; a hook may change its arguments (checked against the
/// tool's schema as the model's are).
impl Target for ToolCall {
    fn show(&self) -> Value {
        json!({ "toolCall": { "toolUseId": self.tool_use_id, "name": self.name, "arguments": self.input } })
    }

    fn change(&mut self, change: &Map<String, Value>) -> Result<(), String> {
        only(change, &["arguments"])?;
        match change.get("arguments") {
            Some(v @ Value::Object(_)) => {
                self.input = v.clone();
                Ok(())
            }
            _ => Err("'arguments' must be an object".into()),
        }
    }
}

/// `after_tool`: the call that ran and its result; a hook may change the result the model reads
/// (and the transcript keeps). The record keeps what the tool answered.
pub(crate) struct Ran<'a> {
    pub call: &'a ToolCall,
    pub output: &'a mut Value,
    pub is_error: bool,
    /// Set when a hook changed the output.
    pub changed: bool,
}

impl Target for Ran<'_> {
    fn show(&self) -> Value {
        json!({ "toolCall": {
            "toolUseId": self.call.tool_use_id, "name": self.call.name, "arguments": self.call.input,
            "result": self.output, "isError": self.is_error,
        } })
    }

    fn change(&mut self, change: &Map<String, Value>) -> Result<(), String> {
        only(change, &["result"])?;
        let result = change.get("result").cloned().unwrap_or(Value::Null);
        *self.output = result;
        self.changed = true;
        Ok(())
    }
}

/// `turn_end`: what the turn came to; observed only.
pub(crate) struct Ended(pub Value);

impl Target for Ended {
    fn show(&self) -> Value {
        json!({ "turn": self.0 })
    }

    fn change(&mut self, _change: &Map<String, Value>) -> Result<(), String> {
        Err("a turn_end hook observes only".into())
    }
}
