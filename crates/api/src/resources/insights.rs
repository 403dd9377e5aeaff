//! `GET /tenants/{t}/insights`: what the tenant's agents achieved over days of its time zone
//! (conversations resolved without a person, handed to one and why, first-response and
//! resolution times as percentiles, failures, tools, tokens and cost), in all, against the
//! period before, and grouped as asked. Read-only; the figures are the stores' insight rows
//! ([`switchboard_domain::insights`]), added up here.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_domain::ValidationErrors;
use switchboard_domain::insights::{GroupBy, Period, Report};

use crate::extract::{Query, Tenant};
use crate::problem::Problem;
use crate::resources::reports::query_day;
use crate::state::ApiState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct InsightsQuery {
    from: Option<String>,
    to: Option<String>,
    group_by: Option<String>,
    time_zone: Option<String>,
}

fn invalid(field: &str, detail: impl Into<String>) -> Problem {
    Problem::invalid(ValidationErrors::single(format!("/query/{field}"), detail))
}

pub(crate) async fn insights(
    State(state): State<Arc<ApiState>>,
    Query(q): Query<InsightsQuery>,
    tenant: Result<Tenant, Problem>,
) -> Result<Response, Problem> {
    let group_by = GroupBy::parse_list(q.group_by.as_deref().unwrap_or("")).map_err(|e| invalid("groupBy", e))?;
    let (from, to) = (query_day("from", &q.from)?, query_day("to", &q.to)?);
    if let Some(zone) = &q.time_zone {
        let mut errors = ValidationErrors::default();
        switchboard_domain::schedule::check_zone(zone, "/query/timeZone", &mut errors);
        errors.into_result().map_err(Problem::invalid)?;
    }
    let Tenant(t) = tenant?;
    let zone_name = match q.time_zone {
        Some(zone) => zone,
        None => state.config.get_tenant(&t).await?.and_then(|tenant| tenant.time_zone).unwrap_or_else(|| "UTC".into()),
    };
    let now = state.executor.deps().clock.now();
    let period = Period::of(from, to, &zone_name, now).map_err(|(field, why)| invalid(field, why))?;
    // One read covers the period and the one before it.
    let (first, last) = period.hours();
    let rows = state.executions.insights(&t, first, last).await?;
    let report = Report::of(period.rows(&rows, false), &group_by, &period.zone);
    let previous = Report::of(period.rows(&rows, true), &[], &period.zone);
    let groups: Vec<Value> = report
        .groups
        .iter()
        .map(|(fields, row)| {
            let mut v = row.figures();
            v["by"] = Value::Object(fields.clone());
            v
        })
        .collect();
    Ok(Json(json!({
        "tenantId": t,
        "from": period.from,
        "to": period.to,
        "timeZone": zone_name,
        "groupBy": group_by.iter().map(|g| g.as_str()).collect::<Vec<_>>(),
        "currency": "USD",
        "total": report.total.figures(),
        "previous": {
            "from": period.previous_from,
            "to": period.from - chrono::Duration::days(1),
            "total": previous.total.figures(),
        },
        "groups": groups,
    }))
    .into_response())
}
