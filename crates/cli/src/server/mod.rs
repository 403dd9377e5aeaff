//! `switchboard serve`: opens the data directory, loads tenant bundles, starts the workers and
//! serves the API until Ctrl-C, then drains in-flight work.

#[cfg(feature = "aws")]
mod bedrock;
mod lock;
pub mod models;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use switchboard_domain::PriceTable;
use switchboard_embedded::api::{api_state, ensure_admin_key};
use switchboard_embedded::retention::DEFAULT_PERIOD_DAYS;
use switchboard_embedded::{Bundle, Embedded, EmbeddedOptions, FileSecrets, QueueConfig, Retention};
use switchboard_engine::{NoSecrets, Secrets, SystemClock};
use switchboard_models::Models;
use switchboard_webhooks::{HttpWebhookCaller, WebhookPolicy};

use crate::shared::{CLOSE_TIMEOUT, notice};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Directory for the SQLite file (created if missing).
    #[arg(long, env = "SWITCHBOARD_DATA_DIR", default_value_os_t = crate::shared::default_data_dir())]
    data_dir: PathBuf,
    /// Address to listen on. Every route but /health needs an API key; keep it on loopback or
    /// behind TLS, since keys travel in plain HTTP here.
    #[arg(long, env = "SWITCHBOARD_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Tenant bundle(s) to load (upsert) at start, e.g. examples/support/tenant.json.
    #[arg(long = "tenant", value_name = "FILE")]
    tenants: Vec<PathBuf>,
    /// Answer every agent with the scripted model — a deterministic test double driven by this
    /// rules file, not an AI — instead of the model each agent names.
    #[arg(long, env = "SWITCHBOARD_SCRIPTED_MODEL", value_name = "FILE")]
    scripted_model: Option<PathBuf>,
    /// Model aliases and provider settings (YAML); without it, the providers' usual environment
    /// variables (OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL,
    /// OLLAMA_HOST, the AWS chain for Bedrock) are read.
    #[arg(long, env = "SWITCHBOARD_MODEL_CONFIG", value_name = "FILE")]
    model_config: Option<PathBuf>,
    /// The model of agents that name none (the template's `DefaultModelId` on AWS), e.g. `ollama:llama3.1`.
    #[arg(long, env = "SWITCHBOARD_DEFAULT_MODEL_ID", value_name = "REF")]
    default_model: Option<String>,
    /// Worker tasks draining the queue: how many conversations' turns run (and wait on their
    /// models) at once.
    #[arg(long, default_value_t = switchboard_embedded::DEFAULT_WORKERS, value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: u16,
    /// Seconds an item stays invisible while a worker has it; after that (say the process died)
    /// it is delivered again.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=43_200))]
    visibility_timeout: u64,
    /// Seconds one item's turn may take (model and tool calls) before it stops with status
    /// `timeout`; must be under --visibility-timeout. Default: three quarters of it.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=43_200))]
    turn_timeout: Option<u64>,
    /// Deliveries of one item before it moves to the dead-letter table.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    max_receives: u32,
    /// Tenant secrets that sign webhook tool calls and verify webhook triggers' deliveries: a JSON file
    /// `{"<tenant>": {"<secretRef>": "<value>"}}`, re-read when it changes. Keep it chmod 600.
    #[arg(long, env = "SWITCHBOARD_SECRETS_FILE", value_name = "FILE")]
    secrets_file: Option<PathBuf>,
    /// Local development only: let webhook tools call http:// URLs and loopback or private
    /// addresses (the cloud metadata address stays refused).
    #[arg(long)]
    allow_private_webhooks: bool,
    /// API requests per minute per tenant before answering 429.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    rate_limit: u32,
    /// Seconds a client has to send its request headers, and then its body; a slower one is
    /// cut off (headers) or answered 408 (body).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=600))]
    read_timeout: u64,
    /// Days an execution record is kept after it was created; 0 keeps them forever.
    #[arg(long, value_name = "DAYS", default_value_t = DEFAULT_PERIOD_DAYS, value_parser = days())]
    retention_executions: i64,
    /// Days a session that ended (or was handed to another agent) is kept after its last change;
    /// 0 keeps them forever. Active sessions and those a human operator owns are never deleted.
    #[arg(long, value_name = "DAYS", default_value_t = DEFAULT_PERIOD_DAYS, value_parser = days())]
    retention_sessions: i64,
    /// Days an event of the event log (the operator stream's replay) is kept; 0 keeps them forever.
    #[arg(long, value_name = "DAYS", default_value_t = DEFAULT_PERIOD_DAYS, value_parser = days())]
    retention_events: i64,
    /// Days a message of the conversation log is kept; 0 keeps them forever.
    #[arg(long, value_name = "DAYS", default_value_t = DEFAULT_PERIOD_DAYS, value_parser = days())]
    retention_messages: i64,
    /// Minutes between two retention sweeps (the first runs a minute after the start).
    #[arg(long, value_name = "MINUTES", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=10_080))]
    retention_sweep: u64,
    /// Directory the retention sweep writes what it deletes to first, as the AWS archiver's files
    /// (`executions/tenant=<id>/date=<day>/<n>.parquet`, Parquet; also, in gzip JSON Lines, `sessions/`,
    /// `events/`, `messages/`). Without it, expired rows are deleted without a copy.
    #[arg(long, env = "SWITCHBOARD_ARCHIVE_DIR", value_name = "DIR")]
    archive_dir: Option<PathBuf>,
}

