//! `switchboard tenants …`: `create` and `key` work straight on a data directory (creating a
//! tenant, through the configuration service like the API's `POST /tenants`, also creates its API
//! key, printed once; only its hash is stored); `show`, `suspend`,
//! `reactivate` and `delete` go through the API, so they work on either profile.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use switchboard_domain::TenantId;
use switchboard_embedded::keys::{generate_api_key, hash_api_key};
use switchboard_embedded::{Embedded, EmbeddedOptions, ScriptedModel};
use switchboard_engine::{ConfigService, ConfigWriteError, SystemClock};

use super::tenant_record::{TenantVerb, tenant_record};
use crate::shared::{Remote, default_data_dir};

#[derive(Debug, Subcommand)]
pub enum TenantsCommand {
    /// Create a tenant and print its owner's API key (shown once).
    Create(CreateArgs),
    /// Issue another API key for an existing tenant, for a principal and role (the old ones keep
    /// working).
    Key(KeyArgs),
    /// Show a tenant's record, over the API (either profile).
    Show(RemoteTenant),
    /// Suspend a tenant over the API (admin): its messages are recorded, not answered.
    Suspend(RemoteTenant),
    /// Reactivate a suspended tenant over the API (admin).
    Reactivate(RemoteTenant),
    /// Delete a suspended tenant and everything kept for it, over the API (admin).
    Delete(RemoteTenant),
}

#[derive(Debug, Args)]
pub struct RemoteTenant {
    /// Tenant id.
    id: String,
    #[command(flatten)]
    remote: Remote,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Tenant id: 1 to 63 of letters, digits, '-', '_' or '.'.
    id: String,
    /// Display name.
    #[arg(long)]
    name: String,
    #[arg(long, env = "SWITCHBOARD_DATA_DIR", default_value_os_t = default_data_dir())]
    data_dir: PathBuf,
    #[command(flatten)]
    grant: super::keys::GrantArgs,
}

#[derive(Debug, Args)]
pub struct KeyArgs {
    id: String,
    #[arg(long, env = "SWITCHBOARD_DATA_DIR", default_value_os_t = default_data_dir())]
    data_dir: PathBuf,
    #[command(flatten)]
    grant: super::keys::GrantArgs,
}

fn open(data_dir: &std::path::Path) -> anyhow::Result<Embedded> {
    // No model runs here; the scripted model with no rules only satisfies the constructor.
    let model = Arc::new(ScriptedModel::from_json(r#"{"rules":[]}"#)?);
    Embedded::open(data_dir, model, Arc::new(SystemClock), EmbeddedOptions::default()).context("--data-dir")
}

fn parse_id(raw: &str) -> anyhow::Result<TenantId> {
    raw.parse().map_err(|e| anyhow::anyhow!("tenant id '{raw}': {e}"))
}

impl TenantsCommand {
    /// Where the command calls an API, when it does.
    pub fn remote_mut(&mut self) -> Option<&mut Remote> {
        match self {
            Self::Show(a) | Self::Suspend(a) | Self::Reactivate(a) | Self::Delete(a) => Some(&mut a.remote),
            Self::Create(_) | Self::Key(_) => None,
        }
    }
}

pub async fn run(cmd: TenantsCommand) -> anyhow::Result<()> {
    match cmd {
        TenantsCommand::Create(args) => {
            let id = parse_id(&args.id)?;
            if let Err(e) = switchboard_domain::tenant_name(&args.name) {
                bail!("--name: {e}, not blank");
            }
            let embedded = open(&args.data_dir)?;
            let store = Arc::new(embedded.store.clone());
            let created = match ConfigService::new(store.clone(), store).create_tenant(&id, &args.name).await {
                Ok(created) => created,
                Err(ConfigWriteError::Store(e)) => return Err(e.into()),
                Err(e) => bail!("--name: {e}"),
            };
            if !created {
                bail!("tenant '{id}' already exists (use `switchboard tenants key {id}` for another key)");
            }
            issue_key(&embedded, &id, &args.grant).await
        }
        TenantsCommand::Show(a) => tenant_record(&a.remote, &a.id, TenantVerb::Show).await,
        TenantsCommand::Suspend(a) => tenant_record(&a.remote, &a.id, TenantVerb::Suspend).await,
        TenantsCommand::Reactivate(a) => tenant_record(&a.remote, &a.id, TenantVerb::Reactivate).await,
        TenantsCommand::Delete(a) => tenant_record(&a.remote, &a.id, TenantVerb::Delete).await,
        TenantsCommand::Key(args) => {
            let id = parse_id(&args.id)?;
            let embedded = open(&args.data_dir)?;
            if !switchboard_engine::ConfigStore::tenant_exists(&embedded.store, &id).await? {
                bail!("no tenant '{id}' in {}", args.data_dir.display());
            }
            issue_key(&embedded, &id, &args.grant).await
        }
    }
}

/// A key for `id` written straight to the data directory (no server needed), for the grant's
/// principal and role.
async fn issue_key(embedded: &Embedded, id: &TenantId, grant: &super::keys::GrantArgs) -> anyhow::Result<()> {
    let grant = grant.grant(chrono::Utc::now())?;
    let key = generate_api_key()?;
    let hash = hash_api_key(&key);
    let new = switchboard_embedded::store::NewKey {
        key_hash: &hash,
        tenant: Some(id),
        principal: &grant.principal,
        role: grant.role,
        expires_at: grant.expires_at,
    };
    embedded.store.add_api_key(new).await?;
    println!("{key}");
    eprintln!(
        "API key for '{}' ({} of tenant '{id}'; shown once; send it as 'Authorization: Bearer <key>')",
        grant.principal, grant.role
    );
    Ok(())
}
