//! Shared by the suites that run the real binary: find (or build) the `switchboard` binary, start
//! `switchboard serve` on a free loopback port (killed by PID when dropped) and create tenants
//! with the CLI.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

/// The workspace's root: the first folder up from this package holding `Cargo.lock`.
pub fn workspace_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        manifest.ancestors().find(|dir| dir.join("Cargo.lock").is_file()).unwrap_or(manifest).to_owned()
    })
}

pub fn examples() -> PathBuf {
    workspace_root().join("examples/support")
}

/// The real `switchboard` binary, built once per test process by `cargo build` (a no-op when it
/// is up to date) with the same profile as these tests, the lock file as it is, and the `aws`
/// feature exactly when this package has it.
pub fn switchboard() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(build_switchboard)
}

/// `cargo build --bin switchboard`, the executable's path read from cargo's JSON messages (cargo
/// has released its build lock by the time tests run).
///
/// With the `aws` feature it is built as part of the whole workspace with one of its test
/// targets selected: cargo then resolves features as `cargo test --workspace` does (dev-
/// dependencies included), so the binary reuses the dependencies that run just built instead of
/// building them again with the CLI's own, narrower features (tokio without `test-util`, serde
/// without `rc`, …: most of the graph). Without it, only the CLI is built, without its default
/// features, as the check of that build wants.
fn build_switchboard() -> PathBuf {
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .current_dir(workspace_root())
        .args(["build", "--locked", "--bin", "switchboard"])
        .arg("--message-format=json-render-diagnostics")
        .args(["--profile", &profile()])
        .stderr(Stdio::inherit());
    if cfg!(feature = "aws") {
        cargo.args(["--workspace", "--test", "serve"]);
    } else {
        cargo.args(["-p", "switchboard-cli", "--no-default-features"]);
    }
    let out = cargo.output().unwrap();
    assert!(out.status.success(), "cargo build of the switchboard binary failed (its errors are above)");
    let executable = String::from_utf8_lossy(&out.stdout).lines().rev().find_map(|line| {
        let message: serde_json::Value = serde_json::from_str(line).ok()?;
        let is_it = message["reason"] == "compiler-artifact" && message["target"]["name"] == "switchboard";
        message["executable"].as_str().filter(|_| is_it).map(PathBuf::from)
    });
    executable.expect("cargo named no switchboard executable")
}

/// The cargo profile this test binary was built with, from where it lies
/// (`target/<profile dir>/deps/`): `debug` is the `dev` profile's folder.
fn profile() -> String {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).and_then(Path::file_name).and_then(|n| n.to_str());
    match dir {
        Some("debug") | None => "dev".to_owned(),
        Some(other) => other.to_owned(),
    }
}

/// The command, reading no configuration file of the machine's user: a test that wants one
/// sets `SWITCHBOARD_CONFIG` itself.
pub fn bin() -> Command {
    let mut command = Command::new(switchboard());
    command.env("SWITCHBOARD_CONFIG", workspace_root().join("target/tests-read-no-config/config.yaml"));
    command
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
        let mut args = vec!["--scripted-model", script.to_str().unwrap()];
        args.extend_from_slice(extra);
        Self::start_with_env(data_dir, &args, &[])
    }

    /// Starts with these flags and environment variables only (no scripted model unless `extra`
    /// names one).
    pub fn start_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn(data_dir, extra, env, "warn", Stdio::inherit())
    }

    /// [`Server::start_with_env`] logging at `debug` into the file `log` (to search what the
    /// server wrote).
    pub fn start_logging(data_dir: &Path, extra: &[&str], env: &[(&str, &str)], log: &Path) -> Self {
        let file = std::fs::File::create(log).unwrap();
        Self::spawn(data_dir, extra, env, "debug", Stdio::from(file))
    }

    fn spawn(data_dir: &Path, extra: &[&str], env: &[(&str, &str)], level: &str, stderr: Stdio) -> Self {
        let mut child = bin()
            .arg("serve")
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--listen", "127.0.0.1:0", "--workers", "2"])
            .args(extra)
            .env_remove("SWITCHBOARD_SCRIPTED_MODEL")
            .envs(env.iter().copied())
            .env("RUST_LOG", level)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let base = line.trim().strip_prefix("listening on ").unwrap().to_owned();
        let admin = std::fs::read_to_string(data_dir.join("admin.key")).unwrap().trim().to_owned();
        Self { child, base, admin }
    }
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM to the server (by its PID) and waits for it to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success(), "kill -TERM {pid}");
        self.child.wait().unwrap()
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

// Not every suite uses every piece of the harness.
#[allow(unused_imports)]
pub use switchboard_testkit::client::{Api, Reply, raw};

impl switchboard_testkit::client::Base for Server {
    fn base(&self) -> &str {
        &self.base
    }
}

/// The variables that choose models; a refusal test runs without any of the host's.
pub const MODEL_VARIABLES: [&str; 6] = [
    "SWITCHBOARD_SCRIPTED_MODEL",
    "SWITCHBOARD_MODEL_CONFIG",
    "SWITCHBOARD_DEFAULT_MODEL_ID",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
];

/// Runs `switchboard serve` with `args` and none of the host's model variables, expecting it to
/// refuse to start; returns its stderr.
pub fn serve_refuses(args: &[&std::ffi::OsStr]) -> String {
    let mut command = bin();
    command.args(["serve", "--listen", "127.0.0.1:0"]).args(args);
    for name in MODEL_VARIABLES {
        command.env_remove(name);
    }
    let out = command.output().unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}
