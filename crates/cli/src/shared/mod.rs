//! What more than one of the command's programs (server, client, console, demo) needs: where a
//! data directory goes, how an error and a notice are printed, the async runtime's size, the
//! HTTP server loop, where an API is and as whom it is called, and SigV4 signing. No program's
//! own logic lives here, and nothing here imports a program.

pub mod contexts;
pub mod http;
pub mod logs;
pub mod remote;
#[cfg(feature = "aws")]
pub mod sigv4;

use std::path::PathBuf;
use std::time::Duration;

pub use logs::notice;
pub use remote::Remote;

/// How long a stopping server (or a finished demo) waits for its database to close (the log's
/// last copy into the file) once the workers have stopped.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a data directory goes when none is given.
pub fn default_data_dir() -> PathBuf {
    PathBuf::from("switchboard-data")
}

/// The async runtime's threads when `--threads` is not given: one per core but one. Under load
/// the database thread runs every write for everyone, and a runtime thread on every core as well
/// made the threads take turns on the cores: about 12 % more CPU per message over HTTP on two
/// cores (docs/benchmarks.md, "One runtime thread per core but one").
pub fn default_threads(cores: usize) -> usize {
    cores.saturating_sub(1).max(1)
}

/// An error and its causes on one line, like `{:#}`, but a cause the error before it already
/// ends with (an error that prints its source and also names it as its source) is said once.
pub fn chain(e: &anyhow::Error) -> String {
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
