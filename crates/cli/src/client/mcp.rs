//! `switchboard tools mcp add|list|refresh`: tools imported from a tenant's MCP server. `add`
//! asks the server (`POST …/tools/discover`) for the tools an MCP server offers and creates one
//! tool record per allowed tool; `refresh` has the server copy an MCP server's current description
//! and schema into each tool (`POST …/tools/{id}/refresh`); `list` shows the tenant's MCP tools by
//! server.
//!
//! Against a deployment whose API calls no tenant's server (the AWS internal-api answers those
//! routes 501), the CLI lists the MCP server from this machine instead, through the same caller
//! the turns use, with the credential taken from `--credential-env`; the records are then
//! written over the API as any other.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Subcommand;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use switchboard_domain::TenantId;
use switchboard_domain::mcp::{ListedTool, McpServer};
use switchboard_engine::{SecretError, Secrets, WebhookCaller};
use switchboard_webhooks::{HttpWebhookCaller, WebhookPolicy};

use super::api::{Api, answer};
use super::output::{Format, print_data};

#[derive(Debug, Subcommand)]
pub enum McpVerb {
    /// Create a tool for each (allowed) tool an MCP server lists, with its schema and description.
    Add {
        /// The server's MCP endpoint (Streamable HTTP), e.g. https://tools.example.com/mcp.
        url: String,
        /// The tenant secret whose value goes in the auth header (e.g. "Bearer …").
        #[arg(long)]
        secret_ref: Option<String>,
        /// The header the secret goes in (default Authorization).
        #[arg(long)]
        auth_header: Option<String>,
        /// How long a call (and the listing) may take, in milliseconds.
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u32,
        /// Only these of the server's tools (by their names on the server), comma-separated.
        #[arg(long, value_delimiter = ',')]
        allow: Vec<String>,
        /// Put in front of each tool's name here (e.g. crm_), to tell servers apart.
        #[arg(long, default_value = "")]
        prefix: String,
        #[command(flatten)]
        here: ListHere,
    },
    /// The tenant's tools of MCP servers, by server.
    List,
    /// Copy each MCP server's current description and schema into its tools (all of them, or
    /// the ones named), as their next versions where they changed.
    Refresh {
        /// Tool ids (default: every tool of an MCP server).
        ids: Vec<String>,
        #[command(flatten)]
        here: ListHere,
    },
}

/// How to list a server from this machine when the deployment's API does not.
#[derive(Debug, clap::Args)]
pub struct ListHere {
    /// An environment variable holding the server's credential (the secret's value), for a
    /// deployment whose API lists no server (AWS): the CLI then lists it from here.
    #[arg(long, value_name = "VAR")]
    credential_env: Option<String>,
    /// With that, allow a server on a private or loopback address over http (development).
    #[arg(long)]
    allow_private: bool,
}

/// `switchboard tools mcp <verb>`
pub async fn run(api: &Api, base: &str, tenant: &str, verb: McpVerb, format: Format) -> anyhow::Result<()> {
    match verb {
        McpVerb::Add { url, secret_ref, auth_header, timeout_ms, allow, prefix, here } => {
            let server = McpServer { url, secret_ref, auth_header, timeout_ms, headers: BTreeMap::new() };
            add(api, base, tenant, &server, &allow, &prefix, &here, format).await
        }
        McpVerb::List => list(api, base, format).await,
        McpVerb::Refresh { ids, here } => refresh(api, base, tenant, ids, &here, format).await,
    }
}

