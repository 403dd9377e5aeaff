//! `switchboard executions <verb>`: a tenant's execution records, one or a session's; and
//! `switchboard replay ID`: one run again by today's engine from its record.

use clap::Subcommand;
use reqwest::Method;

use super::api::{Api, tenant};
use super::output::{print_list, print_value};
use crate::shared::Remote;
use crate::shared::remote::Format;

#[derive(Debug, clap::Args)]
pub struct ExecutionArgs {
    #[command(flatten)]
    pub remote: Remote,
    #[command(subcommand)]
    pub verb: ExecutionVerb,
}

#[derive(Debug, Subcommand)]
pub enum ExecutionVerb {
    Get {
        id: String,
    },
    /// The executions of a session.
    List {
        #[arg(long)]
        session: String,
    },
}

/// `switchboard executions <verb>`
pub async fn run(remote: &Remote, verb: ExecutionVerb) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    match verb {
        ExecutionVerb::Get { id } => print_value(
            &api.call(Method::GET, &format!("/tenants/{t}/executions/{id}"), None, None).await?.0,
            remote.format(),
        ),
        ExecutionVerb::List { session } => {
            let items = api.all_pages(&format!("/tenants/{t}/sessions/{session}/executions?limit=100")).await?;
            print_list("executions", &items, remote.format())
        }
    }
}

/// Arguments of `switchboard replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// The execution to run again
    pub id: String,
}

/// `switchboard replay ID`: `POST …/executions/{id}/replay`, printed as a verdict and each
/// difference (or the report with `-o json|yaml`); fails (exit 1) when the actions differ, so
/// that a script or CI can gate on it.
pub async fn replay(remote: &Remote, id: &str) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    let body = serde_json::json!({});
    let (report, _) =
        api.call(Method::POST, &format!("/tenants/{t}/executions/{id}/replay"), Some(&body), None).await?;
    match remote.format() {
        Format::Table | Format::Wide => println!("{}", verdict(&report)),
        format => print_value(&report, format)?,
    }
    if report["same"] != serde_json::Value::Bool(true) {
        anyhow::bail!("execution {id} replayed with different actions");
    }
    Ok(())
}

/// The replay's report as text: what was compared, then each difference.
fn verdict(report: &serde_json::Value) -> String {
    let r = &report["recorded"];
    let count = |k: &str| r[k].as_array().map_or(0, Vec::len);
    let what = format!(
        "{} model calls, {} tool calls, {} actions, status {}",
        r["modelCalls"],
        count("toolCalls"),
        count("actions"),
        r["status"].as_str().unwrap_or("?")
    );
    if report["same"] == serde_json::Value::Bool(true) {
        return format!("same actions as recorded ({what})");
    }
    let mut out = vec![format!("different actions from the record ({what}):")];
    for d in report["differences"].as_array().into_iter().flatten() {
        out.push(format!("  - {}", d.as_str().unwrap_or_default()));
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_verdict_says_what_was_compared_and_each_difference() {
        let recorded = json!({ "status": "success", "modelCalls": 2, "toolCalls": [{}], "actions": [{}] });
        let same = json!({ "same": true, "differences": [], "recorded": recorded, "replayed": recorded });
        assert_eq!(verdict(&same), "same actions as recorded (2 model calls, 1 tool calls, 1 actions, status success)");
        let different = json!({ "same": false, "differences": ["status: recorded success, replayed failed"], "recorded": recorded });
        assert_eq!(
            verdict(&different),
            "different actions from the record (2 model calls, 1 tool calls, 1 actions, status success):\n  - status: recorded success, replayed failed"
        );
    }
}
