//! The executor: runs one work item to completion — finds or starts the session, runs the agent
//! turn (`turn`), performs tool side effects under idempotency keys, and commits the session
//! together with the execution record (`record`). Redelivering the same item is harmless: a
//! recorded source is never run again, and a side effect repeated by a replay carries the key it
//! had the first time. Also here: the prompt and history a turn starts from (`context`) and
//! moving a session over the API (`handoff`).

pub(crate) mod context;
pub mod handoff;
mod history;
mod record;
mod refused;
mod summary;
mod turn;

use std::time::{Duration, Instant};

use switchboard_domain::message::Message;
use switchboard_domain::{Agent, AgentStatus, ErrorKind, ExecutionRecord, Refusal, Session};
use tracing::{info, warn};

pub use crate::fault::ExecError;
use crate::limits::Limits;
use crate::ports::{Deps, SessionWrite, StoreError, TurnCommit, WorkItem};
pub use record::describe;

/// How often a turn is re-run after losing a session version race before giving up (and
/// leaving the item to be redelivered).
const MAX_COMMIT_ATTEMPTS: u32 = 3;

/// What became of an item.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecOutcome {
    /// The item ran (or was skipped with a record saying why).
    Recorded(Box<ExecutionRecord>),
    /// The source had already been recorded: nothing was done again.
    AlreadyRecorded(Box<ExecutionRecord>),
    /// A handoff continuation whose target session is no longer active: dropped.
    Dropped { reason: String },
}

#[derive(Debug, Clone)]
pub struct Executor {
    deps: Deps,
    budget: Option<Duration>,
}

impl Executor {
    pub fn new(deps: Deps) -> Self {
        Self { deps, budget: None }
    }

    /// How long one item may run (model calls, tool calls, bookkeeping) before its turn stops
    /// with status `timeout`. None: no limit but the models' own timeouts.
    pub fn with_budget(mut self, budget: Option<Duration>) -> Self {
        self.budget = budget;
        self
    }

    pub fn deps(&self) -> &Deps {
        &self.deps
    }

    /// Runs `item` within the executor's budget. See the module docs for the once-only
    /// guarantees.
    pub async fn execute(&self, item: &WorkItem) -> Result<ExecOutcome, ExecError> {
        self.execute_by(item, None).await
    }