/// A retention period in days: 0 (kept forever) to a hundred years.
fn days() -> clap::builder::RangedI64ValueParser<i64> {
    clap::value_parser!(i64).range(0..=36_500)
}

/// What `serve` keeps, for how long, and where it archives (see `switchboard_embedded::retention`).
fn retention(args: &ServeArgs) -> anyhow::Result<Retention> {
    let period = |days: i64| (days > 0).then(|| chrono::TimeDelta::days(days));
    if let Some(dir) = &args.archive_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("--archive-dir {}", dir.display()))?;
    }
    Ok(Retention {
        executions: period(args.retention_executions),
        sessions: period(args.retention_sessions),
        events: period(args.retention_events),
        messages: period(args.retention_messages),
        archive_dir: args.archive_dir.clone(),
        every: Duration::from_secs(args.retention_sweep * 60),
        ..Retention::default()
    })
}

/// The embedded profile's options from the flags: the webhook caller with its secrets and
/// policy, the turn budget, the queue's timings, retention.
fn options(args: &ServeArgs, prices: PriceTable) -> anyhow::Result<EmbeddedOptions> {
    let secrets: Arc<dyn Secrets> = match &args.secrets_file {
        Some(path) => Arc::new(FileSecrets::open(path).map_err(|e| anyhow::anyhow!("--secrets-file: {}", e.message))?),
        None => Arc::new(NoSecrets),
    };
    let policy = WebhookPolicy { allow_http: args.allow_private_webhooks, allow_private: args.allow_private_webhooks };
    if args.allow_private_webhooks {
        tracing::warn!(
            "webhook tools may call http:// and private addresses (--allow-private-webhooks): development only"
        );
    }
    let webhooks =
        Arc::new(HttpWebhookCaller::new(policy, secrets.clone()).map_err(|e| anyhow::anyhow!("webhook client: {e}"))?);
    let visibility = Duration::from_secs(args.visibility_timeout);
    let turn_budget = match args.turn_timeout {
        Some(secs) if secs >= args.visibility_timeout => bail!(
            "--turn-timeout {secs} must be under --visibility-timeout {} (or the item is delivered again while it runs)",
            args.visibility_timeout
        ),
        Some(secs) => Duration::from_secs(secs),
        None => visibility.mul_f64(0.75),
    };
    let retention = retention(args)?;
    Ok(EmbeddedOptions {
        workers: usize::from(args.workers),
        webhooks,
        secrets,
        turn_budget: Some(turn_budget),
        prices: Arc::new(prices),
        queue: QueueConfig {
            visibility_timeout: visibility,
            max_receives: args.max_receives,
            ..QueueConfig::default()
        },
        retention,
        ..EmbeddedOptions::default()
    })
}