#[allow(clippy::too_many_arguments)]
async fn add(
    api: &Api,
    base: &str,
    tenant: &str,
    server: &McpServer,
    allow: &[String],
    prefix: &str,
    here: &ListHere,
    format: Format,
) -> anyhow::Result<()> {
    let offered = discover(api, base, tenant, server, here).await?;
    let names: Vec<&str> = offered.iter().filter_map(|t| t["name"].as_str()).collect();
    if let Some(missing) = allow.iter().find(|a| !names.contains(&a.as_str())) {
        bail!("--allow: the server has no tool '{missing}' (it has {})", names.join(", "));
    }
    let mut created = Vec::new();
    let mut refused = Vec::new();
    for tool in offered.iter().filter(|t| allow.is_empty() || allow.iter().any(|a| t["name"] == a.as_str())) {
        let name = tool["name"].as_str().unwrap_or_default();
        if let Some(problems) = tool["problems"].as_array().filter(|p| !p.is_empty()) {
            refused.push(format!("{name}: {}", faults(problems)));
            continue;
        }
        let mut body = tool["tool"].clone();
        body["name"] = json!(format!("{prefix}{}", body["name"].as_str().unwrap_or_default()));
        let res = api.send(Method::POST, base, Some(&body), &[]).await?;
        match answer(res).await {
            Ok(record) => created.push(record),
            Err(e) => refused.push(format!("{name}: {e}")),
        }
    }
    if !print_data(&Value::Array(created.clone()), format)? {
        for record in &created {
            println!(
                "created tool {} {} ({} on {})",
                record["toolId"].as_str().unwrap_or_default(),
                record["name"].as_str().unwrap_or_default(),
                record["handler"]["tool"].as_str().unwrap_or_default(),
                server.url
            );
        }
    }
    for line in &refused {
        eprintln!("not created: {line}");
    }
    if !refused.is_empty() {
        bail!("{} of the server's tools were not created", refused.len());
    }
    Ok(())
}

/// The server's tools as `…/tools/discover` answers them, listed from here if the API does not.
async fn discover(
    api: &Api,
    base: &str,
    tenant: &str,
    server: &McpServer,
    here: &ListHere,
) -> anyhow::Result<Vec<Value>> {
    let res = api.send(Method::POST, &format!("{base}/discover"), Some(&serde_json::to_value(server)?), &[]).await?;
    if res.status() != StatusCode::NOT_IMPLEMENTED {
        let found = answer(res).await?;
        return Ok(found["tools"].as_array().cloned().unwrap_or_default());
    }
    eprintln!("the server does not list MCP servers; listing {} from here", server.url);
    let listed = list_here(tenant, server, here).await?;
    // Checked when each is created, as any record is.
    Ok(listed
        .iter()
        .map(|t| {
            json!({ "name": t.name, "description": t.description, "inputSchema": t.input_schema,
                         "tool": t.tool_body(server), "problems": [] })
        })
        .collect())
}

/// Lists `server` from this machine, its credential from `--credential-env`.
async fn list_here(tenant: &str, server: &McpServer, here: &ListHere) -> anyhow::Result<Vec<ListedTool>> {
    let credential = match (&server.secret_ref, &here.credential_env) {
        (Some(name), Some(var)) => Some((
            name.clone(),
            std::env::var(var).with_context(|| format!("--credential-env {var}: the variable is not set"))?,
        )),
        (Some(name), None) => {
            bail!(
                "the server's credential is the secret '{name}', which only the deployment reads: give its value in an environment variable named by --credential-env"
            )
        }
        (None, _) => None,
    };
    let policy = WebhookPolicy { allow_http: here.allow_private, allow_private: here.allow_private };
    let caller =
        HttpWebhookCaller::new(policy, Arc::new(Credential(credential))).map_err(|e| anyhow::anyhow!("{e}"))?;
    let tenant: TenantId = tenant.parse().map_err(|e| anyhow::anyhow!("--tenant: {e}"))?;
    caller.list_mcp(&tenant, server).await.map_err(|e| anyhow::anyhow!("{}: {e}", server.url))
}

/// The one secret the CLI holds: the credential given on its command line.
struct Credential(Option<(String, String)>);

#[async_trait::async_trait]
impl Secrets for Credential {
    async fn get_secret(&self, _tenant: &TenantId, name: &str) -> Result<Option<String>, SecretError> {
        Ok(self.0.as_ref().filter(|(n, _)| n == name).map(|(_, value)| value.clone()))
    }
}

fn faults(problems: &[Value]) -> String {
    let lines: Vec<String> = problems
        .iter()
        .map(|p| format!("{} {}", p["pointer"].as_str().unwrap_or_default(), p["detail"].as_str().unwrap_or_default()))
        .collect();
    lines.join("; ")
}

