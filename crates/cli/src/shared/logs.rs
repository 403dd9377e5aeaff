//! Log lines on stderr (text or JSON, `RUST_LOG` for the level), traces over OTLP when the
//! environment names an endpoint, and notices for the person who started the process. It does
//! not decide what is logged.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Set once at start: whether stderr carries JSON log lines only.
static JSON_LOGS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// A line for the person who started the process: plain on stderr, or a log event when the logs
/// are JSON (so that every stderr line parses).
pub fn notice(message: &str) {
    if JSON_LOGS.get().copied().unwrap_or(false) {
        tracing::info!("{message}");
    } else {
        eprintln!("switchboard: {message}");
    }
}

/// Whether text log lines carry colour: only on a terminal, and never when `NO_COLOR` is set to
/// anything but the empty string (no-color.org).
fn coloured(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Installs the process's subscriber: `default_level` unless `RUST_LOG` says otherwise, lines
/// in `format`, and the OTLP trace exporter when configured (returned, to be shut down last).
pub fn init(format: LogFormat, default_level: &str) -> anyhow::Result<Option<switchboard_telemetry::Traces>> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let _ = JSON_LOGS.set(format == LogFormat::Json);
    let logs = match format {
        LogFormat::Text => {
            use std::io::IsTerminal as _;
            let ansi = coloured(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR"));
            tracing_subscriber::fmt::layer().with_ansi(ansi).with_writer(std::io::stderr).boxed()
        }
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
    let traces = switchboard_telemetry::Traces::from_env("switchboard", |v| std::env::var(v).ok())
        .map_err(anyhow::Error::msg)?;
    tracing_subscriber::registry().with(filter).with(logs).with(traces.as_ref().map(|t| t.layer())).init();
    Ok(traces)
}

#[cfg(test)]
mod tests {
    use super::coloured;

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color() {
        assert!(coloured(true, None));
        assert!(coloured(true, Some("".into())), "an empty NO_COLOR is as if unset");
        assert!(!coloured(true, Some("1".into())));
        assert!(!coloured(false, None), "a file or a pipe gets no escape codes");
    }
}
