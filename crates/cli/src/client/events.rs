//! `switchboard events tail`: a tenant's outbound events (hand-offs, ends, failures, flow
//! requests, limits), from its event log (`GET /tenants/{t}/events?after=`), oldest first; with
//! `--follow`, then each one as it is published, from the live stream
//! (`GET /tenants/{t}/events/stream`), or by reading the log again every few seconds where a
//! deployment has no stream (the AWS profile's API).

use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::api::{Api, problem_message, tenant};
use super::output::{self, Format, print_text};
use crate::shared::Remote;

/// Events read per page of the log.
const PAGE: usize = 100;

#[derive(Debug, clap::Args)]
pub struct EventArgs {
    #[command(flatten)]
    pub remote: Remote,
    #[command(subcommand)]
    pub verb: EventVerb,
}

#[derive(Debug, clap::Subcommand)]
pub enum EventVerb {
    /// Print the tenant's events after a sequence number, one line each (`--json`: the log's
    /// entry, `{seq, event}`, one per line); with `--follow`, keep printing them as they come
    /// until interrupted.
    Tail {
        /// The sequence number to start after (0: the oldest kept).
        #[arg(long, default_value_t = 0)]
        after: i64,
        /// Keep printing events as they are published.
        #[arg(long, short = 'f')]
        follow: bool,
        /// Where the deployment has no live stream, how often `--follow` reads the log again.
        #[arg(long, default_value_t = 2, value_name = "SECONDS")]
        poll_secs: u64,
    },
}

/// `switchboard events <verb>`
pub async fn run(remote: &Remote, verb: EventVerb) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    let EventVerb::Tail { after, follow, poll_secs } = verb;
    let mut last = print_logged(&api, t, after, remote.format()).await?;
    if !follow {
        return Ok(());
    }
    match stream(&api, t, last, remote.format()).await? {
        Streamed::Ended => bail!("the event stream ended (the server stopped?)"),
        Streamed::NoStream => loop {
            tokio::time::sleep(Duration::from_secs(poll_secs.max(1))).await;
            last = print_logged(&api, t, last, remote.format()).await?;
        },
    }
}

/// Prints the logged events after `after`, page by page: the last sequence number printed.
async fn print_logged(api: &Api, tenant: &str, mut after: i64, format: Format) -> anyhow::Result<i64> {
    loop {
        let path = format!("/tenants/{tenant}/events?after={after}&limit={PAGE}");
        let (page, _) = api.call(Method::GET, &path, None, None).await?;
        let entries = page["events"].as_array().cloned().unwrap_or_default();
        for entry in &entries {
            print_entry(entry["seq"].as_i64().unwrap_or(after), &entry["event"], format)?;
            after = entry["seq"].as_i64().unwrap_or(after);
        }
        if entries.len() < PAGE {
            return Ok(after);
        }
    }
}

enum Streamed {
    /// The server ended the stream.
    Ended,
    /// The deployment has no live stream (404).
    NoStream,
}

/// Prints the live stream's events after `after` until it ends.
async fn stream(api: &Api, tenant: &str, after: i64, format: Format) -> anyhow::Result<Streamed> {
    use switchboard_models::sse::SseReader;

    let path = format!("/tenants/{tenant}/events/stream?after={after}");
    let mut res = api.send(Method::GET, &path, None, &[("accept", "text/event-stream")]).await?;
    let status = res.status();
    if status == StatusCode::NOT_FOUND {
        return Ok(Streamed::NoStream);
    }
    if !status.is_success() {
        let text = res.text().await?;
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        bail!("{}", problem_message(status, &value));
    }
    let mut reader = SseReader::default();
    while let Some(chunk) = res.chunk().await.context("the event stream broke off")? {
        for event in reader.push(&chunk).map_err(|why| anyhow::anyhow!("the stream holds {why}"))? {
            let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::String(event.data.clone()));
            let seq = event.id.as_deref().and_then(|id| id.parse().ok()).unwrap_or(after);
            print_entry(seq, &data, format)?;
        }
    }
    Ok(Streamed::Ended)
}

/// One event: `{seq, event}` as a line of JSON or a YAML document, or a line of its sequence
/// number, kind, conversation and what it says (a reason, a status).
fn print_entry(seq: i64, event: &Value, format: Format) -> anyhow::Result<()> {
    let entry = serde_json::json!({ "seq": seq, "event": event });
    // Printed and flushed at once: a follower reads each event as it comes.
    print_text(&output::event(&entry, format)?.unwrap_or_else(|| line(seq, event)))
}

fn line(seq: i64, event: &Value) -> String {
    let d = &event["detail"];
    let text = |v: &Value| v.as_str().map(str::to_owned);
    let conversation = text(&d["conversationId"]).unwrap_or_else(|| "-".into());
    let said = text(&d["reason"]).or_else(|| text(&d["status"])).or_else(|| text(&d["limit"])).unwrap_or_default();
    let kind = text(&event["detailType"]).unwrap_or_else(|| "-".into());
    format!("{seq:>6}  {kind:<24}  {conversation}  {said}").trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::line;

    #[test]
    fn a_line_says_the_number_the_kind_the_conversation_and_why() {
        let handoff = json!({ "id": "x", "detailType": "session.handoff.human", "tenantId": "acme",
                              "detail": { "conversationId": "c-1", "reason": "asked for a person" } });
        assert_eq!(line(7, &handoff), "     7  session.handoff.human     c-1  asked for a person");
        let limit = json!({ "detailType": "tenant.limit.reached", "detail": { "limit": "invocationsPerMinute" } });
        assert_eq!(line(12, &limit), "    12  tenant.limit.reached      -  invocationsPerMinute");
    }
}
