//! The `switchboard tenants` commands against a running `switchboard serve` (the API itself is
//! tested in `crates/api/tests`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Server, examples};

#[tokio::test]
async fn the_cli_shows_suspends_reactivates_and_deletes_a_tenant_over_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let cli = |args: &[&str]| {
        let out = common::bin()
            .args(["tenants"])
            .args(args)
            .args(["--endpoint", &server.base, "--api-key", &server.admin])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, _) = cli(&["show", "acme"]);
    assert!(ok && out.contains("tenant acme: ") && out.contains("(active)"), "{out}");
    let (ok, _, err) = cli(&["delete", "acme"]);
    assert!(!ok && err.contains("suspend it first"), "a live tenant is not deleted: {err}");
    let (ok, out, _) = cli(&["suspend", "acme"]);
    assert!(ok && out.contains("(suspended)"), "{out}");
    let (ok, out, _) = cli(&["reactivate", "acme"]);
    assert!(ok && out.contains("(active)"), "{out}");
    cli(&["suspend", "acme"]);
    let (ok, out, err) = cli(&["delete", "acme"]);
    assert!(ok && out.trim() == "deleted tenant acme", "{out} {err}");
    let (ok, _, err) = cli(&["show", "acme"]);
    assert!(!ok && err.contains("no tenant 'acme'"), "{err}");
}