/// Loads (upserts) the `--tenant` bundles, checking their agents' models first when providers
/// answer them.
async fn load_tenants(args: &ServeArgs, models: Option<&Models>, embedded: &Embedded) -> anyhow::Result<()> {
    for path in &args.tenants {
        // The bundle's errors name the file.
        let bundle = Bundle::from_file(path, &SystemClock).context("--tenant")?;
        if let Some(models) = models {
            models::check_agents(&bundle, models, args.default_model.as_ref(), path)?;
        }
        bundle.install(&embedded.store).await.with_context(|| format!("--tenant {}", path.display()))?;
        tracing::info!(tenant = %bundle.tenant_id, agents = bundle.agents.len(), triggers = bundle.triggers.len(), "tenant loaded");
    }
    Ok(())
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let (model, models, prices) = models::models(&args)?;
    let options = options(&args, prices)?;
    // Held until this function returns (or the process ends, when the system lets go of it).
    let _claim = lock::claim(&args.data_dir)?;
    let embedded =
        Arc::new(Embedded::open(&args.data_dir, model, Arc::new(SystemClock), options).context("--data-dir")?);
    load_tenants(&args, models.as_ref(), &embedded).await?;
    if let Some(path) = ensure_admin_key(&embedded).await? {
        notice(&format!("created an admin API key in {}", path.display()));
    }
    embedded.start_workers();
    embedded.start_sweeper();
    embedded.start_approval_sweeper();
    embedded.start_scheduler();
    let listener =
        tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("--listen {}", args.listen))?;
    let addr = listener.local_addr()?;
    let stop = stop_signal();
    // The first line on stdout is machine-readable so that scripts and tests can find the port.
    println!("listening on http://{addr}");
    match &args.scripted_model {
        Some(script) => notice(&format!(
            "data in {}, model: scripted test double from {} (not an AI)",
            args.data_dir.display(),
            script.display()
        )),
        None => notice(&format!("data in {}, models: each agent's own", args.data_dir.display())),
    }
    let read_timeout = Duration::from_secs(args.read_timeout);
    let rate_limit = usize::try_from(args.rate_limit).unwrap_or(usize::MAX);
    let app = switchboard_api::routes(api_state(&embedded, rate_limit, read_timeout));
    crate::shared::http::serve(listener, app, read_timeout, stop).await?;
    // Work in hand finishes (each turn is bounded by --turn-timeout) and is committed; queued
    // items stay in the database for the next start.
    tracing::info!("draining: the workers finish the items in hand");
    if !embedded.close(CLOSE_TIMEOUT).await {
        tracing::warn!(
            "the database was still in use {} s after the workers stopped; the next start replays its log",
            CLOSE_TIMEOUT.as_secs()
        );
    }
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM (what `docker stop`, systemd and Kubernetes send).
/// The handlers are installed when this is called, not when the future is first polled: the
/// server calls it before it says it is listening, so a signal sent as soon as a client reads
/// that line stops it gracefully instead of killing it.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{SignalKind, signal};
        signal(SignalKind::interrupt()).and_then(|int| Ok((int, signal(SignalKind::terminate())?)))
    };
    async move {
        #[cfg(unix)]
        {
            match signals {
                Ok((mut int, mut term)) => tokio::select! {
                    _ = int.recv() => tracing::info!("SIGINT: stopping"),
                    _ = term.recv() => tracing::info!("SIGTERM: stopping"),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the server gracefully");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }

    fn retention_of(flags: &[&str]) -> Retention {
        retention(&Serve::try_parse_from(["serve"].iter().chain(flags)).unwrap().args).unwrap()
    }

    #[test]
    fn retention_keeps_the_aws_periods_by_default_and_zero_keeps_a_kind_for_good() {
        let default = retention_of(&[]);
        assert_eq!(default.executions, Some(chrono::TimeDelta::days(30)));
        assert_eq!(
            (default.sessions, default.events, default.messages),
            (default.executions, default.executions, default.executions)
        );
        assert_eq!((default.every, default.archive_dir.as_ref()), (Duration::from_secs(3600), None));
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("archive");
        let set = retention_of(&[
            "--retention-executions",
            "7",
            "--retention-sessions",
            "0",
            "--retention-events",
            "90",
            "--retention-messages",
            "1",
            "--retention-sweep",
            "5",
            "--archive-dir",
            archive.to_str().unwrap(),
        ]);
        assert_eq!(
            (set.executions, set.sessions, set.events, set.messages),
            (
                Some(chrono::TimeDelta::days(7)),
                None,
                Some(chrono::TimeDelta::days(90)),
                Some(chrono::TimeDelta::days(1))
            )
        );
        assert_eq!((set.every, set.archive_dir), (Duration::from_secs(300), Some(archive.clone())));
        assert!(archive.is_dir(), "the archive directory is made at start");
        assert!(Serve::try_parse_from(["serve", "--retention-events", "-1"]).is_err());
    }
}
