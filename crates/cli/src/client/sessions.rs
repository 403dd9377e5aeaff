//! `switchboard sessions <verb>`: a tenant's sessions, shown, listed, handed off to a human or
//! an agent, or their agent's turn cancelled.

use clap::{Subcommand, ValueEnum};
use reqwest::Method;
use serde_json::json;

use super::api::{Api, query_value, tenant};
use super::output::{print_data, print_list, print_value};
use crate::shared::Remote;

#[derive(Debug, clap::Args)]
pub struct SessionArgs {
    #[command(flatten)]
    pub remote: Remote,
    #[command(subcommand)]
    pub verb: SessionVerb,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Target {
    Human,
    Agent,
}

#[derive(Debug, Subcommand)]
pub enum SessionVerb {
    Get {
        id: String,
    },
    /// The sessions of a conversation, oldest first; without `--conversation`, the tenant's
    /// sessions newest first (`--status handed_off` for the conversations handed on).
    List {
        #[arg(long)]
        conversation: Option<String>,
        /// active, handed_off, completed, failed or abandoned.
        #[arg(long, conflicts_with = "conversation")]
        status: Option<String>,
        /// Only this agent's sessions.
        #[arg(long, conflicts_with = "conversation")]
        agent: Option<String>,
        /// Only conversations that came in on this channel (`webchat`, …).
        #[arg(long, conflicts_with = "conversation")]
        channel: Option<String>,
        /// Only conversations a traffic split assigned this variant.
        #[arg(long, conflicts_with = "conversation")]
        variant: Option<String>,
        /// At most this many (1 to 100).
        #[arg(long, default_value_t = 50, conflicts_with = "conversation")]
        limit: u32,
    },
    /// Hand the conversation to a human or an agent (or back from a human to an agent).
    Handoff {
        id: String,
        #[arg(long, value_enum)]
        to: Target,
        #[arg(long)]
        agent: Option<String>,
        #[arg(long)]
        reason: String,
    },
    /// Stop the agent's turn (a paused one's calls are not run) and give the conversation to a
    /// human.
    Cancel {
        id: String,
        #[arg(long)]
        reason: String,
    },
}

/// `switchboard sessions <verb>`
pub async fn run(remote: &Remote, verb: SessionVerb) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    match verb {
        SessionVerb::Get { id } => print_value(
            &api.call(Method::GET, &format!("/tenants/{t}/sessions/{id}"), None, None).await?.0,
            remote.format(),
        ),
        SessionVerb::List { conversation, status, agent, channel, variant, limit } => {
            let (path, field) = match conversation {
                Some(c) => (format!("/tenants/{t}/conversations/{c}/sessions"), "sessions"),
                None => {
                    let mut query = vec![format!("limit={limit}")];
                    if let Some(s) = &status {
                        query.push(format!("status={}", query_value(s)));
                    }
                    for (name, value) in [("agentId", &agent), ("channel", &channel), ("variant", &variant)] {
                        if let Some(v) = value {
                            query.push(format!("{name}={}", query_value(v)));
                        }
                    }
                    (format!("/tenants/{t}/sessions?{}", query.join("&")), "items")
                }
            };
            let (v, _) = api.call(Method::GET, &path, None, None).await?;
            let items = v[field].as_array().cloned().unwrap_or_default();
            print_list("sessions", &items, remote.format())
        }
        SessionVerb::Handoff { id, to, agent, reason } => {
            let body = match to {
                Target::Human => json!({ "targetType": "human", "reason": reason }),
                Target::Agent => json!({ "targetType": "agent", "targetAgentId": agent, "reason": reason }),
            };
            let (v, _) =
                api.call(Method::POST, &format!("/tenants/{t}/sessions/{id}/handoff"), Some(&body), None).await?;
            if print_data(&v, remote.format())? {
                Ok(())
            } else {
                match v["newSessionId"].as_str() {
                    Some(s) => println!("handed off; new session {s}"),
                    None => println!("handed off to a human"),
                }
                Ok(())
            }
        }
        SessionVerb::Cancel { id, reason } => {
            let body = json!({ "reason": reason });
            let (v, _) =
                api.call(Method::POST, &format!("/tenants/{t}/sessions/{id}/cancel"), Some(&body), None).await?;
            if !print_data(&v, remote.format())? {
                match v["status"].as_str() {
                    Some("cancelling") => println!(
                        "cancelled approval {} of the paused turn; the conversation goes to a human as it resumes",
                        v["approval"]["approvalId"].as_str().unwrap_or("?")
                    ),
                    _ => println!("handed off to a human"),
                }
            }
            Ok(())
        }
    }
}
