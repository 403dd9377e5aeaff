//! What reading the trust store costs against building a client from roots already read
//! (docs/benchmarks.md, "Lambda deployables"):
//! `cargo run --profile server -p switchboard-https --example trust_store_cost`.

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for round in 1..=5 {
        let started = Instant::now();
        let found = rustls_native_certs::load_native_certs();
        let (certificates, read) = (found.certs.len(), started.elapsed());
        let started = Instant::now();
        reqwest::Client::builder().build()?;
        let own_read = started.elapsed();
        let started = Instant::now();
        switchboard_https::client_builder()?.build()?;
        let shared = started.elapsed();
        println!(
            "round {round}: {certificates} certificates; reading them {read:?}; a client that reads \
             them itself {own_read:?}; a client from the shared roots {shared:?}"
        );
    }
    Ok(())
}
