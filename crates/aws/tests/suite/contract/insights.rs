//! Insights on both profiles: a scripted week of traffic (a manual clock, three agents, a
//! version change, a traffic split, two channels, hand-offs to people and to an agent, failed
//! turns, tool failures, unpriced calls) committed turn by turn as the engine commits them, then
//! read back and added up: every figure equals what the script itself says happened, kept apart
//! as the script ran, and a redelivered turn or another tenant's adds nothing.

use std::collections::BTreeMap;

use switchboard_domain::insights::{GroupBy, InsightCounts, InsightRow, Measure, Report, Sketch};
use switchboard_domain::{Action, HandoffCause, Priority, RanWith, ToolCallRecord};

use serde_json::Value;

use super::*;

/// What the script expects of one group (agent, version, variant, channel, UTC day): its
/// counters, and every duration it measured.
#[derive(Default, Debug)]
struct Expected {
    counts: InsightCounts,
    latency: Vec<u64>,
    first_response: Vec<u64>,
    resolution: Vec<u64>,
}

type GroupKey = (AgentId, u64, Option<String>, Option<String>, String);

struct Script<'a> {
    x: &'a Subject,
    trigger: TriggerId,
    expected: BTreeMap<GroupKey, Expected>,
    n: u32,
}

/// One turn the script runs: who, when, what it did.
struct Turn<'s> {
    session: &'s Session,
    version: u64,
    at: DateTime<Utc>,
    status: ExecutionStatus,
    actions: Vec<Action>,
    /// Tool calls, and how many of them failed.
    tools: (u64, u64),
    /// Input and output tokens of its one model call, and its cost (`None`: unpriced).
    call: (u64, u64, Option<u64>),
    latency_ms: u64,
}

impl Script<'_> {
    fn key(&self, s: &Session, version: u64, at: DateTime<Utc>) -> GroupKey {
        let variant = s.split.as_ref().map(|a| a.variant.clone());
        (s.agent_id, version, variant, s.channel.clone(), at.date_naive().to_string())
    }

    /// Commits `turn` writing `sessions` (each created or at its version before), and notes in
    /// the expected figures what the turn counted itself: one execution, its failure, tools,
    /// tokens, cost, latency.
    async fn commit(&mut self, turn: Turn<'_>, sessions: Vec<SessionWrite>) -> Expected {
        self.n += 1;
        let mut e = record(turn.session, &format!("evt-{}", self.n), turn.at);
        e.trigger_id = Some(self.trigger);
        e.ran_with = Some(RanWith { agent: turn.version, ..RanWith::default() });
        e.status = turn.status;
        e.actions = turn.actions;
        e.latency_ms = turn.latency_ms;
        e.model_calls = vec![call("bedrock:m", turn.call.0, turn.call.1, turn.call.2)];
        e.tool_calls = (0..turn.tools.0)
            .map(|i| ToolCallRecord {
                tool_use_id: format!("tu-{i}"),
                name: "lookup_order".into(),
                input: json!({}),
                output: json!({}),
                is_error: i < turn.tools.1,
                idempotency_key: format!("k-{}-{i}", self.n),
                latency_ms: 1,
                after_model_call: 1,
                webhook: None,
            })
            .collect();
        let commit =
            TurnCommit { events: vec![], sessions, execution: e, content: vec![], resumes: None, coalesced: vec![] };
        self.x.sessions.commit_turn(&commit).await.unwrap();
        // a redelivery of the same commit is refused (its session moved on, its source is
        // recorded) and counts nothing
        let again = self.x.sessions.commit_turn(&commit).await;
        assert!(matches!(again, Err(StoreError::Duplicate(_) | StoreError::VersionConflict(_))), "{again:?}");
        let mut counted = Expected::default();
        counted.counts.executions = 1;
        counted.counts.failed = u64::from(turn.status == ExecutionStatus::Failed);
        counted.counts.tool_calls = turn.tools.0;
        counted.counts.tool_failures = turn.tools.1;
        counted.counts.tokens = turn.call.0 + turn.call.1;
        counted.counts.cost_nanos = turn.call.2.unwrap_or(0);
        counted.counts.unpriced_calls = u64::from(turn.call.2.is_none());
        counted.latency.push(turn.latency_ms);
        counted
    }

    fn expect(&mut self, key: GroupKey, counted: Expected) {
        let e = self.expected.entry(key).or_default();
        e.counts.add(&counted.counts);
        e.latency.extend(counted.latency);
        e.first_response.extend(counted.first_response);
        e.resolution.extend(counted.resolution);
    }
}

fn reply() -> Action {
    Action::Reply { text: "on it".into(), message_id: "m".into() }
}

fn to_human(cause: HandoffCause) -> Action {
    Action::HandoffToHuman { reason: "a person, please".into(), priority: Priority::Normal, cause: Some(cause) }
}

