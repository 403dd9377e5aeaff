//! Sessions and the per-turn commit: one `TransactWriteItems` with the sessions (conditional
//! on their versions), the active-session marker and the execution record with its pointers.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, KeysAndAttributes, Put, TransactWriteItem};
use switchboard_domain::{ExecutionRecord, ExecutionStatus, Session, SessionId, TenantId};
use switchboard_engine::{
    Arrival, ExecutionLog, IdleSession, Page, SessionFilter, SessionStore, SessionWrite, StoreError, TurnCommit,
    TurnStart,
};

use super::codec::*;
use super::keys::*;
use super::page::paginate;
use super::{DynamoStore, Item, SESSIONS_AWAITING_APPROVAL, SESSIONS_BY_CONVERSATION};

/// What one item of a turn's transaction is, to explain a cancellation.
#[derive(Debug, Clone)]
pub(super) enum TxRole {
    Session(SessionId),
    ActivePut(String),
    ActiveDelete,
    Execution(String),
    /// The record of a paused execution, replaced by its resumed turn's.
    Resumed(String),
    /// A usage counter: a conflict on it alone is retried as it is.
    Usage,
    /// An event of the turn's outbox in the tenant's event log (no condition).
    Event,
    /// A piece of recorded model content (no condition).
    Content,
}

/// What to do after a cancelled turn transaction that is not the caller's error.
enum Retry {
    /// Only the active marker's delete failed: try again without it.
    WithoutActiveDelete,
    /// Only usage counters met a concurrent transaction: try the same items again.
    Same,
}

/// The owner marker's attribute saying who owns the conversation, and its one value.
pub(super) const OWNER: &str = "owner";
pub(super) const HUMAN: &str = "human";

/// The keys of `SessionsAwaitingApproval`, on a session item only while its turn is paused.
const AWAITING_TENANT: &str = "awaitingTenant";
const AWAITING_SINCE: &str = "awaitingSince";

/// How often a transaction whose only conflict was on usage counters is tried again.
const USAGE_CONFLICT_RETRIES: u32 = 5;

/// One key of a `BatchGetItem`, read strongly consistent.
fn keys_and_attributes(k: Item) -> Result<KeysAndAttributes, StoreError> {
    KeysAndAttributes::builder().keys(k).consistent_read(true).build().map_err(build_err)
}

impl DynamoStore {
    /// The transaction items that keep the conversation's owner marker (`ACTIVE#<conversation>`)
    /// true after the commit: it names the conversation's active session, or the session through
    /// which a human operator owns it (then with `owner` = `human` and the `agentId` it came
    /// from, which event intake reads as a condition of its limits transaction), and does not
    /// exist otherwise. Sessions written in the commit are conditional on their version, so the
    /// marker may be taken over from any of them; a marker held by another session is never
    /// overwritten.
    fn active_marker_items(&self, commit: &TurnCommit) -> Result<Vec<(TransactWriteItem, TxRole)>, StoreError> {
        let mut by_conversation: Vec<((TenantId, String), Vec<&Session>)> = Vec::new();
        for w in &commit.sessions {
            let k = (w.session.tenant_id.clone(), w.session.conversation_id.clone());
            match by_conversation.iter_mut().find(|(c, _)| *c == k) {
                Some((_, v)) => v.push(&w.session),
                None => by_conversation.push((k, vec![&w.session])),
            }
        }
        let mut items = Vec::new();
        for ((tenant, conversation), sessions) in by_conversation {
            let active: Vec<&&Session> = sessions.iter().filter(|s| s.is_active() || s.is_human_owned()).collect();
            if active.len() > 1 {
                return Err(StoreError::VersionConflict(format!(
                    "conversation {conversation} already has another active session"
                )));
            }
            let mut values: HashMap<String, AttributeValue> = HashMap::new();
            let mut names = Vec::with_capacity(sessions.len());
            for (i, session) in sessions.iter().enumerate() {
                values.insert(format!(":w{i}"), s(session.session_id.to_string()));
                names.push(format!(":w{i}"));
            }
            let condition = format!("attribute_not_exists(PK) OR sessionId IN ({})", names.join(", "));
            let table = &self.names.sessions_table;
            if let Some(session) = active.first() {
                let mut item = key(tenant_pk(&tenant), active_sk(&conversation));
                item.insert("sessionId".into(), s(session.session_id.to_string()));
                if session.is_human_owned() {
                    item.insert(OWNER.into(), s(HUMAN));
                    item.insert("agentId".into(), s(session.agent_id.to_string()));
                }
                let put = Put::builder()
                    .table_name(table)
                    .set_item(Some(item))
                    .condition_expression(condition)
                    .set_expression_attribute_values(Some(values))
                    .build()
                    .map_err(build_err)?;
                items.push((TransactWriteItem::builder().put(put).build(), TxRole::ActivePut(conversation)));
            } else {
                let delete = Delete::builder()
                    .table_name(table)
                    .set_key(Some(key(tenant_pk(&tenant), active_sk(&conversation))))
                    .condition_expression(condition)
                    .set_expression_attribute_values(Some(values))
                    .build()
                    .map_err(build_err)?;
                items.push((TransactWriteItem::builder().delete(delete).build(), TxRole::ActiveDelete));
            }
        }
        Ok(items)
    }

