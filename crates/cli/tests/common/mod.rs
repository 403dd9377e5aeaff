//! Shared by the HTTP test suites: start `switchboard serve` on a free loopback port (killed by
//! PID when dropped) and create tenants with the CLI.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/support")
}

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_switchboard"))
}

/// A running server; killed (by its own PID) when dropped.
pub struct Server {
    child: Child,
    pub base: String,
    /// The admin key the server created in its data directory on first start.
    pub admin: String,
}

impl Server {
    pub fn start(data_dir: &Path, extra: &[&str]) -> Self {
        Self::start_with_script(data_dir, &examples().join("script.json"), extra)
    }

    /// Starts with another scripted-model file.
    pub fn start_with_script(data_dir: &Path, script: &Path, extra: &[&str]) -> Self {
        let mut child = bin()
            .arg("serve")
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--listen", "127.0.0.1:0", "--workers", "2", "--scripted-model"])
            .arg(script)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let base = line.trim().strip_prefix("listening on ").unwrap().to_owned();
        let admin = std::fs::read_to_string(data_dir.join("admin.key")).unwrap().trim().to_owned();
        Self { child, base, admin }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `switchboard tenants create` on the data directory; returns the printed key.
pub fn create_tenant(data_dir: &Path, id: &str) -> String {
    let out = bin()
        .args(["tenants", "create", id, "--name", &format!("Tenant {id}"), "--data-dir"])
        .arg(data_dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}
