//! `GET /openapi.json`: the API's contract, `contracts/openapi.yaml`, as JSON. It needs no key,
//! like `/health`: it is the published description of the routes and holds nothing of a tenant.
//! It is the file this server was built with (converted by `build.rs`), not a description made
//! from the router.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The contract as compact JSON, made from the YAML at build time.
const CONTRACT: &str = include_str!(concat!(env!("OUT_DIR"), "/openapi.json"));

/// `GET /openapi.json`: the contract, as built in.
pub(crate) async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], CONTRACT).into_response()
}