    fn session_item(&self, session: &Session, expected: Option<u64>) -> Result<TransactWriteItem, StoreError> {
        let mut item = key(tenant_pk(&session.tenant_id), session_sk(session.session_id));
        item.insert("conversationKey".into(), s(conversation_key(&session.tenant_id, &session.conversation_id)));
        item.insert("startKey".into(), s(start_key(session)));
        item.insert("status".into(), s(status_str(session.status)));
        item.insert("version".into(), n(session.version));
        item.insert("body".into(), encode(session)?);
        if let Some(paused) = &session.paused {
            // The sparse index's keys: the put replaces the item whole, so they go with the pause.
            item.insert(AWAITING_TENANT.into(), s(session.tenant_id.to_string()));
            item.insert(AWAITING_SINCE.into(), n(paused.approval.requested_at.timestamp_millis()));
        }
        // Likewise the idle sweep's, while the session waits on its customer.
        item.extend(super::idle::idle_keys(session).into_iter().flatten());
        let put = Put::builder().table_name(&self.names.sessions_table).set_item(Some(item));
        let put = match expected {
            None => put.condition_expression("attribute_not_exists(PK)"),
            Some(v) => put.condition_expression("version = :expected").expression_attribute_values(":expected", n(v)),
        };
        Ok(TransactWriteItem::builder().put(put.build().map_err(build_err)?).build())
    }

    /// The record, its source and id pointers (each conditional on not existing) and its usage;
    /// or, when it `resumes` a paused execution, the record alone, conditional on the paused one
    /// still awaiting approval, and only the usage it adds to that one.
    fn execution_items(
        &self,
        e: &ExecutionRecord,
        resumes: Option<&ExecutionRecord>,
    ) -> Result<Vec<(TransactWriteItem, TxRole)>, StoreError> {
        let table = &self.names.executions_table;
        let record = record_item(e)?;
        if resumes.is_some() {
            let put = Put::builder()
                .table_name(table)
                .set_item(Some(record))
                .condition_expression("#body.#status = :awaiting")
                .expression_attribute_names("#body", "body")
                .expression_attribute_names("#status", "status")
                .expression_attribute_values(":awaiting", s(ExecutionStatus::AwaitingApproval.as_str()))
                .build()
                .map_err(build_err)?;
            let mut out =
                vec![(TransactWriteItem::builder().put(put).build(), TxRole::Resumed(e.execution_id.to_string()))];
            out.extend(self.usage_items(e, resumes)?);
            return Ok(out);
        }
        let mut out = self.record_puts(e, record)?;
        out.extend(self.usage_items(e, None)?);
        Ok(out)
    }

