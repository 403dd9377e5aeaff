//! Live push to operator consoles on AWS: each event on the Switchboard bus that a console shows
//! (`session.*`) is posted to every WebSocket connection its tenant's consoles opened, through
//! API Gateway's management API (`POST <endpoint>/@connections/<id>`, SigV4 for
//! `execute-api`). A connection that answers `410 Gone` has closed and is forgotten; any other
//! failure is logged and the event is not retried here: it is in the tenant's event log already
//! (`GET /tenants/{t}/events`), which a console reads after every push and on reconnecting.
//! Which connections belong to which tenant: [`crate::DynamoStore::open_push_connection`].

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_config::SdkConfig;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use futures::StreamExt;
use switchboard_domain::TenantId;
use switchboard_engine::StoreError;

use crate::DynamoStore;
use crate::sigv4::{self, EXECUTE_API, UnsignedRequest};

/// Connections posted to at once.
const CONCURRENCY: usize = 16;

/// How one post went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    Sent,
    /// The connection has closed (`410 Gone`).
    Gone,
    Failed(String),
}

/// What one event's fan-out did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushReport {
    pub sent: usize,
    /// Closed connections found (and forgotten).
    pub gone: usize,
    pub failed: usize,
}

/// API Gateway's management API for one WebSocket stage.
#[derive(Debug, Clone)]
pub struct ManagementApi {
    http: reqwest::Client,
    endpoint: url::Url,
    region: String,
    credentials: Option<SharedCredentialsProvider>,
}

impl ManagementApi {
    /// The management API at `endpoint` (`https://<api id>.execute-api.<region>.amazonaws.com/<stage>`),
    /// signing with the region and credentials of `config`.
    pub fn new(config: &SdkConfig, endpoint: &str) -> Result<Self, String> {
        let endpoint = url::Url::parse(endpoint.trim_end_matches('/'))
            .map_err(|e| format!("push endpoint {endpoint:?} is not a URL: {e}"))?;
        if endpoint.cannot_be_a_base() {
            return Err(format!("push endpoint {endpoint} cannot have a path"));
        }
        let http = switchboard_https::client_builder()
            .map_err(|e| e.to_string())?
            .timeout(Duration::from_secs(5))
            .connect_timeout(Duration::from_secs(2))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("build the HTTP client: {e}"))?;
        Ok(Self {
            http,
            endpoint,
            region: config.region().map_or_else(|| "us-east-1".to_owned(), |r| r.to_string()),
            credentials: config.credentials_provider(),
        })
    }

    /// Posts `body` to one connection, once (a failed push is not worth a retry's delay to the
    /// others: the console reads the event log anyway).
    pub async fn post(&self, connection_id: &str, body: &[u8]) -> Delivery {
        let mut url = self.endpoint.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(["@connections", connection_id]);
        }
        let url = url.to_string();
        let Some(provider) = &self.credentials else {
            return Delivery::Failed("no AWS credentials to sign with".into());
        };
        let credentials = match provider.provide_credentials().await {
            Ok(c) => c,
            Err(e) => return Delivery::Failed(format!("load AWS credentials: {e}")),
        };
        let headers = [("content-type", "application/json")];
        let request = UnsignedRequest { method: "POST", url: &url, headers: &headers, body };
        let signed = match sigv4::sign(request, &credentials, &self.region, EXECUTE_API, SystemTime::now()) {
            Ok(s) => s,
            Err(e) => return Delivery::Failed(e.to_string()),
        };
        let mut request = self.http.post(&url).body(body.to_vec());
        for (name, value) in headers.iter().copied().chain(signed.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
            request = request.header(name, value);
        }
        match request.send().await {
            Ok(r) if r.status().is_success() => Delivery::Sent,
            Ok(r) if r.status() == reqwest::StatusCode::GONE => Delivery::Gone,
            Ok(r) => Delivery::Failed(format!("HTTP {}", r.status())),
            Err(e) => Delivery::Failed(if e.is_timeout() { "timed out".into() } else { e.to_string() }),
        }
    }
}

/// The console-push fan-out: the tenant's connections from the store, each posted to.
#[derive(Debug, Clone)]
pub struct ConsolePush {
    pub store: Arc<DynamoStore>,
    pub management: ManagementApi,
}

impl ConsolePush {
    /// Posts `message` to every open connection of `tenant`'s consoles, forgetting closed ones.
    /// Fails only when the connections cannot be read.
    pub async fn fan_out(&self, tenant: &TenantId, message: &serde_json::Value) -> Result<PushReport, StoreError> {
        let connections = self.store.push_connections(tenant).await?;
        let body = message.to_string().into_bytes();
        let body = &body;
        let deliveries: Vec<(String, Delivery)> = futures::stream::iter(connections)
            .map(|id| async move {
                let delivery = self.management.post(&id, body).await;
                (id, delivery)
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut report = PushReport::default();
        for (id, delivery) in deliveries {
            match delivery {
                Delivery::Sent => report.sent += 1,
                Delivery::Gone => {
                    report.gone += 1;
                    if let Err(e) = self.store.close_push_connection(tenant, &id).await {
                        // Kept until the next push finds it gone again, or its TTL.
                        tracing::warn!(connection = %id, error = %e, "could not forget a closed connection");
                    }
                }
                Delivery::Failed(why) => {
                    report.failed += 1;
                    tracing::warn!(connection = %id, %tenant, reason = %why, "push failed; the event stays in the event log");
                }
            }
        }
        Ok(report)
    }
}

/// Tickets for the console push, kept in DynamoDB ([`DynamoStore::issue_push_ticket`]), for the
/// WebSocket API at `url` (`wss://<api id>.execute-api.<region>.amazonaws.com/<stage>`).
#[derive(Debug, Clone)]
pub struct DynamoPushTickets {
    pub store: Arc<DynamoStore>,
    pub url: String,
}

#[async_trait::async_trait]
impl switchboard_engine::PushTickets for DynamoPushTickets {
    async fn issue(&self, tenant: &TenantId) -> Result<switchboard_engine::PushTicket, StoreError> {
        let (ticket, expires_at) = self.store.issue_push_ticket(tenant).await?;
        Ok(switchboard_engine::PushTicket { ticket, url: self.url.clone(), expires_at })
    }
}
