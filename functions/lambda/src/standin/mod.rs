//! The Conversations Service stand-in (the optional `conversations-standin` function, deployed
//! when the stack's `ConversationsStandIn` is `true`), so that the AWS profile can be tried
//! without a Conversations Service of one's own. It keeps `contracts/conversations-service.md`
//! — a reply posted under an idempotency key, a conversation's history — and adds a way for a
//! person to be the customer (`customer-messages`: stored, then put on the conversations bus as
//! `message.new`, as a real service would) and the example tenant's order lookup
//! ([`orders`]). API Gateway checks IAM (SigV4) on every route but the order lookup, which checks
//! Switchboard's webhook signature instead, so this code authenticates nobody. It is a stand-in,
//! not a messaging product: no channels, no delivery to anyone, no customer identity.

pub mod orders;

use std::sync::Arc;

use aws_config::SdkConfig;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, RawQuery, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_api::Problem;
use switchboard_aws::dynamo::Recorded;
use switchboard_aws::{DynamoMessageLog, EventBridgeBus, SecretsManagerSecrets};
use switchboard_domain::ids::check_external_id;
use switchboard_domain::limits::MAX_MESSAGE_TEXT_BYTES;
use switchboard_domain::{TenantId, ValidationErrors};
use switchboard_engine::{Clock, Sender, SystemClock};
use tower::ServiceExt;
use tower::util::MapRequest;

/// Messages a history read answers at most, whatever `limit` asks (the contract allows fewer).
pub const MAX_HISTORY: usize = 100;
/// Messages a history read answers when it names no `limit`.
pub const DEFAULT_HISTORY: usize = 20;
/// The longest `Idempotency-Key` taken (DynamoDB sort keys hold 1 KiB).
pub const MAX_KEY_BYTES: usize = 512;

/// What the stand-in works with, built once per container.
#[derive(Debug, Clone)]
pub struct StandIn {
    pub log: DynamoMessageLog,
    /// The bus Switchboard's `message.new` rule listens on (`ConversationsEventBusName`).
    pub bus: EventBridgeBus,
    /// The example order lookup; `None` answers it 404.
    pub orders: Option<orders::Orders>,
}

impl StandIn {
    /// From the function's environment: `SWITCHBOARD_STANDIN_TABLE`, `SWITCHBOARD_STANDIN_EVENT_BUS`
    /// and, for the order lookup, `SWITCHBOARD_STANDIN_ORDERS_TENANT` (whose secret
    /// `switchboard/<tenant>/orders` signs the example tenant's order tool).
    pub fn from_env(sdk: &SdkConfig) -> Result<Self, String> {
        Self::from_vars(sdk, |name| std::env::var(name).ok())
    }