    /// The puts that record `e` anew (its `record` item, the pointers by source and by id), each
    /// refused when it exists: a source is recorded once.
    fn record_puts(&self, e: &ExecutionRecord, record: Item) -> Result<Vec<(TransactWriteItem, TxRole)>, StoreError> {
        let table = &self.names.executions_table;
        let (pk, sk) = (execution_pk(e.session_id), execution_sk(e.execution_id));
        let ttl = n(ttl_seconds(e.expires_at));
        let pointer = |sk_of_pointer: String| {
            let mut item = key(tenant_pk(&e.tenant_id), sk_of_pointer);
            item.insert("executionPk".into(), s(pk.clone()));
            item.insert("executionSk".into(), s(sk.clone()));
            item.insert("expiresAt".into(), ttl.clone());
            item
        };
        let mut out = Vec::with_capacity(3);
        for item in [record, pointer(source_sk(&e.source_id)), pointer(execution_id_sk(e.execution_id))] {
            let put = Put::builder()
                .table_name(table)
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(PK)")
                .build()
                .map_err(build_err)?;
            out.push((TransactWriteItem::builder().put(put).build(), TxRole::Execution(e.source_id.clone())));
        }
        Ok(out)
    }

    /// The records of a burst's earlier messages ([`TurnCommit::coalesced`]): recorded like any,
    /// counted in no usage (nothing ran for them).
    fn coalesced_items(&self, commit: &TurnCommit) -> Result<Vec<(TransactWriteItem, TxRole)>, StoreError> {
        let mut out = Vec::with_capacity(3 * commit.coalesced.len());
        for e in &commit.coalesced {
            out.extend(self.record_puts(e, record_item(e)?)?);
        }
        Ok(out)
    }

    /// Maps a cancelled transaction to the store error the embedded store would have given: the
    /// first failed condition in write order decides. `Ok(true)` means only the active marker's
    /// delete failed (another session holds it, which this commit must leave alone): retry
    /// without it.
    fn explain_cancellation(roles: &[TxRole], err: &SdkError<TransactWriteItemsError>) -> Result<Retry, StoreError> {
        let Some(TransactWriteItemsError::TransactionCanceledException(tce)) = err.as_service_error() else {
            return Err(unavailable("TransactWriteItems", err));
        };
        let reasons = tce.cancellation_reasons();
        let failed = |code: &str| {
            reasons
                .iter()
                .zip(roles)
                .filter(move |(r, _)| r.code() == Some(code))
                .map(|(_, role)| role.clone())
                .collect::<Vec<_>>()
        };
        let conditions = failed("ConditionalCheckFailed");
        if !conditions.is_empty() && conditions.iter().all(|r| matches!(r, TxRole::ActiveDelete)) {
            return Ok(Retry::WithoutActiveDelete);
        }
        if let Some(role) = conditions.iter().find(|r| !matches!(r, TxRole::ActiveDelete)) {
            return Err(match role {
                TxRole::Session(id) => StoreError::VersionConflict(format!("session {id} changed")),
                TxRole::ActivePut(conv) => {
                    StoreError::VersionConflict(format!("conversation {conv} already has another active session"))
                }
                TxRole::Execution(source) => StoreError::Duplicate(format!("source {source} already recorded")),
                TxRole::Resumed(id) => StoreError::Duplicate(format!("execution {id} no longer awaits approval")),
                TxRole::ActiveDelete => StoreError::VersionConflict("active session changed".into()),
                // An update without a condition cannot fail one.
                TxRole::Usage => StoreError::Corrupt("a usage counter failed a condition it does not have".into()),
                TxRole::Event => StoreError::Corrupt("an event failed a condition it does not have".into()),
                TxRole::Content => StoreError::Corrupt("recorded content failed a condition it does not have".into()),
            });
        }
        let conflicts = failed("TransactionConflict");
        if !conflicts.is_empty() && conflicts.iter().all(|r| matches!(r, TxRole::Usage)) {
            return Ok(Retry::Same);
        }
        if !conflicts.is_empty() {
            return Err(StoreError::VersionConflict("a concurrent transaction wrote the same session".into()));
        }
        Err(unavailable("TransactWriteItems", err))
    }
}

impl DynamoStore {
    /// [`SessionStore::latest_session`], given what the conversation's active marker read.
    async fn latest_after_marker(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        marker: Option<Item>,
    ) -> Result<Option<Session>, StoreError> {
        if let Some(marker) = marker {
            let id: SessionId = attr_s(&marker, "sessionId")?
                .parse()
                .map_err(|_| StoreError::Corrupt("active marker holds a bad session id".into()))?;
            // The marker's session is the conversation's newest while it holds the marker: a
            // newer one would have had to take the marker over.
            if let Some(session) = self.get_session(tenant, id).await?
                && (session.is_active() || session.is_human_owned())
            {
                return Ok(Some(session));
            }
        }
        self.newest_indexed_session(tenant, conversation_id).await
    }

