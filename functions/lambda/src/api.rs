//! internal-api: the axum router of `crates/api` behind API Gateway (REST, `AWS_IAM` auth), so
//! the function itself authenticates nobody (`auth: None`): API Gateway has already checked the
//! caller's SigV4 signature against an IAM policy scoped to `/tenants/<id>/*`. Intake routes to
//! the work queue; `agents/{id}/invoke` enqueues the work item, then waits (bounded, under API
//! Gateway's 29 s) for the agent-executor function to record it, and answers exactly as the
//! embedded profile does. There is no conversation log on AWS (the Conversations Service has it);
//! the event log is DynamoDB's (written with each commit), read by `GET …/events` and, polled, streamed by
//! `GET …/events/stream` (`PolledEvents`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lambda_http::RequestExt;
use lambda_http::request::RequestContext;
use switchboard_api::{ApiState, Invoker, RateLimiter};
use switchboard_aws::TurnLog;
use switchboard_domain::ExecutionRecord;
use switchboard_engine::{ExecutionLog, Follower, RouteError, WorkItem, WorkQueue};
use tower::ServiceExt;
use tower::util::MapRequest;

use crate::wiring::Wiring;

/// How long `invoke` waits for the execution on AWS: under API Gateway's 29 s integration
/// timeout, with room for the request's own work.
pub const INVOKE_WAIT_BOUND: Duration = Duration::from_secs(25);

/// `agents/{id}/invoke` on AWS: enqueues in the conversation's FIFO group (dedup id = the
/// item's source id), then reads the execution record by its source until it appears or the
/// bound passes (`None`: the API answers `202` with where to poll). Reads back off from 50 ms to
/// 1 s, so a turn that takes a few seconds costs about ten strongly consistent reads.
#[derive(Clone)]
pub struct QueueInvoker {
    queue: Arc<dyn WorkQueue>,
    executions: Arc<dyn ExecutionLog>,
    bound: Duration,
    /// Where a followed turn's events are read from; without it, turns cannot be followed.
    turns: Option<TurnLog>,
}

/// The event stream on AWS (`GET …/events/stream`): the tenant's event log read every
/// [`PolledEvents::EVERY`], for [`PolledEvents::FOR`] (inside the function's 29 s); then the
/// stream ends and the reader reconnects with `Last-Event-ID` (the console does, within a
/// second). Needs the API's streaming integration to reach a browser as it goes.
#[derive(Clone)]
pub struct PolledEvents {
    log: Arc<dyn switchboard_engine::EventLog>,
    every: Duration,
    lasting: Duration,
}

impl std::fmt::Debug for PolledEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolledEvents")
            .field("every", &self.every)
            .field("lasting", &self.lasting)
            .finish_non_exhaustive()
    }
}

impl PolledEvents {
    pub const EVERY: Duration = Duration::from_secs(1);
    pub const FOR: Duration = Duration::from_secs(20);

    pub fn new(log: Arc<dyn switchboard_engine::EventLog>) -> Self {
        Self { log, every: Self::EVERY, lasting: Self::FOR }
    }

    /// Reads every `every`, for `lasting` (tests make both short).
    pub fn timed(mut self, every: Duration, lasting: Duration) -> Self {
        (self.every, self.lasting) = (every, lasting);
        self
    }
}

impl switchboard_engine::EventFeed for PolledEvents {
    fn subscribe(&self, tenant: &switchboard_domain::TenantId, after: i64) -> switchboard_engine::LiveEvents {
        use futures::StreamExt;
        let (log, every, tenant) = (Arc::clone(&self.log), self.every, tenant.clone());
        let until = tokio::time::Instant::now() + self.lasting;
        let pages = futures::stream::unfold(after, move |seen| {
            let (log, tenant) = (Arc::clone(&log), tenant.clone());
            async move {
                let now = tokio::time::Instant::now();
                if now >= until {
                    return None;
                }
                tokio::time::sleep(every.min(until - now)).await;
                // A read that fails is tried again at the next tick.
                let events = log.events_after(&tenant, seen, 100).await.unwrap_or_default();
                let next = events.last().map_or(seen, |(seq, _)| *seq);
                Some((futures::stream::iter(events), next))
            }
        });
        pages.flatten().boxed()
    }
}

/// How often a streamed invoke reads the turn log while it waits.
const TURN_POLL: Duration = Duration::from_millis(100);

/// A streamed invoke looks for the record every this many reads of the turn log even without an
/// ended page (a turn that writes none: skipped for a human operator, refused by a limit).
const RECORD_EVERY: u32 = 5;

impl QueueInvoker {
    pub fn new(queue: Arc<dyn WorkQueue>, executions: Arc<dyn ExecutionLog>) -> Self {
        Self { queue, executions, bound: INVOKE_WAIT_BOUND, turns: None }
    }

    /// Streamed invokes follow the turn through `turns`.
    pub fn following(mut self, turns: TurnLog) -> Self {
        self.turns = Some(turns);
        self
    }