    /// [`StandIn::from_env`] with the variables read through `var` (tests).
    pub fn from_vars(sdk: &SdkConfig, var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let set = |name: &str| var(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let required = |name: &str| set(name).ok_or_else(|| format!("environment variable {name} is not set"));
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let orders = match set("SWITCHBOARD_STANDIN_ORDERS_TENANT") {
            Some(t) => {
                let tenant = t.parse().map_err(|e| format!("SWITCHBOARD_STANDIN_ORDERS_TENANT: {e}"))?;
                let secrets = Arc::new(SecretsManagerSecrets::from_config(sdk));
                Some(orders::Orders { tenant, secrets, clock: clock.clone() })
            }
            None => None,
        };
        Ok(Self {
            log: DynamoMessageLog::from_config(sdk, required("SWITCHBOARD_STANDIN_TABLE")?, clock),
            bus: EventBridgeBus::from_config(sdk, required("SWITCHBOARD_STANDIN_EVENT_BUS")?),
            orders,
        })
    }
}

/// The stand-in's routes, at the stage's root.
pub fn routes(standin: Arc<StandIn>) -> axum::Router {
    axum::Router::new()
        .route("/tenants/{tenant}/conversations/{conversation}/messages", post(post_reply).get(history))
        .route("/tenants/{tenant}/conversations/{conversation}/customer-messages", post(post_customer_message))
        .route("/example/orders", post(orders::lookup))
        .fallback(|| async { Problem::not_found("no such route on the Conversations Service stand-in") })
        .method_not_allowed_fallback(|| async { Problem::method_not_allowed() })
        .with_state(standin)
}

/// The routes as the Lambda runtime calls them: the stage taken off the path first.
pub fn app(standin: Arc<StandIn>) -> MapRequest<axum::Router, fn(lambda_http::Request) -> lambda_http::Request> {
    routes(standin).map_request(crate::api::strip_stage as fn(lambda_http::Request) -> lambda_http::Request)
}

/// Serves API Gateway's REST proxy events until the runtime stops.
pub async fn serve(standin: &Arc<StandIn>) -> Result<(), lambda_http::Error> {
    lambda_http::run(app(standin.clone())).await
}

/// The tenant and conversation of the path, each an external id (`check_external_id`), or the
/// API's problem naming the segment at fault.
#[derive(Debug, Clone)]
pub struct ConversationPath {
    pub tenant: TenantId,
    pub conversation: String,
}

impl<S: Send + Sync> FromRequestParts<S> for ConversationPath {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        let Path((tenant, conversation)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|_| Problem::not_found("no such conversation"))?;
        let mut errors = ValidationErrors::default();
        let parsed = tenant.parse::<TenantId>().map_err(|e| errors.push("/path/tenantId", e.to_string()));
        if let Err(e) = check_external_id(&conversation) {
            errors.push("/path/conversationId", e.to_string());
        }
        match parsed {
            Ok(tenant) if errors.is_empty() => Ok(Self { tenant, conversation }),
            _ => Err(Problem::invalid(errors)),
        }
    }
}

/// A message's body: `text`, and who wrote it (`agent` unless said; the operator's name is
/// taken and not kept, as the contract allows).
#[derive(Debug, Deserialize)]
struct MessageBody {
    text: String,
    #[serde(default)]
    sender: Option<Sender>,
    #[serde(default)]
    platform: Option<String>,
}

/// The body as a [`MessageBody`] whose text is 1 to [`MAX_MESSAGE_TEXT_BYTES`] bytes.
fn read_body(body: &[u8]) -> Result<MessageBody, ValidationErrors> {
    let value: Value = serde_json::from_slice(body).map_err(|e| switchboard_domain::input::not_json(&e))?;
    let message: MessageBody = switchboard_domain::input::read_value(value, "")?;
    match message.text.len() {
        0 => Err(ValidationErrors::single("/text", "must not be empty")),
        n if n > MAX_MESSAGE_TEXT_BYTES => {
            Err(ValidationErrors::single("/text", format!("is longer than {MAX_MESSAGE_TEXT_BYTES} bytes")))
        }
        _ => Ok(message),
    }
}

/// The `Idempotency-Key` header: `None` when absent, an error when it is unusable.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ValidationErrors> {
    let Some(value) = headers.get("idempotency-key") else { return Ok(None) };
    match value.to_str() {
        Ok(k) if !k.is_empty() && k.len() <= MAX_KEY_BYTES => Ok(Some(k.to_owned())),
        _ => Err(ValidationErrors::single(
            "/headers/Idempotency-Key",
            format!("must be 1 to {MAX_KEY_BYTES} bytes of visible ASCII"),
        )),
    }
}

/// `201 {messageId}`, or `200 {messageId, duplicate: true}` for a key used before.
fn sent(recorded: &Recorded) -> Response {
    let id = &recorded.message.message_id;
    match recorded.duplicate {
        true => (StatusCode::OK, Json(json!({ "messageId": id, "duplicate": true }))).into_response(),
        false => (StatusCode::CREATED, Json(json!({ "messageId": id }))).into_response(),
    }
}

