//! `switchboard usage` and `switchboard activity`: a tenant's tokens and cost per day, agent and
//! model, and its executions per hour. Read-only.

use clap::Args;
use reqwest::Method;
use serde_json::{Value, json};

use super::api::{Api, query_value, tenant};
use super::output::{Format, cell, print_data, print_list};
use crate::shared::Remote;

#[derive(Debug, clap::Args)]
pub struct UsageArgs {
    #[command(flatten)]
    pub remote: Remote,
    #[command(flatten)]
    pub range: UsageRange,
}

#[derive(Debug, clap::Args)]
pub struct ActivityArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// Hours to report, the current one included (1 to 168)
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u16).range(1..=168))]
    pub hours: u16,
}

/// The days of a usage report (UTC, `YYYY-MM-DD`; the server's defaults when left out).
#[derive(Debug, Args)]
pub struct UsageRange {
    /// First day (default: 29 days before `--to`).
    #[arg(long)]
    pub from: Option<String>,
    /// Last day, included (default: today).
    #[arg(long)]
    pub to: Option<String>,
}

/// `switchboard usage`: one line per day, agent and model, then the total. A cost of `-` means
/// no price is known for the model (not that it was free).
pub async fn usage(remote: &Remote, range: UsageRange) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    let mut query = Vec::new();
    if let Some(from) = &range.from {
        query.push(format!("from={}", query_value(from)));
    }
    if let Some(to) = &range.to {
        query.push(format!("to={}", query_value(to)));
    }
    let path = format!("/tenants/{t}/usage?{}", query.join("&"));
    let report = api.call(Method::GET, &path, None, None).await?.0;
    if print_data(&report, remote.format())? {
        return Ok(());
    }
    let dollars = |v: &Value| v.as_f64().map_or_else(|| json!("-"), |d| json!(format!("{d:.6}")));
    let mut rows: Vec<Value> = report["rows"].as_array().cloned().unwrap_or_default();
    let mut total = report["total"].clone();
    total["day"] = json!("total");
    rows.push(total);
    for row in &mut rows {
        row["costUsd"] = dollars(&row["costUsd"]);
    }
    println!("{} to {} (prices: {})", cell(&report["from"]), cell(&report["to"]), cell(&report["priceVersion"]));
    print_list("usage", &rows, Format::Table)?;
    let unpriced = report["total"]["unpricedCalls"].as_u64().unwrap_or(0);
    if unpriced > 0 {
        println!("{unpriced} call(s) of models without a price are not in the cost");
    }
    Ok(())
}

/// `switchboard activity`: executions per UTC hour and status, the hours with any, then each
/// traffic-split variant's executions, tokens, cost and mean latency side by side.
pub async fn activity(remote: &Remote, hours: u16) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    let report = api.call(Method::GET, &format!("/tenants/{t}/activity?hours={hours}"), None, None).await?.0;
    if print_data(&report, remote.format())? {
        return Ok(());
    }
    println!("{} to {} (UTC hours)", cell(&report["from"]), cell(&report["to"]));
    let by_status = |v: &Value| -> String {
        v.as_object()
            .map(|m| m.iter().map(|(status, n)| format!("{status}={n}")).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    println!("{:<20}  {:>10}  BY STATUS", "HOUR", "EXECUTIONS");
    for h in report["byHour"].as_array().into_iter().flatten().filter(|h| h["total"].as_u64() > Some(0)) {
        println!("{:<20}  {:>10}  {}", cell(&h["hour"]), cell(&h["total"]), by_status(&h["executions"]));
    }
    println!("{:<20}  {:>10}  {}", "total", cell(&report["total"]), by_status(&report["executions"]));
    let variants = report["variants"].as_array().cloned().unwrap_or_default();
    if !variants.is_empty() {
        println!();
        println!(
            "{:<26}  {:<16}  {:>10}  {:>10}  {:>12}  {:>11}  BY STATUS",
            "TRIGGER (SPLIT)", "VARIANT", "EXECUTIONS", "TOKENS", "COST USD", "MEAN MS"
        );
        for v in &variants {
            let cost = v["costUsd"].as_f64().map_or_else(|| "-".to_owned(), |d| format!("{d:.6}"));
            println!(
                "{:<26}  {:<16}  {:>10}  {:>10}  {:>12}  {:>11}  {}",
                cell(&v["triggerId"]),
                cell(&v["variant"]),
                cell(&v["total"]),
                cell(&v["tokens"]),
                cost,
                cell(&v["meanLatencyMs"]),
                by_status(&v["executions"])
            );
        }
    }
    Ok(())
}