    /// Runs `item`, stopping its turn by `deadline` or the executor's budget, whichever comes
    /// first (a Lambda function passes its invocation's deadline less a margin). A turn that
    /// reaches it stops between steps, or during a model call (no retry or fallback starts past
    /// it), and is recorded with status `timeout`, so its side effects are never repeated by a
    /// redelivery. A tool call under way is not cut off; webhook tools keep their own timeouts.
    #[tracing::instrument(skip_all, fields(tenant = %item.tenant_id, source = %item.source_id, execution_id = tracing::field::Empty))]
    pub async fn execute_by(&self, item: &WorkItem, deadline: Option<Instant>) -> Result<ExecOutcome, ExecError> {
        let own = self.budget.and_then(|b| Instant::now().checked_add(b));
        let deadline = match (deadline, own) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let deps = &self.deps;
        if let Some(done) = deps.executions.execution_for_source(&item.tenant_id, &item.source_id).await? {
            info!(execution_id = %done.execution_id, "source already recorded (a redelivery); nothing is done again");
            return Ok(ExecOutcome::AlreadyRecorded(Box::new(done)));
        }
        let mut last_conflict = String::new();
        for attempt in 1..=MAX_COMMIT_ATTEMPTS {
            let started = Instant::now();
            let prepared = self.prepare(item).await?;
            // Whether the turn may end the conversation's time with an agent (and so its slot).
            let mut may_end = true;
            let (commit, record) = match prepared {
                Prepared::Drop(reason) => return Ok(ExecOutcome::Dropped { reason }),
                Prepared::Skip(mut session, reason) => {
                    // The human operator owns the conversation: no agent answers, but the message
                    // joins the session's transcript, so an agent it is handed back to sees it.
                    may_end = false;
                    let record = record::skipped(deps, item, &session, &reason, started);
                    let expected = session.version;
                    session.append_transcript([Message::user_text(item.text.clone())]);
                    session.version += 1;
                    session.updated_at = deps.clock.now();
                    let write = SessionWrite { session, expected_version: Some(expected) };
                    (TurnCommit { sessions: vec![write], execution: record.clone() }, record)
                }
                Prepared::Refused { session, is_new, refusal } => {
                    refused::commit(deps, item, *session, is_new, &refusal, started).await?
                }
                Prepared::Run { session, agent, is_new } => {
                    let expected = (!is_new).then_some(session.version);
                    let turn = turn::run(deps, item, *session, &agent, started, deadline).await?;
                    let mut sessions = vec![SessionWrite { session: turn.session, expected_version: expected }];
                    if let Some(next) = turn.new_session {
                        sessions.push(SessionWrite { session: next, expected_version: None });
                    }
                    (TurnCommit { sessions, execution: turn.record.clone() }, turn.record)
                }
            };
            match deps.sessions.commit_turn(&commit).await {
                Ok(()) => {
                    if may_end && !commit.sessions.iter().any(|w| w.session.is_active()) {
                        // Ended, failed or with a human: the conversation's session slot is free.
                        Limits::new(deps).release(&item.tenant_id, &item.conversation_id).await;
                    }
                    deps.metrics.execution(&record);
                    info!(
                        execution_id = %record.execution_id, status = ?record.status,
                        iterations = record.iterations, tokens = record.token_usage.total(),
                        latency_ms = record.latency_ms, "execution recorded"
                    );
                    return Ok(ExecOutcome::Recorded(Box::new(record)));
                }
                Err(StoreError::VersionConflict(m)) => {
                    warn!(attempt, conflict = %m, "session changed while the turn ran; running it again");
                    last_conflict = m;
                }
                Err(StoreError::Duplicate(_)) => {
                    // Another worker recorded the same source meanwhile.
                    if let Some(done) = deps.executions.execution_for_source(&item.tenant_id, &item.source_id).await? {
                        return Ok(ExecOutcome::AlreadyRecorded(Box::new(done)));
                    }
                    return Err(ExecError::new(ErrorKind::Store, "duplicate source without a record", true));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(ExecError::new(
            ErrorKind::Conflict,
            format!("session kept changing during {MAX_COMMIT_ATTEMPTS} attempts: {last_conflict}"),
            true,
        ))
    }

    async fn prepare(&self, item: &WorkItem) -> Result<Prepared, ExecError> {
        let deps = &self.deps;
        let now = deps.clock.now();
        let latest = deps.sessions.latest_session(&item.tenant_id, &item.conversation_id).await?;
        let mut is_new = false;
        if let Some(refusal) = &item.refused {
            // Recorded in the conversation's current session (a human's included), or in a new
            // one that the next admitted message goes on with.
            let (session, is_new) = match latest {
                Some(s) if s.is_active() || s.is_human_owned() => (s, false),
                _ => (Session::start(item.tenant_id.clone(), item.conversation_id.clone(), item.agent_id, now), true),
            };
            return Ok(Prepared::Refused { session: Box::new(session), is_new, refusal: refusal.clone() });
        }
        let session = match latest {
            Some(s) if s.is_human_owned() => {
                return Ok(Prepared::Skip(s, "a human operator owns the conversation".into()));
            }
            Some(s) if s.is_active() => {
                if item.continuation && s.agent_id != item.agent_id {
                    return Ok(Prepared::Drop(format!("handoff target {} is no longer active", item.agent_id)));
                }
                s
            }
            _ if item.continuation => {
                return Ok(Prepared::Drop("the handed-off session is no longer active".into()));
            }
            _ => {
                is_new = true;
                Session::start(item.tenant_id.clone(), item.conversation_id.clone(), item.agent_id, now)
            }
        };
        match deps.config.get_agent(&item.tenant_id, session.agent_id).await? {
            Some(agent) if agent.status == AgentStatus::Active => {
                Ok(Prepared::Run { session: Box::new(session), agent, is_new })
            }
            _ => Err(ExecError::new(
                ErrorKind::Config,
                format!("agent {} of session {} is missing or not active", session.agent_id, session.session_id),
                false,
            )),
        }
    }
}

enum Prepared {
    Run { session: Box<Session>, agent: Agent, is_new: bool },
    Refused { session: Box<Session>, is_new: bool, refusal: Refusal },
    Skip(Session, String),
    Drop(String),
}
