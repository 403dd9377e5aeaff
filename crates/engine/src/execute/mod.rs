//! The executor: runs one work item to completion — finds or starts the session, runs the agent
//! turn (`turn`), performs tool side effects under idempotency keys, and commits the session
//! together with the execution record (`record`). Redelivering the same item is harmless: a
//! recorded source is never run again, and a side effect repeated by a replay carries the key it
//! had the first time. Also here: the prompt and history a turn starts from (`context`).

mod burst;
pub(crate) mod context;
mod give_up;
pub(crate) mod history;
mod idle;
pub(crate) mod interrupt;
pub(crate) mod pause;
pub(crate) mod record;
mod refused;
mod summary;
mod turn;

use std::sync::Arc;
use std::time::{Duration, Instant};

use switchboard_domain::approval::MAX_HELD_MESSAGES;
use switchboard_domain::{
    Agent, AgentStatus, ErrorKind, ExecutionRecord, ExecutionStatus, HeldMessage, OnLimit, Refusal, Session,
};
use tracing::{info, warn};

pub use crate::fault::ExecError;
use crate::limits::{Admission, Limits};
use crate::ports::{Deps, Follower, Progress, SessionWrite, StoreError, TurnCommit, TurnStart, WorkItem};
pub use give_up::LAST_DELIVERY;
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
    /// The conversation's turn is paused for an approval: the item waits in its session, and
    /// runs once that turn is done.
    Held,
    /// A handoff continuation whose target session is no longer active: dropped.
    Dropped { reason: String },
}

/// Which delivery of its item a run is, as the work queue counts them (SQS's
/// `ApproximateReceiveCount` against the queue's `maxReceiveCount`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// 1 for the first delivery.
    pub number: u32,
    /// The delivery after which the queue gives up on the item (dead letters).
    pub of: u32,
}

impl Attempt {
    pub fn is_last(self) -> bool {
        self.number >= self.of
    }
}

/// Told of each held item run after the item that let it go (see [`Executor::with_held_done`]).
pub type HeldDone = Arc<dyn Fn(&WorkItem, &ExecOutcome) + Send + Sync>;

#[derive(Clone)]
pub struct Executor {
    deps: Deps,
    budget: Option<Duration>,
    progress: Option<Arc<dyn Progress>>,
    held_done: Option<HeldDone>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").field("budget", &self.budget).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for dyn Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}

impl Executor {
    pub fn new(deps: Deps) -> Self {
        Self { deps, budget: None, progress: None, held_done: None }
    }

    /// Who is told what became of the items a conversation held behind a paused turn, which run
    /// after the item that let them go (a waiting caller of the embedded profile).
    pub fn with_held_done(mut self, done: HeldDone) -> Self {
        self.held_done = Some(done);
        self
    }

