//! `GET /openapi.json`: the contract, served as JSON to anyone, is `contracts/openapi.yaml` as
//! written.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use crate::common;

use common::{Server, create_tenant};
use reqwest::Client;
use serde_json::Value;

fn written() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contracts/openapi.yaml");
    let yaml = std::fs::read_to_string(path).unwrap();
    serde_saphyr::from_str_with_options(&yaml, serde_saphyr::options! { strict_booleans: true }).unwrap()
}

#[tokio::test]
async fn the_contract_is_served_as_json_without_a_key() {
    // given a server and the contract as written
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let written = written();
    let client = Client::new();

    // when someone without a key asks for it
    let res = client.get(format!("{}/openapi.json", server.base)).send().await.unwrap();

    // then it is JSON whose paths are the contract's, this route's own among them
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/json");
    let served: Value = res.json().await.unwrap();
    assert_eq!(served["paths"], written["paths"]);
    assert!(served["paths"].get("/openapi.json").is_some(), "the route is in its own contract");
    assert_eq!(served, written, "and the rest of the document too");

    // and a tenant's key gets the same document (the key is not needed, nor refused)
    let key = create_tenant(&server, "acme");
    let res = client.get(format!("{}/openapi.json", server.base)).bearer_auth(key).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.json::<Value>().await.unwrap(), served);
}
