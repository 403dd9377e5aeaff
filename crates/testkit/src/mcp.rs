//! A tenant's MCP server that this project did not write: `tests/receivers/mcp_orders.py`, built
//! on the official Python SDK (`mcp` on PyPI, which `scripts/test.sh` installs into the
//! emulator's venv), on a loopback port, killed by its PID when dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use serde_json::Value;

/// The bearer token the server requires.
pub const TOKEN: &str = "mcp-token-7c1f0e2a";

/// The Python with the `mcp` package: `SWITCHBOARD_PYTHON`, else the emulator's venv.
pub fn python() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = std::env::var_os("SWITCHBOARD_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv-emulator/bin/python"));
    assert!(
        path.exists(),
        "no Python at {}: run ./scripts/test.sh, which installs mcp into .venv-emulator \
         (or set SWITCHBOARD_PYTHON to a python that has mcp==2.3.0)",
        path.display()
    );
    path
}

/// The running server.
#[derive(Debug)]
pub struct OrdersServer {
    /// Its MCP endpoint, `http://127.0.0.1:<port>/mcp`.
    pub url: String,
    /// An endpoint on the same server that answers outside the protocol.
    pub broken_url: String,
    child: Child,
    calls: BufReader<ChildStdout>,
}

impl OrdersServer {
    pub fn start() -> Self {
        let python = python();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/receivers/mcp_orders.py");
        let mut child = Command::new(&python)
            .arg(script)
            .arg(TOKEN)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut calls = BufReader::new(child.stdout.take().unwrap());
        let mut port = String::new();
        calls.read_line(&mut port).unwrap();
        let port: u16 = port.trim().parse().unwrap_or_else(|_| {
            panic!("the MCP server did not start (see its error above): does {} have mcp?", python.display())
        });
        Self {
            url: format!("http://127.0.0.1:{port}/mcp"),
            broken_url: format!("http://127.0.0.1:{port}/broken"),
            child,
            calls,
        }
    }

    /// The next tool call the server saw: `{"tool", "arguments"}`, printed before it answered.
    pub fn next_call(&mut self) -> Value {
        let mut line = String::new();
        self.calls.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("a call line, not {line:?}: {e}"))
    }
}

impl Drop for OrdersServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
