//! The `switchboard` command: `serve` runs the embedded profile behind the HTTP API, `demo` runs
//! an example tenant end to end offline and prints what happened; the other commands are the
//! API's client and the operator console's relay. This file only reads the flags and hands over
//! to the program they name (`server`, `demo`, `client`, `console`); what two programs share is
//! in `shared`.

mod client;
mod console;
mod demo;
mod init;
mod server;
mod shared;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use shared::logs::LogFormat;

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

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the embedded profile (one SQLite file, no AWS account) behind the HTTP API.
    Serve(server::ServeArgs),
    /// Run an example tenant (`--example`, default `support`) offline on a fresh temporary data
    /// directory and print what happened.
    Demo(demo::DemoArgs),
    /// Write a starting tenant (`tenant.json`) and model configuration (`models.yaml`) for a
    /// provider, ready for `serve`.
    Init(init::InitArgs),
    /// Tenants: create one or issue a key in a data directory (works beside a running server);
    /// show, suspend, reactivate or delete one over the API (either profile, admin).
    #[command(subcommand)]
    Tenants(client::tenants::TenantsCommand),
    /// Agents of a tenant, on a running server.
    Agents(client::config::ConfigArgs),
    /// Triggers of a tenant, on a running server.
    Triggers(client::config::ConfigArgs),
    /// Tools of a tenant (system tools are listed read-only), on a running server.
    Tools(client::config::ConfigArgs),
    /// Skills of a tenant, on a running server.
    Skills(client::config::ConfigArgs),
    /// Sessions of a tenant, on a running server.
    Sessions(client::sessions::SessionArgs),
    /// Tool calls waiting for a person's approval: listed, approved (optionally with edited
    /// arguments) or denied, on a running server.
    Approvals(client::approvals::ApprovalArgs),
    /// Execution records of a tenant, on a running server.
    Executions(client::executions::ExecutionArgs),
    /// Run an execution again from its record with today's engine (recorded model answers and
    /// tool results; nothing called, committed or sent) and say whether it takes the same
    /// actions; exits 1 when it does not.
    Replay(client::executions::ReplayArgs),
    /// Run an evaluation dataset's cases through the engine on this machine (nothing sent or
    /// committed), against an agent from a running server or a bundle, and print each case;
    /// exits 1 when a case fails.
    Eval(client::eval::EvalArgs),
    /// Outbound events of a tenant (hand-offs, ends, failures, limits): `events tail [--follow]`.
    Events(client::events::EventArgs),
    /// Tokens and cost of a tenant per day, agent and model, on a running server.
    Usage(client::reports::UsageArgs),
    /// Executions of a tenant per UTC hour and status, on a running server.
    Activity(client::reports::ActivityArgs),
    /// What a tenant's agents achieved over days of its time zone: conversations resolved
    /// without a person, hand-offs and why, first-response and resolution times, failures,
    /// cost, against the period before; grouped with `--group-by`, on a running server.
    Insights(client::reports::InsightsArgs),
    /// API keys of a tenant, each for a principal in a role, on a running server (the tenant's
    /// owner or the admin; the embedded profile).
    Keys(client::keys::KeysArgs),
    /// Who the key (or the AWS identity) is on the tenant: principal, role, what it may do.
    Whoami(client::keys::WhoamiArgs),
    /// Create or update a whole tenant bundle (agents, triggers, tools, skills) on a running
    /// server or the AWS profile's API, printing what changed.
    Apply(client::apply::ApplyCommand),
    /// Run the example tenant's order system: a webhook receiver that verifies signatures.
    ExampleReceiver(demo::receiver::ReceiverArgs),
    /// Serve the operator console on a loopback address for a deployment the browser cannot
    /// call itself, forwarding its API calls to --endpoint (signed with --aws-sigv4).
    Console(console::ConsoleArgs),
    /// Ask a running server whether it is ready (`GET /ready`: database writable, workers
    /// running); exits 0 when it is, 1 with the reason when not. No key needed.
    Ready(client::ready::ReadyArgs),
    /// The client's contexts (endpoint, tenant, key) in its configuration file: `set-context`,
    /// `use-context`, `get-contexts`, `current-context`, `delete-context`.
    #[command(subcommand)]
    Config(client::contexts::ConfigCommand),
    /// Print the shell completion script for `switchboard` (bash, zsh, fish, elvish or
    /// powershell): e.g. `switchboard completion bash > ~/.local/share/bash-completion/completions/switchboard`.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Completion { shell } = cli.command {
        // Needs no runtime, logs or traces: the script only.
        completion(shell, &mut std::io::stdout());
        return ExitCode::SUCCESS;
    }
    let default_level = match cli.command {
        Command::Serve(_) | Command::Console(_) => "info",
        _ => "warn",
    };
    let traces = match shared::logs::init(cli.log_format, default_level) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let threads = cli.threads.map_or_else(
        || shared::default_threads(std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)),
        std::num::NonZeroUsize::get,
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(cli.command));
    drop(runtime);
    if let Some(t) = traces {
        t.shutdown();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", shared::chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// Writes the completion script of `shell` for every command and flag.
fn completion(shell: clap_complete::Shell, out: &mut dyn std::io::Write) {
    use clap::CommandFactory as _;
    clap_complete::generate(shell, &mut Cli::command(), "switchboard", out);
}

impl Command {
    /// Where the command calls an API, when it does.
    fn remote_mut(&mut self) -> Option<&mut shared::Remote> {
        match self {
            Self::Tenants(cmd) => cmd.remote_mut(),
            Self::Agents(a) | Self::Triggers(a) | Self::Tools(a) | Self::Skills(a) => Some(&mut a.remote),
            Self::Sessions(a) => Some(&mut a.remote),
            Self::Approvals(a) => Some(&mut a.remote),
            Self::Executions(a) => Some(&mut a.remote),
            Self::Replay(a) => Some(&mut a.remote),
            Self::Eval(a) => Some(&mut a.remote),
            Self::Events(a) => Some(&mut a.remote),
            Self::Usage(a) => Some(&mut a.remote),
            Self::Activity(a) => Some(&mut a.remote),
            Self::Insights(a) => Some(&mut a.remote),
            Self::Keys(a) => Some(&mut a.remote),
            Self::Whoami(a) => Some(&mut a.remote),
            Self::Apply(a) => Some(&mut a.remote),
            Self::Console(a) => Some(&mut a.remote),
            _ => None,
        }
    }
}

/// Hands the command to its program, its API flags filled in from the configuration file's
/// context where they were left out.
async fn run(mut command: Command) -> anyhow::Result<()> {
    if let Some(remote) = command.remote_mut()
        && let Some(path) = shared::contexts::path()
    {
        remote.fill_from(&shared::contexts::load(&path)?)?;
    }
    match command {
        Command::Serve(args) => server::run(args).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Init(args) => init::run(&args),
        Command::Tenants(cmd) => client::tenants::run(cmd).await,
        Command::Agents(a) => client::config::run("agents", &a.remote, a.verb).await,
        Command::Triggers(a) => client::config::run("triggers", &a.remote, a.verb).await,
        Command::Tools(a) => client::config::run("tools", &a.remote, a.verb).await,
        Command::Skills(a) => client::config::run("skills", &a.remote, a.verb).await,
        Command::Sessions(a) => client::sessions::run(&a.remote, a.verb).await,
        Command::Approvals(a) => client::approvals::run(&a.remote, a.verb).await,
        Command::Executions(a) => client::executions::run(&a.remote, a.verb).await,
        Command::Replay(a) => client::executions::replay(&a).await,
        Command::Eval(a) => client::eval::run(a).await,
        Command::Events(a) => client::events::run(&a.remote, a.verb).await,
        Command::Usage(a) => client::reports::usage(&a.remote, a.range).await,
        Command::Activity(a) => client::reports::activity(&a.remote, a.hours).await,
        Command::Insights(a) => client::reports::insights(&a).await,
        Command::Keys(a) => client::keys::run(&a.remote, a.verb).await,
        Command::Whoami(a) => client::keys::whoami(&a.remote).await,
        Command::Apply(a) => client::apply::run(&a.remote, a.args).await,
        Command::ExampleReceiver(a) => demo::receiver::run(a).await,
        Command::Console(a) => console::run(a).await,
        Command::Ready(a) => client::ready::run(a).await,
        Command::Config(cmd) => client::contexts::run(cmd),
        Command::Completion { shell } => {
            completion(shell, &mut std::io::stdout());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_completion_script_names_the_commands_and_their_flags_in_each_shell() {
        use clap_complete::Shell;
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut script = Vec::new();
            completion(shell, &mut script);
            let script = String::from_utf8(script).unwrap();
            for word in ["serve", "agents", "executions", "data-dir", "log-format"] {
                assert!(script.contains(word), "{shell}: no {word}");
            }
        }
    }
}
