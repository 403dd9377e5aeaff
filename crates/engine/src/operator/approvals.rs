//! Deciding the approvals that paused turns wait for: an operator approves a tool call (possibly
//! with edited arguments, which must meet the tool's schema) or denies it with a reason; an
//! approval nobody decides within its timeout expires, which is a denial. The decision is kept
//! in the session, conditional on the version read — so one decision wins, once — and the turn's
//! resumption is queued after it in the conversation's order. Nothing a client sends names the
//! call: the approval's id finds the call the server holds, and a decision cannot change which
//! call it is, only (when approving) the arguments it runs with.

use serde_json::Value;
use switchboard_domain::approval::MAX_DENIAL_REASON_CHARS;
use switchboard_domain::{Approval, ApprovalStatus, FieldError, Session, SessionId, TenantId, ValidationErrors};
use tracing::{info, warn};

use super::{ATTEMPTS, Operator, OperatorError};
use crate::execute::pause::Snapshot;
use crate::ports::{SessionWrite, StoreError, WorkItem};

/// Most approvals a tenant's list shows (and most paused sessions a sweep looks at).
pub const MAX_LISTED_APPROVALS: usize = 500;

/// How long after a decision its turn's resumption may still be on its way before a sweep
/// queues it again (both profiles' sweepers).
pub const REQUEUE_AFTER: chrono::Duration = chrono::Duration::seconds(60);

/// Who decides an approval that expired.
pub const EXPIRY_PRINCIPAL: &str = "system";

/// A decision sent for an approval.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Run the call, with these arguments instead of the model's when given.
    Approve {
        arguments: Option<Value>,
    },
    Deny {
        reason: String,
    },
    /// Run nothing more of the paused turn: its calls are not run, no model is asked again, and
    /// the conversation goes to a human.
    Cancel {
        reason: String,
    },
}

/// What a sweep of overdue and unresumed approvals did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    pub expired: usize,
    /// Decided approvals whose resumption was queued again.
    pub requeued: usize,
}

impl Operator {
    /// The tenant's approvals waiting for a decision (or decided and about to resume), the
    /// longest waiting first.
    pub async fn approvals(&self, tenant: &TenantId) -> Result<Vec<Approval>, OperatorError> {
        let sessions = self.deps.sessions.sessions_awaiting_approval(Some(tenant), MAX_LISTED_APPROVALS).await?;
        Ok(sessions.into_iter().filter_map(|s| s.paused.map(|p| p.approval)).collect())
    }

    /// One of the tenant's approvals a paused turn holds.
    pub async fn approval(&self, tenant: &TenantId, approval_id: &str) -> Result<Approval, OperatorError> {
        Ok(self.paused_for(tenant, approval_id).await?.paused.map(|p| p.approval).unwrap_or_else(|| unreachable!()))
    }

    /// `principal` decides the approval `approval_id` of `tenant`; the paused turn is queued to
    /// resume. Deciding again as decided is answered as the first time (and queues the
    /// resumption again, in case the first one was lost); another decision is refused. An
    /// approval past its expiry expires instead (`NotAllowed`, saying so).
    pub async fn decide(
        &self,
        tenant: &TenantId,
        approval_id: &str,
        principal: &str,
        decision: Decision,
    ) -> Result<Approval, OperatorError> {
        if let Decision::Deny { reason } | Decision::Cancel { reason } = &decision
            && (reason.trim().is_empty() || reason.chars().count() > MAX_DENIAL_REASON_CHARS)
        {
            return Err(invalid("/reason", format!("must be 1 to {MAX_DENIAL_REASON_CHARS} characters")));
        }
        for _ in 0..ATTEMPTS {
            let mut session = self.paused_for(tenant, approval_id).await?;
            let snapshot = snapshot_of(&session)?;
            let now = self.deps.clock.now();
            let approval = &mut session.paused.as_mut().unwrap_or_else(|| unreachable!()).approval;
            if !approval.is_pending() {
                if same_decision(approval, principal, &decision) {
                    let approval = approval.clone();
                    self.queue_resumption(&snapshot.item, &approval).await?;
                    return Ok(approval);
                }
                let by = approval.decided_by.as_deref().unwrap_or("someone");
                return Err(OperatorError::NotAllowed(format!("already {} by {by}", approval.status.as_str())));
            }
            let expired = approval.is_overdue(now);
            if expired {
                decide(approval, ApprovalStatus::Expired, EXPIRY_PRINCIPAL, now);
            } else {
                match &decision {
                    Decision::Approve { arguments } => {
                        if let Some(arguments) = arguments {
                            check_arguments(snapshot.schema.as_ref(), arguments)?;
                            approval.edited_arguments = (arguments != &approval.arguments).then(|| arguments.clone());
                        }
                        decide(approval, ApprovalStatus::Approved, principal, now);
                    }
                    Decision::Deny { reason } => {
                        approval.reason = Some(reason.trim().to_owned());
                        decide(approval, ApprovalStatus::Denied, principal, now);
                    }
                    Decision::Cancel { reason } => {
                        approval.reason = Some(reason.trim().to_owned());
                        decide(approval, ApprovalStatus::Cancelled, principal, now);
                    }
                }
            }
            let approval = approval.clone();
            match self.write(session).await {
                Ok(()) => {}
                Err(StoreError::VersionConflict(_)) => continue,
                Err(e) => return Err(e.into()),
            }
            info!(approval_id, status = approval.status.as_str(), by = ?approval.decided_by, "approval decided");
            self.queue_resumption(&snapshot.item, &approval).await?;
            if expired {
                return Err(OperatorError::NotAllowed(format!(
                    "the approval expired at {}; the call counts as denied",
                    approval.expires_at.to_rfc3339()
                )));
            }
            return Ok(approval);
        }
        Err(OperatorError::Conflict)
    }

