//! `switchboard executions <verb>`: a tenant's execution records, one or a session's; and
//! `switchboard replay ID`: one run again by today's engine from its record.

use anyhow::Context;
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
    /// Ask the server's model again instead of taking the recorded answers (the agent as it is
    /// now), and show the record and the live run side by side
    #[arg(long)]
    pub live: bool,
    /// A live run's model instead of the agent's (`provider:model` or an alias)
    #[arg(long, value_name = "REF", requires = "live")]
    pub model: Option<String>,
    /// A live run's changes to the agent: a JSON or YAML file of agent fields (as `agents get`
    /// writes), laid over the agent as it is now
    #[arg(long, value_name = "FILE", requires = "live")]
    pub agent_file: Option<std::path::PathBuf>,
    /// Run the replay on this machine from what the API serves, instead of asking the server to
    /// (what happens anyway when the server does not replay, as the AWS internal API)
    #[arg(long, conflicts_with = "live")]
    pub local: bool,
}

/// `switchboard replay ID`: `POST …/executions/{id}/replay`, printed as a verdict and each
/// difference (or the report with `-o json|yaml`); fails (exit 1) when the actions differ, so
/// that a script or CI can gate on it. `--live` prints the record and the live run side by side
/// and succeeds whatever they did (a live model answers as it likes).
pub async fn replay(args: &ReplayArgs) -> anyhow::Result<()> {
    let (remote, id) = (&args.remote, args.id.as_str());
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    let mut body = serde_json::json!({});
    if args.live {
        body["live"] = true.into();
        if let Some(model) = &args.model {
            body["model"] = model.clone().into();
        }
        if let Some(path) = &args.agent_file {
            let mut agent =
                super::api::read_record(path).with_context(|| format!("--agent-file {}", path.display()))?;
            if let Some(fields) = agent.as_object_mut() {
                // What `agents get` writes beside the fields one changes.
                for set_by_server in ["agentId", "tenantId", "version", "createdAt", "updatedAt"] {
                    fields.remove(set_by_server);
                }
            }
            body["agent"] = agent;
        }
    }
    let report = match args.local {
        true => super::local_replay::replay(&api, t, id).await?,
        false => {
            let path = format!("/tenants/{t}/executions/{id}/replay");
            let res = api.send(Method::POST, &path, Some(&body), &[]).await?;
            if res.status() == reqwest::StatusCode::NOT_IMPLEMENTED && !args.live {
                // A server without the embedded engine (the AWS internal API): replayed here.
                eprintln!("the server does not replay executions; replaying {id} here from what its API serves");
                super::local_replay::replay(&api, t, id).await?
            } else {
                super::api::answer(res).await?
            }
        }
    };
    match remote.format() {
        Format::Table | Format::Wide if args.live => println!("{}", side_by_side(&report)),
        Format::Table | Format::Wide => println!("{}", verdict(&report)),
        format => print_value(&report, format)?,
    }
    if !args.live && report["same"] != serde_json::Value::Bool(true) {
        anyhow::bail!("execution {id} replayed with different actions");
    }
    Ok(())
}

/// A live run's report as two columns, the record's and the live run's, then each difference.
fn side_by_side(report: &serde_json::Value) -> String {
    let (a, b) = (&report["recorded"], &report["live"]);
    let names = |side: &serde_json::Value| {
        let calls: Vec<&str> =
            side["toolCalls"].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str()).collect();
        if calls.is_empty() { "—".to_owned() } else { calls.join(", ") }
    };
    let actions = |side: &serde_json::Value| {
        let kinds: Vec<&str> =
            side["actions"].as_array().into_iter().flatten().filter_map(|c| c["type"].as_str()).collect();
        if kinds.is_empty() { "—".to_owned() } else { kinds.join(", ") }
    };
    let replies = |side: &serde_json::Value| {
        let texts: Vec<&str> = side["replies"].as_array().into_iter().flatten().filter_map(|r| r.as_str()).collect();
        if texts.is_empty() { "—".to_owned() } else { texts.join(" / ") }
    };
    let models = |side: &serde_json::Value| {
        let mut names: Vec<&str> = side["models"].as_array().into_iter().flatten().filter_map(|m| m.as_str()).collect();
        names.dedup();
        names.join(", ")
    };
    let cost = |side: &serde_json::Value| side["costUsd"].as_f64().map_or("unpriced".to_owned(), |c| format!("${c}"));
    let rows = [
        ("status", a["status"].as_str().unwrap_or("?").to_owned(), b["status"].as_str().unwrap_or("?").to_owned()),
        ("model", models(a), models(b)),
        ("model calls", a["modelCalls"].to_string(), b["modelCalls"].to_string()),
        ("tool calls", names(a), names(b)),
        ("actions", actions(a), actions(b)),
        ("replies", replies(a), replies(b)),
        ("tokens", a["tokens"].to_string(), b["tokens"].to_string()),
        ("cost", cost(a), cost(b)),
        ("latency", format!("{} ms", a["latencyMs"]), format!("{} ms", b["latencyMs"])),
    ];
    let width = rows.iter().map(|(_, r, _)| r.chars().count()).max().unwrap_or(0).max("recorded".len());
    let mut out = vec![format!("{:<12} {:<width$}  live", "", "recorded")];
    for (label, recorded, live) in rows {
        out.push(format!("{label:<12} {recorded:<width$}  {live}"));
    }
    if report["same"] == serde_json::Value::Bool(true) {
        out.push("same actions as recorded".to_owned());
    } else {
        out.push("different actions from the record:".to_owned());
        for d in report["differences"].as_array().into_iter().flatten() {
            out.push(format!("  - {}", d.as_str().unwrap_or_default()));
        }
    }
    out.join("\n")
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
