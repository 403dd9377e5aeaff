//! Events in and out. In: `POST /events`, an inbound event as the AWS profile's bus delivers it
//! (routed to an agent, or recorded). Out: the tenant's published events as a page
//! (`GET …/events`), as a live Server-Sent Events stream (`GET …/events/stream`), or a ticket for
//! the AWS profile's WebSocket push (`POST …/events/push`). What the events mean is the engine's.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use switchboard_domain::{InboundEvent, ValidationErrors};
use switchboard_engine::RouteOutcome;

use crate::auth::Caller;
use crate::extract::{Query, Tenant, page_limit};
use crate::problem::Problem;
use crate::state::ApiState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PostEventQuery {
    /// Seconds to wait for the resulting execution (embedded profile), 1 to 60.
    wait: Option<u64>,
}

/// Longest `?wait=` accepted.
const MAX_WAIT_SECS: u64 = 60;

/// Most logged events one stream replays before going live.
const MAX_REPLAY: usize = 1000;

/// `POST /events[?wait=s]`: an inbound event for a tenant the caller may act for; `202` with what
/// became of it (and, when waited for, its message's execution: the first event's, for a repeat).
pub(crate) async fn post_event(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Query(q): Query<PostEventQuery>,
    bytes: Bytes,
) -> Result<Response, Problem> {
    let wait = match q.wait {
        None => None,
        Some(s) if (1..=MAX_WAIT_SECS).contains(&s) => Some(std::time::Duration::from_secs(s)),
        Some(_) => {
            return Err(Problem::invalid(ValidationErrors::single(
                "/query/wait",
                format!("must be between 1 and {MAX_WAIT_SECS} seconds"),
            )));
        }
    };
    // The gate has refused a body that is not JSON or is over the limit; the event has its own
    // parser, which names the field at fault in the envelope's words.
    let event = InboundEvent::parse_bytes(&bytes).map_err(Problem::invalid)?;
    if !caller.may_access(&event.detail.tenant_id) {
        return Err(Problem::unknown_tenant("/detail/tenantId", event.detail.tenant_id.as_str()));
    }
    let (outcome, execution) = match wait {
        Some(w) => state.ingest.ingest_and_wait(&event, w).await?,
        None => (state.ingest.ingest(&event).await?, None),
    };
    let mut body = json!({ "eventId": event.id, "outcome": outcome.as_str() });
    let queued = matches!(
        outcome,
        RouteOutcome::Enqueued { .. } | RouteOutcome::HumanOwned { .. } | RouteOutcome::Limited { .. }
    );
    if queued {
        // Where its execution will be: the message's, not the event's (a repeat under another
        // event id points at the same one).
        body["sourceId"] = json!(switchboard_engine::intake::source_id(&event));
    }
    match outcome {
        RouteOutcome::Enqueued { trigger_id, agent_id, .. } => {
            body["triggerId"] = json!(trigger_id);
            body["agentId"] = json!(agent_id);
        }
        RouteOutcome::HumanOwned { session_id } => body["sessionId"] = json!(session_id),
        RouteOutcome::Limited { agent_id, limit, .. } => {
            body["agentId"] = json!(agent_id);
            body["limit"] = json!(limit);
        }
        RouteOutcome::NoMatch | RouteOutcome::NotInbound | RouteOutcome::Suspended => {}
    }
    if let (Some(e), Some(obj)) = (execution, body.as_object_mut()) {
        obj.insert("execution".into(), json!(e));
    }
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    after: Option<i64>,
    limit: Option<usize>,
}

/// `GET /tenants/{t}/events[?after&limit]`: the tenant's logged events after a sequence number.
pub(crate) async fn list_events(
    State(state): State<Arc<ApiState>>,
    Query(q): Query<EventsQuery>,
    tenant: Result<Tenant, Problem>,
) -> Result<Response, Problem> {
    let limit = page_limit(q.limit)?;
    let Tenant(t) = tenant?;
    let Some(log) = &state.events else {
        return Err(Problem::not_found("this deployment keeps no event log; subscribe to EventBridge"));
    };
    let events = log.events_after(&t, q.after.unwrap_or(0), limit).await?;
    let items: Vec<_> = events.into_iter().map(|(seq, e)| json!({ "seq": seq, "event": e })).collect();
    Ok(Json(json!({ "events": items })).into_response())
}

/// Server-Sent Events for an operator UI: first the tenant's logged events after `after` (or the
/// `Last-Event-ID` a reconnecting browser sends), then live ones as they are published. Each SSE
/// event carries the log sequence number as its id and the detail-type as its event name.
pub(crate) async fn stream_events(
    State(state): State<Arc<ApiState>>,
    Query(q): Query<EventsQuery>,
    Tenant(t): Tenant,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use futures::StreamExt;

    let (Some(log), Some(live)) = (&state.events, &state.live) else {
        return Err(Problem::not_found("this deployment has no event stream; subscribe to EventBridge"));
    };
    let last_seen = headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<i64>().ok());
    let after = last_seen.or(q.after).unwrap_or(0);
    // Subscribe before reading the log so nothing published in between is missed; the live
    // part then skips what the replay already sent.
    let live = live.subscribe(&t, after);
    let replay = log.events_after(&t, after, MAX_REPLAY).await?;
    let replayed_up_to = replay.last().map_or(after, |(seq, _)| *seq);
    let tenant = t.clone();
    let live = live.filter(move |(seq, e)| futures::future::ready(*seq > replayed_up_to && e.tenant_id == tenant));
    let stream = futures::stream::iter(replay)
        .chain(live)
        .map(|(seq, e)| Event::default().id(seq.to_string()).event(e.detail_type.clone()).json_data(&e));
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}

/// `POST /tenants/{t}/events/push`: a single-use ticket (valid a minute) to open the live push
/// WebSocket for this tenant (AWS profile). 404 where there is none: the embedded profile
/// streams over `GET …/events/stream` instead.
pub(crate) async fn push_ticket(State(state): State<Arc<ApiState>>, Tenant(t): Tenant) -> Result<Response, Problem> {
    let Some(push) = &state.push else {
        return Err(Problem::not_found(format!(
            "this deployment has no live push; read GET /tenants/{t}/events/stream"
        )));
    };
    let ticket = push.issue(&t).await?;
    let body = json!({ "ticket": ticket.ticket, "url": ticket.url, "tenantId": t, "expiresAt": ticket.expires_at });
    let mut res = (StatusCode::CREATED, Json(body)).into_response();
    res.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
    Ok(res)
}
