//! Turns a trigger starts when asked rather than on a message: a `manual` trigger's run
//! (`POST /tenants/{t}/triggers/{id}/run`, by a caller of the API) and a `webhook` trigger's
//! delivery (`POST /hooks/{t}/{id}`, by another system, signed with the trigger's secret in the
//! Standard Webhooks scheme). Both are turns like an invoke's ([`super::start_turn`]): in the
//! conversation's queue, under the tenant's limits, recorded with the trigger.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_domain::ids::check_external_id;
use switchboard_domain::limits::MAX_MESSAGE_TEXT_BYTES;
use switchboard_domain::webhook::standard;
use switchboard_domain::{EventType, TenantId, Trigger, TriggerId, TriggerStatus, ValidationErrors, WebhookSource};
use switchboard_engine::{ConfigKind, ConfigRecord};

use super::{INVOKE_WAIT, Start, Wait, idempotency_key, start_turn, stream_asked};
use crate::extract::{JsonBody, Query, Tenant};
use crate::problem::Problem;
use crate::state::ApiState;

/// A manual trigger's run: the text the agent is given, on which conversation (absent: one of
/// its own), with what the record keeps beside it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RunBody {
    input: String,
    #[serde(default)]
    conversation_id: Option<String>,
    #[serde(default)]
    metadata: Option<serde_json::Map<String, Value>>,
}

