//! `switchboard agents|triggers|tools|skills <verb>`: list, show, create, update and delete a
//! tenant's configuration records; `agents invoke` hands over to [`super::invoke`].

use std::path::PathBuf;

use anyhow::bail;
use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use super::api::{Api, query_value, read_record, tenant};
use super::output::{cell, columns, print_data, print_list, print_value};
use crate::shared::Remote;

#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    #[command(flatten)]
    pub remote: Remote,
    #[command(subcommand)]
    pub verb: ConfigVerb,
}

#[derive(Debug, Subcommand)]
pub enum ConfigVerb {
    /// List records (all pages).
    List {
        #[arg(long)]
        status: Option<String>,
        /// Agents only: standard, supervisor or router.
        #[arg(long = "type")]
        kind: Option<String>,
    },
    /// Show one record.
    Get { id: String },
    /// Create a record from a JSON or YAML file.
    Create {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Replace a record with a JSON or YAML file (reads its ETag first, then sends If-Match).
    Update {
        id: String,
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Delete a record.
    Delete { id: String },
    /// Agents only: run the agent on a conversation now and show what it did.
    Invoke {
        id: String,
        #[arg(long)]
        conversation: String,
        #[arg(long)]
        message: Option<String>,
        /// Print the turn as it happens (model calls, the reply as it is written, tool calls,
        /// actions); with --json, each event as a line of JSON.
        #[arg(long)]
        stream: bool,
    },
}

/// `switchboard agents|triggers|tools|skills <verb>`
pub async fn run(segment: &str, remote: &Remote, verb: ConfigVerb) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let base = format!("/tenants/{}/{segment}", tenant(remote)?);
    match verb {
        ConfigVerb::List { status, kind } => {
            let mut query = vec!["limit=100".to_owned()];
            query.extend(status.as_deref().map(|s| format!("status={}", query_value(s))));
            query.extend(kind.as_deref().map(|k| format!("type={}", query_value(k))));
            let items = api.all_pages(&format!("{base}?{}", query.join("&"))).await?;
            print_list(segment, &items, remote.format())
        }
        ConfigVerb::Get { id } => {
            print_value(&api.call(Method::GET, &format!("{base}/{id}"), None, None).await?.0, remote.format())
        }
        ConfigVerb::Create { file } => {
            let (created, _) = api.call(Method::POST, &base, Some(&read_record(&file)?), None).await?;
            if print_data(&created, remote.format())? {
                Ok(())
            } else {
                let id = columns(segment)[0].1;
                println!("created {} {}", segment.trim_end_matches('s'), cell(&created[id]));
                Ok(())
            }
        }
        ConfigVerb::Update { id, file } => {
            let record = read_record(&file)?;
            let (_, etag) = api.call(Method::GET, &format!("{base}/{id}"), None, None).await?;
            let (updated, etag) =
                api.call(Method::PUT, &format!("{base}/{id}"), Some(&record), etag.as_deref()).await?;
            if print_data(&updated, remote.format())? {
                Ok(())
            } else {
                println!(
                    "updated {} {id} (version {})",
                    segment.trim_end_matches('s'),
                    etag.unwrap_or_default().trim_matches('"')
                );
                Ok(())
            }
        }
        ConfigVerb::Delete { id } => {
            api.call(Method::DELETE, &format!("{base}/{id}"), None, None).await?;
            println!("deleted {} {id}", segment.trim_end_matches('s'));
            Ok(())
        }
        ConfigVerb::Invoke { id, conversation, message, stream } => {
            if segment != "agents" {
                bail!("invoke works on agents only");
            }
            let body = json!({ "conversationId": conversation, "message": message });
            super::invoke::run(&api, &format!("{base}/{id}/invoke"), &body, stream, remote.format()).await
        }
    }
}