    /// Waits at most `bound` (tests use 0: enqueue and answer at once).
    pub fn with_bound(mut self, bound: Duration) -> Self {
        self.bound = bound;
        self
    }
}

impl std::fmt::Debug for QueueInvoker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueInvoker").field("bound", &self.bound).finish_non_exhaustive()
    }
}

#[async_trait]
impl Invoker for QueueInvoker {
    async fn invoke(&self, item: WorkItem, wait: Duration) -> Result<Option<ExecutionRecord>, RouteError> {
        self.queue.enqueue(&item).await?;
        let until = tokio::time::Instant::now() + wait.min(self.bound);
        let mut pause = Duration::from_millis(50);
        loop {
            if let Some(record) = self.executions.execution_for_source(&item.tenant_id, &item.source_id).await? {
                return Ok(Some(record));
            }
            let now = tokio::time::Instant::now();
            if now >= until {
                return Ok(None);
            }
            tokio::time::sleep(pause.min(until - now)).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    fn follows_turns(&self) -> bool {
        self.turns.is_some()
    }

    /// Enqueues as [`Invoker::invoke`] does, then reads the turn's pages every [`TURN_POLL`],
    /// handing their events on, until the record is there (after an ended page, or found on its
    /// own) or the bound passes.
    async fn invoke_following(
        &self,
        item: WorkItem,
        wait: Duration,
        follower: Follower,
    ) -> Result<Option<ExecutionRecord>, RouteError> {
        let Some(turns) = &self.turns else { return self.invoke(item, wait).await };
        let item = WorkItem { follow: true, ..item };
        self.queue.enqueue(&item).await?;
        let until = tokio::time::Instant::now() + wait.min(self.bound);
        let mut after: Option<String> = None;
        let mut reads = 0u32;
        loop {
            let pages = turns.read(&item.tenant_id, &item.source_id, after.as_deref()).await?;
            for event in pages.events {
                follower.send(event);
            }
            if pages.last.is_some() {
                after = pages.last;
            }
            reads += 1;
            // An ended page means a run of the turn was committed (or lost a race and runs again);
            // the other reads find a record no page announces (a turn skipped or refused).
            if (pages.ended || reads.is_multiple_of(RECORD_EVERY))
                && let Some(record) = self.executions.execution_for_source(&item.tenant_id, &item.source_id).await?
            {
                // What the last run wrote after its commit (its ended page) is read on the way.
                let rest = turns.read(&item.tenant_id, &item.source_id, after.as_deref()).await?;
                for event in rest.events {
                    follower.send(event);
                }
                return Ok(Some(record));
            }
            let now = tokio::time::Instant::now();
            if now >= until {
                return Ok(None);
            }
            tokio::time::sleep(TURN_POLL.min(until - now)).await;
        }
    }
}

/// The API's state on the AWS adapters. `limiter`: an optional per-container rate limit (API
/// Gateway usage plans are the real one).
pub fn state(wiring: &Wiring, limiter: Option<Arc<RateLimiter>>) -> ApiState {
    ApiState {
        // `POST /events`: event intake, as the event-router function runs it.
        ingest: Arc::new(wiring.intake.clone()),
        invoker: Arc::new(
            QueueInvoker::new(wiring.queue.clone(), wiring.store.clone()).following(wiring.turns.clone()),
        ),
        executor: wiring.executor.clone(),
        operator: switchboard_engine::Operator::new(wiring.deps.clone()),
        config: wiring.store.clone(),
        admin: wiring.store.clone(),
        sessions: wiring.store.clone(),
        executions: wiring.store.clone(),
        conversations: None,
        // The event log DynamoDB keeps beside EventBridge, and a stream of it, polled.
        events: Some(wiring.store.clone()),
        live: Some(Arc::new(PolledEvents::new(wiring.store.clone()))),
        push: None,
        auth: None,
        limiter,
        // API Gateway delivers the whole body in the event; nothing is read from a socket.
        body_timeout: switchboard_api::DEFAULT_BODY_TIMEOUT,
        ready: None,
        metrics: None,
        // One dead-letter queue for every tenant: counted by the stack's alarm, not per tenant.
        dead_letters: None,
        replayer: None,
        secrets: wiring.secrets.clone(),
        // The internal-api makes no call to a tenant's server: the CLI lists MCP servers itself.
        tool_servers: None,
    }
}

/// `lambda_http` puts the REST API's stage in front of the path (`/prod/tenants/…`); the API's
/// routes start at `/tenants`, so the stage segment is taken off again. The caller API Gateway
/// admitted is named here too (`Caller::iam`).
pub fn strip_stage(mut request: lambda_http::Request) -> lambda_http::Request {
    let (stage, principal) = match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV1(ctx)) => (ctx.stage.clone(), iam_principal(&ctx.identity)),
        _ => (None, None),
    };
    // API Gateway's IAM auth has admitted the caller to this route; it is named on what it does.
    request.extensions_mut().insert(switchboard_api::Caller::iam(principal.unwrap_or_else(|| "iam".to_owned())));
    let Some(stage) = stage else { return request };
    let prefix = format!("/{stage}");
    let path_and_query = request.uri().path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_default();
    let Some(rest) = path_and_query.strip_prefix(&prefix).filter(|r| r.starts_with('/')) else { return request };
    let mut parts = request.uri().clone().into_parts();
    if let Ok(p) = rest.parse() {
        parts.path_and_query = Some(p);
        if let Ok(uri) = lambda_http::http::Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
    request
}

/// The IAM principal API Gateway authenticated: its ARN (`arn:aws:sts::…:assumed-role/R/alice`),
/// else the caller id (`AROA…:alice`).
fn iam_principal(identity: &aws_lambda_events::apigw::ApiGatewayRequestIdentity) -> Option<String> {
    // (an IAM ARN is at most 2048 characters; records keep at most 512 of a name)
    identity.user_arn.clone().or_else(|| identity.caller.clone()).filter(|p| !p.is_empty() && p.len() <= 512)
}

/// The API as the Lambda runtime calls it: stage stripped and the caller named, then the
/// `crates/api` router.
pub fn app(state: ApiState) -> MapRequest<axum::Router, fn(lambda_http::Request) -> lambda_http::Request> {
    switchboard_api::routes(state).map_request(strip_stage as fn(lambda_http::Request) -> lambda_http::Request)
}

/// Serves the configuration half of the API (`internal-api`; `template.yaml` sends it its paths).
pub async fn serve_configuration(wiring: &Wiring) -> Result<(), lambda_http::Error> {
    serve(wiring, switchboard_api::configuration_api).await
}

/// Serves the operations half of the API (`operations-api`; `template.yaml` sends it its paths).
pub async fn serve_operations(wiring: &Wiring) -> Result<(), lambda_http::Error> {
    serve(wiring, switchboard_api::operations_api).await
}

/// Serves webhook triggers' deliveries (`webhook-intake`; `template.yaml` sends it `/hooks/…`).
pub async fn serve_hooks(wiring: &Wiring) -> Result<(), lambda_http::Error> {
    serve(wiring, switchboard_api::hooks_api).await
}

/// Serves `half` of the API through the Lambda runtime (API Gateway REST proxy events). Each
/// function's `main` names one of the two above, so its binary holds only that half's handlers:
/// nothing reachable names the other's, and the linker leaves it out.
async fn serve(wiring: &Wiring, half: fn(ApiState) -> axum::Router) -> Result<(), lambda_http::Error> {
    // Each request's spans are sent before its answer returns (a frozen container sends nothing).
    let mut state = state(wiring, None);
    state.push = push_tickets(wiring, |name| std::env::var(name).ok());
    let router = half(state).layer(axum::middleware::from_fn(
        |req: axum::extract::Request, next: axum::middleware::Next| async move {
            let res = next.run(req).await;
            crate::wiring::flush_traces().await;
            res
        },
    ));
    let app = router.map_request(strip_stage as fn(lambda_http::Request) -> lambda_http::Request);
    if streams_responses(|name| std::env::var(name).ok()) {
        // API Gateway's integration streams (the template's `responseTransferMode: STREAM`):
        // every answer goes out as it is written, a streamed invoke's events included.
        lambda_http::run_with_streaming_response(app).await
    } else {
        lambda_http::run(app).await
    }
}

/// Tickets for the console push when the stack has its WebSocket API (`SWITCHBOARD_PUSH_URL`,
/// `wss://<api id>.execute-api.<region>.amazonaws.com/<stage>`); without it
/// `POST /tenants/{t}/events/push` answers 404 and consoles read the polled stream.
pub fn push_tickets(
    wiring: &Wiring,
    var: impl Fn(&str) -> Option<String>,
) -> Option<Arc<dyn switchboard_engine::PushTickets>> {
    let url = var("SWITCHBOARD_PUSH_URL").map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())?;
    Some(Arc::new(switchboard_aws::DynamoPushTickets { store: wiring.store.clone(), url }))
}

/// Whether the function answers in Lambda's response-streaming format
/// (`SWITCHBOARD_API_RESPONSE_STREAMING=true`, which the template sets together with the API's
/// streaming integration: the two must agree, or API Gateway cannot read the answer).
pub fn streams_responses(var: impl Fn(&str) -> Option<String>) -> bool {
    var("SWITCHBOARD_API_RESPONSE_STREAMING").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_function_streams_its_answers_only_when_the_template_says_so() {
        let with =
            |v: &'static str| move |name: &str| (name == "SWITCHBOARD_API_RESPONSE_STREAMING").then(|| v.to_owned());
        assert!(streams_responses(with("true")));
        assert!(streams_responses(with(" TRUE ")));
        assert!(!streams_responses(with("1")), "only `true`, as the template writes it");
        assert!(!streams_responses(|_| None));
    }
}