/// The tenant's tools of MCP servers.
async fn mcp_tools(api: &Api, base: &str) -> anyhow::Result<Vec<Value>> {
    let all = api.all_pages(&format!("{base}?limit=100")).await?;
    Ok(all.into_iter().filter(|t| t["handler"]["type"] == "mcp").collect())
}

async fn list(api: &Api, base: &str, format: Format) -> anyhow::Result<()> {
    let tools = mcp_tools(api, base).await?;
    if print_data(&Value::Array(tools.clone()), format)? {
        return Ok(());
    }
    let mut by_server: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for tool in &tools {
        by_server.entry(tool["handler"]["url"].as_str().unwrap_or_default()).or_default().push(tool);
    }
    if by_server.is_empty() {
        println!("no tools of MCP servers");
    }
    for (url, tools) in by_server {
        println!("{url}");
        for t in tools {
            println!(
                "  {}  {}  ({} on the server, version {})",
                t["toolId"].as_str().unwrap_or_default(),
                t["name"].as_str().unwrap_or_default(),
                t["handler"]["tool"].as_str().unwrap_or_default(),
                t["version"]
            );
        }
    }
    Ok(())
}

async fn refresh(
    api: &Api,
    base: &str,
    tenant: &str,
    ids: Vec<String>,
    here: &ListHere,
    format: Format,
) -> anyhow::Result<()> {
    let ids = match ids.is_empty() {
        true => mcp_tools(api, base).await?.iter().filter_map(|t| t["toolId"].as_str().map(str::to_owned)).collect(),
        false => ids,
    };
    let mut results = Vec::new();
    for id in ids {
        let res = api.send(Method::POST, &format!("{base}/{id}/refresh"), Some(&json!({})), &[]).await?;
        let result = match res.status() == StatusCode::NOT_IMPLEMENTED {
            true => refresh_here(api, base, tenant, &id, here).await?,
            false => answer(res).await?,
        };
        results.push(result);
    }
    if !print_data(&Value::Array(results.clone()), format)? {
        for r in &results {
            let tool = &r["tool"];
            let what = match r["changed"].as_bool() {
                Some(true) => format!("updated to version {}", tool["version"]),
                _ => "unchanged".to_owned(),
            };
            println!(
                "{} {}: {what}",
                tool["toolId"].as_str().unwrap_or_default(),
                tool["name"].as_str().unwrap_or_default()
            );
        }
    }
    Ok(())
}

/// [`refresh`] of one tool listed from here: its server's description and schema, written with
/// the version read as `If-Match`.
async fn refresh_here(api: &Api, base: &str, tenant: &str, id: &str, here: &ListHere) -> anyhow::Result<Value> {
    let (tool, etag) = api.call(Method::GET, &format!("{base}/{id}"), None, None).await?;
    if tool["handler"]["type"] != "mcp" {
        bail!("{id}: the tool '{}' is not a tool of an MCP server", tool["name"].as_str().unwrap_or_default());
    }
    let server: McpServer = {
        let mut handler = tool["handler"].clone();
        if let Some(h) = handler.as_object_mut() {
            h.remove("type");
            h.remove("tool");
        }
        serde_json::from_value(handler).context("the tool's handler")?
    };
    let on_server = tool["handler"]["tool"].as_str().unwrap_or_default();
    let listed = list_here(tenant, &server, here).await?;
    let now = listed
        .iter()
        .find(|l| l.name == on_server)
        .with_context(|| format!("{id}: the server no longer lists the tool '{on_server}'"))?;
    let description = match now.description.trim() {
        "" => tool["description"].as_str().unwrap_or_default().to_owned(),
        described => described.to_owned(),
    };
    if tool["description"] == description.as_str() && tool["parameters"] == now.input_schema {
        return Ok(json!({ "changed": false, "tool": tool }));
    }
    let mut body = tool.clone();
    if let Some(fields) = body.as_object_mut() {
        for owned in ["tenantId", "toolId", "type", "createdAt", "updatedAt", "version"] {
            fields.remove(owned);
        }
    }
    body["description"] = json!(description);
    body["parameters"] = now.input_schema.clone();
    let (written, _) = api.call(Method::PUT, &format!("{base}/{id}"), Some(&body), etag.as_deref()).await?;
    Ok(json!({ "changed": true, "tool": written }))
}
