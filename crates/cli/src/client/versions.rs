//! `switchboard agents|triggers|tools|skills versions|diff|rollback`: a record's kept versions,
//! what changed between two, and writing an old one again as the next version.

use reqwest::Method;
use serde_json::json;

use super::api::Api;
use super::output::{Format, cell, print_data, print_list};

/// The history verbs of a configuration record.
#[derive(Debug)]
pub enum History {
    /// Every kept version, newest first.
    List { id: String },
    /// The changes from version `from` to version `to`.
    Diff { id: String, from: u64, to: u64 },
    /// Version `version` written as the next version.
    Rollback { id: String, version: u64 },
}

/// Runs `verb` on the records under `base` (`/tenants/<t>/<segment>`).
pub async fn run(api: &Api, base: &str, segment: &str, verb: History, format: Format) -> anyhow::Result<()> {
    let what = segment.trim_end_matches('s');
    match verb {
        History::List { id } => {
            let items = api.all_pages(&format!("{base}/{id}/versions?limit=100")).await?;
            print_list("versions", &items, format)
        }
        History::Diff { id, from, to } => {
            let (diff, _) =
                api.call(Method::GET, &format!("{base}/{id}/versions/{from}/diff?to={to}"), None, None).await?;
            if !print_data(&diff, format)? {
                let changes = diff["changes"].as_array().cloned().unwrap_or_default();
                if changes.is_empty() {
                    println!("{what} {id}: versions {from} and {to} are the same");
                } else {
                    print_list("changes", &changes, format)?;
                }
            }
            Ok(())
        }
        History::Rollback { id, version } => {
            // If-Match: the version read now, so that a change made meanwhile is not undone unseen.
            let (_, etag) = api.call(Method::GET, &format!("{base}/{id}"), None, None).await?;
            let body = json!({ "version": version });
            let (written, etag) =
                api.call(Method::POST, &format!("{base}/{id}/rollback"), Some(&body), etag.as_deref()).await?;
            if !print_data(&written, format)? {
                let now = etag.unwrap_or_default();
                println!(
                    "rolled {what} {id} back to version {version} (now version {})",
                    cell(&json!(now.trim_matches('"')))
                );
            }
            Ok(())
        }
    }
}
