//! `switchboard keys`: issue, list and revoke a tenant's API keys over the API (admin, embedded
//! profile).

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use super::api::{Api, query_value, tenant};
use super::output::{print_data, print_list};
use crate::shared::Remote;

#[derive(Debug, clap::Args)]
pub struct KeysArgs {
    #[command(flatten)]
    pub remote: Remote,
    #[command(subcommand)]
    pub verb: KeyVerb,
}

/// `switchboard keys …` (admin, embedded profile).
#[derive(Debug, Subcommand)]
pub enum KeyVerb {
    /// Issue a new API key for the tenant and print it (shown once).
    Issue,
    /// The tenant's keys by id (never the keys).
    List,
    /// Revoke a key at once.
    Revoke { key_id: String },
}

/// `switchboard keys`: issue, list and revoke a tenant's API keys.
pub async fn run(remote: &Remote, verb: KeyVerb) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    let base = format!("/tenants/{t}/keys");
    match verb {
        KeyVerb::Issue => {
            let issued = api.call(Method::POST, &base, Some(&json!({})), None).await?.0;
            if print_data(&issued, remote.format())? {
                return Ok(());
            }
            println!("{}", issued["key"].as_str().unwrap_or_default());
            eprintln!(
                "API key {} for tenant '{t}' (shown once; send it as 'Authorization: Bearer <key>')",
                issued["keyId"].as_str().unwrap_or_default()
            );
        }
        KeyVerb::List => {
            let listed = api.call(Method::GET, &base, None, None).await?.0;
            if print_data(&listed, remote.format())? {
                return Ok(());
            }
            print_list("keys", listed["keys"].as_array().map_or(&[][..], Vec::as_slice), remote.format())?;
        }
        KeyVerb::Revoke { key_id } => {
            api.call(Method::DELETE, &format!("{base}/{}", query_value(&key_id)), None, None).await?;
            println!("revoked key {key_id}");
        }
    }
    Ok(())
}