    /// The conversation's newest session by the `SessionsByConversation` index (whose writes
    /// trail the table's by a moment).
    async fn newest_indexed_session(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
    ) -> Result<Option<Session>, StoreError> {
        let out = self
            .by_conversation(tenant, conversation_id)
            .scan_index_forward(false)
            .limit(1)
            .send()
            .await
            .map_err(|e| unavailable("Query", &e))?;
        out.items.unwrap_or_default().first().map(decode).transpose()
    }

    /// A query of the conversation's sessions on the `SessionsByConversation` index, oldest
    /// first.
    fn by_conversation(&self, tenant: &TenantId, conversation_id: &str) -> QueryFluentBuilder {
        self.client
            .query()
            .table_name(&self.names.sessions_table)
            .index_name(SESSIONS_BY_CONVERSATION)
            .key_condition_expression("conversationKey = :c")
            .expression_attribute_values(":c", s(conversation_key(tenant, conversation_id)))
    }
}

#[async_trait]
impl SessionStore for DynamoStore {
    /// See the `arrivals` module: one conditional `PutItem`.
    async fn note_arrival(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        arrival: &Arrival,
    ) -> Result<(), StoreError> {
        self.put_arrival(tenant, conversation_id, arrival).await
    }

    /// See the `arrivals` module: one strongly consistent `GetItem`.
    async fn newest_arrival(&self, tenant: &TenantId, conversation_id: &str) -> Result<Option<Arrival>, StoreError> {
        self.get_arrival(tenant, conversation_id).await
    }

    async fn get_session(&self, tenant: &TenantId, session: SessionId) -> Result<Option<Session>, StoreError> {
        let item =
            self.get_item(&self.names.sessions_table, key(tenant_pk(tenant), session_sk(session)), "GetItem").await?;
        item.as_ref().map(decode).transpose()
    }

