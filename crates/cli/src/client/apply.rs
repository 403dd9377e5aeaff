//! `switchboard apply -f tenant.json`: a whole tenant bundle created or updated over the API, with
//! what changed printed (or what would, with `--dry-run`).

use std::path::PathBuf;

use anyhow::bail;
use clap::Args;
use reqwest::Method;
use serde_json::{Value, json};

use super::api::{Api, query_value, read_record};
use super::output::{cell, print_data};
use crate::shared::Remote;

#[derive(Debug, clap::Args)]
pub struct ApplyCommand {
    #[command(flatten)]
    pub remote: Remote,
    #[command(flatten)]
    pub args: ApplyArgs,
}

/// `switchboard apply`'s own arguments.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// A tenant bundle (JSON or YAML): the tenant with its tools, skills, agents and triggers,
    /// as `switchboard serve --tenant` reads it; `-` reads it from standard input.
    #[arg(long, short = 'f')]
    pub file: PathBuf,
    /// Say what would change; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `switchboard apply -f tenant.json`: creates or updates every record of the bundle (and, with
/// an admin key or IAM on AWS, the tenant), printing what changed.
pub async fn run(remote: &Remote, args: ApplyArgs) -> anyhow::Result<()> {
    let bundle = read_record(&args.file)?;
    let Some(t) = bundle.get("tenantId").and_then(Value::as_str).map(str::to_owned) else {
        bail!("-f {}: the bundle has no tenantId", args.file.display());
    };
    if let Some(flag) = &remote.tenant
        && *flag != t
    {
        bail!("--tenant {flag} does not match the bundle's tenantId {t}");
    }
    let api = Api::new(remote).await?;
    let dry = if args.dry_run { "?dryRun=true" } else { "" };
    let report =
        api.call(Method::POST, &format!("/tenants/{}/apply{dry}", query_value(&t)), Some(&bundle), None).await?.0;
    if print_data(&report, remote.format())? {
        return Ok(());
    }
    let verb = |created: &str, done: &str| if args.dry_run { format!("would be {created}") } else { done.to_owned() };
    if report["tenantCreated"] == json!(true) {
        println!("tenant {t}: {}", verb("created", "created"));
    }
    if report["limits"] == json!("updated") {
        println!("{:<18} tenant {t} limits", verb("updated", "updated"));
    }
    let mut counts = [0usize; 3];
    for c in report["changes"].as_array().into_iter().flatten() {
        let change = c["change"].as_str().unwrap_or("");
        let slot = match change {
            "created" => 0,
            "updated" => 1,
            _ => 2,
        };
        counts[slot] += 1;
        if slot < 2 {
            let kind = c["kind"].as_str().unwrap_or("").trim_end_matches('s');
            println!("{:<18} {kind} {} ({})", verb(change, change), cell(&c["id"]), cell(&c["name"]));
        }
    }
    let [created, updated, unchanged] = counts;
    let tail = if args.dry_run { " (dry run: nothing written)" } else { "" };
    println!("{created} created, {updated} updated, {unchanged} unchanged{tail}");
    Ok(())
}
