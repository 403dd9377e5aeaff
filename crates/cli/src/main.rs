//! The `switchboard` command: `serve` runs the embedded profile behind the HTTP API, `demo` runs
//! an example tenant end to end offline and prints what happened.

#[cfg(feature = "aws")]
mod aws;
mod client;
mod console;
mod demo;
mod http;
mod receiver;
#[cfg(feature = "aws")]
mod relay;
mod serve;
mod tenants;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

#[derive(Debug, Parser)]
#[command(
    name = "switchboard",
    version,
    about = "AI agents on customer conversations: routing, agent loop, tools, handoffs."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log lines on stderr as human-readable text or as one JSON object per line (for a log
    /// collector). `RUST_LOG` sets the level (default: info for serve, warn otherwise).
    #[arg(long, global = true, value_enum, env = "SWITCHBOARD_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
    /// Threads running requests and turns (default: one per core but one, which is left to the
    /// database thread; at least one)
    #[arg(long, global = true, env = "SWITCHBOARD_THREADS", value_name = "N")]
    threads: Option<std::num::NonZeroUsize>,
}

/// The async runtime's threads when `--threads` is not given: one per core but one. Under load
/// the database thread runs every write for everyone, and a runtime thread on every core as well
/// made the threads take turns on the cores: about 12 % more CPU per message over HTTP on two
/// cores (docs/benchmarks.md, "One runtime thread per core but one").
fn default_threads(cores: usize) -> usize {
    cores.saturating_sub(1).max(1)
}

/// Set once at start: whether stderr carries JSON log lines only.
static JSON_LOGS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// A line for the person who started the process: plain on stderr, or a log event when the logs
/// are JSON (so that every stderr line parses).
pub(crate) fn notice(message: &str) {
    if JSON_LOGS.get().copied().unwrap_or(false) {
        tracing::info!("{message}");
    } else {
        eprintln!("switchboard: {message}");
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the embedded profile (one SQLite file, no AWS account) behind the HTTP API.
    Serve(serve::ServeArgs),
    /// Run an example tenant (`--example`, default `support`) offline on a fresh temporary data
    /// directory and print what happened.
    Demo(demo::DemoArgs),
    /// Tenants: create one or issue a key in a data directory (works beside a running server);
    /// show, suspend, reactivate or delete one over the API (either profile, admin).
    #[command(subcommand)]
    Tenants(tenants::TenantsCommand),
    /// Agents of a tenant, on a running server.
    Agents(ConfigArgs),
    /// Triggers of a tenant, on a running server.
    Triggers(ConfigArgs),
    /// Tools of a tenant (system tools are listed read-only), on a running server.
    Tools(ConfigArgs),
    /// Skills of a tenant, on a running server.
    Skills(ConfigArgs),
    /// Sessions of a tenant, on a running server.
    Sessions(SessionArgs),
    /// Execution records of a tenant, on a running server.
    Executions(ExecutionArgs),
    /// Tokens and cost of a tenant per day, agent and model, on a running server.
    Usage(UsageArgs),
    /// Executions of a tenant per UTC hour and status, on a running server.
    Activity(ActivityArgs),
    /// API keys of a tenant, on a running server (admin key; the embedded profile).
    Keys(KeysArgs),
    /// Create or update a whole tenant bundle (agents, triggers, tools, skills) on a running
    /// server or the AWS profile's API, printing what changed.
    Apply(ApplyCommand),
    /// Run the example tenant's order system: a webhook receiver that verifies signatures.
    ExampleReceiver(receiver::ReceiverArgs),
    /// Serve the operator console on a loopback address for a deployment the browser cannot
    /// call itself, forwarding its API calls to --endpoint (signed with --aws-sigv4).
    Console(console::ConsoleArgs),
    /// Ask a running server whether it is ready (`GET /ready`: database writable, workers
    /// running); exits 0 when it is, 1 with the reason when not. No key needed.
    Ready(client::ReadyArgs),
}

#[derive(Debug, clap::Args)]
struct ConfigArgs {
    #[command(flatten)]
    remote: client::Remote,
    #[command(subcommand)]
    verb: client::ConfigVerb,
}

#[derive(Debug, clap::Args)]
struct KeysArgs {
    #[command(flatten)]
    remote: client::Remote,
    #[command(subcommand)]
    verb: client::KeyVerb,
}

#[derive(Debug, clap::Args)]
struct SessionArgs {
    #[command(flatten)]
    remote: client::Remote,
    #[command(subcommand)]
    verb: client::SessionVerb,
}

#[derive(Debug, clap::Args)]
struct ApplyCommand {
    #[command(flatten)]
    remote: client::Remote,
    #[command(flatten)]
    args: client::ApplyArgs,
}

#[derive(Debug, clap::Args)]
struct UsageArgs {
    #[command(flatten)]
    remote: client::Remote,
    #[command(flatten)]
    range: client::UsageRange,
}

#[derive(Debug, clap::Args)]
struct ActivityArgs {
    #[command(flatten)]
    remote: client::Remote,
    /// Hours to report, the current one included (1 to 168)
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u16).range(1..=168))]
    hours: u16,
}