    /// A strongly consistent `GetItem` of the session's `version` attribute alone.
    async fn session_version(&self, tenant: &TenantId, session: SessionId) -> Result<Option<u64>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.names.sessions_table)
            .set_key(Some(key(tenant_pk(tenant), session_sk(session))))
            .consistent_read(true)
            .projection_expression("#v")
            .expression_attribute_names("#v", "version")
            .send()
            .await
            .map_err(|e| unavailable("GetItem", &e))?;
        let Some(item) = out.item else { return Ok(None) };
        let version = item.get("version").and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok());
        version.map(Some).ok_or_else(|| StoreError::Corrupt(format!("session {session} has no version")))
    }

    /// The active session if there is one (by its marker, strongly consistent), else the newest.
    async fn latest_session(&self, tenant: &TenantId, conversation_id: &str) -> Result<Option<Session>, StoreError> {
        let table = &self.names.sessions_table;
        let marker = self.get_item(table, key(tenant_pk(tenant), active_sk(conversation_id)), "GetItem").await?;
        self.latest_after_marker(tenant, conversation_id, marker).await
    }

    /// The newest session from the conversation index alone: one `Query`, eventually consistent.
    async fn latest_session_for_routing(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
    ) -> Result<Option<Session>, StoreError> {
        self.newest_indexed_session(tenant, conversation_id).await
    }

    /// The source's pointer and the conversation's active marker in one `BatchGetItem` (both
    /// strongly consistent); the record or the session they lead to is read after it.
    async fn turn_start(
        &self,
        _log: &dyn ExecutionLog,
        tenant: &TenantId,
        source_id: &str,
        conversation_id: &str,
    ) -> Result<TurnStart, StoreError> {
        let (executions, sessions) = (&self.names.executions_table, &self.names.sessions_table);
        let pointer_key = key(tenant_pk(tenant), source_sk(source_id));
        let marker_key = key(tenant_pk(tenant), active_sk(conversation_id));
        let wanted = HashMap::from([
            (executions.clone(), keys_and_attributes(pointer_key)?),
            (sessions.clone(), keys_and_attributes(marker_key)?),
        ]);
        let mut found = batch_get(&self.client, wanted).await?;
        let mut first = |table: &str| found.remove(table).and_then(|items| items.into_iter().next());
        let (pointer, marker) = (first(executions), first(sessions));
        if let Some(pointer) = pointer
            && let Some(done) = self.execution_at_pointer(tenant, &pointer).await?
        {
            return Ok(TurnStart::Recorded(Box::new(done)));
        }
        let latest = self.latest_after_marker(tenant, conversation_id, marker).await?;
        Ok(TurnStart::Latest(latest.map(Box::new)))
    }

    /// A `Query` of the tenant's `SESSION#` items, newest first, with the filter as a
    /// `FilterExpression` (repeated until the page is full, since DynamoDB filters after `Limit`).
    async fn list_sessions(
        &self,
        tenant: &TenantId,
        filter: SessionFilter,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Page<Session>, StoreError> {
        let pk = tenant_pk(tenant);
        let start = after.map(|s| key(pk.clone(), session_sk(s)));
        let mut conditions = vec![];
        let mut query = self
            .client
            .query()
            .table_name(&self.names.sessions_table)
            .key_condition_expression("PK = :pk AND begins_with(SK, :session)")
            .expression_attribute_values(":pk", s(pk.clone()))
            .expression_attribute_values(":session", s("SESSION#"))
            .scan_index_forward(false)
            .consistent_read(true);
        if let Some(status) = filter.status {
            conditions.push("#status = :status");
            query = query
                .expression_attribute_names("#status", "status")
                .expression_attribute_values(":status", s(status_str(status)));
        }
        if let Some(agent) = filter.agent_id {
            conditions.push("#body.#agent = :agent");
            query = query
                .expression_attribute_names("#body", "body")
                .expression_attribute_names("#agent", "agentId")
                .expression_attribute_values(":agent", s(agent.to_string()));
        }
        if let Some(channel) = filter.channel {
            conditions.push("#body.#channel = :channel");
            query = query
                .expression_attribute_names("#body", "body")
                .expression_attribute_names("#channel", "channel")
                .expression_attribute_values(":channel", s(channel));
        }
        if let Some(variant) = filter.variant {
            conditions.push("#body.#split.#variant = :variant");
            query = query
                .expression_attribute_names("#body", "body")
                .expression_attribute_names("#split", "split")
                .expression_attribute_names("#variant", "variant")
                .expression_attribute_values(":variant", s(variant));
        }
        if !conditions.is_empty() {
            query = query.filter_expression(conditions.join(" AND "));
        }
        let found = paginate(query, start).take(limit.saturating_add(1), |item| decode(&item).map(Some)).await?;
        Ok(Page::from_overfetch(found, limit, |s: &Session| s.session_id.to_string()))
    }

    async fn sessions_for_conversation(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
    ) -> Result<Vec<Session>, StoreError> {
        paginate(self.by_conversation(tenant, conversation_id), None).all().await?.iter().map(decode).collect()
    }

    /// One `TransactWriteItems` (the recorded content that has no room in it, and pieces too
    /// large for an item, written first, see `content`): the session puts (each conditional on the version read or on not
    /// existing), the active-session marker, the execution record and its source and id pointers
    /// (each conditional on not existing), and the turn's events in the event log (the outbox,
    /// under sequence numbers taken first, marked burned if the commit fails).
    async fn commit_turn(&self, commit: &TurnCommit) -> Result<(), StoreError> {
        let mut items: Vec<(TransactWriteItem, TxRole)> = Vec::new();
        for w in &commit.sessions {
            items.push((self.session_item(&w.session, w.expected_version)?, TxRole::Session(w.session.session_id)));
        }
        items.extend(self.active_marker_items(commit)?);
        items.extend(self.execution_items(&commit.execution, commit.resumes.as_deref())?);
        items.extend(self.insight_item(commit)?.map(|item| (item, TxRole::Usage)));
        items.extend(self.coalesced_items(commit)?);
        let e = &commit.execution;
        let now = self.clock.now();
        self.put_large_content(e.session_id, &commit.content).await?;
        let (inside, overflow) =
            self.content_in_transaction(&e.tenant_id, e.session_id, &commit.content, now, items.len())?;
        if !overflow.is_empty() {
            self.put_content(&e.tenant_id, e.session_id, overflow, now).await?;
        }
        items.extend(inside.into_iter().map(|item| (item, TxRole::Content)));
        let (outbox, taken) = self.outbox_items(&commit.events).await?;
        items.extend(outbox.into_iter().map(|item| (item, TxRole::Event)));
        let committed = self.transact_turn(items).await;
        if committed.is_err() {
            self.burn(taken).await;
        }
        committed
    }

    async fn write_session(&self, write: &SessionWrite) -> Result<(), StoreError> {
        let item = self.session_item(&write.session, write.expected_version)?;
        self.transact_turn(vec![(item, TxRole::Session(write.session.session_id))]).await
    }

    /// One tenant's: a `Query` of `SessionsAwaitingApproval`, oldest request first. Every
    /// tenant's (the sweeper's): a `Scan` of the index, which holds paused sessions only, sorted
    /// here. The index trails the table by a moment; deciding reads the session again by its key.
    async fn sessions_awaiting_approval(
        &self,
        tenant: Option<&TenantId>,
        limit: usize,
    ) -> Result<Vec<Session>, StoreError> {
        let table = &self.names.sessions_table;
        let Some(tenant) = tenant else {
            let mut sessions: Vec<Session> = Vec::new();
            let mut start: Option<Item> = None;
            loop {
                let out = self
                    .client
                    .scan()
                    .table_name(table)
                    .index_name(SESSIONS_AWAITING_APPROVAL)
                    .set_exclusive_start_key(start.take())
                    .send()
                    .await
                    .map_err(|e| unavailable("Scan", &e))?;
                for item in out.items.unwrap_or_default() {
                    sessions.push(decode(&item)?);
                }
                match out.last_evaluated_key {
                    Some(k) if !k.is_empty() => start = Some(k),
                    _ => break,
                }
            }
            let since = |s: &Session| s.paused.as_ref().map(|p| p.approval.requested_at);
            sessions.sort_by(|a, b| since(a).cmp(&since(b)).then(a.session_id.cmp(&b.session_id)));
            sessions.truncate(limit);
            return Ok(sessions);
        };
        let query = self
            .client
            .query()
            .table_name(table)
            .index_name(SESSIONS_AWAITING_APPROVAL)
            .key_condition_expression("#t = :t")
            .expression_attribute_names("#t", AWAITING_TENANT)
            .expression_attribute_values(":t", s(tenant.to_string()));
        paginate(query, None).take(limit, |item| decode(&item).map(Some)).await
    }

    async fn idle_sessions(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        limit: usize,
    ) -> Result<Vec<IdleSession>, StoreError> {
        self.due_idle_sessions(now, limit).await
    }
}

