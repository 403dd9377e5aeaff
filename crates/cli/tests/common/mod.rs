//! The suites here use the end-to-end harness of the top-level `tests` package, by path: one
//! harness, here run against this package's own `switchboard` binary.
#![allow(dead_code, unused_imports)]

#[path = "../../../../tests/common/mod.rs"]
mod harness;

pub use harness::*;
