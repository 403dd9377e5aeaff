//! Insights: what a tenant's agents achieve, counted where the state changes. A turn's commit
//! adds one [`InsightLine`] (its execution, and the conversation's outcome if the turn decided
//! one) to the row of its UTC hour, agent, agent version, trigger, traffic-split variant and
//! channel; a report ([`Report::of`]) adds rows up over a span, grouped as asked, in the
//! tenant's time zone. No batch job and no read of the records: the rows are the figures.
//!
//! Latencies are kept as DDSketch buckets (relative accuracy 1 %, the `sketches-ddsketch`
//! mapping), which add up like counters, so that a report's percentiles are those of every
//! execution it covers, never an average of averages.

use std::collections::BTreeMap;

use chrono::{DateTime, Datelike, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sketches_ddsketch::{Config, DDSketch};

use crate::cost::Cost;
use crate::execution::{Action, ExecutionRecord, ExecutionStatus};
use crate::ids::{AgentId, TriggerId};
use crate::session::{HandoffCause, HandoffTarget, Session, SessionStatus};
use crate::usage::hour_of;

/// The longest channel name counted as itself; a longer one (channels are named by whoever
/// sends the event) is counted under [`OTHER_CHANNEL`].
pub const MAX_CHANNEL_LEN: usize = 64;
/// What a channel whose name is too long is counted as.
pub const OTHER_CHANNEL: &str = "other";

/// What one row of insights is kept by: a UTC hour and what answered in it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InsightKey {
    pub hour: DateTime<Utc>,
    pub agent_id: AgentId,
    /// The agent's version the turn ran (0 for a record written without one).
    pub agent_version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_id: Option<TriggerId>,
    /// The traffic-split variant of the conversation, if a split assigned it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// The channel's platform (`webchat`, `whatsapp`, …); none for an `invoke`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
}

/// The counters of a row, added up. Names are the API's and DynamoDB's attributes
/// ([`InsightCounts::NAMES`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InsightCounts {
    /// Executions counted (once each, with the status they end with).
    pub executions: u64,
    /// Of them, those that failed or timed out.
    pub failed: u64,
    pub tool_calls: u64,
    /// Tool calls that answered an error.
    pub tool_failures: u64,
    pub tokens: u64,
    /// What the priced model calls cost, in billionths of a dollar.
    pub cost_nanos: u64,
    pub unpriced_calls: u64,
    /// Conversations opened (a first session started by a customer's message or an invoke).
    pub conversations: u64,
    /// Conversations whose first turn replied (the count behind the first-response times).
    pub first_responses: u64,
    /// Conversations an agent ended without a person (the count behind the resolution times).
    pub resolved: u64,
    /// Conversations handed to another agent.
    pub to_agent: u64,
    /// Conversations handed to a person, by cause, in [`HandoffCause::ALL`] order.
    pub to_human: [u64; 6],
    /// Conversations closed because their customer went quiet (sessions closed as `abandoned`).
    pub abandoned: u64,
}

impl InsightCounts {
    /// Every counter's name, in [`InsightCounts::values`] order.
    pub const NAMES: [&'static str; 18] = [
        "executions",
        "failed",
        "toolCalls",
        "toolFailures",
        "tokens",
        "costNanos",
        "unpricedCalls",
        "conversations",
        "firstResponses",
        "resolved",
        "toAgent",
        "toHumanAgent",
        "toHumanFailure",
        "toHumanMaxTurns",
        "toHumanSessionBudget",
        "toHumanLimit",
        "toHumanApi",
        "abandoned",
    ];

    pub fn values(&self) -> [u64; 18] {
        let h = self.to_human;
        [
            self.executions,
            self.failed,
            self.tool_calls,
            self.tool_failures,
            self.tokens,
            self.cost_nanos,
            self.unpriced_calls,
            self.conversations,
            self.first_responses,
            self.resolved,
            self.to_agent,
            h[0],
            h[1],
            h[2],
            h[3],
            h[4],
            h[5],
            self.abandoned,
        ]
    }

    pub fn from_values(v: [u64; 18]) -> Self {
        InsightCounts {
            executions: v[0],
            failed: v[1],
            tool_calls: v[2],
            tool_failures: v[3],
            tokens: v[4],
            cost_nanos: v[5],
            unpriced_calls: v[6],
            conversations: v[7],
            first_responses: v[8],
            resolved: v[9],
            to_agent: v[10],
            to_human: [v[11], v[12], v[13], v[14], v[15], v[16]],
            abandoned: v[17],
        }
    }

