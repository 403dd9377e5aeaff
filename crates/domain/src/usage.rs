//! What executions add up to for their tenant: calls, tokens and cost per day, agent and model
//! (usage), and executions per hour and status (activity). Costs come from `cost`.

use std::collections::BTreeMap;

use chrono::{DateTime, DurationRound, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use crate::cost::Cost;
use crate::execution::{ExecutionRecord, ExecutionStatus, ModelCallRecord};
use crate::ids::{AgentId, TriggerId};

/// Calls, tokens and cost, added up. `cost_usd` covers the priced calls; it is `None` when no
/// call was priced, and `unpriced_calls` says how many calls it leaves out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageCounts {
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub cost_usd: Option<Cost>,
    pub unpriced_calls: u64,
}

impl UsageCounts {
    /// Every token counted: input (fresh, cached and cache writes) and output, as
    /// [`TokenUsage::total`] counts one call's.
    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens
    }

    pub fn of_call(call: &ModelCallRecord) -> Self {
        let u = call.usage;
        UsageCounts {
            calls: 1,
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            cost_usd: call.cost_usd,
            unpriced_calls: u64::from(call.cost_usd.is_none()),
        }
    }

    pub fn add(&mut self, other: &UsageCounts) {
        self.calls += other.calls;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.unpriced_calls += other.unpriced_calls;
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        };
    }
}

/// What one execution adds to its tenant's usage of one day: per agent (sub-agents count as
/// themselves) and model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageLine {
    pub agent_id: AgentId,
    pub model: String,
    pub counts: UsageCounts,
}

/// Executions of one tenant committed in one UTC hour with one status: what an overview of the
/// tenant's activity counts. Kept as long as usage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityRow {
    pub hour: DateTime<Utc>,
    pub status: ExecutionStatus,
    pub executions: u64,
}

/// Executions of one variant of a trigger's traffic split committed in one UTC hour with one
/// status, and what they used: what the activity report compares variants by. Counted in the
/// transaction that records each execution whose session a split assigned ([`Session::split`]),
/// as [`ActivityRow`]s are; kept as long as usage.
///
/// [`Session::split`]: crate::Session::split
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VariantRow {
    pub hour: DateTime<Utc>,
    pub trigger_id: TriggerId,
    pub variant: String,
    pub status: ExecutionStatus,
    pub executions: u64,
    /// Every token their model calls counted (sub-agents included).
    pub tokens: u64,
    /// What their priced calls cost; `unpriced_calls` says how many it leaves out.
    pub cost_usd: Cost,
    pub unpriced_calls: u64,
    /// Their latencies added up (divided by `executions`: the mean).
    pub latency_ms: u64,
}

impl VariantRow {
    /// What `record` adds to its variant's row, if a split assigned its session and it is
    /// counted (not while it awaits approval, as for activity).
    pub fn of(record: &ExecutionRecord) -> Option<VariantRow> {
        let split = record.split.as_ref().filter(|_| record.status != ExecutionStatus::AwaitingApproval)?;
        let mut used = UsageCounts::default();
        for line in record.usage_lines() {
            used.add(&line.counts);
        }
        Some(VariantRow {
            hour: record.activity_hour(),
            trigger_id: split.trigger_id,
            variant: split.variant.clone(),
            status: record.status,
            executions: 1,
            tokens: used.tokens(),
            cost_usd: used.cost_usd.unwrap_or(Cost::ZERO),
            unpriced_calls: used.unpriced_calls,
            latency_ms: record.latency_ms,
        })
    }
}

/// The start of the UTC hour `t` falls in.
pub fn hour_of(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(chrono::TimeDelta::hours(1)).unwrap_or(t)
}

impl ExecutionRecord {
    /// The UTC hour the execution is counted in by [`ActivityRow`]s.
    pub fn activity_hour(&self) -> DateTime<Utc> {
        hour_of(self.created_at)
    }

    /// The UTC day the execution is counted on.
    pub fn usage_day(&self) -> NaiveDate {
        self.created_at.date_naive()
    }

    /// Its model calls, its sub-agents' included, added up per agent and model.
    pub fn usage_lines(&self) -> Vec<UsageLine> {
        self.usage_lines_after(None)
    }

    /// [`usage_lines`](Self::usage_lines) of what this record adds to `before`, the same
    /// execution's record as it paused for an approval (its model calls and sub-agents came
    /// first, and are counted already).
    pub fn usage_lines_after(&self, before: Option<&ExecutionRecord>) -> Vec<UsageLine> {
        let (calls, children) = before.map_or((0, 0), |b| (b.model_calls.len(), b.children.len()));
        let mut lines: BTreeMap<(AgentId, &str), UsageCounts> = BTreeMap::new();
        let children =
            self.children.iter().skip(children).flat_map(|c| c.model_calls.iter().map(move |m| (c.agent_id, m)));
        for (agent, call) in self.model_calls.iter().skip(calls).map(|m| (self.agent_id, m)).chain(children) {
            lines.entry((agent, call.model.as_str())).or_default().add(&UsageCounts::of_call(call));
        }
        lines
            .into_iter()
            .map(|((agent_id, model), counts)| UsageLine { agent_id, model: model.to_owned(), counts })
            .collect()
    }

    /// This record with only what it adds to `before` (the same execution's record as it paused
    /// for an approval): the model calls, tool calls and sub-agent runs made after the pause,
    /// which the metrics count on the resumed commit (the paused one counted the rest).
    pub fn added_since(&self, before: Option<&ExecutionRecord>) -> std::borrow::Cow<'_, ExecutionRecord> {
        let Some(before) = before else { return std::borrow::Cow::Borrowed(self) };
        let mut added = self.clone();
        added.model_calls.drain(..before.model_calls.len().min(added.model_calls.len()));
        added.tool_calls.drain(..before.tool_calls.len().min(added.tool_calls.len()));
        added.children.drain(..before.children.len().min(added.children.len()));
        std::borrow::Cow::Owned(added)
    }

    /// What the execution cost: every model call's cost added up (sub-agents included); `None`
    /// if any call has no price.
    pub fn total_cost(&self) -> Option<Cost> {
        let calls = self.model_calls.iter().chain(self.children.iter().flat_map(|c| c.model_calls.iter()));
        calls.map(|c| c.cost_usd).try_fold(Cost::ZERO, |sum, c| c.map(|c| sum.saturating_add(c)))
    }
}

/// One line of a usage report: a day, an agent, a model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageRow {
    pub day: NaiveDate,
    pub agent_id: AgentId,
    pub model: String,
    #[serde(flatten)]
    pub counts: UsageCounts,
}
