//! `switchboard usage`, `switchboard activity` and `switchboard insights`: a tenant's tokens and
//! cost per day, agent and model, its executions per hour, and what its agents achieved.
//! Read-only.

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

#[derive(Debug, clap::Args)]
pub struct InsightsArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// First day, YYYY-MM-DD (default: 6 days before `--to`).
    #[arg(long)]
    pub from: Option<String>,
    /// Last day, included (default: today in the time zone).
    #[arg(long)]
    pub to: Option<String>,
    /// Groups, comma-separated: agent, version, trigger, variant, channel, day, hour.
    #[arg(long)]
    pub group_by: Option<String>,
    /// The IANA time zone of the days (default: the tenant's, else UTC).
    #[arg(long)]
    pub time_zone: Option<String>,
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

/// A rate as a percentage, `-` when nothing was counted.
fn percent(v: &Value) -> String {
    v.as_f64().map_or_else(|| "-".to_owned(), |r| format!("{:.1}%", r * 100.0))
}

/// A percentile in milliseconds as seconds, `-` when nothing was measured.
fn seconds(v: &Value, p: &str) -> String {
    v[p].as_u64().map_or_else(|| "-".to_owned(), |ms| format!("{:.1}s", ms as f64 / 1000.0))
}

/// The change of a figure against the period before, `new` since nothing was counted then.
fn change(now: &Value, before: &Value) -> String {
    match (now.as_f64(), before.as_f64()) {
        (Some(n), Some(b)) if b > 0.0 => format!("{:+.0}%", (n - b) / b * 100.0),
        (Some(n), _) if n > 0.0 => "new".to_owned(),
        _ => "-".to_owned(),
    }
}

/// `switchboard insights`: the headline figures with their change against the period before,
/// the hand-offs to people by cause, then one line per group when `--group-by` names any.
pub async fn insights(args: &InsightsArgs) -> anyhow::Result<()> {
    let remote = &args.remote;
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    let mut query = Vec::new();
    for (name, value) in
        [("from", &args.from), ("to", &args.to), ("groupBy", &args.group_by), ("timeZone", &args.time_zone)]
    {
        if let Some(v) = value {
            query.push(format!("{name}={}", query_value(v)));
        }
    }
    let report = api.call(Method::GET, &format!("/tenants/{t}/insights?{}", query.join("&")), None, None).await?.0;
    if print_data(&report, remote.format())? {
        return Ok(());
    }
    let (now, before) = (&report["total"], &report["previous"]["total"]);
    println!(
        "{} to {} ({}), against {} to {}",
        cell(&report["from"]),
        cell(&report["to"]),
        cell(&report["timeZone"]),
        cell(&report["previous"]["from"]),
        cell(&report["previous"]["to"])
    );
    println!("{:<26}  {:>12}  {:>12}  {:>8}", "FIGURE", "NOW", "BEFORE", "CHANGE");
    let line = |name: &str, a: String, b: String, c: String| println!("{name:<26}  {a:>12}  {b:>12}  {c:>8}");
    for (name, key) in [
        ("conversations", "conversations"),
        ("resolved by an agent", "resolved"),
        ("handed to a person", "handedToHuman"),
        ("handed to another agent", "handedToAgent"),
        ("abandoned (went quiet)", "abandoned"),
        ("executions", "executions"),
        ("failed executions", "failedExecutions"),
        ("tool calls", "toolCalls"),
        ("tool failures", "toolFailures"),
        ("tokens", "tokens"),
    ] {
        line(name, cell(&now[key]), cell(&before[key]), change(&now[key], &before[key]));
    }
    let dollars = |v: &Value| v.as_f64().map_or_else(|| "-".to_owned(), |d| format!("{d:.4}"));
    line(
        "cost USD",
        dollars(&now["costUsd"]),
        dollars(&before["costUsd"]),
        change(&now["costUsd"], &before["costUsd"]),
    );
    for (name, key) in
        [("resolution rate", "resolutionRate"), ("abandoned rate", "abandonedRate"), ("failure rate", "failureRate")]
    {
        line(name, percent(&now[key]), percent(&before[key]), "".into());
    }
    for (name, key) in [("first response p50", "firstResponseMs"), ("resolution time p50", "resolutionMs")] {
        line(name, seconds(&now[key], "p50"), seconds(&before[key], "p50"), "".into());
        let p90 = name.replace("p50", "p90");
        line(&p90, seconds(&now[key], "p90"), seconds(&before[key], "p90"), "".into());
    }
    let reasons = now["handoffReasons"].as_object().map_or_else(String::new, |m| {
        m.iter().filter(|(_, n)| n.as_u64() > Some(0)).map(|(c, n)| format!("{c}={n}")).collect::<Vec<_>>().join(" ")
    });
    if !reasons.is_empty() {
        println!("hand-offs to a person by cause: {reasons}");
    }
    print_groups(report["groups"].as_array().map_or(&[][..], Vec::as_slice));
    Ok(())
}

/// One line per group of an insights report: its fields, then its main figures.
fn print_groups(groups: &[Value]) {
    if groups.is_empty() {
        return;
    }
    println!();
    println!(
        "{:<44}  {:>6}  {:>8}  {:>6}  {:>9}  {:>9}  {:>8}  {:>8}  {:>7}",
        "GROUP", "CONVS", "RESOLVED", "HUMAN", "ABANDONED", "RES.RATE", "FIRST50", "EXECS", "FAILED"
    );
    for g in groups {
        let by = g["by"].as_object().map_or_else(String::new, |m| {
            m.values().map(|v| if v.is_null() { "-".to_owned() } else { cell(v) }).collect::<Vec<_>>().join(" ")
        });
        println!(
            "{:<44}  {:>6}  {:>8}  {:>6}  {:>9}  {:>9}  {:>8}  {:>8}  {:>7}",
            by,
            cell(&g["conversations"]),
            cell(&g["resolved"]),
            cell(&g["handedToHuman"]),
            cell(&g["abandoned"]),
            percent(&g["resolutionRate"]),
            seconds(&g["firstResponseMs"], "p50"),
            cell(&g["executions"]),
            cell(&g["failedExecutions"])
        );
    }
}