/// `POST …/messages`: a reply (Switchboard's agent, or a human operator with `sender: human`),
/// once per `Idempotency-Key`, which is required.
async fn post_reply(
    State(standin): State<Arc<StandIn>>,
    path: ConversationPath,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Problem> {
    let key = idempotency_key(&headers).map_err(Problem::invalid)?;
    let key = key.ok_or_else(|| {
        Problem::invalid(ValidationErrors::single(
            "/headers/Idempotency-Key",
            "is required: a retried reply must not be sent twice",
        ))
    })?;
    let message = read_body(&body).map_err(Problem::invalid)?;
    let sender = match message.sender.unwrap_or(Sender::Agent) {
        Sender::Customer => Err(Problem::invalid(ValidationErrors::single(
            "/sender",
            "must be agent or human; a customer's message goes to …/customer-messages",
        ))),
        sender => Ok(sender),
    }?;
    let recorded = standin.log.append(&path.tenant, &path.conversation, sender, &message.text, Some(&key)).await?;
    tracing::info!(
        tenant = %path.tenant,
        conversation = %path.conversation,
        message_id = %recorded.message.message_id,
        duplicate = recorded.duplicate,
        "reply stored"
    );
    Ok(sent(&recorded))
}

/// `GET …/messages?limit=n`: the newest `n` (default [`DEFAULT_HISTORY`], at most
/// [`MAX_HISTORY`]) messages, oldest first.
async fn history(
    State(standin): State<Arc<StandIn>>,
    path: ConversationPath,
    RawQuery(query): RawQuery,
) -> Result<Response, Problem> {
    let limit = history_limit(query.as_deref()).map_err(Problem::invalid)?;
    let messages = standin.log.newest(&path.tenant, &path.conversation, limit).await?;
    Ok(Json(json!({ "messages": messages })).into_response())
}

/// `limit` of a query string: a whole number from 1, cut to [`MAX_HISTORY`].
fn history_limit(query: Option<&str>) -> Result<usize, ValidationErrors> {
    let given = query.unwrap_or_default().split('&').find_map(|pair| pair.strip_prefix("limit="));
    match given.map(str::parse::<usize>) {
        None => Ok(DEFAULT_HISTORY),
        Some(Ok(n)) if n >= 1 => Ok(n.min(MAX_HISTORY)),
        Some(_) => Err(ValidationErrors::single("/query/limit", "must be a whole number from 1")),
    }
}

/// `POST …/customer-messages {"text", "platform"?}`: the customer's message is stored, then
/// put on the bus as `message.new` (platform `webchat` unless said). With an `Idempotency-Key`,
/// a retry stores nothing new and puts the first message's event again, under the same message
/// id — which Switchboard answers once — so a failed put is mended by retrying.
async fn post_customer_message(
    State(standin): State<Arc<StandIn>>,
    path: ConversationPath,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Problem> {
    let key = idempotency_key(&headers).map_err(Problem::invalid)?;
    let message = read_body(&body).map_err(Problem::invalid)?;
    if message.sender.is_some_and(|s| s != Sender::Customer) {
        let why = "must be customer, or left out; replies go to …/messages";
        return Err(Problem::invalid(ValidationErrors::single("/sender", why)));
    }
    let platform = message.platform.unwrap_or_else(|| "webchat".to_owned());
    let (tenant, conversation) = (&path.tenant, &path.conversation);
    let recorded = standin.log.append(tenant, conversation, Sender::Customer, &message.text, key.as_deref()).await?;
    let id = &recorded.message.message_id;
    let detail = json!({
        "tenantId": tenant,
        "conversationId": conversation,
        "messageId": id,
        "channel": { "platform": platform },
        "conversation": { "status": "open" },
        "message": { "direction": "inbound", "text": recorded.message.text },
    });
    if let Err(e) = standin.bus.put_message_new(&detail, id).await {
        tracing::error!(tenant = %tenant, message_id = %id, error = %e.message, "message stored, event not put");
        return Err(Problem::unavailable());
    }
    tracing::info!(tenant = %tenant, conversation = %conversation, message_id = %id, "customer message put");
    Ok(sent(&recorded))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_limit_is_a_whole_number_from_one_cut_to_the_most() {
        assert_eq!(history_limit(None).ok(), Some(DEFAULT_HISTORY));
        assert_eq!(history_limit(Some("limit=3")).ok(), Some(3));
        assert_eq!(history_limit(Some("x=1&limit=100000")).ok(), Some(MAX_HISTORY));
        for bad in ["limit=0", "limit=-1", "limit=two", "limit="] {
            assert!(history_limit(Some(bad)).is_err(), "{bad}");
        }
    }
}
