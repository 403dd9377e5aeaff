//! Running an agent now: `POST /tenants/{t}/agents/{id}/invoke`, in the conversation's turn (it
//! queues behind messages already waiting), answered with the execution, or streamed as the
//! turn's events (`Accept: text/event-stream`, `contracts/invoke-stream.md`). An
//! `Idempotency-Key` makes a retried call answer as the first did. The turn is the engine's.
//! A manual trigger's run and a webhook trigger's delivery start turns the same way
//! ([`triggers`]).

pub(crate) mod triggers;

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use switchboard_domain::ids::check_external_id;
use switchboard_domain::limits::MAX_MESSAGE_TEXT_BYTES;
use switchboard_domain::{Agent, AgentId, AgentStatus, ExecutionRecord, TenantId, TenantStatus, ValidationErrors};
use switchboard_engine::{Admission, DayTokens, Limits, WorkItem};

use crate::extract::{JsonBody, Tenant};
use crate::problem::Problem;
use crate::state::ApiState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct InvokeBody {
    conversation_id: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

/// How long an invoke waits for its execution.
const INVOKE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// `POST /tenants/{t}/agents/{id}/invoke`: runs the agent on a conversation now and answers with
/// the execution (`202` with where it will be, when the wait runs out).
pub(crate) async fn invoke(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    Path((_, agent_raw)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<JsonBody<InvokeBody>, Problem>,
) -> Result<Response, Problem> {
    let no_agent = || Problem::not_found(format!("no agent '{agent_raw}'"));
    let agent_id: AgentId = agent_raw.parse().map_err(|_| no_agent())?;
    let agent = state.config.get_agent(&t, agent_id).await?.ok_or_else(no_agent)?;
    // An unknown agent is told before a bad body.
    let JsonBody(body) = body?;
    let key = check_request(&body, &headers)?;
    let streamed = stream_asked(&state, &headers)?;
    let source_id = format!("invoke-{}", key.clone().unwrap_or_else(|| ulid::Ulid::generate().to_string()));
    let start = Start {
        source_id,
        conversation_id: body.conversation_id,
        text: body.message.unwrap_or_else(|| "[invoked without a message]".to_owned()),
        detail: json!({ "invoke": true, "metadata": body.metadata }),
        trigger: None,
        variant: None,
    };
    let wait = if streamed { Wait::Stream } else { Wait::For(INVOKE_WAIT) };
    start_turn(&state, &agent, start, key.is_some(), wait).await
}

/// A turn started from outside the event intake: by whom (`source_id`, which deduplicates it),
/// on which conversation, with which text, from which trigger (id and version), with which
/// detail for the record.
pub(crate) struct Start {
    pub(crate) source_id: String,
    pub(crate) conversation_id: String,
    pub(crate) text: String,
    pub(crate) detail: serde_json::Value,
    pub(crate) trigger: Option<(switchboard_domain::TriggerId, u64)>,
    /// The variant of the trigger's traffic split that chose the agent.
    pub(crate) variant: Option<String>,
}

/// How the caller hears of the turn: its events as they come, its execution (after at most the
/// duration, else `202` with where it will be), or only that it is queued (`202`; a start that
/// repeats one already recorded answers with that one's execution).
pub(crate) enum Wait {
    Stream,
    For(std::time::Duration),
    Queued,
}

/// Runs `agent` on the start's conversation in turn, once the tenant, agent and conversation allow
/// it and the tenant's limits admit it. A start that may repeat an earlier one (`retried`: an
/// `Idempotency-Key`, a webhook's id) answers as the first did once its execution is recorded.
pub(crate) async fn start_turn(
    state: &ApiState,
    agent: &Agent,
    start: Start,
    retried: bool,
    wait: Wait,
) -> Result<Response, Problem> {
    let t = &agent.tenant_id;
    let (tenant, agent_session) = may_run(state, t, agent, &start.conversation_id).await?;
    // A retry of a call that already ran answers as the first did, limits or not; anything new
    // is counted against the tenant's limits first (a refused call runs nothing and may be
    // retried with the same key after `Retry-After`).
    let done = match retried {
        true => state.executions.execution_for_source(t, &start.source_id).await?,
        false => None,
    };
    let day_tokens = match done {
        Some(_) => None,
        None => Some(admit(state, &tenant, &start.conversation_id, agent_session).await?),
    };
    let source_id = start.source_id;
    let item = WorkItem {
        tenant_id: t.clone(),
        source_id: source_id.clone(),
        event_id: None,
        conversation_id: start.conversation_id,
        message_id: source_id.clone(),
        text: start.text,
        trigger_id: start.trigger.map(|(id, _)| id),
        trigger_version: start.trigger.map(|(_, version)| version),
        variant: start.variant,
        agent_id: agent.agent_id,
        continuation: false,
        detail: start.detail,
        refused: None,
        day_tokens,
        follow: matches!(wait, Wait::Stream),
        resume: None,
        arrived_at: None,
        earlier: vec![],
        recording: tenant.recording,
        close_idle_after: tenant.limits.close_idle_after(),
        closes_idle: None,
    };
    let recorded = match (done, wait) {
        (done, Wait::Stream) => return Ok(stream_invoke(state, item, done, t.as_str())),
        (Some(r), _) => Some(r),
        (None, Wait::For(wait)) => state.invoker.invoke(item, wait).await?,
        (None, Wait::Queued) => {
            // However quickly the turn runs, the answer says queued: the same every time.
            state.invoker.invoke(item, std::time::Duration::ZERO).await?;
            None
        }
    };
    Ok(answer(recorded, t, &source_id))
}

/// The body's and headers' rules; the `Idempotency-Key`, when one was sent.
pub(crate) fn check_request(body: &InvokeBody, headers: &HeaderMap) -> Result<Option<String>, Problem> {
    let mut errors = ValidationErrors::default();
    if let Err(e) = check_external_id(&body.conversation_id) {
        errors.push("/conversationId", e.to_string());
    }
    if body.message.as_ref().is_some_and(|m| m.len() > MAX_MESSAGE_TEXT_BYTES) {
        errors.push("/message", format!("must be at most {MAX_MESSAGE_TEXT_BYTES} bytes"));
    }
    let key = idempotency_key(headers, &mut errors);
    errors.into_result().map_err(Problem::invalid)?;
    Ok(key)
}

/// The `Idempotency-Key` header, when one was sent; a malformed one is pushed onto `errors`.
pub(crate) fn idempotency_key(headers: &HeaderMap, errors: &mut ValidationErrors) -> Option<String> {
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
    if let Some(k) = &key
        && check_external_id(k).is_err()
    {
        errors.push("/headers/Idempotency-Key", "must be 1 to 63 characters of letters, digits, '-', '_' or '.'");
    }
    key
}

/// Whether the agent may answer the conversation now (the tenant active, the agent active, the
/// conversation not with a human or another agent): the tenant's record, and whether the agent
/// already holds the conversation.
async fn may_run(
    state: &ApiState,
    t: &TenantId,
    agent: &Agent,
    conversation: &str,
) -> Result<(switchboard_domain::Tenant, bool), Problem> {
    let tenant = state.config.get_tenant(t).await?.ok_or_else(|| Problem::not_found(format!("no tenant '{t}'")))?;
    if tenant.status == TenantStatus::Suspended {
        return Err(Problem::conflict(format!("tenant {t} is suspended")));
    }
    if agent.status != AgentStatus::Active {
        return Err(Problem::conflict(format!("agent {} is not active", agent.agent_id)));
    }
    let latest = state.sessions.latest_session(t, conversation).await?;
    let agent_session = latest.as_ref().is_some_and(|s| s.is_active());
    if let Some(s) = latest {
        if s.is_human_owned() {
            return Err(Problem::conflict("a human operator owns this conversation; hand it back first"));
        }
        if s.is_active() && s.agent_id != agent.agent_id {
            return Err(Problem::conflict(format!(
                "the conversation is with agent {} (session {}); hand it off first",
                s.agent_id, s.session_id
            )));
        }
    }
    Ok((tenant, agent_session))
}

/// Counts a new call against the tenant's limits; the day's tokens so far when admitted.
async fn admit(
    state: &ApiState,
    tenant: &switchboard_domain::Tenant,
    conversation: &str,
    agent_session: bool,
) -> Result<DayTokens, Problem> {
    let t = &tenant.tenant_id;
    match Limits::new(state.executor.deps()).admit(tenant, conversation, Some(agent_session), true).await? {
        Admission::Admitted(day) => Ok(day),
        // taken over between the read above and the count
        Admission::HumanOwned { .. } => {
            Err(Problem::conflict("a human operator owns this conversation; hand it back first"))
        }
        Admission::Refused(refusal) => {
            tracing::info!(tenant = %t, limit = refusal.limit.as_str(), "invoke refused by a tenant limit");
            Err(Problem::tenant_limit(&refusal))
        }
    }
}

/// The execution, or `202` with where it will be once recorded (the same on both profiles).
fn answer(recorded: Option<ExecutionRecord>, t: &TenantId, source_id: &str) -> Response {
    match recorded {
        Some(r) => Json(json!({
            "sessionId": r.session_id, "executionId": r.execution_id, "status": r.status, "actions": r.actions,
        }))
        .into_response(),
        None => {
            let location = format!("/tenants/{t}/executions?sourceId={source_id}");
            let mut res = (
                StatusCode::ACCEPTED,
                Json(json!({ "sourceId": source_id, "status": "queued", "location": location })),
            )
                .into_response();
            if let Ok(v) = header::HeaderValue::from_str(&location) {
                res.headers_mut().insert(header::LOCATION, v);
            }
            res
        }
    }
}

/// Whether the caller asked for a stream of the turn, refused (`406`) where this deployment
/// cannot follow one.
pub(crate) fn stream_asked(state: &ApiState, headers: &HeaderMap) -> Result<bool, Problem> {
    let streamed = wants_event_stream(headers);
    if streamed && !state.invoker.follows_turns() {
        return Err(Problem::not_acceptable(
            "this deployment cannot stream a turn yet; call without 'Accept: text/event-stream' for the execution",
        ));
    }
    Ok(streamed)
}

/// Whether the caller asked for a stream of the turn (`Accept: text/event-stream`).
fn wants_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream")))
}

/// What a streamed invoke's body carries, in order: the turn's events, then how it ended.
enum Streamed {
    Turn(switchboard_engine::TurnEvent),
    End(Result<Option<Box<ExecutionRecord>>, Problem>),
}

/// A streamed invoke (`contracts/invoke-stream.md`): the turn's events as server-sent events
/// while it runs, then `execution.finished` with the record (or `execution.pending` with where
/// to find it once the wait has passed, or `error` with a problem), and the stream ends. The
/// turn runs in the conversation's queue, not in this request: a client that goes away does not
/// stop or repeat it. A retried call whose execution is recorded (`done`) gets only the end.
fn stream_invoke(state: &ApiState, item: WorkItem, done: Option<ExecutionRecord>, tenant_raw: &str) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use futures::StreamExt;
    use switchboard_engine::Follower;

    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Streamed>();
    let location = format!("/tenants/{tenant_raw}/executions?sourceId={}", item.source_id);
    let source_id = item.source_id.clone();
    match done {
        Some(record) => {
            let _ = tx.send(Streamed::End(Ok(Some(Box::new(record)))));
        }
        None => {
            let invoker = state.invoker.clone();
            let turn = tx.clone();
            let follower = Follower::new(move |event| {
                // Nobody reading any more (the client went away) is fine.
                let _ = turn.send(Streamed::Turn(event));
            });
            tokio::spawn(async move {
                let ended = invoker
                    .invoke_following(item, INVOKE_WAIT, follower)
                    .await
                    .map(|r| r.map(Box::new))
                    .map_err(Problem::from);
                let _ = tx.send(Streamed::End(ended));
            });
        }
    }
    let events = futures::stream::unfold(Some(rx), move |rx| {
        let (location, source_id) = (location.clone(), source_id.clone());
        async move {
            let mut rx = rx?;
            let event = match rx.recv().await? {
                Streamed::Turn(e) => return Some((Event::default().event(e.name()).json_data(&e), Some(rx))),
                Streamed::End(Ok(Some(record))) => Event::default()
                    .event("execution.finished")
                    .json_data(json!({ "event": "execution.finished", "execution": record })),
                Streamed::End(Ok(None)) => Event::default().event("execution.pending").json_data(json!({
                    "event": "execution.pending", "sourceId": source_id, "location": location,
                })),
                Streamed::End(Err(problem)) => {
                    Event::default().event("error").json_data(json!({ "event": "error", "problem": problem.to_json() }))
                }
            };
            Some((event, None))
        }
    });
    Sse::new(events.map(|e| e.map_err(std::io::Error::other))).keep_alive(KeepAlive::default()).into_response()
}