    /// Who may follow a turn while it runs (a streamed invoke); without it nobody can.
    pub fn with_progress(mut self, progress: Arc<dyn Progress>) -> Self {
        self.progress = Some(progress);
        self
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
    pub async fn execute_by(&self, item: &WorkItem, deadline: Option<Instant>) -> Result<ExecOutcome, ExecError> {
        self.execute_attempt(item, deadline, None).await
    }

    /// [`Executor::execute_by`] for a queue that says which delivery of the item this is. A
    /// deferred message (refused at intake under `onLimit: defer`) asks the limits again: once
    /// admitted it runs like any message; still refused it answers an error with `retry_after`
    /// (the queue holds it, and its conversation's later messages, until then) — unless this is
    /// its last delivery, when it is recorded as refused and gets nothing.
    ///
    /// Its span follows OpenTelemetry's GenAI conventions (`invoke_agent`), with the model calls
    /// (`chat`) and tool calls (`execute_tool`) of the turn beneath it.
    ///
    /// Once the item is done, the messages its conversation held behind a paused turn that is
    /// now done run in turn, in the order they came.
    pub async fn execute_attempt(
        &self,
        item: &WorkItem,
        deadline: Option<Instant>,
        attempt: Option<Attempt>,
    ) -> Result<ExecOutcome, ExecError> {
        self.execute_behind(item, None, deadline, attempt).await.map(|(outcome, _)| outcome)
    }

    /// [`Executor::execute_attempt`] for a consumer that holds the items queued behind `item`
    /// in its group, in order (an SQS batch's): an agent that coalesces bursts gathers them from
    /// there, where the embedded queue is asked. Beside the outcome: how many of `behind`, from
    /// the first, the item's turn answered with it (recorded as `coalesced`), which the consumer
    /// acknowledges with it.
    pub async fn execute_batch(
        &self,
        item: &WorkItem,
        behind: &[WorkItem],
        deadline: Option<Instant>,
        attempt: Option<Attempt>,
    ) -> Result<(ExecOutcome, usize), ExecError> {
        self.execute_behind(item, Some(behind), deadline, attempt).await
    }

    async fn execute_behind(
        &self,
        item: &WorkItem,
        behind: Option<&[WorkItem]>,
        deadline: Option<Instant>,
        attempt: Option<Attempt>,
    ) -> Result<(ExecOutcome, usize), ExecError> {
        let own = self.budget.and_then(|b| Instant::now().checked_add(b));
        let deadline = match (deadline, own) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let (outcome, may_hold, answered) = match self.execute_one(item, deadline, attempt, behind).await? {
            One::Done(outcome, may_hold) => (outcome, may_hold, 0),
            // The burst's turn, which its last message carries (it gathers no other).
            One::Merged(merged) => match Box::pin(self.execute_one(&merged, deadline, attempt, Some(&[]))).await? {
                One::Done(outcome, may_hold) => (outcome, may_hold, merged.earlier.len()),
                One::Merged(_) => return Err(ExecError::new(ErrorKind::Internal, "a burst gathered twice", false)),
            },
        };
        if may_hold {
            self.run_held(item).await;
        }
        Ok((outcome, answered))
    }

    #[tracing::instrument(name = "invoke_agent", skip_all, fields(
        otel.name = %format!("invoke_agent {}", item.agent_id),
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.id = %item.agent_id,
        gen_ai.conversation.id = %item.conversation_id,
        tenant = %item.tenant_id,
        source = %item.source_id,
        execution_id = tracing::field::Empty,
    ))]
    ///
    /// Beside the outcome: whether the conversation may hold items to run now (its session as
    /// committed held some, or the item had been recorded before, as a redelivery after a
    /// crash is): only then are they looked for, so that other items cost no extra read.
    async fn execute_one(
        &self,
        item: &WorkItem,
        deadline: Option<Instant>,
        attempt: Option<Attempt>,
        behind: Option<&[WorkItem]>,
    ) -> Result<One, ExecError> {
        let deps = &self.deps;
        let start = deps
            .sessions
            .turn_start(deps.executions.as_ref(), &item.tenant_id, &item.source_id, &item.conversation_id)
            .await?;
        // The session read with the record lookup serves the first attempt; a retry reads again.
        let mut resuming = None;
        let mut latest = match start {
            // The turn this item resumes, still paused: the session is read with the decision.
            TurnStart::Recorded(done) if item.resume.is_some() && done.status == ExecutionStatus::AwaitingApproval => {
                resuming = Some(done);
                None
            }
            TurnStart::Recorded(done) => {
                info!(execution_id = %done.execution_id, "source already recorded (a redelivery); nothing is done again");
                return Ok(One::Done(ExecOutcome::AlreadyRecorded(done), true));
            }
            TurnStart::Latest(latest) => Some(latest.map(|s| *s)),
        };
        let admitted;
        let item = match self.admit_deferred(item, attempt).await? {
            Some(next) => {
                admitted = next;
                &admitted
            }
            None => item,
        };
        let mut last_conflict = String::new();
        for round in 1..=MAX_COMMIT_ATTEMPTS {
            let run = match self.run(item, latest.take(), deadline, resuming.as_deref(), (behind, attempt)).await {
                Err(moved) if moved.moved => {
                    warn!(attempt = round, reason = %moved.message, "the session moved while the turn ran; running it again");
                    last_conflict = moved.message;
                    continue;
                }
                run => run?,
            };
            let ready = match run {
                Run::Ready(ready) => *ready,
                Run::Drop(reason) => return Ok(One::Done(ExecOutcome::Dropped { reason }, false)),
                Run::Merged(merged) => return Ok(One::Merged(merged)),
                Run::Hold(write) => match deps.sessions.write_session(&write).await {
                    Ok(()) => {
                        info!(session_id = %write.session.session_id, "a turn of the conversation awaits approval; the item waits behind it");
                        // Held behind items a failure left (no turn paused): they run now.
                        return Ok(One::Done(ExecOutcome::Held, write.session.paused.is_none()));
                    }
                    Err(StoreError::VersionConflict(conflict)) => {
                        last_conflict = conflict;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                },
            };
            let holds = ready.commit.sessions.iter().any(|w| !w.session.held.is_empty());
            match self.commit(item, ready).await? {
                Ok(outcome) => {
                    let again = matches!(outcome, ExecOutcome::AlreadyRecorded(_));
                    return Ok(One::Done(outcome, holds || again));
                }
                Err(conflict) => {
                    warn!(attempt = round, conflict = %conflict, "session changed while the turn ran; running it again");
                    last_conflict = conflict;
                }
            }
        }
        Err(ExecError::new(
            ErrorKind::Conflict,
            format!("session kept changing during {MAX_COMMIT_ATTEMPTS} attempts: {last_conflict}"),
            true,
        ))
    }

    /// Runs `item` once, given the conversation's latest session if it was just read: what to
    /// commit, or why the item is dropped.
    async fn run(
        &self,
        item: &WorkItem,
        latest: Option<Option<Session>>,
        deadline: Option<Instant>,
        resuming: Option<&ExecutionRecord>,
        (behind, attempt): (Option<&[WorkItem]>, Option<Attempt>),
    ) -> Result<Run, ExecError> {
        if let Some(session_id) = item.closes_idle {
            return self.close_idle(item, session_id, latest).await;
        }
        let deps = &self.deps;
        let started = Instant::now();
        let mut follower = None;
        let (mut commit, record, may_end) = match self.prepare(item, latest, resuming).await? {
            Prepared::Drop(reason) => return Ok(Run::Drop(reason)),
            Prepared::Hold(session) => return Ok(Run::Hold(Box::new(self.hold(item, *session)?))),
            Prepared::Resume { session, agent, paused } => {
                let expected = Some(session.version);
                let turn = turn::resume(deps, item, *session, &agent, (*paused).clone(), started, deadline).await?;
                let (commit, record) = self.turn_commit(item, turn, expected, Some(paused));
                (commit, record, true)
            }
            Prepared::Skip(mut session, reason) => {
                // The human operator owns the conversation: no agent answers, but the message
                // joins the session's transcript, so an agent it is handed back to sees it.
                let record = record::skipped(deps, item, &session, &reason, started);
                let expected = session.version;
                // Messages an interrupted turn left are the operator's now, in the transcript.
                session.interrupted.clear();
                session.append_transcript([item.user_message()]);
                session.version += 1;
                session.updated_at = deps.clock.now();
                let write = SessionWrite { session: *session, expected_version: Some(expected) };
                (TurnCommit::of(write, record.clone(), vec![]), record, false)
            }
            Prepared::Refused { session, is_new, refusal } => {
                let (commit, record) = refused::commit(deps, item, *session, is_new, &refusal, started).await?;
                (commit, record, true)
            }
            Prepared::Run { session, agent, is_new } => {
                match burst::gather(deps, item, &agent, behind, attempt).await? {
                    burst::Gathered::Alone => {}
                    burst::Gathered::Wait(wait) => return Err(wait),
                    burst::Gathered::Merged(merged) => return Ok(Run::Merged(merged)),
                }
                let expected = (!is_new).then_some(session.version);
                if let Some(by) = interrupt::newer(deps, item, &agent, &session, behind).await? {
                    let (commit, record) = interrupt::at_start(deps, item, *session, expected, by, started);
                    (commit, record, true)
                } else {
                    follower = self.progress.as_ref().and_then(|p| p.follower(item));
                    let turn = turn::run(deps, item, *session, &agent, started, deadline, follower.as_ref()).await?;
                    let (commit, record) = self.turn_commit(item, turn, expected, None);
                    (commit, record, true)
                }
            }
        };
        // A session left waiting on its customer closes as abandoned once idle, if its tenant
        // closes idle sessions; any other is not due to.
        let version = record.ran_with.as_ref().map_or(0, |r| r.agent);
        for write in &mut commit.sessions {
            // (a session a hand-off started has no turn of its agent yet)
            let version = if write.session.agent_id == record.agent_id { version } else { 0 };
            write.session.rest(item.close_idle_after, record.trigger_id, version);
        }
        if !item.earlier.is_empty()
            && let Some(first) = commit.sessions.first()
        {
            commit.coalesced = record::coalesced(deps, item, &first.session, &record);
        }
        Ok(Run::Ready(Box::new(Ready { commit, record, may_end, _follower: follower })))
    }

    /// What a turn commits: its session (as of `expected`, `None` for a new one) and the one a
    /// handoff started, its record (completing `resumes`, the record of the turn it resumed)
    /// and the recorded content new to the session.
    fn turn_commit(
        &self,
        item: &WorkItem,
        mut turn: turn::Turn,
        expected: Option<u64>,
        resumes: Option<Box<ExecutionRecord>>,
    ) -> (TurnCommit, ExecutionRecord) {
        let content = record::take_content(&mut turn.record, &mut turn.session, self.deps.clock.now());
        record::apply_recording(&mut turn.record, item.recording, resumes.as_deref());
        let mut sessions = vec![SessionWrite { session: turn.session, expected_version: expected }];
        if let Some(mut next) = turn.new_session {
            // The messages held behind a paused turn go on with the conversation.
            next.held = std::mem::take(&mut sessions[0].session.held);
            sessions.push(SessionWrite { session: next, expected_version: None });
        }
        let execution = turn.record.clone();
        (TurnCommit { sessions, execution, events: turn.events, content, resumes, coalesced: vec![] }, turn.record)
    }

    /// The write that holds `item` in `session` behind its paused turn (or behind items a
    /// failure left held), once: a redelivery is not held twice.
    fn hold(&self, item: &WorkItem, mut session: Session) -> Result<SessionWrite, ExecError> {
        let expected = session.version;
        let holds = |h: &HeldMessage| {
            h.source_id == item.source_id
                || serde_json::from_value::<WorkItem>(h.item.clone()).is_ok_and(|w| w.answers(&item.source_id))
        };
        if !session.held.iter().any(holds) {
            if session.held.len() >= MAX_HELD_MESSAGES {
                let why = format!("the conversation already holds {MAX_HELD_MESSAGES} messages behind a paused turn");
                return Err(ExecError::new(ErrorKind::Limit, why, true));
            }
            let held =
                serde_json::to_value(item).map_err(|e| ExecError::new(ErrorKind::Internal, e.to_string(), false))?;
            session.held.push(HeldMessage { source_id: item.source_id.clone(), item: held });
        }
        session.version += 1;
        session.updated_at = self.deps.clock.now();
        Ok(SessionWrite { session, expected_version: Some(expected) })
    }

    /// Runs, in order, the items the conversation of `item` held behind a paused turn, while
    /// its newest session holds some and no turn of it is paused. Each is removed from the
    /// session by its own commit (or after it, when its turn wrote another session). A failure
    /// leaves the rest held, logged: the conversation's next item runs them first.
    async fn run_held(&self, item: &WorkItem) {
        let sessions = &self.deps.sessions;
        for _ in 0..=MAX_HELD_MESSAGES {
            let latest = match sessions.latest_session(&item.tenant_id, &item.conversation_id).await {
                Ok(Some(s)) => s,
                Ok(None) => return,
                Err(e) => {
                    warn!(error = %e, "the conversation's held messages could not be read; they run with its next item");
                    return;
                }
            };
            if latest.paused.is_some() {
                return;
            }
            let Some(front) = latest.held.first() else { return };
            let next = match serde_json::from_value::<WorkItem>(front.item.clone()) {
                Ok(next) => next,
                Err(e) => {
                    let source = front.source_id.clone();
                    warn!(source = %source, error = %e, "a held item cannot be read; dropped");
                    let _ = self.unhold(latest, &source).await;
                    continue;
                }
            };
            match self.execute_one(&next, None, None, Some(&[])).await {
                // Given nothing behind it, a held item gathers no burst.
                Ok(One::Merged(_)) => return,
                Ok(One::Done(outcome, _)) => {
                    if let Some(done) = &self.held_done {
                        done(&next, &outcome);
                    }
                }
                Err(e) => {
                    warn!(source = %next.source_id, error = %e, "a held item failed; it runs again with the conversation's next item");
                    return;
                }
            }
            // Its commit removed it when it wrote this session; otherwise it goes now.
            match sessions.get_session(&item.tenant_id, latest.session_id).await {
                Ok(Some(s)) if s.held.iter().any(|h| h.source_id == next.source_id) => {
                    if let Err(e) = self.unhold(s, &next.source_id).await {
                        warn!(error = %e, "a held item that ran could not be removed; it is recorded, so it will not run again");
                        return;
                    }
                }
                _ => {}
            }
        }
    }

    /// Removes `source_id` from what `session` holds.
    async fn unhold(&self, mut session: Session, source_id: &str) -> Result<(), StoreError> {
        let expected = session.version;
        session.held.retain(|h| h.source_id != source_id);
        session.version += 1;
        session.updated_at = self.deps.clock.now();
        self.deps.sessions.write_session(&SessionWrite { session, expected_version: Some(expected) }).await
    }

    /// Commits a run of `item`: what became of it, or the version conflict that calls for
    /// running it again.
    async fn commit(&self, item: &WorkItem, ready: Ready) -> Result<Result<ExecOutcome, String>, ExecError> {
        let deps = &self.deps;
        let Ready { commit, record, may_end, .. } = &ready;
        match deps.sessions.commit_turn(commit).await {
            Ok(()) => {
                deps.bus.relay(&commit.events).await;
                if *may_end && !commit.sessions.iter().any(|w| w.session.is_active()) {
                    // Ended, failed or with a human: the conversation's session slot is free.
                    Limits::new(deps).release(&item.tenant_id, &item.conversation_id).await;
                }
                // A resumed turn's commit counts only what it adds to the paused record.
                deps.metrics.execution(&record.added_since(commit.resumes.as_deref()));
                info!(
                    execution_id = %record.execution_id, status = ?record.status,
                    iterations = record.iterations, tokens = record.token_usage.total(),
                    latency_ms = record.latency_ms, "execution recorded"
                );
                Ok(Ok(ExecOutcome::Recorded(Box::new(ready.record))))
            }
            Err(StoreError::VersionConflict(m)) => Ok(Err(m)),
            Err(StoreError::Duplicate(_)) => {
                // Another worker recorded the same source meanwhile.
                if let Some(done) = deps.executions.execution_for_source(&item.tenant_id, &item.source_id).await? {
                    return Ok(Ok(ExecOutcome::AlreadyRecorded(Box::new(done))));
                }
                Err(ExecError::new(ErrorKind::Store, "duplicate source without a record", true))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The item to run for a deferred message, if `item` is one (see
    /// [`Executor::execute_attempt`]).
    async fn admit_deferred(&self, item: &WorkItem, attempt: Option<Attempt>) -> Result<Option<WorkItem>, ExecError> {
        let Some(refusal) = item.refused.as_ref().filter(|r| r.on_limit == OnLimit::Defer) else {
            return Ok(None);
        };
        let deps = &self.deps;
        // Delivered before its window reopens (the queue's first delivery comes at once): the
        // answer is known without asking the counters again.
        if let Some(reopens) = refusal.reopens_at
            && !attempt.is_some_and(Attempt::is_last)
        {
            let wait = (reopens - deps.clock.now()).num_milliseconds();
            if wait > 0 {
                let retry_after_seconds = u64::try_from(wait).unwrap_or(0).div_ceil(1000);
                info!(limit = refusal.limit.as_str(), retry_after_s = retry_after_seconds, "message deferred");
                return Err(ExecError::deferred(&Refusal { retry_after_seconds, ..refusal.clone() }));
            }
        }
        let Some(tenant) = deps.config.get_tenant(&item.tenant_id).await? else {
            return Err(ExecError::new(ErrorKind::Config, format!("no tenant '{}'", item.tenant_id), false));
        };
        let mut next = item.clone();
        match Limits::new(deps).admit(&tenant, &item.conversation_id, Some(true), true).await? {
            Admission::Admitted(day) => {
                info!(limit = refusal.limit.as_str(), "deferred message admitted");
                next.refused = None;
                next.day_tokens = Some(day);
            }
            // A human took the conversation over meanwhile: nothing counted; the message joins
            // the human's transcript (the session read next decides).
            Admission::HumanOwned { .. } => {
                info!(limit = refusal.limit.as_str(), "deferred message now with a human operator");
                next.refused = None;
            }
            Admission::Refused(again) if attempt.is_some_and(Attempt::is_last) => {
                warn!(
                    limit = again.limit.as_str(),
                    "deferred message still refused at its last delivery; recorded, not answered"
                );
                next.refused = Some(Refusal { on_limit: OnLimit::Nothing, ..again });
            }
            Admission::Refused(again) => {
                info!(limit = again.limit.as_str(), retry_after_s = again.retry_after_seconds, "message deferred");
                return Err(ExecError::deferred(&again));
            }
        }
        Ok(Some(next))
    }

    /// What to do with `item`, given the conversation's latest session if it was just read.
    async fn prepare(
        &self,
        item: &WorkItem,
        latest: Option<Option<Session>>,
        resuming: Option<&ExecutionRecord>,
    ) -> Result<Prepared, ExecError> {
        let deps = &self.deps;
        let now = deps.clock.now();
        let mut latest = match latest {
            Some(read) => read,
            None => deps.sessions.latest_session(&item.tenant_id, &item.conversation_id).await?,
        };
        if let Some(paused) = resuming {
            return self.prepare_resume(item, latest, paused).await;
        }
        if let Some(s) = &mut latest
            && s.is_active()
        {
            let front = s.held.first().is_some_and(|h| h.source_id == item.source_id);
            if s.paused.is_some() || (!s.held.is_empty() && !front) {
                return Ok(Prepared::Hold(Box::new(latest.take().unwrap_or_else(|| unreachable!()))));
            }
        }
        // The first of the held items is running: its commit takes it out.
        if let Some(s) = &mut latest
            && s.held.first().is_some_and(|h| h.source_id == item.source_id)
        {
            s.held.remove(0);
        }
        let mut is_new = false;
        if let Some(refusal) = &item.refused {
            // Recorded in the conversation's current session (a human's included), or in a new
            // one that the next admitted message goes on with.
            let (session, is_new) = match latest {
                Some(s) if s.is_active() || s.is_human_owned() => (s, false),
                _ => (new_session(item, now), true),
            };
            return Ok(Prepared::Refused { session: Box::new(session), is_new, refusal: refusal.clone() });
        }
        let session = match latest {
            Some(s) if s.is_human_owned() => {
                return Ok(Prepared::Skip(Box::new(s), "a human operator owns the conversation".into()));
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
                new_session(item, now)
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

impl Executor {
    /// What to do with `item`, which resumes the turn recorded as `paused`: the decided
    /// approval must be the one the conversation's session holds.
    async fn prepare_resume(
        &self,
        item: &WorkItem,
        latest: Option<Session>,
        paused: &ExecutionRecord,
    ) -> Result<Prepared, ExecError> {
        let Some(session) = latest.filter(|s| s.session_id == paused.session_id && s.is_active()) else {
            return Ok(Prepared::Drop("the paused turn's session is no longer the conversation's active one".into()));
        };
        let Some(p) = &session.paused else {
            return Ok(Prepared::Drop("the session holds no paused turn".into()));
        };
        if Some(&p.approval.approval_id) != item.resume.as_ref() {
            return Ok(Prepared::Drop(format!(
                "the session's paused turn waits for another approval ({})",
                p.approval.approval_id
            )));
        }
        if p.approval.is_pending() {
            // Queued before the decision was kept (a resumption is queued after it): another
            // delivery will find it.
            return Err(ExecError::new(ErrorKind::Conflict, "the approval is not decided yet", true));
        }
        match self.deps.config.get_agent(&item.tenant_id, session.agent_id).await? {
            Some(agent) => Ok(Prepared::Resume { session: Box::new(session), agent, paused: Box::new(paused.clone()) }),
            None => Err(ExecError::new(
                ErrorKind::Config,
                format!("agent {} of session {} is missing", session.agent_id, session.session_id),
                false,
            )),
        }
    }
}

/// The session `item` starts, with the channel its message came in on.
fn new_session(item: &WorkItem, now: chrono::DateTime<chrono::Utc>) -> Session {
    let mut session = Session::start(item.tenant_id.clone(), item.conversation_id.clone(), item.agent_id, now);
    session.channel = item.detail["channel"]["platform"].as_str().map(str::to_owned);
    // A burst's first message opened the conversation; an invoke or a start opens it now.
    let arrivals = item.earlier.iter().chain(std::iter::once(item)).filter_map(|i| i.arrived_at);
    session.opened_at = Some(arrivals.min().unwrap_or(now).min(now));
    session.split = item
        .trigger_id
        .zip(item.variant.clone())
        .map(|(trigger_id, variant)| switchboard_domain::Assignment { trigger_id, variant });
    session
}

/// A run of an item, ready to commit.
struct Ready {
    commit: TurnCommit,
    record: ExecutionRecord,
    /// Whether the commit may end the conversation's time with an agent (and so free its slot):
    /// not when a human operator owns it.
    may_end: bool,
    /// Who follows this run of the turn; let go once its commit is decided, so that a
    /// follower's end (the AWS turn log's last page) comes after the record.
    _follower: Option<Follower>,
}

/// What became of an item, or the burst that answers it (which runs in its place).
enum One {
    /// The outcome, and whether the conversation may hold items to run now.
    Done(ExecOutcome, bool),
    Merged(Box<WorkItem>),
}

/// What running an item once came to.
enum Run {
    Ready(Box<Ready>),
    /// The item's burst is complete: its turn runs as this item.
    Merged(Box<WorkItem>),
    /// Nothing to do (a continuation whose session moved on, a stale resumption).
    Drop(String),
    /// The item waits behind a paused turn: the session write that holds it.
    Hold(Box<SessionWrite>),
}

enum Prepared {
    Run { session: Box<Session>, agent: Agent, is_new: bool },
    Resume { session: Box<Session>, agent: Agent, paused: Box<ExecutionRecord> },
    Hold(Box<Session>),
    Refused { session: Box<Session>, is_new: bool, refusal: Refusal },
    Skip(Box<Session>, String),
    Drop(String),
}