    pub fn add(&mut self, other: &InsightCounts) {
        let mut sum = self.values();
        for (s, o) in sum.iter_mut().zip(other.values()) {
            *s = s.saturating_add(o);
        }
        *self = Self::from_values(sum);
    }

    /// Conversations handed to a person, whatever the cause.
    pub fn handed_to_human(&self) -> u64 {
        self.to_human.iter().sum()
    }
}

/// The latencies a row keeps as sketches, with the short names their buckets are stored under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Measure {
    /// An execution's latency.
    Latency,
    /// From the conversation's first message to the commit of the first turn that replied.
    FirstResponse,
    /// From the conversation's first message to an agent ending it.
    Resolution,
}

impl Measure {
    pub const ALL: [Measure; 3] = [Measure::Latency, Measure::FirstResponse, Measure::Resolution];

    /// The bucket attributes' prefix (DynamoDB) and the `measure` column (SQLite).
    pub fn short(self) -> &'static str {
        match self {
            Measure::Latency => "lat",
            Measure::FirstResponse => "frt",
            Measure::Resolution => "ttr",
        }
    }

    pub fn parse_short(s: &str) -> Option<Measure> {
        Measure::ALL.into_iter().find(|m| m.short() == s)
    }
}

/// The bucket of a sketch that holds durations of at most a millisecond.
pub const ZERO_BUCKET: i32 = -1;

/// The sketches' mapping: 1 % relative accuracy; a millisecond or less is the zero bucket.
fn mapping() -> Config {
    Config::new(0.01, 4096, 1.0)
}

/// A sketch of durations in milliseconds, as buckets (DDSketch keys, [`ZERO_BUCKET`] for a
/// millisecond or less) and their counts: adding two is adding their buckets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sketch(pub BTreeMap<i32, u64>);

impl Sketch {
    /// The bucket `ms` is counted in.
    pub fn bucket(ms: u64) -> i32 {
        let v = ms as f64;
        let c = mapping();
        if v > c.min_possible() { c.key(v) } else { ZERO_BUCKET }
    }

    pub fn add_ms(&mut self, ms: u64) {
        self.add_bucket(Self::bucket(ms), 1);
    }

    pub fn add_bucket(&mut self, bucket: i32, count: u64) {
        let n = self.0.entry(bucket).or_default();
        *n = n.saturating_add(count);
    }

    pub fn merge(&mut self, other: &Sketch) {
        for (b, n) in &other.0 {
            self.add_bucket(*b, *n);
        }
    }

    pub fn count(&self) -> u64 {
        self.0.values().sum()
    }

    /// The `q` quantile (0 to 1) in whole milliseconds, within 1 % of the true value; `None`
    /// for an empty sketch.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let c = mapping();
        let mut sketch = DDSketch::new(c);
        for (b, n) in &self.0 {
            let v = if *b == ZERO_BUCKET { 0.0 } else { c.value(*b) };
            sketch.add_with_count(v, *n);
        }
        let v = sketch.quantile(q).ok().flatten()?;
        Some(v.round().max(0.0) as u64)
    }

    /// `{p50, p90, p99, count}`, or null when empty.
    fn summary(&self) -> Value {
        if self.0.is_empty() {
            return Value::Null;
        }
        json!({
            "p50": self.quantile(0.5),
            "p90": self.quantile(0.9),
            "p99": self.quantile(0.99),
            "count": self.count(),
        })
    }
}

/// What one commit adds to its row: its counters and the durations it measured (in ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsightLine {
    pub key: InsightKey,
    pub counts: InsightCounts,
    /// `(measure, bucket)` of each duration measured.
    pub buckets: Vec<(Measure, i32)>,
}

/// A session a commit writes, and whether the commit creates it.
#[derive(Debug, Clone, Copy)]
pub struct Written<'a> {
    pub session: &'a Session,
    pub created: bool,
}

