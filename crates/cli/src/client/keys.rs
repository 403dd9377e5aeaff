//! `switchboard keys`: issue, list, rotate and revoke a tenant's API keys over the API (its
//! owner or an admin; the embedded profile). Each key is held by a named principal in a role.

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;
use switchboard_domain::access::Role;

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

/// Whom a new key is for: a principal, a role and an optional lifetime.
#[derive(Debug, Clone, clap::Args)]
pub struct GrantArgs {
    /// Who holds the key: a person's or a program's name, recorded on everything it does.
    #[arg(long, default_value = "owner")]
    pub principal: String,
    /// owner (keys and settings), builder (configuration), operator (conversations) or viewer.
    #[arg(long, default_value = "owner", value_parser = parse_role)]
    pub role: Role,
    /// The key stops working after this long: `90d`, `12h`, `30m`.
    #[arg(long, value_name = "DURATION", value_parser = parse_lifetime)]
    pub expires_in: Option<chrono::TimeDelta>,
}

/// A grant as the API and the store take it.
#[derive(Debug, Clone)]
pub struct Grant {
    pub principal: String,
    pub role: Role,
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl GrantArgs {
    pub fn grant(&self, now: chrono::DateTime<chrono::Utc>) -> anyhow::Result<Grant> {
        let principal = self.principal.trim();
        if principal.is_empty() || principal.chars().count() > 128 || principal.chars().any(char::is_control) {
            anyhow::bail!("--principal: must be 1 to 128 characters, no control characters");
        }
        if self.role == Role::Admin {
            anyhow::bail!("--role: admin keys span every tenant and are not issued per tenant");
        }
        Ok(Grant { principal: principal.to_owned(), role: self.role, expires_at: self.expires_in.map(|d| now + d) })
    }

    fn body(&self) -> anyhow::Result<serde_json::Value> {
        let grant = self.grant(chrono::Utc::now())?;
        let mut body = json!({ "principal": grant.principal, "role": grant.role });
        if let Some(at) = grant.expires_at {
            body["expiresAt"] = json!(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        }
        Ok(body)
    }
}

fn parse_role(raw: &str) -> Result<Role, String> {
    raw.parse()
}

/// `90d`, `12h` or `30m`: a positive whole number of days, hours or minutes.
fn parse_lifetime(raw: &str) -> Result<chrono::TimeDelta, String> {
    let bad = || format!("'{raw}' is not a lifetime such as 90d, 12h or 30m");
    let (digits, unit) = raw.split_at(raw.len().saturating_sub(1));
    let n: i64 = digits.parse().ok().filter(|n| *n > 0 && *n <= 36_500).ok_or_else(bad)?;
    match unit {
        "d" => Ok(chrono::TimeDelta::days(n)),
        "h" => Ok(chrono::TimeDelta::hours(n)),
        "m" => Ok(chrono::TimeDelta::minutes(n)),
        _ => Err(bad()),
    }
}

/// `switchboard keys …` (owner or admin, embedded profile).
#[derive(Debug, Subcommand)]
pub enum KeyVerb {
    /// Issue a new API key for a principal of the tenant and print it (shown once).
    Issue(GrantArgs),
    /// The tenant's keys by id, with their principals, roles, expiry and last use (never the keys).
    List,
    /// Replace a key by a new one for the same principal and role; the old one stops working.
    Rotate { key_id: String },
    /// Revoke a key at once.
    Revoke { key_id: String },
}

/// `switchboard whoami`: who the key (or the AWS identity) is on the tenant.
#[derive(Debug, clap::Args)]
pub struct WhoamiArgs {
    #[command(flatten)]
    pub remote: Remote,
}

/// Prints the caller's principal, role and the route groups it reaches (`GET …/me`).
pub async fn whoami(remote: &Remote) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    let me = api.call(Method::GET, &format!("/tenants/{t}/me"), None, None).await?.0;
    if print_data(&me, remote.format())? {
        return Ok(());
    }
    let groups: Vec<&str> = me["groups"].as_array().map_or(vec![], |g| g.iter().filter_map(|v| v.as_str()).collect());
    println!(
        "{} ({} of {t}): {}",
        me["principal"].as_str().unwrap_or_default(),
        me["role"].as_str().unwrap_or_default(),
        groups.join(", ")
    );
    Ok(())
}

/// `switchboard keys`: issue, list, rotate and revoke a tenant's API keys.
pub async fn run(remote: &Remote, verb: KeyVerb) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    let base = format!("/tenants/{t}/keys");
    match verb {
        KeyVerb::Issue(grant) => {
            let issued = api.call(Method::POST, &base, Some(&grant.body()?), None).await?.0;
            print_issued(&issued, t, remote)?;
        }
        KeyVerb::List => {
            let listed = api.call(Method::GET, &base, None, None).await?.0;
            if print_data(&listed, remote.format())? {
                return Ok(());
            }
            print_list("keys", listed["keys"].as_array().map_or(&[][..], Vec::as_slice), remote.format())?;
        }
        KeyVerb::Rotate { key_id } => {
            let path = format!("{base}/{}/rotate", query_value(&key_id));
            let issued = api.call(Method::POST, &path, Some(&json!({})), None).await?.0;
            print_issued(&issued, t, remote)?;
            eprintln!("key {key_id} no longer works");
        }
        KeyVerb::Revoke { key_id } => {
            api.call(Method::DELETE, &format!("{base}/{}", query_value(&key_id)), None, None).await?;
            println!("revoked key {key_id}");
        }
    }
    Ok(())
}

/// A new key: the key alone on stdout (for a pipe), what it is for on stderr.
fn print_issued(issued: &serde_json::Value, t: &str, remote: &Remote) -> anyhow::Result<()> {
    if print_data(issued, remote.format())? {
        return Ok(());
    }
    println!("{}", issued["key"].as_str().unwrap_or_default());
    eprintln!(
        "API key {} for '{}' ({} of tenant '{t}'; shown once; send it as 'Authorization: Bearer <key>')",
        issued["keyId"].as_str().unwrap_or_default(),
        issued["principal"].as_str().unwrap_or_default(),
        issued["role"].as_str().unwrap_or_default(),
    );
    Ok(())
}
