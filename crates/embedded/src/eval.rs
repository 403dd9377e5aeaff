//! Evaluation: a dataset of cases, each a short conversation with what its answer must show,
//! run through the engine before a change reaches customers. Every case runs in its own
//! [`Sandbox`] — nothing is sent, committed or called outside it: webhook tools answer from the
//! case's `toolResults` (or are refused, which the model is told) — several cases at once.
//! The dataset format is documented in `docs/running.md` ("Evaluating an agent") with an
//! example in `examples/support/eval.yaml`.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use switchboard_domain::message::{Message, Role};
use switchboard_domain::{Action, AgentId, ExecutionRecord, Recording, Session, Tenant};
use switchboard_engine::{
    ConfigRecord, McpAnswer, McpRequest, Model, SessionStore, SessionWrite, WebhookCaller, WebhookError,
    WebhookRequest, WebhookResponse, WorkItem,
};

use crate::sandbox::Sandbox;

/// A dataset: its cases, and the agent they are for when the command names none.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Dataset {
    #[serde(default)]
    pub agent: Option<AgentId>,
    pub cases: Vec<Case>,
}

/// One case: the customer's messages, one turn each, and the expectations on what the agent did.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Case {
    pub name: String,
    /// The conversation so far, oldest first, which the case's first message continues (a
    /// recorded execution's history, as `--from-executions` writes it); none: a new conversation.
    #[serde(default)]
    pub history: Vec<Turn>,
    pub messages: Vec<String>,
    /// The channel the messages come in on (`webchat` unless given).
    #[serde(default)]
    pub channel: Option<String>,
    #[serde(default)]
    pub expect: Expect,
    /// What each webhook tool answers, by tool name (a tool without one is refused).
    #[serde(default)]
    pub tool_results: BTreeMap<String, Value>,
}

/// One message of a case's earlier conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Turn {
    pub role: Role,
    pub text: String,
}

/// What a case's turns must show, all of it (each optional).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Expect {
    /// A reply contains this text (any case).
    #[serde(default)]
    pub reply_contains: Option<String>,
    /// A reply matches this regular expression.
    #[serde(default)]
    pub reply_matches: Option<String>,
    /// A tool was called with at least these arguments.
    #[serde(default)]
    pub tool_called: Option<ToolExpectation>,
    /// `true`: the conversation was handed off (to a person or another agent); `false`: it was not.
    #[serde(default)]
    pub handoff: Option<bool>,
    /// The case's model calls cost at most this, in US dollars (a model without a price fails it).
    #[serde(default)]
    pub max_cost_usd: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolExpectation {
    pub name: String,
    /// Each of these must be in the call's arguments, equal (others may be there too).
    #[serde(default)]
    pub arguments: serde_json::Map<String, Value>,
}

/// What one case gave.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CaseResult {
    pub name: String,
    pub passed: bool,
    /// Each expectation that did not hold, in words.
    pub failures: Vec<String>,
    pub replies: Vec<String>,
    /// `{name, input, isError}` of each tool call.
    pub tool_calls: Vec<Value>,
    pub handed_off: bool,
    pub tokens: u64,
    /// `None` when a model had no price.
    pub cost_usd: Option<f64>,
    pub model_calls: usize,
}

/// What a run needs besides the dataset.
#[derive(Clone)]
pub struct Setup {
    pub tenant: Tenant,
    /// Agents (the evaluated one among them), tools and skills, as the cases run with them.
    pub records: Vec<ConfigRecord>,
    pub agent: AgentId,
    pub model: Arc<dyn Model>,
    /// Cases run at once.
    pub parallel: usize,
}

impl std::fmt::Debug for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup").field("agent", &self.agent).field("parallel", &self.parallel).finish_non_exhaustive()
    }
}

/// Checks a dataset's own rules, beyond its shape: named cases with messages, expressions that
/// compile. Every fault, as `(JSON pointer, what is wrong)`.
pub fn check(dataset: &Dataset) -> Vec<(String, String)> {
    let mut faults = Vec::new();
    if dataset.cases.is_empty() {
        faults.push(("/cases".to_owned(), "has no case".to_owned()));
    }
    for (i, case) in dataset.cases.iter().enumerate() {
        if case.name.trim().is_empty() {
            faults.push((format!("/cases/{i}/name"), "is empty".to_owned()));
        }
        if case.messages.is_empty() || case.messages.iter().any(|m| m.trim().is_empty()) {
            faults.push((format!("/cases/{i}/messages"), "needs at least one message, none empty".to_owned()));
        }
        for (n, turn) in case.history.iter().enumerate() {
            if turn.text.trim().is_empty() {
                faults.push((format!("/cases/{i}/history/{n}/text"), "is empty".to_owned()));
            }
        }
        if case.history.first().is_some_and(|t| t.role != Role::User) {
            faults.push((
                format!("/cases/{i}/history/0/role"),
                "a conversation opens with the customer: user".to_owned(),
            ));
        }
        if let Some(re) = &case.expect.reply_matches
            && let Err(e) = regex::Regex::new(re)
        {
            faults.push((format!("/cases/{i}/expect/replyMatches"), format!("is not a regular expression: {e}")));
        }
    }
    faults
}