#[derive(Debug, clap::Args)]
struct ExecutionArgs {
    #[command(flatten)]
    remote: client::Remote,
    #[command(subcommand)]
    verb: client::ExecutionVerb,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = match cli.command {
        Command::Serve(_) | Command::Console(_) => "info",
        _ => "warn",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let _ = JSON_LOGS.set(cli.log_format == LogFormat::Json);
    let logs = match cli.log_format {
        LogFormat::Text => tracing_subscriber::fmt::layer().with_writer(std::io::stderr).boxed(),
        // Span fields (request id, tenant, execution id) go on every line, flattened.
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .boxed(),
    };
    // Traces over OTLP when the standard variables name an endpoint; nothing otherwise.
    let traces = match switchboard_telemetry::Traces::from_env("switchboard", |v| std::env::var(v).ok()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    tracing_subscriber::registry().with(filter).with(logs).with(traces.as_ref().map(|t| t.layer())).init();
    let threads = cli.threads.map_or_else(
        || default_threads(std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)),
        std::num::NonZeroUsize::get,
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve::run(args).await,
            Command::Demo(args) => demo::run(args).await,
            Command::Tenants(cmd) => tenants::run(cmd).await,
            Command::Agents(a) => client::config("agents", &a.remote, a.verb).await,
            Command::Triggers(a) => client::config("triggers", &a.remote, a.verb).await,
            Command::Tools(a) => client::config("tools", &a.remote, a.verb).await,
            Command::Skills(a) => client::config("skills", &a.remote, a.verb).await,
            Command::Sessions(a) => client::sessions(&a.remote, a.verb).await,
            Command::Executions(a) => client::executions(&a.remote, a.verb).await,
            Command::Usage(a) => client::usage(&a.remote, a.range).await,
            Command::Activity(a) => client::activity(&a.remote, a.hours).await,
            Command::Keys(a) => client::keys(&a.remote, a.verb).await,
            Command::Apply(a) => client::apply(&a.remote, a.args).await,
            Command::ExampleReceiver(a) => receiver::run(a).await,
            Command::Console(a) => console::run(a).await,
            Command::Ready(a) => client::ready(a).await,
        }
    });
    drop(runtime);
    if let Some(t) = traces {
        t.shutdown();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, like `{:#}`, but a cause the error before it already
/// ends with (an error that prints its source and also names it as its source) is said once.
fn chain(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// Where a data directory goes when none is given.
fn default_data_dir() -> PathBuf {
    PathBuf::from("switchboard-data")
}

#[cfg(test)]
mod tests {
    use super::{chain, default_threads};

    /// Prints its source and names it as its source, as `#[error("…: {source}")]` does.
    #[derive(Debug)]
    struct Says {
        source: std::io::Error,
    }

    impl std::fmt::Display for Says {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot create data directory /x: {}", self.source)
        }
    }

    impl std::error::Error for Says {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn a_cause_is_said_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = anyhow::Error::new(Says { source: io() }).context("--data-dir");
        assert_eq!(chain(&e), "--data-dir: cannot create data directory /x: no such file");
        let e = anyhow::Error::new(io()).context("--tenant");
        assert_eq!(chain(&e), "--tenant: no such file");
    }

    #[test]
    fn the_runtime_leaves_one_core_to_the_database_thread_and_keeps_at_least_one() {
        assert_eq!([0, 1, 2, 4, 16].map(default_threads), [1, 1, 1, 3, 15]);
    }
}