impl InsightLine {
    /// What a turn's commit adds: `record` (beyond `before`, the same execution as it paused
    /// for an approval) and the sessions it writes. A turn that pauses for an approval counts
    /// what it did so far (its calls, the conversation it opened, its first reply) but not yet as
    /// an execution: its resumed commit counts it once, with the status it ends with, and what it
    /// added. `None` for a commit counted in no insight: a person's own action on a conversation
    /// they own, or a message nothing ran for (`skipped`).
    pub fn of(record: &ExecutionRecord, before: Option<&ExecutionRecord>, sessions: &[Written<'_>]) -> Option<Self> {
        if matches!(record.status, ExecutionStatus::Operator | ExecutionStatus::Skipped | ExecutionStatus::Coalesced) {
            return None;
        }
        let paused = record.status == ExecutionStatus::AwaitingApproval;
        // Nothing ran for an idle session's close: it counts its conversation's outcome alone.
        let ran = record.status != ExecutionStatus::Abandoned;
        let added = record.added_since(before);
        let own = sessions.iter().find(|w| w.session.session_id == record.session_id).map(|w| w.session);
        let channel = own
            .and_then(|s| s.channel.clone())
            .or_else(|| record.input.pointer("/detail/channel/platform").and_then(Value::as_str).map(str::to_owned))
            .map(|c| if c.len() > MAX_CHANNEL_LEN { OTHER_CHANNEL.to_owned() } else { c });
        let key = InsightKey {
            hour: hour_of(record.created_at),
            agent_id: record.agent_id,
            // An idle close ran nothing: its session says what its last turn ran with.
            agent_version: record
                .ran_with
                .as_ref()
                .map(|r| r.agent)
                .or_else(|| own.filter(|_| !ran).and_then(|s| s.idle.as_ref()).map(|i| i.agent_version))
                .unwrap_or(0),
            trigger_id: record.trigger_id,
            variant: record.split.as_ref().map(|s| s.variant.clone()),
            channel,
        };
        let mut counts = InsightCounts { executions: u64::from(ran && !paused), ..InsightCounts::default() };
        counts.failed = u64::from(matches!(record.status, ExecutionStatus::Failed | ExecutionStatus::Timeout));
        let children = added.children.iter().flat_map(|c| c.tool_calls.iter());
        for call in added.tool_calls.iter().chain(children) {
            counts.tool_calls += 1;
            counts.tool_failures += u64::from(call.is_error);
        }
        for line in added.usage_lines() {
            counts.tokens += line.counts.tokens();
            counts.cost_nanos += line.counts.cost_usd.map_or(0, |c| c.nanos);
            counts.unpriced_calls += line.counts.unpriced_calls;
        }
        let mut buckets = Vec::new();
        if ran && !paused {
            buckets.push((Measure::Latency, Sketch::bucket(record.latency_ms)));
        }
        let replied = record.actions.iter().any(|a| matches!(a, Action::Reply { .. }));
        for w in sessions {
            let s = w.session;
            let ms = |at: DateTime<Utc>| u64::try_from((at - s.opened()).num_milliseconds()).unwrap_or(0);
            if w.created && s.parent_session_id.is_none() {
                counts.conversations += 1;
                if replied {
                    counts.first_responses += 1;
                    buckets.push((Measure::FirstResponse, Sketch::bucket(ms(s.updated_at))));
                }
            }
            match (s.status, &s.handed_off_to) {
                (SessionStatus::Completed, _) => {
                    counts.resolved += 1;
                    buckets.push((Measure::Resolution, Sketch::bucket(ms(s.ended_at.unwrap_or(s.updated_at)))));
                }
                (SessionStatus::HandedOff, Some(HandoffTarget::Human)) => {
                    let cause = record.actions.iter().rev().find_map(|a| match a {
                        Action::HandoffToHuman { cause, .. } => Some(cause.unwrap_or_default()),
                        _ => None,
                    });
                    let i = HandoffCause::ALL.iter().position(|c| Some(*c) == cause).unwrap_or(0);
                    counts.to_human[i] += 1;
                }
                (SessionStatus::HandedOff, Some(HandoffTarget::Agent { .. })) => counts.to_agent += 1,
                (SessionStatus::Abandoned, _) => counts.abandoned += 1,
                _ => {}
            }
        }
        Some(InsightLine { key, counts, buckets })
    }
}

/// A row as a store keeps it: its key, counters and sketches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InsightRow {
    pub key: Option<InsightKey>,
    pub counts: InsightCounts,
    pub sketches: BTreeMap<Measure, Sketch>,
}

impl InsightRow {
    /// A row holding `line` alone.
    pub fn of_line(line: &InsightLine) -> Self {
        let mut row = InsightRow { key: Some(line.key.clone()), counts: line.counts, ..InsightRow::default() };
        for (m, b) in &line.buckets {
            row.sketches.entry(*m).or_default().add_bucket(*b, 1);
        }
        row
    }

    pub fn add(&mut self, other: &InsightRow) {
        self.counts.add(&other.counts);
        for (m, s) in &other.sketches {
            self.sketches.entry(*m).or_default().merge(s);
        }
    }

