//! Reports over a tenant's records: usage (tokens and cost by day, agent and model,
//! `GET …/usage`) and activity (executions by status per hour, `GET …/activity`). Read-only; the
//! numbers are the stores' aggregates, summed here.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chrono::NaiveDate;
use serde::Deserialize;
use serde_json::json;
use switchboard_domain::limits::USAGE_TTL_DAYS;
use switchboard_domain::{Cost, TriggerId, UsageCounts, ValidationErrors, VariantRow};

use crate::extract::{Query, Tenant};
use crate::problem::Problem;
use crate::state::ApiState;

/// The query parameter `field`'s day (`YYYY-MM-DD`), if given. A signed year of more digits parses
/// too: the years a report can mean are 0001 to 9999, and keeping to them keeps a report's
/// arithmetic on days within chrono's range.
pub(crate) fn query_day(field: &str, raw: &Option<String>) -> Result<Option<NaiveDate>, Problem> {
    raw.as_deref()
        .map(|v| {
            NaiveDate::parse_from_str(v, "%Y-%m-%d")
                .ok()
                .filter(|d| (1..=9999).contains(&chrono::Datelike::year(d)))
                .ok_or_else(|| {
                    Problem::invalid(ValidationErrors::single(
                        format!("/query/{field}"),
                        "must be a date, YYYY-MM-DD, of the years 0001 to 9999",
                    ))
                })
        })
        .transpose()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UsageQuery {
    from: Option<String>,
    to: Option<String>,
}

/// Days a usage report spans by default (ending today, UTC).
const USAGE_DEFAULT_DAYS: i64 = 30;

/// Tokens and cost of the UTC days `from..=to` (default: the last 30 days), by day, agent and
/// model, with a total per day and for the range.
pub(crate) async fn usage(
    State(state): State<Arc<ApiState>>,
    Query(q): Query<UsageQuery>,
    tenant: Result<Tenant, Problem>,
) -> Result<Response, Problem> {
    let day = query_day;
    let today = state.executor.deps().clock.now().date_naive();
    let to = day("to", &q.to)?.unwrap_or(today);
    let from = day("from", &q.from)?.unwrap_or(to - chrono::Duration::days(USAGE_DEFAULT_DAYS - 1));
    if from > to {
        return Err(Problem::invalid(ValidationErrors::single("/query/from", "must not be after `to`")));
    }
    if (to - from).num_days() >= USAGE_TTL_DAYS {
        return Err(Problem::invalid(ValidationErrors::single(
            "/query/from",
            format!("a report spans at most {USAGE_TTL_DAYS} days (usage is kept that long)"),
        )));
    }
    let Tenant(t) = tenant?;
    let rows = state.executions.usage(&t, from, to).await?;
    let mut total = UsageCounts::default();
    let mut by_day: Vec<(NaiveDate, UsageCounts)> = Vec::new();
    for row in &rows {
        total.add(&row.counts);
        match by_day.last_mut() {
            Some((d, counts)) if *d == row.day => counts.add(&row.counts),
            _ => by_day.push((row.day, row.counts)),
        }
    }
    let by_day: Vec<serde_json::Value> = by_day
        .into_iter()
        .map(|(d, counts)| {
            let mut v = serde_json::to_value(counts).unwrap_or_default();
            v["day"] = json!(d);
            v
        })
        .collect();
    Ok(Json(json!({
        "tenantId": t,
        "from": from,
        "to": to,
        "currency": "USD",
        "priceVersion": state.executor.deps().prices.version,
        "rows": rows,
        "byDay": by_day,
        "total": total,
    }))
    .into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ActivityQuery {
    hours: Option<String>,
}

/// Hours an activity report spans at most (a week).
const ACTIVITY_MAX_HOURS: i64 = 168;

/// The tenant's executions by status in each of the last `hours` UTC hours (default 24), the
/// current hour last and every hour listed, with the totals of the span and, for triggers that
/// split traffic, each variant's.
pub(crate) async fn activity(
    State(state): State<Arc<ApiState>>,
    Query(q): Query<ActivityQuery>,
    tenant: Result<Tenant, Problem>,
) -> Result<Response, Problem> {
    let hours = match q.hours.as_deref() {
        None => 24,
        Some(raw) => raw.parse::<i64>().ok().filter(|h| (1..=ACTIVITY_MAX_HOURS).contains(h)).ok_or_else(|| {
            Problem::invalid(ValidationErrors::single(
                "/query/hours",
                format!("must be a whole number of hours from 1 to {ACTIVITY_MAX_HOURS}"),
            ))
        })?,
    };
    let Tenant(t) = tenant?;
    let to = switchboard_domain::hour_of(state.executor.deps().clock.now());
    let from = to - chrono::Duration::hours(hours - 1);
    let rows = state.executions.activity(&t, from, to).await?;
    let mut total = serde_json::Map::new();
    let by_hour: Vec<serde_json::Value> = (0..hours)
        .map(|i| {
            let hour = from + chrono::Duration::hours(i);
            let mut executions = serde_json::Map::new();
            let mut sum = 0u64;
            for r in rows.iter().filter(|r| r.hour == hour) {
                executions.insert(r.status.as_str().to_owned(), json!(r.executions));
                let t = total.entry(r.status.as_str()).or_insert(json!(0u64));
                *t = json!(t.as_u64().unwrap_or(0) + r.executions);
                sum += r.executions;
            }
            json!({ "hour": hour, "executions": executions, "total": sum })
        })
        .collect();
    let sum: u64 = rows.iter().map(|r| r.executions).sum();
    let variants = variant_totals(&state.executions.variants(&t, from, to).await?);
    let dead_letters = match &state.dead_letters {
        Some(d) => Some(d.count(&t).await?),
        None => None,
    };
    Ok(Json(json!({
        "tenantId": t,
        "from": from,
        "to": to,
        "byHour": by_hour,
        "executions": total,
        "total": sum,
        "variants": variants,
        "deadLetters": dead_letters,
    }))
    .into_response())
}

/// The span's executions of each traffic-split variant (by trigger, then variant), added up:
/// by status, in all, and the tokens, cost and mean latency they took, so that two variants of
/// a trigger can be compared side by side.
fn variant_totals(rows: &[VariantRow]) -> Vec<serde_json::Value> {
    let mut sums: BTreeMap<(TriggerId, &str), Vec<&VariantRow>> = BTreeMap::new();
    for row in rows {
        sums.entry((row.trigger_id, row.variant.as_str())).or_default().push(row);
    }
    sums.into_iter()
        .map(|((trigger_id, variant), rows)| {
            let mut executions = serde_json::Map::new();
            for status in switchboard_domain::ExecutionStatus::ALL {
                let n: u64 = rows.iter().filter(|r| r.status == status).map(|r| r.executions).sum();
                if n > 0 {
                    executions.insert(status.as_str().to_owned(), json!(n));
                }
            }
            let total: u64 = rows.iter().map(|r| r.executions).sum();
            let latency: u64 = rows.iter().map(|r| r.latency_ms).sum();
            let cost = rows.iter().fold(Cost::ZERO, |sum, r| sum.saturating_add(r.cost_usd));
            json!({
                "triggerId": trigger_id,
                "variant": variant,
                "executions": executions,
                "total": total,
                "tokens": rows.iter().map(|r| r.tokens).sum::<u64>(),
                "costUsd": cost,
                "unpricedCalls": rows.iter().map(|r| r.unpriced_calls).sum::<u64>(),
                "meanLatencyMs": latency.checked_div(total).unwrap_or(0),
            })
        })
        .collect()
}
