//! Time, injectable so that tests control expiry and timestamps.

use chrono::{DateTime, Utc};

/// Wall-clock time, injectable so that tests control expiry and timestamps.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}
