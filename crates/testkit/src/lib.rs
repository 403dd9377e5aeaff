//! What the test suites share: a manual clock (tests control expiry and timestamps), fault
//! injection at the engine's ports (`faults`); with `http`,
//! fake model providers (Chat Completions, Messages), a tenant's signature-checking webhook
//! receiver and a client of the internal API; and, with the
//! `aws` feature, the AWS emulator harness (one moto server per test binary, fresh tables and
//! queues per test), a fake Bedrock Converse server, a fake Conversations Service and an SDK
//! request counter. Test code only: nothing here is linked into a binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(feature = "aws")]
pub mod aws;
#[cfg(feature = "http")]
pub mod client;
pub mod faults;
pub mod iam;
pub mod mcp;
#[cfg(feature = "http")]
pub mod providers;
#[cfg(feature = "http")]
pub mod webhooks;

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use switchboard_engine::{Authorship, Clock, ModelError, TextSink};

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

/// Who a test writes configuration as when it writes past the configuration service.
pub fn by() -> Authorship {
    Authorship { at: "2026-11-23T07:00:00Z".parse().unwrap(), by: "test".into() }
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
