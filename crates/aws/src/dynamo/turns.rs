//! A followed turn's events on the AWS profile: the turn runs in the agent-executor function and
//! the streamed invoke waits in the internal-api function, so the events go through DynamoDB.
//! The executor writes them in pages as they come — `TENANT#<t>` / `TURN#<source>#<run>#<page>`
//! in the executions table, `events` the page's events as a JSON array, `expiresAt` an hour on —
//! and a last page with `end` once the turn is committed; the API reads the pages after the
//! last one it has. `run` is a ULID per run of the turn, so that a redelivered item's run sorts
//! after the first one's. Only items a streamed invoke queued (`follow`) are written.
//!
//! The writer waits [`TurnLog::LINGER`] after a page's first event for more to come, so a
//! turn costs about ten writes a second while it streams text, not one per token.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use switchboard_domain::TenantId;
use switchboard_engine::{Follower, Progress, StoreError, TurnEvent, WorkItem};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::DynamoStore;
use super::codec::unavailable;
use super::keys::{key, n, s, tenant_pk};
use super::page::paginate;

/// How long a page of events is kept.
const KEEP: Duration = Duration::from_secs(3600);

/// The most events one page holds.
const MAX_PAGE_EVENTS: usize = 256;

/// The turn log: a [`Progress`] for the executor, pages to read for the API.
#[derive(Debug, Clone)]
pub struct TurnLog {
    client: Client,
    table: String,
    store: DynamoStore,
    writers: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

/// Some of a followed turn's events, read in order.
#[derive(Debug, Default)]
pub struct TurnPages {
    pub events: Vec<TurnEvent>,
    /// Where the next read starts (the last page read), if any page was read.
    pub last: Option<String>,
    /// The turn's last page was read: it is committed and nothing follows.
    pub ended: bool,
}

impl TurnLog {
    /// A page's first event waits this long for others to share its write.
    pub const LINGER: Duration = Duration::from_millis(100);

    pub fn new(store: &DynamoStore) -> Self {
        Self {
            client: store.client.clone(),
            table: store.names.executions_table.clone(),
            store: store.clone(),
            writers: Arc::default(),
        }
    }

    /// Waits until every turn followed so far has its pages written (a Lambda function calls it
    /// before it answers, so that no write is frozen with the container).
    pub async fn flush(&self) {
        let writers: Vec<JoinHandle<()>> = self.writers.lock().map(|mut w| std::mem::take(&mut *w)).unwrap_or_default();
        for w in writers {
            if let Err(e) = w.await {
                tracing::warn!(error = %e, "a turn log writer stopped early");
            }
        }
    }

    /// The pages of `source_id`'s turn after `after` (from the first without one).
    pub async fn read(&self, tenant: &TenantId, source_id: &str, after: Option<&str>) -> Result<TurnPages, StoreError> {
        let prefix = turn_prefix(source_id);
        let start = after.unwrap_or(&prefix).to_owned();
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("PK = :pk AND SK BETWEEN :after AND :end")
            .expression_attribute_values(":pk", s(tenant_pk(tenant)))
            .expression_attribute_values(":after", s(start))
            .expression_attribute_values(":end", s(format!("{prefix}~")))
            .consistent_read(true);
        let mut pages = TurnPages::default();
        for item in paginate(query, None).all().await? {
            let Some(sk) = item.get("SK").and_then(|v| v.as_s().ok()) else { continue };
            if Some(sk.as_str()) == after || sk == &prefix {
                continue;
            }
            if let Some(events) = item.get("events").and_then(|v| v.as_s().ok()) {
                match serde_json::from_str::<Vec<TurnEvent>>(events) {
                    Ok(mut e) => pages.events.append(&mut e),
                    Err(e) => tracing::warn!(sk, error = %e, "a turn log page does not parse; skipped"),
                }
            }
            pages.ended |= item.get("end").and_then(|v| v.as_bool().ok()).copied().unwrap_or(false);
            pages.last = Some(sk.clone());
        }
        Ok(pages)
    }

    /// Writes one page; a failure is logged, never the turn's.
    async fn put_page(&self, tenant: &TenantId, sk: String, events: &[TurnEvent], end: bool) {
        let mut item = key(tenant_pk(tenant), sk);
        item.insert("events".into(), s(serde_json::to_string(events).unwrap_or_else(|_| "[]".into())));
        if end {
            item.insert("end".into(), aws_sdk_dynamodb::types::AttributeValue::Bool(true));
        }
        let expires = self.store.clock.now() + chrono::Duration::from_std(KEEP).unwrap_or_default();
        item.insert("expiresAt".into(), n(expires.timestamp()));
        let put = self.client.put_item().table_name(&self.table).set_item(Some(item)).send().await;
        if let Err(e) = put {
            tracing::warn!(tenant = %tenant, error = %unavailable("PutItem", &e), "a turn log page was not written");
        }
    }

    /// Writes the events `rx` receives in pages until the turn's follower is dropped, then the
    /// last page.
    async fn write(self, tenant: TenantId, prefix: String, mut rx: mpsc::UnboundedReceiver<TurnEvent>) {
        let mut page = 0u32;
        let mut batch = Vec::new();
        while let Some(first) = rx.recv().await {
            batch.push(first);
            tokio::time::sleep(Self::LINGER).await;
            while batch.len() < MAX_PAGE_EVENTS {
                match rx.try_recv() {
                    Ok(e) => batch.push(e),
                    Err(_) => break,
                }
            }
            self.put_page(&tenant, format!("{prefix}{page:06}"), &batch, false).await;
            batch.clear();
            page += 1;
        }
        self.put_page(&tenant, format!("{prefix}{page:06}"), &[], true).await;
    }
}

/// Where a source's turn pages sort.
fn turn_prefix(source_id: &str) -> String {
    format!("TURN#{source_id}#")
}

impl Progress for TurnLog {
    fn follower(&self, item: &WorkItem) -> Option<Follower> {
        if !item.follow {
            return None;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let prefix = format!("{}{}#", turn_prefix(&item.source_id), ulid::Ulid::generate());
        let writer = tokio::spawn(self.clone().write(item.tenant_id.clone(), prefix, rx));
        if let Ok(mut w) = self.writers.lock() {
            w.retain(|h| !h.is_finished());
            w.push(writer);
        }
        Some(Follower::new(move |event| {
            let _ = tx.send(event);
        }))
    }
}
