//! `switchboard agents|triggers|tools|skills <verb>`: list, show, create, update and delete a
//! tenant's configuration records; `agents invoke` and `triggers run` hand over to
//! [`super::invoke`], `tools mcp` to [`super::mcp`], and the
//! history verbs (`versions`, `diff`, `rollback`) to [`super::versions`].

use std::path::{Path, PathBuf};

use anyhow::bail;
use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use super::api::{Api, query_value, read_record, tenant};
use super::output::{Format, cell, columns, print_data, print_list, print_value};
use super::versions::{self, History};
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
    /// Replace a record with a JSON or YAML file (If-Match: the file's `version`, as `get`
    /// wrote it, else the record's current ETag).
    Update {
        id: String,
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Delete a record.
    Delete { id: String },
    /// The record's kept versions, newest first (a deleted record's too).
    Versions { id: String },
    /// What changed from version FROM to version TO of a record.
    Diff { id: String, from: u64, to: u64 },
    /// Write an old version of a record again, as its next version.
    Rollback { id: String, version: u64 },
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
    /// Triggers only: start a manual trigger's agent with an input now and show what it did.
    Run {
        id: String,
        /// The text the agent is given.
        #[arg(long)]
        input: String,
        /// The conversation to run on (default: one of the run's own).
        #[arg(long)]
        conversation: Option<String>,
        /// Print the turn as it happens; with --json, each event as a line of JSON.
        #[arg(long)]
        stream: bool,
    },
    /// Tools only: tools of the tenant's MCP servers (add from a server, list, refresh).
    Mcp {
        #[command(subcommand)]
        verb: super::mcp::McpVerb,
    },
    /// Triggers only: which trigger would answer a message (or an event's detail) and why each
    /// one would or would not; nothing is queued.
    Test {
        /// The customer's message.
        #[arg(long, conflicts_with = "detail", required_unless_present = "detail")]
        message: Option<String>,
        /// The message's channel (default webchat).
        #[arg(long, requires = "message")]
        channel: Option<String>,
        /// A JSON or YAML file holding an event's `detail` (`-` reads standard input).
        #[arg(long, value_name = "FILE")]
        detail: Option<PathBuf>,
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
            let record = Written::from(segment, read_record(&file)?);
            let (created, _) = api.call(Method::POST, &base, Some(&record.body), None).await?;
            if print_data(&created, remote.format())? {
                Ok(())
            } else {
                let id = columns(segment)[0].1;
                println!("created {} {}", segment.trim_end_matches('s'), cell(&created[id]));
                Ok(())
            }
        }
        ConfigVerb::Update { id, file } => update(&api, &base, segment, &id, &file, remote.format()).await,
        ConfigVerb::Delete { id } => {
            api.call(Method::DELETE, &format!("{base}/{id}"), None, None).await?;
            println!("deleted {} {id}", segment.trim_end_matches('s'));
            Ok(())
        }
        ConfigVerb::Versions { id } => versions::run(&api, &base, segment, History::List { id }, remote.format()).await,
        ConfigVerb::Diff { id, from, to } => {
            versions::run(&api, &base, segment, History::Diff { id, from, to }, remote.format()).await
        }
        ConfigVerb::Rollback { id, version } => {
            versions::run(&api, &base, segment, History::Rollback { id, version }, remote.format()).await
        }
        ConfigVerb::Invoke { id, conversation, message, stream } => {
            if segment != "agents" {
                bail!("invoke works on agents only");
            }
            let body = json!({ "conversationId": conversation, "message": message });
            super::invoke::run(&api, &format!("{base}/{id}/invoke"), &body, stream, remote.format()).await
        }
        ConfigVerb::Run { id, input, conversation, stream } => {
            if segment != "triggers" {
                bail!("run works on manual triggers only");
            }
            let body = json!({ "input": input, "conversationId": conversation });
            super::invoke::run(&api, &format!("{base}/{id}/run"), &body, stream, remote.format()).await
        }
        ConfigVerb::Mcp { verb } => {
            if segment != "tools" {
                bail!("mcp works on tools only");
            }
            super::mcp::run(&api, &base, tenant(remote)?, verb, remote.format()).await
        }
        ConfigVerb::Test { message, channel, detail } => {
            if segment != "triggers" {
                bail!("test works on triggers only");
            }
            let body = match detail {
                Some(file) => json!({ "detail": read_record(&file)? }),
                None => json!({ "message": message, "channel": channel }),
            };
            let (tested, _) = api.call(Method::POST, &format!("{base}/test"), Some(&body), None).await?;
            if !print_data(&tested, remote.format())? {
                println!("{}", super::trigger_test::explained(&tested));
            }
            Ok(())
        }
    }
}

/// `update`: the file sent as the record's replacement, `If-Match` its `version` (else the
/// record's current ETag).
async fn update(api: &Api, base: &str, segment: &str, id: &str, file: &Path, format: Format) -> anyhow::Result<()> {
    let record = Written::from(segment, read_record(file)?);
    if let Some(other) = record.id.as_deref().filter(|other| *other != id) {
        bail!("-f {}: the file is {} {other}, not {id}", file.display(), segment.trim_end_matches('s'));
    }
    let etag = match record.version {
        Some(version) => Some(format!("\"{version}\"")),
        None => api.call(Method::GET, &format!("{base}/{id}"), None, None).await?.1,
    };
    let (updated, etag) = api.call(Method::PUT, &format!("{base}/{id}"), Some(&record.body), etag.as_deref()).await?;
    if !print_data(&updated, format)? {
        let version = etag.unwrap_or_default();
        println!("updated {} {id} (version {})", segment.trim_end_matches('s'), version.trim_matches('"'));
    }
    Ok(())
}

/// A record file as `create` and `update` send it. A file that `get -o yaml|json` wrote carries
/// the fields the server sets; they are taken out, and its `version` becomes `update`'s
/// `If-Match`, so that a record someone changed since it was read is refused (412), not
/// overwritten.
struct Written {
    body: Value,
    id: Option<String>,
    version: Option<u64>,
}

impl Written {
    fn from(segment: &str, mut body: Value) -> Self {
        let (mut id, mut version) = (None, None);
        if let Some(fields) = body.as_object_mut() {
            id = fields.remove(columns(segment)[0].1).and_then(|v| v.as_str().map(str::to_owned));
            version = fields.remove("version").and_then(|v| v.as_u64());
            for set_by_server in ["tenantId", "createdAt", "updatedAt"] {
                fields.remove(set_by_server);
            }
        }
        Self { body, id, version }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_record_as_get_wrote_it_is_sent_without_the_fields_the_server_sets() {
        let got = json!({ "tenantId": "acme", "agentId": "a-1", "name": "Support", "version": 4,
                          "createdAt": "2026-11-29T10:00:00Z", "updatedAt": "2026-11-29T11:00:00Z" });
        let written = Written::from("agents", got);
        assert_eq!(written.body, json!({ "name": "Support" }));
        assert_eq!((written.id.as_deref(), written.version), (Some("a-1"), Some(4)));
        let by_hand = Written::from("triggers", json!({ "name": "All chats" }));
        assert_eq!((by_hand.id, by_hand.version), (None, None));
    }
}