    /// The figures a report shows of these counters and sketches.
    pub fn figures(&self) -> Value {
        let c = &self.counts;
        // A conversation's outcomes: an agent resolved it, a person got it, its customer left.
        let outcomes = c.resolved + c.handed_to_human() + c.abandoned;
        let rate = |n: u64, of: u64| (of > 0).then(|| n as f64 / of as f64);
        let reasons: serde_json::Map<String, Value> =
            HandoffCause::ALL.iter().zip(c.to_human).map(|(cause, n)| (cause.as_str().to_owned(), json!(n))).collect();
        let sketch = |m: Measure| self.sketches.get(&m).map_or(Value::Null, Sketch::summary);
        json!({
            "conversations": c.conversations,
            "resolved": c.resolved,
            "handedToHuman": c.handed_to_human(),
            "handedToAgent": c.to_agent,
            "handoffReasons": reasons,
            "resolutionRate": rate(c.resolved, outcomes),
            "handoffRate": rate(c.handed_to_human(), outcomes),
            "abandoned": c.abandoned,
            "abandonedRate": rate(c.abandoned, outcomes),
            "executions": c.executions,
            "failedExecutions": c.failed,
            "failureRate": rate(c.failed, c.executions),
            "toolCalls": c.tool_calls,
            "toolFailures": c.tool_failures,
            "tokens": c.tokens,
            "costUsd": Cost::from_nanos(c.cost_nanos),
            "unpricedCalls": c.unpriced_calls,
            "firstResponseMs": sketch(Measure::FirstResponse),
            "resolutionMs": sketch(Measure::Resolution),
            "latencyMs": sketch(Measure::Latency),
        })
    }
}

/// What a report may group its rows by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GroupBy {
    Agent,
    /// The agent and its version.
    Version,
    Trigger,
    /// The trigger and its split's variant.
    Variant,
    Channel,
    /// The day in the report's time zone.
    Day,
    /// The hour in the report's time zone.
    Hour,
}

impl GroupBy {
    pub const ALL: [GroupBy; 7] = [
        GroupBy::Agent,
        GroupBy::Version,
        GroupBy::Trigger,
        GroupBy::Variant,
        GroupBy::Channel,
        GroupBy::Day,
        GroupBy::Hour,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::Agent => "agent",
            GroupBy::Version => "version",
            GroupBy::Trigger => "trigger",
            GroupBy::Variant => "variant",
            GroupBy::Channel => "channel",
            GroupBy::Day => "day",
            GroupBy::Hour => "hour",
        }
    }

    /// A comma-separated list (`agent,day`), each once; the name at fault otherwise.
    pub fn parse_list(raw: &str) -> Result<Vec<GroupBy>, String> {
        let mut out = Vec::new();
        for name in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let g = GroupBy::ALL.into_iter().find(|g| g.as_str() == name).ok_or_else(|| {
                let known: Vec<&str> = GroupBy::ALL.iter().map(|g| g.as_str()).collect();
                format!("unknown grouping {name:?}: one or more of {}", known.join(", "))
            })?;
            if out.contains(&g) {
                return Err(format!("{name:?} is named twice"));
            }
            out.push(g);
        }
        Ok(out)
    }

    /// This grouping's fields of `key`, as the report's group names them.
    fn fields(self, key: &InsightKey, zone: &jiff::tz::TimeZone) -> Vec<(&'static str, Value)> {
        // Formatted by hand: jiff's `strftime` would add its formatter to every function that
        // links the API (docs/benchmarks.md, "Lambda deployables").
        let local = |with_hour: bool| {
            let Ok(t) = jiff::Timestamp::from_millisecond(key.hour.timestamp_millis()) else { return String::new() };
            let z = t.to_zoned(zone.clone());
            let day = format!("{:04}-{:02}-{:02}", z.year(), z.month(), z.day());
            if !with_hour {
                return day;
            }
            let offset = z.offset().seconds();
            let (sign, offset) = if offset < 0 { ('-', -offset) } else { ('+', offset) };
            format!("{day}T{:02}:{:02}:00{sign}{:02}:{:02}", z.hour(), z.minute(), offset / 3600, offset % 3600 / 60)
        };
        match self {
            GroupBy::Agent => vec![("agentId", json!(key.agent_id))],
            GroupBy::Version => vec![("agentId", json!(key.agent_id)), ("agentVersion", json!(key.agent_version))],
            GroupBy::Trigger => vec![("triggerId", json!(key.trigger_id))],
            GroupBy::Variant => vec![("triggerId", json!(key.trigger_id)), ("variant", json!(key.variant))],
            GroupBy::Channel => vec![("channel", json!(key.channel))],
            GroupBy::Day => vec![("day", json!(local(false)))],
            GroupBy::Hour => vec![("hour", json!(local(true)))],
        }
    }
}

/// A report's figures: over the whole span, and per group, ordered by the group's fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub total: InsightRow,
    pub groups: Vec<(serde_json::Map<String, Value>, InsightRow)>,
}

