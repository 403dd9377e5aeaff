//! `switchboard approvals <verb>`: the tool calls paused turns wait on, listed, approved
//! (optionally with edited arguments) or denied, as the key's principal.

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use super::api::{Api, tenant};
use super::output::{print_data, print_list, print_value};
use crate::shared::Remote;

#[derive(Debug, clap::Args)]
pub struct ApprovalArgs {
    #[command(flatten)]
    pub remote: Remote,
    #[command(subcommand)]
    pub verb: ApprovalVerb,
}

#[derive(Debug, Subcommand)]
pub enum ApprovalVerb {
    /// The approvals waiting, the longest waiting first.
    List,
    Get {
        id: String,
    },
    /// Let the call run; `--arguments` runs it with these instead of the model's (a JSON
    /// object, checked against the tool's parameters).
    Approve {
        id: String,
        #[arg(long, value_parser = json_object)]
        arguments: Option<Value>,
    },
    /// Refuse the call; the model reads the reason as its result.
    Deny {
        id: String,
        #[arg(long)]
        reason: String,
    },
}

/// `--arguments`: a JSON object.
fn json_object(text: &str) -> Result<Value, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err("must be a JSON object, e.g. '{\"amount\": 80}'".into()),
        Err(e) => Err(format!("is not JSON: {e}")),
    }
}

/// `switchboard approvals <verb>`
pub async fn run(remote: &Remote, verb: ApprovalVerb) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    let base = format!("/tenants/{t}/approvals");
    let (path, body, verb_done) = match verb {
        ApprovalVerb::List => {
            let (v, _) = api.call(Method::GET, &base, None, None).await?;
            let items = v["approvals"].as_array().cloned().unwrap_or_default();
            return print_list("approvals", &items, remote.format());
        }
        ApprovalVerb::Get { id } => {
            let (v, _) = api.call(Method::GET, &format!("{base}/{id}"), None, None).await?;
            return print_value(&v, remote.format());
        }
        ApprovalVerb::Approve { id, arguments } => {
            let body = arguments.map_or_else(|| json!({}), |a| json!({ "arguments": a }));
            (format!("{base}/{id}/approve"), body, "approved")
        }
        ApprovalVerb::Deny { id, reason } => (format!("{base}/{id}/deny"), json!({ "reason": reason }), "denied"),
    };
    let (v, _) = api.call(Method::POST, &path, Some(&body), None).await?;
    if !print_data(&v, remote.format())? {
        let id = v["approvalId"].as_str().unwrap_or_default();
        let tool = v["tool"].as_str().unwrap_or_default();
        println!("{verb_done} {id} ({tool}); the turn resumes");
    }
    Ok(())
}
