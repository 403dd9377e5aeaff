//! `switchboard replay ID --local`: the replay run on this machine from what the API serves —
//! the record, its model calls' content, the tenant's agents, tools and skills, the agent's kept
//! version, the session and its earlier records — for a server that does not replay itself (the
//! AWS internal API answers `501`: its Lambda function carries no embedded engine). The run is
//! the embedded profile's own ([`switchboard_embedded::replay`]), so its verdict is the one the
//! embedded server would give.

use anyhow::Context;
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::Value;
use switchboard_domain::{ExecutionRecord, Session};
use switchboard_embedded::replay::{self, ReplayError, ReplayInput};
use switchboard_engine::recorded::CallContent;

use super::api::Api;

/// The replay of execution `id` of tenant `t`, run here; its report as the server's route writes it.
pub async fn replay(api: &Api, t: &str, id: &str) -> anyhow::Result<Value> {
    let input = gather(api, t, id).await?;
    match replay::replay(input).await {
        Ok(report) => Ok(serde_json::to_value(report)?),
        Err(ReplayError::Unreplayable(why)) => anyhow::bail!("execution {id} cannot be replayed: {why}"),
        Err(e) => Err(anyhow::anyhow!("replaying execution {id}: {e}")),
    }
}

/// What the replay reads, over the API (the embedded `replay::gather`, call for call).
async fn gather(api: &Api, t: &str, id: &str) -> anyhow::Result<ReplayInput> {
    let record: ExecutionRecord = get(api, &format!("/tenants/{t}/executions/{id}")).await?;
    let calls: Value = get(api, &format!("/tenants/{t}/executions/{id}/model-calls")).await?;
    let calls: Vec<CallContent> = serde_json::from_value(calls["calls"].clone()).context("the model calls")?;
    let (tenant, agents, tools, skills) = super::eval::tenant_config(api, t).await?;
    // The agent as the turn ran it (its kept version), else as it is now.
    let kept = match record.ran_with.as_ref() {
        Some(w) => {
            let path = format!("/tenants/{t}/agents/{}/versions/{}", record.agent_id, w.agent);
            api.call(Method::GET, &path, None, None)
                .await
                .ok()
                .and_then(|(v, _)| serde_json::from_value(v["record"].clone()).ok())
        }
        None => None,
    };
    let agent = kept
        .or_else(|| agents.iter().find(|a| a.agent_id == record.agent_id).cloned())
        .with_context(|| format!("agent {} of execution {id} is gone", record.agent_id))?;
    let session: Option<Session> = api
        .call(Method::GET, &format!("/tenants/{t}/sessions/{}", record.session_id), None, None)
        .await
        .ok()
        .and_then(|(v, _)| serde_json::from_value(v).ok());
    let path = format!("/tenants/{t}/sessions/{}/executions?limit=100", record.session_id);
    let mut earlier: Vec<ExecutionRecord> = api
        .all_pages(&path)
        .await?
        .into_iter()
        .map(serde_json::from_value)
        .collect::<Result<_, _>>()
        .context("the session's records")?;
    let at = earlier.iter().position(|e| e.execution_id == record.execution_id).unwrap_or(earlier.len());
    earlier.truncate(at);
    Ok(ReplayInput { tenant, record, calls, agent, agents, tools, skills, session, earlier })
}

async fn get<T: DeserializeOwned>(api: &Api, path: &str) -> anyhow::Result<T> {
    let (value, _) = api.call(Method::GET, path, None, None).await?;
    serde_json::from_value(value).with_context(|| format!("GET {path}"))
}