impl Report {
    /// `rows` added up, in all and by `group_by` (the days and hours of `zone`).
    pub fn of<'r>(
        rows: impl IntoIterator<Item = &'r InsightRow>,
        group_by: &[GroupBy],
        zone: &jiff::tz::TimeZone,
    ) -> Report {
        let mut total = InsightRow::default();
        let mut groups: BTreeMap<Vec<String>, (serde_json::Map<String, Value>, InsightRow)> = BTreeMap::new();
        for row in rows {
            total.add(row);
            let Some(key) = &row.key else { continue };
            if group_by.is_empty() {
                continue;
            }
            let mut fields = serde_json::Map::new();
            for g in group_by {
                fields.extend(g.fields(key, zone).into_iter().map(|(k, v)| (k.to_owned(), v)));
            }
            // numbers padded, so that version 10 sorts after version 9
            let sort_key: Vec<String> =
                fields.values().map(|v| v.as_u64().map_or_else(|| v.to_string(), |n| format!("{n:020}"))).collect();
            groups.entry(sort_key).or_insert_with(|| (fields, InsightRow::default())).1.add(row);
        }
        Report { total, groups: groups.into_values().collect() }
    }
}

/// Days a report spans by default (ending today in its time zone).
pub const DEFAULT_DAYS: i64 = 7;
/// Days a report spans at most (a quarter; the counters are kept as long as usage).
pub const MAX_DAYS: i64 = 92;

/// The days a report covers in a time zone, and the period of as many days just before, as the
/// UTC instants their midnights fall on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Period {
    pub from: NaiveDate,
    pub to: NaiveDate,
    pub zone: jiff::tz::TimeZone,
    /// Local midnight starting `from`, and the one ending `to`.
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub previous_from: NaiveDate,
    pub previous_start: DateTime<Utc>,
}