/// `POST /tenants/{t}/triggers/{id}/run`: starts a manual trigger's agent with the body's input,
/// if the trigger's conditions hold for it, and answers as an invoke does (the execution, `202`
/// with where it will be, or its events with `Accept: text/event-stream`).
pub(crate) async fn run(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    Path((_, trigger_raw)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<JsonBody<RunBody>, Problem>,
) -> Result<Response, Problem> {
    let trigger = manual_trigger(&state, &t, &trigger_raw).await?;
    // An unknown trigger is told before a bad body.
    let JsonBody(body) = body?;
    let mut errors = ValidationErrors::default();
    if body.input.trim().is_empty() {
        errors.push("/input", "must not be blank");
    } else if body.input.len() > MAX_MESSAGE_TEXT_BYTES {
        errors.push("/input", format!("must be at most {MAX_MESSAGE_TEXT_BYTES} bytes"));
    }
    if let Some(c) = &body.conversation_id
        && let Err(e) = check_external_id(c)
    {
        errors.push("/conversationId", e.to_string());
    }
    let key = idempotency_key(&headers, &mut errors);
    errors.into_result().map_err(Problem::invalid)?;
    let streamed = stream_asked(&state, &headers)?;
    // A key names the run within the trigger; without one every call is a run of its own.
    let run = key.clone().unwrap_or_else(|| ulid::Ulid::generate().to_string());
    let conversation_id = body.conversation_id.unwrap_or_else(|| format!("manual-{}", ulid::Ulid::generate()));
    let detail = json!({
        "tenantId": t, "conversationId": conversation_id, "input": body.input, "metadata": body.metadata,
        "manual": { "triggerId": trigger.trigger_id },
    });
    if !trigger.conditions.matches_in(&detail, state.executor.deps().clock.now(), &calendars(&state, &t).await?) {
        return Err(Problem::conflict(format!(
            "the conditions of trigger {} do not hold for this run; POST /tenants/{t}/triggers/test explains them",
            trigger.trigger_id
        )));
    }
    let (agent, variant) = active_agent(&state, &trigger, &conversation_id).await?;
    let start = Start {
        source_id: format!("manual-{}-{run}", trigger.trigger_id),
        conversation_id,
        text: body.input,
        detail,
        trigger: Some((trigger.trigger_id, trigger.version)),
        variant,
    };
    let wait = if streamed { Wait::Stream } else { Wait::For(INVOKE_WAIT) };
    start_turn(&state, &agent, start, key.is_some(), wait).await
}

/// The tenant's trigger `raw` if it is an active manual one; else why it cannot be run.
async fn manual_trigger(state: &ApiState, t: &TenantId, raw: &str) -> Result<Trigger, Problem> {
    let no_trigger = || Problem::not_found(format!("no trigger '{raw}'"));
    let id: TriggerId = raw.parse().map_err(|_| no_trigger())?;
    let Some(ConfigRecord::Trigger(trigger)) = state.admin.get_config(t, ConfigKind::Trigger, &id.to_string()).await?
    else {
        return Err(no_trigger());
    };
    if trigger.event_type != EventType::Manual {
        return Err(Problem::conflict(format!(
            "trigger {id} is not a manual trigger; only a trigger with eventType 'manual' is run by hand"
        )));
    }
    if trigger.status != TriggerStatus::Active {
        return Err(Problem::conflict(format!("trigger {id} is not active")));
    }
    Ok(trigger)
}

/// The tenant's business-hours calendars, which the trigger's time conditions may name.
async fn calendars(state: &ApiState, t: &TenantId) -> Result<switchboard_domain::calendar::Calendars, Problem> {
    Ok(state.config.get_tenant(t).await?.map(|tenant| tenant.calendars).unwrap_or_default())
}

/// The active agent the trigger answers `conversation` with (its split's variant, or its own
/// agent), and the variant's name; else why it cannot run.
async fn active_agent(
    state: &ApiState,
    trigger: &Trigger,
    conversation: &str,
) -> Result<(switchboard_domain::Agent, Option<String>), Problem> {
    if let Some(chosen) =
        switchboard_engine::config::trigger_agent(state.config.as_ref(), trigger, conversation).await?
    {
        return Ok(chosen);
    }
    match state.config.get_agent(&trigger.tenant_id, trigger.agent_id).await? {
        Some(_) => Err(Problem::conflict(format!("agent {} is not active", trigger.agent_id))),
        None => Err(Problem::conflict(format!(
            "trigger {}'s agent {} does not exist",
            trigger.trigger_id, trigger.agent_id
        ))),
    }
}

/// `POST /hooks/{t}/{id}`: a webhook trigger's delivery. Not behind the API's authentication:
/// the Standard Webhooks signature under the trigger's secret is the authentication, checked
/// before anything else is read. Every request that cannot be verified — no such tenant or
/// trigger, no secret, a bad or stale signature — answers the same `401`, so that the endpoint
/// tells a stranger nothing. A verified delivery is queued and answered `202` at once (or, with
/// `?wait=s`, once its execution is recorded); a repeat of one (the same `webhook-id`) answers as
/// the first did and starts nothing.
pub(crate) async fn deliver(
    State(state): State<Arc<ApiState>>,
    Path((tenant_raw, trigger_raw)): Path<(String, String)>,
    query: Result<Query<DeliverQuery>, Problem>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Problem> {
    let (trigger, source, id) = verified(&state, &tenant_raw, &trigger_raw, &headers, &body).await?;
    // Read once verified: a stranger learns nothing from a bad query either.
    let Query(query) = query?;
    let wait = match query.wait {
        None => Wait::Queued,
        Some(s) if (1..=MAX_DELIVERY_WAIT_SECS).contains(&s) => Wait::For(std::time::Duration::from_secs(s)),
        Some(_) => {
            return Err(Problem::invalid(ValidationErrors::single(
                "/query/wait",
                format!("must be between 1 and {MAX_DELIVERY_WAIT_SECS} seconds"),
            )));
        }
    };
    // Counted once verified, so that made-up tenants do not grow the limiter's table.
    if let Some(limiter) = &state.limiter
        && let Err(retry_after) = limiter.check(trigger.tenant_id.as_str())
    {
        return Err(Problem::rate_limited(retry_after.as_secs().max(1)));
    }
    let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
        return Err(Problem::invalid(ValidationErrors::single("", "the body is not JSON")));
    };
    let t = &trigger.tenant_id;
    let source_id = format!("webhook-{}-{id}", trigger.trigger_id);
    let conversation_id = source.conversation_in(&payload).unwrap_or_else(|| format!("webhook-{id}"));
    let detail = json!({
        "tenantId": t, "conversationId": conversation_id,
        "webhook": { "triggerId": trigger.trigger_id, "id": id, "body": payload },
    });
    let calendars = calendars(&state, &trigger.tenant_id).await?;
    if !trigger.conditions.matches_in(&detail, state.executor.deps().clock.now(), &calendars) {
        // Answered 2xx: a sender retries anything else, and the body will not change.
        tracing::info!(tenant = %t, trigger_id = %trigger.trigger_id, "webhook delivery ignored: conditions do not hold");
        return Ok((
            StatusCode::OK,
            Json(json!({ "status": "ignored", "reason": "the trigger's conditions do not hold" })),
        )
            .into_response());
    }
    let (agent, variant) = active_agent(&state, &trigger, &conversation_id).await?;
    // The body as the agent's text, as it came: it is JSON of at most the text limit.
    let text = String::from_utf8_lossy(&body).into_owned();
    let trigger = Some((trigger.trigger_id, trigger.version));
    let start = Start { source_id, conversation_id, text, detail, trigger, variant };
    start_turn(&state, &agent, start, true, wait).await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeliverQuery {
    /// Seconds to wait for the delivery's execution (trying a trigger out); senders leave it out.
    wait: Option<u64>,
}

/// Longest `?wait=` of a delivery.
const MAX_DELIVERY_WAIT_SECS: u64 = 30;

/// The active webhook trigger the request is for, its source and the delivery's `webhook-id`,
/// once the signature is verified.
async fn verified(
    state: &ApiState,
    tenant_raw: &str,
    trigger_raw: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(Trigger, WebhookSource, String), Problem> {
    let refuse = |why: &str| {
        tracing::info!(tenant = tenant_raw, trigger = trigger_raw, why, "webhook delivery refused");
        Problem::bad_signature()
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("");
    let (id, timestamp, signature) =
        (header(standard::ID_HEADER), header(standard::TIMESTAMP_HEADER), header(standard::SIGNATURE_HEADER));
    if id.is_empty() || timestamp.is_empty() || signature.is_empty() {
        return Err(refuse("a Standard Webhooks header is missing"));
    }
    let (Ok(t), Ok(trigger_id)) = (tenant_raw.parse::<TenantId>(), trigger_raw.parse::<TriggerId>()) else {
        return Err(refuse("no such tenant or trigger"));
    };
    let triggers = state.config.active_triggers(&t, EventType::Webhook).await?;
    let Some(trigger) = triggers.iter().find(|tr| tr.trigger_id == trigger_id).cloned() else {
        return Err(refuse("no such active webhook trigger"));
    };
    let Some(source) = trigger.webhook.clone() else { return Err(refuse("the trigger has no webhook source")) };
    let secret = match state.secrets.get_secret(&t, &source.secret_ref).await {
        Ok(Some(secret)) => secret,
        Ok(None) => return Err(refuse("the trigger's secret is missing")),
        Err(e) => {
            tracing::warn!(tenant = %t, error = %e, "a webhook trigger's secret could not be read");
            return Err(Problem::unavailable());
        }
    };
    let Ok(key) = standard::Key::from_secret(&secret) else {
        return Err(refuse("the trigger's secret is not a Standard Webhooks secret (whsec_…)"));
    };
    let now = state.executor.deps().clock.now().timestamp();
    if let Err(e) = standard::verify(&key, id, timestamp, signature, body, now) {
        return Err(refuse(&e.to_string()));
    }
    // Verified; the id now names the delivery in ids of this tenant's records.
    if check_external_id(id).is_err() {
        return Err(Problem::invalid(ValidationErrors::single(
            "/headers/webhook-id",
            "must be 1 to 63 characters of letters, digits, '-', '_' or '.'",
        )));
    }
    Ok((trigger, source, id.to_owned()))
}
