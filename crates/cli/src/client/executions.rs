//! `switchboard executions <verb>`: a tenant's execution records, one or a session's.

use clap::Subcommand;
use reqwest::Method;

use super::api::{Api, tenant};
use super::output::{print_list, print_value};
use crate::shared::Remote;

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
