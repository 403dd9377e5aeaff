//! `switchboard ready`: asks a running server whether it is ready (`GET /ready`), for a health
//! check or a script. No key, no tenant.

use anyhow::{Context, bail};
use clap::Args;
use serde_json::Value;

use super::api::problem_message;

/// Arguments of `switchboard ready`: only where the server is; `/ready` needs no key.
#[derive(Debug, Args)]
pub struct ReadyArgs {
    /// Base URL of the server to ask
    #[arg(long, env = "SWITCHBOARD_ENDPOINT", default_value = "http://127.0.0.1:8080")]
    endpoint: String,
    /// Seconds to wait for the answer before calling the server not ready
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=300))]
    timeout: u64,
}

/// `GET /ready` once: success when the server answers 200 (database writable, workers running),
/// an error naming the reason otherwise. What a container's health check or a script runs.
pub async fn run(args: ReadyArgs) -> anyhow::Result<()> {
    let base = args.endpoint.trim_end_matches('/');
    let url = reqwest::Url::parse(&format!("{base}/ready"))
        .with_context(|| format!("--endpoint {} is not a URL", args.endpoint))?;
    let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(args.timeout)).build()?;
    let res = http.get(url).send().await.with_context(|| format!("cannot reach {base} (--endpoint)"))?;
    let status = res.status();
    let text = res.text().await.unwrap_or_default();
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    if !status.is_success() {
        bail!("not ready: {}", problem_message(status, &value));
    }
    println!("ready");
    Ok(())
}