    /// Expires every tenant's approvals past their timeout, and queues again the resumption of
    /// approvals decided over `grace` ago whose turn has not resumed (its queueing was lost):
    /// what the embedded profile's sweeper and the event-router's scheduled tick on AWS run.
    pub async fn sweep_approvals(&self, grace: chrono::Duration) -> Result<Swept, OperatorError> {
        let mut swept = Swept::default();
        let now = self.deps.clock.now();
        for session in self.deps.sessions.sessions_awaiting_approval(None, MAX_LISTED_APPROVALS).await? {
            let Some(paused) = &session.paused else { continue };
            let approval = &paused.approval;
            if approval.is_overdue(now) {
                let deny = Decision::Deny { reason: "expired".into() };
                match self.decide(&session.tenant_id, &approval.approval_id, EXPIRY_PRINCIPAL, deny).await {
                    Err(OperatorError::NotAllowed(_)) | Ok(_) => swept.expired += 1,
                    Err(e) => {
                        warn!(approval_id = %approval.approval_id, error = %e, "an overdue approval could not expire")
                    }
                }
            } else if !approval.is_pending() && approval.decided_at.is_some_and(|at| at + grace <= now) {
                let snapshot = snapshot_of(&session)?;
                self.queue_resumption(&snapshot.item, approval).await?;
                swept.requeued += 1;
            }
        }
        Ok(swept)
    }

    /// The session whose paused turn waits for `approval_id`.
    async fn paused_for(&self, tenant: &TenantId, approval_id: &str) -> Result<Session, OperatorError> {
        let sessions = self.deps.sessions.sessions_awaiting_approval(Some(tenant), MAX_LISTED_APPROVALS).await?;
        let found =
            sessions.into_iter().find(|s| s.paused.as_ref().is_some_and(|p| p.approval.approval_id == approval_id));
        let session = found.ok_or_else(|| OperatorError::NoApproval(approval_id.to_owned()))?;
        // Read again by id: the list may come from an index a moment behind.
        let id: SessionId = session.session_id;
        let session = self.deps.sessions.get_session(tenant, id).await?.ok_or(OperatorError::NoSession(id))?;
        match &session.paused {
            Some(p) if p.approval.approval_id == approval_id => Ok(session),
            _ => Err(OperatorError::NoApproval(approval_id.to_owned())),
        }
    }

    async fn write(&self, mut session: Session) -> Result<(), StoreError> {
        let expected = session.version;
        session.version += 1;
        session.updated_at = self.deps.clock.now();
        self.deps.sessions.write_session(&SessionWrite { session, expected_version: Some(expected) }).await
    }

    /// Queues the paused turn of `item` to resume after `approval`, in its conversation's order.
    async fn queue_resumption(&self, item: &WorkItem, approval: &Approval) -> Result<(), OperatorError> {
        let resume = WorkItem { resume: Some(approval.approval_id.clone()), follow: false, ..item.clone() };
        self.deps.queue.enqueue(&resume).await.map_err(|e| {
            OperatorError::Store(StoreError::Unavailable {
                message: format!("the decision is kept, but its turn could not be queued to resume: {e}"),
                retryable: true,
            })
        })?;
        Ok(())
    }
}

fn decide(approval: &mut Approval, status: ApprovalStatus, by: &str, now: chrono::DateTime<chrono::Utc>) {
    approval.status = status;
    approval.decided_by = Some(by.to_owned());
    approval.decided_at = Some(now);
}

/// Whether `decision` by `principal` is the one `approval` already had.
fn same_decision(approval: &Approval, principal: &str, decision: &Decision) -> bool {
    if approval.decided_by.as_deref() != Some(principal) {
        return false;
    }
    match (approval.status, decision) {
        (ApprovalStatus::Approved, Decision::Approve { arguments }) => {
            arguments.as_ref().is_none_or(|a| approval.edited_arguments.as_ref().unwrap_or(&approval.arguments) == a)
        }
        (ApprovalStatus::Denied, Decision::Deny { reason })
        | (ApprovalStatus::Cancelled, Decision::Cancel { reason }) => approval.reason.as_deref() == Some(reason.trim()),
        (ApprovalStatus::Expired, _) => principal == EXPIRY_PRINCIPAL,
        _ => false,
    }
}

fn snapshot_of(session: &Session) -> Result<Snapshot, OperatorError> {
    let state = session.paused.as_ref().map(|p| p.state.clone()).unwrap_or_default();
    Snapshot::read(state).map_err(|e| OperatorError::Store(StoreError::Corrupt(e.message)))
}

/// Edited arguments must be an object that meets the tool's parameters.
fn check_arguments(schema: Option<&Value>, arguments: &Value) -> Result<(), OperatorError> {
    if !arguments.is_object() {
        return Err(invalid("/arguments", "must be an object".into()));
    }
    let Some(schema) = schema else { return Ok(()) };
    switchboard_domain::schema::validate(schema, arguments).map_err(|problems| {
        let errors = problems
            .into_iter()
            .map(|p| {
                let (at, what) = p.split_once(": ").unwrap_or(("", p.as_str()));
                FieldError { pointer: format!("/arguments{at}"), detail: what.to_owned() }
            })
            .collect();
        OperatorError::Invalid(ValidationErrors(errors))
    })
}

fn invalid(pointer: &str, message: String) -> OperatorError {
    OperatorError::Invalid(ValidationErrors::single(pointer, message))
}
