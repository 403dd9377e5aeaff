//! `switchboard tenants show|suspend|reactivate|delete`: a tenant's record over the API, so that
//! they work on either profile. Creating a tenant and issuing a key on a data directory are
//! `super::tenants`'s.

use reqwest::Method;
use serde_json::json;

use super::api::{Api, query_value};
use super::output::print_data;
use crate::shared::Remote;

/// What `switchboard tenants show|suspend|reactivate|delete` does over the API.
#[derive(Debug, Clone, Copy)]
pub enum TenantVerb {
    Show,
    Suspend,
    Reactivate,
    Delete,
}

/// A tenant's record over the API (admin): shown, suspended, reactivated, or deleted — a
/// deletion is asked for again while the store answers that more is left (`202`).
pub async fn tenant_record(remote: &Remote, id: &str, verb: TenantVerb) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let path = format!("/tenants/{}", query_value(id));
    let status = |s: &str| json!({ "status": s });
    let shown = match verb {
        TenantVerb::Show => api.call(Method::GET, &path, None, None).await?.0,
        TenantVerb::Suspend => api.call(Method::PATCH, &path, Some(&status("suspended")), None).await?.0,
        TenantVerb::Reactivate => api.call(Method::PATCH, &path, Some(&status("active")), None).await?.0,
        TenantVerb::Delete => {
            let mut calls = 0;
            while api.call(Method::DELETE, &path, None, None).await?.0["status"] == "deleting" {
                calls += 1;
                eprintln!("deleting tenant '{id}': more is left after call {calls}, going on");
            }
            println!("deleted tenant {id}");
            return Ok(());
        }
    };
    if print_data(&shown, remote.format())? {
        return Ok(());
    }
    println!(
        "tenant {}: {} ({})",
        shown["tenantId"].as_str().unwrap_or(id),
        shown["name"].as_str().unwrap_or_default(),
        shown["status"].as_str().unwrap_or_default()
    );
    Ok(())
}