/// Runs every case (at most `setup.parallel` at once); results in the dataset's order.
pub async fn run(dataset: &Dataset, setup: &Setup) -> Result<Vec<CaseResult>, String> {
    let runs = dataset.cases.iter().enumerate().map(|(i, case)| run_case(i, case, setup));
    let mut results: Vec<(usize, CaseResult)> = futures::stream::iter(runs)
        .buffer_unordered(setup.parallel.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    results.sort_by_key(|(i, _)| *i);
    Ok(results.into_iter().map(|(_, r)| r).collect())
}

async fn run_case(index: usize, case: &Case, setup: &Setup) -> Result<(usize, CaseResult), String> {
    let webhooks = CaseWebhooks(case.tool_results.clone());
    let sandbox = Sandbox::open(&setup.tenant, &setup.records, setup.model.clone(), Arc::new(webhooks)).await?;
    let conversation = format!("eval-{index}");
    let channel = case.channel.clone().unwrap_or_else(|| "webchat".into());
    if !case.history.is_empty() {
        seed(&sandbox, setup, &conversation, &channel, &case.history).await?;
    }
    let mut records = Vec::new();
    for (n, text) in case.messages.iter().enumerate() {
        let message = format!("m-{n}");
        let item = WorkItem {
            tenant_id: sandbox.tenant.clone(),
            source_id: format!("message-{conversation}:{message}"),
            event_id: None,
            conversation_id: conversation.clone(),
            message_id: message.clone(),
            text: text.clone(),
            trigger_id: None,
            trigger_version: None,
            variant: None,
            agent_id: setup.agent,
            continuation: false,
            detail: json!({ "tenantId": sandbox.tenant, "conversationId": conversation, "messageId": message,
                            "channel": { "platform": channel }, "message": { "direction": "inbound", "text": text } }),
            refused: None,
            day_tokens: None,
            follow: false,
            resume: None,
            arrived_at: None,
            earlier: vec![],
            recording: Recording::Off,
            close_idle_after: None,
            closes_idle: None,
        };
        records.extend(sandbox.run(&item).await?);
    }
    Ok((index, judge(case, &records)))
}

/// Starts the case's conversation as its history left it: a session of the evaluated agent
/// holding those messages, with a turn counted for each answer in them.
async fn seed(
    sandbox: &Sandbox,
    setup: &Setup,
    conversation: &str,
    channel: &str,
    history: &[Turn],
) -> Result<(), String> {
    let mut session = Session::start(sandbox.tenant.clone(), conversation.to_owned(), setup.agent, chrono::Utc::now());
    session.channel = Some(channel.to_owned());
    session.turn_count =
        u32::try_from(history.iter().filter(|t| t.role == Role::Assistant).count()).unwrap_or(u32::MAX);
    session.append_transcript(history.iter().map(|t| match t.role {
        Role::User => Message::user_text(t.text.clone()),
        Role::Assistant => Message::assistant_text(t.text.clone()),
    }));
    let write = SessionWrite { session, expected_version: None };
    sandbox.embedded.store.write_session(&write).await.map_err(|e| format!("seeding the case's history: {e}"))
}

/// What `records` (a case's executions) show against the case's expectations.
pub fn judge(case: &Case, records: &[ExecutionRecord]) -> CaseResult {
    let actions: Vec<&Action> = records.iter().flat_map(|r| r.actions.iter()).collect();
    let replies: Vec<String> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Reply { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect();
    let calls: Vec<&switchboard_domain::ToolCallRecord> = records
        .iter()
        .flat_map(|r| r.tool_calls.iter().chain(r.children.iter().flat_map(|c| c.tool_calls.iter())))
        .collect();
    let tool_calls = calls.iter().map(|c| json!({ "name": c.name, "input": c.input, "isError": c.is_error })).collect();
    let handed_off = actions.iter().any(|a| matches!(a, Action::HandoffToHuman { .. } | Action::HandoffToAgent { .. }));
    let tokens = records.iter().map(|r| r.token_usage.total()).sum();
    let cost = records.iter().map(|r| r.cost_usd.map(|c| c.dollars())).sum::<Option<f64>>();
    let model_calls = records
        .iter()
        .map(|r| r.model_calls.len() + r.children.iter().map(|c| c.model_calls.len()).sum::<usize>())
        .sum();
    let e = &case.expect;
    let mut failures = Vec::new();
    if let Some(needle) = &e.reply_contains
        && !replies.iter().any(|r| r.to_lowercase().contains(&needle.to_lowercase()))
    {
        failures.push(format!("no reply contains {needle:?} (replies: {replies:?})"));
    }
    if let Some(re) = &e.reply_matches {
        match regex::Regex::new(re) {
            Ok(re) if replies.iter().any(|r| re.is_match(r)) => {}
            Ok(re) => failures.push(format!("no reply matches /{re}/ (replies: {replies:?})")),
            Err(why) => failures.push(format!("replyMatches is not a regular expression: {why}")),
        }
    }
    if let Some(want) = &e.tool_called {
        let held =
            calls.iter().any(|c| c.name == want.name && want.arguments.iter().all(|(k, v)| c.input.get(k) == Some(v)));
        if !held {
            let made: Vec<String> = calls.iter().map(|c| format!("{} {}", c.name, c.input)).collect();
            failures.push(format!(
                "{} was not called with {} (calls: {made:?})",
                want.name,
                Value::Object(want.arguments.clone())
            ));
        }
    }
    if let Some(want) = e.handoff
        && want != handed_off
    {
        failures.push(if want {
            "no hand-off happened".to_owned()
        } else {
            "the conversation was handed off".to_owned()
        });
    }
    if let Some(max) = e.max_cost_usd {
        match cost {
            Some(c) if c <= max => {}
            Some(c) => failures.push(format!("cost ${c} is over ${max}")),
            None => failures.push("the cost is unknown (a model has no price)".to_owned()),
        }
    }
    CaseResult {
        name: case.name.clone(),
        passed: failures.is_empty(),
        failures,
        replies,
        tool_calls,
        handed_off,
        tokens,
        cost_usd: cost,
        model_calls,
    }
}

/// JUnit XML of `results` (one test suite, a test case each), for CI systems that read it.
pub fn junit(suite: &str, results: &[CaseResult]) -> String {
    let escape = |s: &str| {
        s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&apos;")
    };
    let failures = results.iter().filter(|r| !r.passed).count();
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\">\n",
        escape(suite),
        results.len()
    );
    for r in results {
        out.push_str(&format!("  <testcase classname=\"{}\" name=\"{}\"", escape(suite), escape(&r.name)));
        if r.passed {
            out.push_str("/>\n");
        } else {
            let message = r.failures.join("; ");
            out.push_str(&format!(
                ">\n    <failure message=\"{}\">{}</failure>\n  </testcase>\n",
                escape(&message),
                escape(&message)
            ));
        }
    }
    out.push_str("</testsuite>\n");
    out
}

/// Webhook tools answer with the case's `toolResults`, by tool name; nothing is called.
struct CaseWebhooks(BTreeMap<String, Value>);

#[async_trait]
impl WebhookCaller for CaseWebhooks {
    async fn call(&self, request: &WebhookRequest) -> Result<WebhookResponse, WebhookError> {
        match self.0.get(&request.tool_name) {
            Some(result) => Ok(WebhookResponse {
                status: 200,
                body: result.to_string().into_bytes(),
                truncated: false,
                attempts: 1,
                host: "eval".into(),
            }),
            None => Err(Self::none_for(&request.tool_name)),
        }
    }

    /// A tool of an MCP server answers the case's result as its structured content (a string as
    /// its text).
    async fn call_mcp(&self, request: &McpRequest) -> Result<McpAnswer, WebhookError> {
        let result = self.0.get(&request.tool_name).ok_or_else(|| Self::none_for(&request.tool_name))?;
        Ok(McpAnswer::reading(result, false, "eval"))
    }
}

impl CaseWebhooks {
    fn none_for(tool: &str) -> WebhookError {
        WebhookError::Blocked(format!(
            "evaluation: the case gives no result for {tool} (toolResults); tools are not called"
        ))
    }
}
