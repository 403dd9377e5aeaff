//! What the test suites share: a manual clock (tests control expiry and timestamps); with `http`,
//! fake model providers (Chat Completions, Messages); and, with the
//! `aws` feature, the AWS emulator harness (one moto server per test binary, fresh tables and
//! queues per test), a fake Bedrock Converse server, a fake Conversations Service and an SDK
//! request counter. Test code only: nothing here is linked into a binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(feature = "aws")]
pub mod aws;
#[cfg(feature = "http")]
pub mod providers;

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use switchboard_engine::{Clock, ModelError, TextSink};

/// A clock that moves only when told to; starts at 2026-11-23T07:00:00Z.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    pub fn new() -> Arc<Self> {
        Arc::new(Self(Mutex::new("2026-11-23T07:00:00Z".parse().unwrap())))
    }

    pub fn advance(&self, by: chrono::Duration) {
        *self.0.lock().unwrap() += by;
    }

    /// [`advance`](Self::advance) by a `std` duration (queue timeouts are `std`).
    pub fn advance_std(&self, by: std::time::Duration) {
        self.advance(chrono::Duration::from_std(by).unwrap());
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

/// A streamed model call's sink that keeps what it was handed: text pieces, and `None` where an
/// attempt started over.
#[derive(Debug, Default)]
pub struct Pieces(Mutex<Vec<Option<String>>>);

impl Pieces {
    pub fn taken(&self) -> Vec<Option<String>> {
        self.0.lock().unwrap().clone()
    }
}

impl TextSink for Pieces {
    fn text(&self, delta: &str) {
        self.0.lock().unwrap().push(Some(delta.to_owned()));
    }

    fn restart(&self, _error: &ModelError) {
        self.0.lock().unwrap().push(None);
    }
}

/// Set in the child process [`in_a_process_without_a_trust_store`] starts.
const NO_TRUST_STORE_CHILD: &str = "SWITCHBOARD_TEST_NO_TRUST_STORE";

/// Runs the test `name` (its path, as `cargo test` prints it) of this test binary again, in a
/// child process whose `SSL_CERT_FILE` and `SSL_CERT_DIR` point at nothing, so that the platform
/// has no trust store; panics unless exactly that test ran there and passed. Returns `true` in
/// the child, where the test then checks what it must; `false` in the parent, once the child
/// passed. A child process because the store is read once per process and the variables are
/// process-wide.
pub fn in_a_process_without_a_trust_store(name: &str) -> bool {
    if std::env::var_os(NO_TRUST_STORE_CHILD).is_some() {
        return true;
    }
    let empty = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name])
        .env(NO_TRUST_STORE_CHILD, "1")
        .env("SSL_CERT_FILE", empty.path().join("no-such-bundle.pem"))
        .env("SSL_CERT_DIR", empty.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("1 passed"), "the child process ran no test named {name}: {stdout}");
    false
}