/// A week of conversations: each opens with a turn that replies (or fails and goes to a person),
/// then its second turn resolves it, hands it to a person, hands it to the specialist agent
/// (whose own turn then resolves it), or leaves it open.
pub(super) async fn a_week_of_traffic_gives_the_insights_the_figures_computed_from_it(x: &Subject) {
    let t = tenant("t-insights");
    let monday: DateTime<Utc> = "2026-11-30T00:00:00Z".parse().unwrap();
    let (front, candidate, specialist) = (AgentId::generate(), AgentId::generate(), AgentId::generate());
    let mut script = Script { x, trigger: TriggerId::generate(), expected: BTreeMap::new(), n: 0 };
    for day in 0..7i64 {
        for i in 0..(3 + day % 3) {
            let opened = monday + Duration::days(day) + Duration::hours(i * 4 + 1) + Duration::minutes(i);
            // the split: even conversations to the front agent (version 1, then 2 from Thursday), odd to the candidate
            let (agent, version, variant) =
                if i % 2 == 0 { (front, if day < 3 { 1 } else { 2 }, "control") } else { (candidate, 1, "candidate") };
            let mut s = Session::start(t.clone(), format!("c-{day}-{i}"), agent, opened);
            s.split = Some(Assignment { trigger_id: script.trigger, variant: variant.into() });
            s.channel = Some(if i % 3 == 2 { "whatsapp" } else { "webchat" }.into());
            s.opened_at = Some(opened);
            let day_u = u64::try_from(day).unwrap();
            let i_u = u64::try_from(i).unwrap();
            let cost = (day != 6).then_some(100 * day_u + 7);
            let latency = 100 + 10 * i_u + day_u;

            // -- the first turn: replied after `first_ms`, or failed and went to a person
            let first_ms = 1_000 * (i_u + 1) + 250 * day_u;
            let first_at = opened + Duration::milliseconds(i64::try_from(first_ms).unwrap());
            let failed_first = i % 4 == 3;
            let mut first = s.clone();
            first.version = 1;
            first.turn_count = 1;
            first.updated_at = first_at;
            let (status, actions) = if failed_first {
                first.status = SessionStatus::HandedOff;
                first.handed_off_to = Some(HandoffTarget::Human);
                first.ended_at = Some(first_at);
                (ExecutionStatus::Failed, vec![to_human(HandoffCause::Failure)])
            } else {
                (ExecutionStatus::Success, vec![reply()])
            };
            let turn = Turn {
                session: &first,
                version,
                at: opened + Duration::milliseconds(200),
                status,
                actions,
                tools: (0, 0),
                call: (20 + i_u, 5, cost),
                latency_ms: latency,
            };
            let mut counted =
                script.commit(turn, vec![SessionWrite { session: first.clone(), expected_version: None }]).await;
            counted.counts.conversations = 1;
            if failed_first {
                counted.counts.to_human[1] = 1;
            } else {
                counted.counts.first_responses = 1;
                counted.first_response.push(first_ms);
            }
            let key = script.key(&first, version, opened);
            script.expect(key, counted);
            if failed_first {
                continue;
            }

            // -- the second turn, ten minutes later
            let at = opened + Duration::minutes(10);
            let mut second = bump(&first, at);
            let mut sessions = vec![];
            let (status, actions, mut counted_extra) = match (day + i) % 4 {
                0 => {
                    second.status = SessionStatus::Completed;
                    second.ended_at = Some(at);
                    let mut e = Expected::default();
                    e.counts.resolved = 1;
                    e.resolution.push(600_000);
                    (ExecutionStatus::Ended, vec![Action::EndConversation { summary: None }], e)
                }
                1 => {
                    second.status = SessionStatus::HandedOff;
                    second.handed_off_to = Some(HandoffTarget::Human);
                    second.ended_at = Some(at);
                    let mut e = Expected::default();
                    e.counts.to_human[0] = 1;
                    (ExecutionStatus::HandedOff, vec![to_human(HandoffCause::Agent)], e)
                }
                2 => {
                    let context = switchboard_domain::HandoffContext {
                        from_agent_id: agent,
                        from_session_id: second.session_id,
                        reason: "orders".into(),
                        relevant_info: json!({}),
                        summary: None,
                    };
                    let next = second.successor(specialist, 1, context, at);
                    second.status = SessionStatus::HandedOff;
                    second.handed_off_to =
                        Some(HandoffTarget::Agent { agent_id: specialist, session_id: next.session_id });
                    second.ended_at = Some(at);
                    sessions.push(SessionWrite { session: next, expected_version: None });
                    let mut e = Expected::default();
                    e.counts.to_agent = 1;
                    let action = Action::HandoffToAgent {
                        agent_id: specialist,
                        session_id: second.session_id,
                        reason: "orders".into(),
                    };
                    (ExecutionStatus::HandedOff, vec![action], e)
                }
                _ => (ExecutionStatus::Success, vec![reply()], Expected::default()),
            };
            sessions.insert(0, SessionWrite { session: second.clone(), expected_version: Some(first.version) });
            let failures = u64::from(day % 2 == 0);
            let turn = Turn {
                session: &second,
                version,
                at,
                status,
                actions,
                tools: (2, failures),
                call: (30, 10 + i_u, cost),
                latency_ms: latency * 3,
            };
            let counted = script.commit(turn, sessions.clone()).await;
            counted_extra.counts.add(&counted.counts);
            counted_extra.latency.extend(counted.latency);
            let key = script.key(&second, version, at);
            script.expect(key, counted_extra);

            // -- the specialist's turn resolves what it was handed, twenty minutes in
            if let Some(handed) = sessions.get(1) {
                let at = opened + Duration::minutes(20);
                let mut done = bump(&handed.session, at);
                done.status = SessionStatus::Completed;
                done.ended_at = Some(at);
                let turn = Turn {
                    session: &done,
                    version: 1,
                    at,
                    status: ExecutionStatus::Ended,
                    actions: vec![reply(), Action::EndConversation { summary: None }],
                    tools: (1, 0),
                    call: (40, 12, cost),
                    latency_ms: latency + 5,
                };
                let mut counted = script
                    .commit(
                        turn,
                        vec![SessionWrite { session: done.clone(), expected_version: Some(handed.session.version) }],
                    )
                    .await;
                counted.counts.resolved = 1;
                // measured from the conversation's first message, which the hand-off carried
                counted.resolution.push(1_200_000);
                let key = script.key(&done, 1, at);
                script.expect(key, counted);
            }
        }
    }
    // another tenant's traffic at the same hours counts only for it
    let other = tenant("t-insights-other");
    let s = Session::start(other.clone(), "c-x".into(), front, monday + Duration::hours(1));
    x.sessions.commit_turn(&create(&s, "evt-1", monday + Duration::hours(1))).await.unwrap();

    // then the rows of the week, added up per group, are what the script counted
    let rows = x.executions.insights(&t, monday, monday + Duration::days(7) - Duration::hours(1)).await.unwrap();
    let zone = jiff::tz::TimeZone::UTC;
    let group_by = [GroupBy::Agent, GroupBy::Version, GroupBy::Variant, GroupBy::Channel, GroupBy::Day];
    let report = Report::of(&rows, &group_by, &zone);
    let as_row = |e: &Expected| {
        let mut row = InsightRow { counts: e.counts, ..InsightRow::default() };
        for (measure, values) in [
            (Measure::Latency, &e.latency),
            (Measure::FirstResponse, &e.first_response),
            (Measure::Resolution, &e.resolution),
        ] {
            for v in values {
                row.sketches.entry(measure).or_default().add_ms(*v);
            }
        }
        row
    };
    let mut got: BTreeMap<GroupKey, Value> = BTreeMap::new();
    for (fields, row) in &report.groups {
        let key = (
            fields["agentId"].as_str().unwrap().parse().unwrap(),
            fields["agentVersion"].as_u64().unwrap(),
            fields["variant"].as_str().map(str::to_owned),
            fields["channel"].as_str().map(str::to_owned),
            fields["day"].as_str().unwrap().to_owned(),
        );
        got.insert(key, row.figures());
    }
    let want: BTreeMap<GroupKey, Value> =
        script.expected.iter().map(|(k, e)| (k.clone(), as_row(e).figures())).collect();
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "the groups");
    for (key, figures) in &want {
        assert_eq!(&got[key], figures, "{key:?}");
    }
    // and the week's totals, with percentiles within 1 % of the exact ones
    let mut all = Expected::default();
    for e in script.expected.values() {
        all.counts.add(&e.counts);
        all.latency.extend(&e.latency);
        all.first_response.extend(&e.first_response);
        all.resolution.extend(&e.resolution);
    }
    let total = report.total.figures();
    assert_eq!(total, as_row(&all).figures());
    assert_eq!(total["conversations"], 27, "3, 4 or 5 conversations a day, Monday to Sunday: {total}");
    assert!(total["resolved"].as_u64().unwrap() > 0 && total["handedToAgent"].as_u64().unwrap() > 0, "{total}");
    for (figure, values) in [("firstResponseMs", &all.first_response), ("latencyMs", &all.latency)] {
        let mut sorted = values.clone();
        sorted.sort_unstable();
        for (p, q) in [("p50", 0.5), ("p90", 0.9)] {
            let exact = sorted[(q * (sorted.len() - 1) as f64) as usize] as f64;
            let got = total[figure][p].as_u64().unwrap() as f64;
            assert!((got - exact).abs() <= exact * 0.011 + 1.0, "{figure} {p}: {got} against {exact}");
        }
    }
    let reasons = &total["handoffReasons"];
    assert_eq!(reasons["failure"].as_u64().unwrap(), all.counts.to_human[1]);
    assert!(reasons["failure"].as_u64().unwrap() > 0 && reasons["agent"].as_u64().unwrap() > 0, "{total}");
    // a sketch read back is the very sketch of the values (not only close to it)
    let mut latency = Sketch::default();
    all.latency.iter().for_each(|v| latency.add_ms(*v));
    assert_eq!(report.total.sketches[&Measure::Latency], latency);

    // and the other tenant sees its one execution only; an empty span reads nothing
    let theirs = x.executions.insights(&other, monday, monday + Duration::days(7)).await.unwrap();
    assert_eq!(Report::of(&theirs, &[], &zone).total.counts.executions, 1);
    let before = x.executions.insights(&t, monday - Duration::days(7), monday - Duration::hours(1)).await.unwrap();
    assert!(before.is_empty());
}
