//! A scratch embedded profile: a temporary directory holding one tenant's configuration, copied
//! in, where the engine runs turns that nothing outside sees — replies go to the scratch
//! conversation log, events to its bus, records to its store, and the directory is removed when
//! the sandbox is dropped. What replay and evaluation run in; which model and webhook caller
//! answer is theirs to give.

use std::sync::Arc;

use switchboard_domain::{ExecutionRecord, Tenant, TenantId};
use switchboard_engine::{
    Authorship, ConfigAdmin, ConfigRecord, ExecOutcome, Model, SystemClock, WebhookCaller, WorkItem,
};

use crate::{Embedded, EmbeddedOptions};

/// See the module docs.
pub struct Sandbox {
    pub embedded: Embedded,
    pub tenant: TenantId,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox").field("tenant", &self.tenant).finish_non_exhaustive()
    }
}

impl Sandbox {
    /// A sandbox for `tenant` with `records` written as they are (no reference checks: what a
    /// run needs is copied whole), answered by `model` and `webhooks`.
    pub async fn open(
        tenant: &Tenant,
        records: &[ConfigRecord],
        model: Arc<dyn Model>,
        webhooks: Arc<dyn WebhookCaller>,
    ) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("a scratch directory: {e}"))?;
        let options = EmbeddedOptions { webhooks, workers: 1, ..EmbeddedOptions::default() };
        let embedded = Embedded::open(dir.path(), model, Arc::new(SystemClock), options).map_err(|e| e.to_string())?;
        let t = &tenant.tenant_id;
        embedded.store.create_tenant(t, &tenant.name).await.map_err(|e| e.to_string())?;
        let by = Authorship { at: chrono::Utc::now(), by: "sandbox".into() };
        for record in records {
            embedded.store.put_config(record, None, &by).await.map_err(|e| e.to_string())?;
        }
        Ok(Self { embedded, tenant: t.clone(), _dir: dir })
    }

    /// Runs `item`, then every item its turn queued (a handoff's continuation), in queue order:
    /// the records written, `item`'s first.
    pub async fn run(&self, item: &WorkItem) -> Result<Vec<ExecutionRecord>, String> {
        let e = &self.embedded;
        let mut records = Vec::new();
        let mut keep = |outcome: ExecOutcome| match outcome {
            ExecOutcome::Recorded(r) | ExecOutcome::AlreadyRecorded(r) => records.push(*r),
            ExecOutcome::Dropped { .. } | ExecOutcome::Held => {}
        };
        keep(e.executor.execute(item).await.map_err(|err| err.message.clone())?);
        while let Some(d) = e.queue.receive().await.map_err(|err| err.to_string())? {
            let next: WorkItem = serde_json::from_str(&d.body).map_err(|err| err.to_string())?;
            keep(e.executor.execute(&next).await.map_err(|err| err.message.clone())?);
            e.queue.ack(&d.receipt).await.map_err(|err| err.to_string())?;
        }
        Ok(records)
    }
}