/// The item that holds the record `e`.
fn record_item(e: &ExecutionRecord) -> Result<Item, StoreError> {
    let mut record = key(execution_pk(e.session_id), execution_sk(e.execution_id));
    record.insert("tenantId".into(), s(e.tenant_id.to_string()));
    record.insert("expiresAt".into(), n(ttl_seconds(e.expires_at)));
    record.insert("body".into(), encode(e)?);
    Ok(record)
}

impl DynamoStore {
    /// Writes a turn's items, again as a cancellation's reasons call for.
    async fn transact_turn(&self, mut items: Vec<(TransactWriteItem, TxRole)>) -> Result<(), StoreError> {
        let mut usage_conflicts = 0;
        loop {
            let (writes, roles): (Vec<_>, Vec<_>) = items.iter().cloned().unzip();
            match self.client.transact_write_items().set_transact_items(Some(writes)).send().await {
                Ok(_) => return Ok(()),
                Err(e) => match Self::explain_cancellation(&roles, &e)? {
                    Retry::WithoutActiveDelete => items.retain(|(_, role)| !matches!(role, TxRole::ActiveDelete)),
                    Retry::Same if usage_conflicts < USAGE_CONFLICT_RETRIES => {
                        usage_conflicts += 1;
                        let pause = fastrand::u64(5..=20 * u64::from(usage_conflicts));
                        tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
                    }
                    Retry::Same => {
                        return Err(StoreError::Unavailable {
                            message: "usage counters kept meeting concurrent transactions".into(),
                            retryable: true,
                        });
                    }
                },
            }
        }
    }
}
