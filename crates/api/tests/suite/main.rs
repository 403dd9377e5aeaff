//! The API crate's black-box suite, one test binary (each binary links the whole embedded stack,
//! so the suites share one): the API over real HTTP (`api`), the cross-tenant corpus of
//! client-chosen ids (`tenancy`), the answers checked against `contracts/` (`contracts`), the
//! extractors through the router without a socket (`extract`), insights of real turns
//! (`insights`), the fuzz corpus of every JSON
//! body replayed (`fuzz_corpus`), tools of an MCP server (`mcp`), the contract served as JSON (`openapi`), the API's two halves on
//! AWS behind the template's gateway (`split`), turns started by manual and webhook triggers
//! (`starts`), traffic splits between agents (`traffic_splits`), the trigger tester
//! (`trigger_test`), kept
//! configuration versions (`versions`) and a tenant's time zone (`zones`). `common` is their harness.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod api;
mod common;
mod contracts;
mod extract;
mod fuzz_corpus;
mod insights;
mod mcp;
mod openapi;
mod split;
mod starts;
mod tenancy;
mod traffic_splits;
mod trigger_test;
mod versions;
mod zones;