impl Period {
    /// `from..=to` in `zone` (an IANA name), by default the [`DEFAULT_DAYS`] ending on the day
    /// `now` falls on there. The query field at fault (`from`, `timeZone`) and why otherwise.
    pub fn of(
        from: Option<NaiveDate>,
        to: Option<NaiveDate>,
        zone: &str,
        now: DateTime<Utc>,
    ) -> Result<Period, (&'static str, String)> {
        let zone = jiff::tz::TimeZone::get(zone).map_err(|_| ("timeZone", format!("unknown time zone {zone:?}")))?;
        let today = jiff::Timestamp::from_millisecond(now.timestamp_millis())
            .ok()
            .map(|t| t.to_zoned(zone.clone()).date())
            .and_then(|d| {
                NaiveDate::from_ymd_opt(
                    i32::from(d.year()),
                    u32::try_from(d.month()).ok()?,
                    u32::try_from(d.day()).ok()?,
                )
            })
            .unwrap_or_else(|| now.date_naive());
        // Days jiff's zones know (years 1 to 9999), checked before any arithmetic on them.
        let known = |d: &NaiveDate| (1..=9999).contains(&d.year());
        if let Some((field, _)) = [("from", from), ("to", to)].into_iter().find(|(_, d)| d.is_some_and(|d| !known(&d)))
        {
            return Err((field, "must be a day of the years 0001 to 9999".into()));
        }
        let to = to.unwrap_or(today);
        let from = from.unwrap_or(to - chrono::Duration::days(DEFAULT_DAYS - 1));
        if from > to {
            return Err(("from", "must not be after `to`".into()));
        }
        let days = (to - from).num_days() + 1;
        if days > MAX_DAYS {
            return Err(("from", format!("a report spans at most {MAX_DAYS} days")));
        }
        let previous_from = from - chrono::Duration::days(days);
        let midnight = |day: NaiveDate, field: &'static str| -> Result<DateTime<Utc>, (&'static str, String)> {
            let civil = jiff::civil::Date::new(
                i16::try_from(day.year()).unwrap_or(i16::MAX),
                i8::try_from(day.month()).unwrap_or(1),
                i8::try_from(day.day()).unwrap_or(1),
            );
            let ms = civil
                .ok()
                .and_then(|d| d.to_zoned(zone.clone()).ok())
                .map(|z| z.timestamp().as_millisecond())
                .and_then(DateTime::from_timestamp_millis);
            ms.ok_or_else(|| (field, "the days are out of range".to_owned()))
        };
        Ok(Period {
            start: midnight(from, "from")?,
            end: midnight(to + chrono::Duration::days(1), "to")?,
            previous_start: midnight(previous_from, "from")?,
            from,
            to,
            zone,
            previous_from,
        })
    }

    /// The first and last UTC hours whose rows a report of this period and the one before reads.
    pub fn hours(&self) -> (DateTime<Utc>, DateTime<Utc>) {
        (hour_of(self.previous_start), hour_of(self.end - chrono::Duration::milliseconds(1)))
    }

    /// The rows of `rows` whose hour starts in the period (`previous`: in the one before).
    pub fn rows<'r>(&self, rows: &'r [InsightRow], previous: bool) -> impl Iterator<Item = &'r InsightRow> {
        let (start, end) = if previous { (self.previous_start, self.start) } else { (self.start, self.end) };
        rows.iter().filter(move |r| r.key.as_ref().is_some_and(|k| k.hour >= start && k.hour < end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sketchs_quantiles_are_within_one_percent_of_the_exact_ones() {
        let mut s = Sketch::default();
        let values: Vec<u64> = (1..=1000).map(|i| i * 37).collect();
        for v in &values {
            s.add_ms(*v);
        }
        for q in [0.5, 0.9, 0.99] {
            let exact = values[(q * (values.len() - 1) as f64) as usize] as f64;
            let got = s.quantile(q).unwrap() as f64;
            assert!((got - exact).abs() <= exact * 0.011, "q{q}: {got} against {exact}");
        }
        assert_eq!(s.count(), 1000);
    }

    #[test]
    fn sketches_merged_are_the_sketch_of_all_their_values() {
        let (mut a, mut b, mut all) = (Sketch::default(), Sketch::default(), Sketch::default());
        for v in [0, 1, 2, 150, 9_000] {
            a.add_ms(v);
            all.add_ms(v);
        }
        for v in [3, 150, 40_000, 86_400_000] {
            b.add_ms(v);
            all.add_ms(v);
        }
        a.merge(&b);
        assert_eq!(a, all);
        assert_eq!(a.0[&ZERO_BUCKET], 2, "0 and 1 ms are the zero bucket");
        assert_eq!(a.quantile(0.0), Some(0));
    }

    #[test]
    fn days_and_hours_are_named_in_the_zone_with_its_offset() {
        let key = InsightKey {
            hour: "2026-12-01T22:00:00Z".parse().unwrap(),
            agent_id: "01J00000000000000000000003".parse().unwrap(),
            agent_version: 1,
            trigger_id: None,
            variant: None,
            channel: None,
        };
        let at = |zone: &str, g: GroupBy| g.fields(&key, &jiff::tz::TimeZone::get(zone).unwrap())[0].1.clone();
        assert_eq!(at("Asia/Kolkata", GroupBy::Day), json!("2026-12-02"));
        assert_eq!(at("Asia/Kolkata", GroupBy::Hour), json!("2026-12-02T03:30:00+05:30"));
        assert_eq!(at("America/St_Johns", GroupBy::Hour), json!("2026-12-01T18:30:00-03:30"));
        assert_eq!(at("UTC", GroupBy::Hour), json!("2026-12-01T22:00:00+00:00"));
    }

    #[test]
    fn a_report_adds_rows_up_by_group_in_the_order_of_their_fields() {
        let row = |version: u64, executions: u64| {
            let key = InsightKey {
                hour: "2026-12-01T10:00:00Z".parse().unwrap(),
                agent_id: "01J00000000000000000000003".parse().unwrap(),
                agent_version: version,
                trigger_id: None,
                variant: None,
                channel: None,
            };
            InsightRow {
                key: Some(key),
                counts: InsightCounts { executions, ..Default::default() },
                ..Default::default()
            }
        };
        let rows = [row(10, 1), row(2, 2), row(10, 4)];
        let report = Report::of(&rows, &[GroupBy::Version], &jiff::tz::TimeZone::UTC);
        let versions: Vec<(Value, u64)> =
            report.groups.iter().map(|(by, r)| (by["agentVersion"].clone(), r.counts.executions)).collect();
        assert_eq!(versions, vec![(json!(2), 2), (json!(10), 5)]);
        assert_eq!(report.total.counts.executions, 7);
        assert!(Report::of(&rows, &[], &jiff::tz::TimeZone::UTC).groups.is_empty());
    }

    #[test]
    fn groupings_parse_from_a_list_and_name_the_one_at_fault() {
        assert_eq!(GroupBy::parse_list("agent, day").unwrap(), vec![GroupBy::Agent, GroupBy::Day]);
        assert_eq!(GroupBy::parse_list("").unwrap(), vec![]);
        assert!(GroupBy::parse_list("agent,week").unwrap_err().contains("\"week\""));
        assert!(GroupBy::parse_list("day,day").unwrap_err().contains("twice"));
    }

    fn record(status: &str, extra: Value) -> ExecutionRecord {
        let mut v = json!({
            "tenantId": "t-1", "executionId": "01J00000000000000000000001", "sessionId": "01J00000000000000000000002",
            "agentId": "01J00000000000000000000003", "sourceId": "s-1", "input": {}, "status": status,
            "iterations": 1, "modelCalls": [], "toolCalls": [], "actions": [],
            "tokenUsage": { "inputTokens": 0, "outputTokens": 0 }, "latencyMs": 40,
            "createdAt": "2026-12-01T10:15:00Z", "expiresAt": "2026-12-31T10:15:00Z"
        });
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        serde_json::from_value(v).unwrap()
    }

    fn session(record: &ExecutionRecord) -> Session {
        let opened: DateTime<Utc> = "2026-12-01T10:14:58Z".parse().unwrap();
        let mut s = Session::start(record.tenant_id.clone(), "c-1".into(), record.agent_id, opened);
        s.session_id = record.session_id;
        s.opened_at = Some(opened);
        s.updated_at = "2026-12-01T10:15:01Z".parse().unwrap();
        s
    }

    fn call(tokens: u64) -> Value {
        json!({ "model": "m", "stopReason": "tool_use", "usage": { "inputTokens": tokens, "outputTokens": 0 }, "latencyMs": 1 })
    }

    fn tool(is_error: bool) -> Value {
        json!({ "toolUseId": "t", "name": "x", "input": {}, "output": {}, "isError": is_error, "idempotencyKey": "k", "latencyMs": 1 })
    }

    #[test]
    fn a_turn_paused_for_an_approval_counts_its_conversation_and_calls_then_its_execution_once_resumed() {
        // given a first turn that replied, called a model and a tool, and paused before a second tool
        let reply = json!([{ "type": "reply", "text": "one moment", "messageId": "m-1" }]);
        let paused = record(
            "awaiting_approval",
            json!({ "modelCalls": [call(10)], "toolCalls": [tool(false)], "actions": reply }),
        );
        let s = session(&paused);
        let line = InsightLine::of(&paused, None, &[Written { session: &s, created: true }]).unwrap();
        // then the pause counts the conversation, its first response, its calls, and no execution
        assert_eq!((line.counts.executions, line.counts.conversations, line.counts.first_responses), (0, 1, 1));
        assert_eq!((line.counts.tokens, line.counts.tool_calls), (10, 1));
        assert_eq!(line.buckets, vec![(Measure::FirstResponse, Sketch::bucket(3_000))]);
        // and the resumed turn counts the execution with what it added: a failed tool, a call
        let done = record(
            "success",
            json!({ "modelCalls": [call(10), call(5)], "toolCalls": [tool(false), tool(true)], "actions": reply }),
        );
        let resumed = InsightLine::of(&done, Some(&paused), &[Written { session: &s, created: false }]).unwrap();
        assert_eq!(
            (resumed.counts.executions, resumed.counts.conversations, resumed.counts.first_responses),
            (1, 0, 0)
        );
        assert_eq!((resumed.counts.tokens, resumed.counts.tool_calls, resumed.counts.tool_failures), (5, 1, 1));
        assert_eq!(resumed.buckets, vec![(Measure::Latency, Sketch::bucket(40))]);
    }

    #[test]
    fn a_hand_off_counts_by_its_cause_and_one_recorded_without_a_cause_as_the_agents() {
        for (cause, slot) in [(Some("failure"), 1), (Some("api"), 5), (None, 0)] {
            let mut action = json!({ "type": "handoff_to_human", "reason": "r", "priority": "normal" });
            if let Some(cause) = cause {
                action["cause"] = json!(cause);
            }
            let r = record("failed", json!({ "actions": [action] }));
            let mut s = session(&r);
            s.status = SessionStatus::HandedOff;
            s.handed_off_to = Some(HandoffTarget::Human);
            let line = InsightLine::of(&r, None, &[Written { session: &s, created: false }]).unwrap();
            let mut want = [0; 6];
            want[slot] = 1;
            assert_eq!((line.counts.to_human, line.counts.failed), (want, 1), "{cause:?}");
        }
    }

    #[test]
    fn a_session_left_waiting_is_due_to_close_and_its_close_counts_abandoned_under_its_idle_key() {
        let turn = record("success", json!({ "ranWith": { "agent": 4 } }));
        let mut s = session(&turn);
        let trigger: crate::TriggerId = "01J00000000000000000000009".parse().unwrap();
        // a session its agent waits on is due 30 minutes after its last write, if its tenant closes them
        s.rest(None, Some(trigger), 4);
        assert_eq!(s.idle_due(), None, "the tenant keeps it open");
        s.rest(Some(30), Some(trigger), 4);
        let due: DateTime<Utc> = "2026-12-01T10:45:01Z".parse().unwrap();
        assert_eq!(s.idle_due(), Some(due));
        // paused for an approval, handed on or ended, it is not due
        let mut ended = s.clone();
        ended.status = SessionStatus::Completed;
        assert_eq!(ended.idle_due(), None);
        ended.rest(Some(30), Some(trigger), 4);
        assert_eq!(ended.idle, None, "a turn that ends it sets no idle time");
        // its close ran nothing: it counts one abandoned conversation, under the idle's version
        let close = record("abandoned", json!({ "triggerId": trigger, "latencyMs": 3 }));
        s.status = SessionStatus::Abandoned;
        let line = InsightLine::of(&close, None, &[Written { session: &s, created: false }]).unwrap();
        assert_eq!((line.counts.abandoned, line.counts.executions, line.counts.resolved), (1, 0, 0));
        assert_eq!((line.key.agent_version, line.key.trigger_id), (4, Some(trigger)));
        assert!(line.buckets.is_empty(), "no latency for a close");
        // and the rates share the outcomes: one resolved, one to a person, one abandoned
        let mut row = InsightRow::of_line(&line);
        row.counts.resolved = 1;
        row.counts.to_human[0] = 1;
        let figures = row.figures();
        let third = Some(1.0 / 3.0);
        assert_eq!((figures["resolutionRate"].as_f64(), figures["abandonedRate"].as_f64()), (third, third));
    }

    #[test]
    fn a_persons_own_action_and_a_message_nothing_ran_for_count_nowhere_and_a_long_channel_is_other() {
        for status in ["operator", "skipped"] {
            let r = record(status, json!({}));
            assert_eq!(InsightLine::of(&r, None, &[]), None, "{status}");
        }
        let long = "x".repeat(MAX_CHANNEL_LEN + 1);
        let r = record("success", json!({ "input": { "detail": { "channel": { "platform": long } } } }));
        assert_eq!(InsightLine::of(&r, None, &[]).unwrap().key.channel.as_deref(), Some(OTHER_CHANNEL));
        let r = record("success", json!({ "input": { "detail": { "channel": { "platform": "webchat" } } } }));
        assert_eq!(InsightLine::of(&r, None, &[]).unwrap().key.channel.as_deref(), Some("webchat"));
    }

    #[test]
    fn counters_round_trip_through_their_values() {
        let c = InsightCounts { executions: 3, to_human: [1, 2, 3, 4, 5, 6], cost_nanos: 9, ..Default::default() };
        assert_eq!(InsightCounts::from_values(c.values()), c);
        assert_eq!(c.handed_to_human(), 21);
    }
}

#[cfg(test)]
mod period_tests {
    use super::*;

    #[test]
    fn a_period_is_made_of_local_days_and_the_previous_one_as_long() {
        let now: DateTime<Utc> = "2026-12-07T23:30:00Z".parse().unwrap_or_default();
        // already the 8th in Paris
        let p = Period::of(None, None, "Europe/Paris", now).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!((p.from.to_string(), p.to.to_string()), ("2026-12-02".into(), "2026-12-08".into()));
        assert_eq!(p.start.to_rfc3339(), "2026-12-01T23:00:00+00:00");
        assert_eq!(p.end.to_rfc3339(), "2026-12-08T23:00:00+00:00");
        assert_eq!(p.previous_start.to_rfc3339(), "2026-11-24T23:00:00+00:00");
        let day = |s: &str| s.parse::<NaiveDate>().ok();
        assert_eq!(Period::of(day("2026-12-03"), day("2026-12-01"), "UTC", now).unwrap_err().0, "from");
        assert_eq!(Period::of(day("2026-01-01"), day("2026-12-01"), "UTC", now).unwrap_err().0, "from");
        assert_eq!(Period::of(None, None, "Mars/Base", now).unwrap_err().0, "timeZone");
        // the edges of what a date parses to are refused, not overflowed
        for (from, to, field) in [
            (None, Some(NaiveDate::MAX), "to"),
            (Some(NaiveDate::MIN), None, "from"),
            (Some(NaiveDate::MIN), Some(NaiveDate::MIN), "from"),
            (None, day("0000-12-31"), "to"),
        ] {
            assert_eq!(Period::of(from, to, "UTC", now).unwrap_err().0, field, "{from:?} {to:?}");
        }
        // the calendar's last day has no midnight after it in a zone's range
        assert_eq!(Period::of(day("9999-12-25"), day("9999-12-31"), "UTC", now).unwrap_err().0, "to");
        assert!(Period::of(day("0001-01-01"), day("0001-01-02"), "UTC", now).is_ok());
    }
}
