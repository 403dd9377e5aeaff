//! Reading back what the model saw: an execution record's model calls with the content their
//! references point at, fetched from the session's content store in one read. The API's
//! `GET …/executions/{e}/model-calls`, the console's execution view and replay read this.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;
use serde_json::Value;
use switchboard_domain::{ContentRef, ExecutionRecord, ModelCallRecord};

use crate::ports::{ExecutionLog, StoreError};

/// One model call with its content.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallContent {
    /// Its place among the record's calls (`modelCalls[index]`), or among its sub-agent's.
    pub index: usize,
    /// For a supervisor's sub-agent call: the tool call its run answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub_agent_call: Option<String>,
    /// The model that answered.
    pub model: String,
    pub stop_reason: String,
    pub usage: switchboard_domain::TokenUsage,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// `None` when the call was recorded without content (the tenant's `recording` was `off`).
    pub request: Option<RequestContent>,
    pub response: Option<ResponseContent>,
}

/// A call's request, each part as it was sent (or as redaction left it).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestContent {
    pub model: String,
    pub system: Part,
    pub messages: Vec<Part>,
    pub tools: Part,
    pub config: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseContent {
    pub message: Part,
}

/// One piece of content: the reference and what it points at (`None`: no longer kept).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    pub sha256: String,
    pub bytes: u64,
    pub tokens: u32,
    pub content: Option<Value>,
}

/// Every model call of `record` (its own, then each sub-agent run's) with its content.
pub async fn model_calls(log: &dyn ExecutionLog, record: &ExecutionRecord) -> Result<Vec<CallContent>, StoreError> {
    let mut calls: Vec<(Option<&str>, usize, &ModelCallRecord)> =
        record.model_calls.iter().enumerate().map(|(i, c)| (None, i, c)).collect();
    for child in &record.children {
        calls.extend(child.model_calls.iter().enumerate().map(|(i, c)| (Some(child.tool_use_id.as_str()), i, c)));
    }
    let mut wanted = BTreeSet::new();
    for (_, _, call) in &calls {
        for r in refs(call) {
            wanted.insert(r.sha256.clone());
        }
    }
    let hashes: Vec<String> = wanted.into_iter().collect();
    let found = match hashes.is_empty() {
        true => vec![],
        false => log.content(&record.tenant_id, record.session_id, &hashes).await?,
    };
    let bodies: HashMap<String, Value> = found
        .into_iter()
        .filter_map(|b| {
            let value = serde_json::from_slice(&b.body).ok()?;
            Some((b.sha256, value))
        })
        .collect();
    let part = |r: &ContentRef| Part {
        sha256: r.sha256.clone(),
        bytes: r.bytes,
        tokens: r.tokens,
        content: bodies.get(&r.sha256).cloned(),
    };
    Ok(calls
        .into_iter()
        .map(|(sub_agent_call, index, call)| CallContent {
            index,
            sub_agent_call: sub_agent_call.map(str::to_owned),
            model: call.model.clone(),
            stop_reason: call.stop_reason.clone(),
            usage: call.usage,
            purpose: call.purpose.clone(),
            request: call.request.as_ref().map(|r| RequestContent {
                model: r.model.clone(),
                system: part(&r.system),
                messages: r.messages.iter().map(part).collect(),
                tools: part(&r.tools),
                config: r.config.clone(),
            }),
            response: call.response.as_ref().map(|r| ResponseContent { message: part(&r.message) }),
        })
        .collect())
}

/// The references of one call.
fn refs(call: &ModelCallRecord) -> Vec<&ContentRef> {
    let mut out = Vec::new();
    if let Some(r) = &call.request {
        out.push(&r.system);
        out.push(&r.tools);
        out.extend(r.messages.iter());
    }
    if let Some(r) = &call.response {
        out.push(&r.message);
    }
    out
}
