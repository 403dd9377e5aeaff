//! The docs test: the shell blocks of `README.md` (the quick start, the real-model path) and of
//! `docs/running.md` (the server walkthrough, the HTTP API and the command line) run as written,
//! in document order, one bash session per document, in a fresh directory; a command that fails
//! fails the test, naming the document's line. So the commands a newcomer copies cannot drift
//! from what the binary does.
//!
//! What the test changes, and only that:
//! - `cargo run -p switchboard-cli --` is the `switchboard` this test was built with (the same
//!   program, without building it again), first on `PATH`;
//! - the ports `8080` (the server) and `8088` (the example order system) are free ones, in the
//!   commands, the environment's defaults and the copied `examples/`;
//! - `switchboard serve` and `switchboard example-receiver`, which a reader starts in a terminal
//!   of their own, start in the background: the block goes on once the first line on stdout says
//!   `listening on`, and they are stopped by their PIDs when the document ends;
//! - `curl` fails on an HTTP error status (`--fail-with-body`), as a reader would notice one;
//! - OpenAI's base URL is a fake of its wire protocol on loopback (no network, no key);
//! - `./scripts/test.sh` is not run (it runs this test).
//!
//! A block is left out only with a `<!-- not run by the docs test: why -->` line before it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};

use switchboard_testkit::providers::{FakeProvider, Wire, chat};

/// The line before a block that the test leaves out.
const NOT_RUN: &str = "<!-- not run by the docs test:";

/// A fenced `sh` block: where it starts in its document and its text.
#[derive(Debug)]
struct Block {
    line: usize,
    text: String,
}

/// The `sh` blocks of `markdown` that the test runs.
fn blocks(markdown: &str) -> Vec<Block> {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_end() != "```sh" {
            i += 1;
            continue;
        }
        let skipped = lines[..i].iter().rev().find(|l| !l.trim().is_empty()).is_some_and(|l| l.starts_with(NOT_RUN));
        let start = i + 1;
        let end = start + lines[start..].iter().position(|l| l.trim_end() == "```").expect("an unclosed block");
        if !skipped {
            out.push(Block { line: start, text: lines[start..end].join("\n") });
        }
        i = end + 1;
    }
    out
}

/// What a reader's copy of the block does here: the same commands, on this test's ports and
/// binary.
fn as_run_here(text: &str, ports: Ports) -> String {
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("./scripts/test.sh") {
                return ": # the test command (it runs this test)".to_owned();
            }
            line.replace("cargo run -p switchboard-cli -- ", "switchboard ")
                .replace("127.0.0.1:8080", &format!("127.0.0.1:{}", ports.server))
                .replace("127.0.0.1:8088", &format!("127.0.0.1:{}", ports.receiver))
                .replace("curl -s ", "curl -s --fail-with-body ")
                .replace("curl -N ", "curl -N --fail-with-body ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs before a document's blocks: stops at the first failing command, naming it; starts a
/// server or the order system in the background until it listens; stops them at the end.
const PREAMBLE: &str = r#"set -Eeuo pipefail
trap 'echo "docs test: this command failed, in the block after the last ### line: $BASH_COMMAND" >&2' ERR
started=()
stop_started() {
    for pid in "${started[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${started[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_started EXIT
switchboard() {
    case "${1:-}" in
        serve|example-receiver)
            local fifo fd line
            fifo=$(mktemp -u "$PWD/.listening.XXXXXX")
            mkfifo "$fifo"
            if [ "$1" = example-receiver ]; then set -- "$@" --listen "127.0.0.1:$RECEIVER_PORT"; fi
            ( exec switchboard "$@" > "$fifo" ) &
            started+=("$!")
            exec {fd}<"$fifo"
            rm -f "$fifo"
            if ! IFS= read -r -u "$fd" line; then echo "docs test: '$*' ended before it listened" >&2; return 1; fi
            echo "$line"
            case "$line" in
                *"listening on "*) ;;
                *) echo "docs test: '$*' said '$line', not 'listening on'" >&2; return 1 ;;
            esac
            ;;
        *) command switchboard "$@" || { local rc=$?; echo "docs test: 'switchboard $*' failed (exit $rc)" >&2; return "$rc"; } ;;
    esac
}
"#;

#[derive(Debug, Clone, Copy)]
struct Ports {
    server: u16,
    receiver: u16,
}

/// A port no one listens on now (the listener is closed before the document takes it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Copies `from` into `to` with the example ports replaced.
fn copy_examples(from: &Path, to: &Path, ports: Ports) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_examples(&entry.path(), &target, ports);
        } else {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            std::fs::write(&target, as_run_here(&text, ports)).unwrap();
        }
    }
}

/// Runs the blocks of the document at `doc` (relative to the workspace) in a fresh directory:
/// what it printed (stdout, then stderr after a `--- stderr` line), or a panic with its output
/// when a command failed.
async fn run_document(doc: &str, fake: &FakeProvider) -> String {
    let root = common::workspace_root();
    let markdown = std::fs::read_to_string(root.join(doc)).unwrap();
    let ports = Ports { server: free_port(), receiver: free_port() };
    let dir = tempfile::tempdir().unwrap();
    copy_examples(&root.join("examples"), &dir.path().join("examples"), ports);
    let mut script = String::from(PREAMBLE);
    for block in blocks(&markdown) {
        script.push_str(&format!("\necho '### {doc}:{}'\n{}\n", block.line, as_run_here(&block.text, ports)));
    }
    let bin_dir = common::switchboard().parent().unwrap().to_owned();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut command = Command::new("bash");
    for name in
        common::MODEL_VARIABLES.iter().chain(&["SWITCHBOARD_API_KEY", "SWITCHBOARD_TENANT", "SWITCHBOARD_CONTEXT"])
    {
        command.env_remove(name);
    }
    command
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .env("PATH", path)
        .env("HOME", dir.path().join("home"))
        .env("SWITCHBOARD_CONFIG", dir.path().join("home/.config/switchboard/config.yaml"))
        .env("SWITCHBOARD_LISTEN", format!("127.0.0.1:{}", ports.server))
        .env("SWITCHBOARD_ENDPOINT", format!("http://127.0.0.1:{}", ports.server))
        .env("RECEIVER_PORT", ports.receiver.to_string())
        .env("OPENAI_BASE_URL", &fake.base_url)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // its own process group, so that whatever it started can be stopped with it
        .process_group(0);
    // Off the runtime's threads: the fake provider answers on them.
    let out = tokio::task::spawn_blocking(move || run_to_end(command)).await.unwrap();
    let (status, stdout, stderr) = out;
    assert!(status.success(), "{doc}: a command did not work as written\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
    format!("{stdout}\n--- stderr\n{stderr}")
}

/// Runs `command` to its end; a guard stops its process group if it has not ended in ten
/// minutes (a command waiting for ever), which fails the test.
fn run_to_end(mut command: Command) -> (std::process::ExitStatus, String, String) {
    let mut child = command.spawn().unwrap();
    let group = child.id();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let guard = std::thread::spawn(move || {
        if finished.recv_timeout(std::time::Duration::from_secs(600)).is_err() {
            // kill(1) on the process group this test made
            let _ = Command::new("kill").args(["-KILL", &format!("-{group}")]).status();
        }
    });
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        err.read_to_string(&mut stderr).unwrap();
        stderr
    });
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    let status = child.wait().unwrap();
    let _ = done.send(());
    guard.join().unwrap();
    (status, stdout, reader.join().unwrap())
}

#[tokio::test]
async fn the_readme_quick_start_and_real_model_path_work_as_written() {
    let fake =
        FakeProvider::start(Wire::ChatCompletions, (0..200).map(|_| chat::text("Happy to help.")).collect()).await;
    let out = run_document("README.md", &fake).await;
    // the offline demo on the scripted double, then the demo and the server on OpenAI's protocol
    assert!(out.contains("SCRIPTED TEST DOUBLE"), "{out}");
    assert!(out.contains("Model: openai:gpt-4o-mini for every agent") && out.contains("Happy to help."), "{out}");
    assert!(out.lines().any(|l| l.starts_with("listening on http://127.0.0.1:")), "{out}");
    assert!(fake.received().iter().all(|r| r.body["model"] == "gpt-4o-mini"));
}

#[tokio::test]
async fn the_server_walkthrough_works_as_written() {
    let fake = FakeProvider::start(Wire::ChatCompletions, vec![]).await;
    let out = run_document("docs/running.md", &fake).await;
    // the order system answered the signed order lookup: the reply carries its answer
    assert!(out.contains("example order system listening on"), "{out}");
    assert!(out.contains("\"order_status\""), "the order lookup ran: {out}");
    assert!(!out.contains("blocked"), "no webhook call was refused: {out}");
    // the command line's blocks, the context's included
    assert!(out.contains("api key") && out.contains("local"), "the contexts listing: {out}");
}

#[test]
fn a_block_is_left_out_only_with_its_reason() {
    let md = "```sh\necho one\n```\n\n<!-- not run by the docs test: needs an AWS account -->\n```sh\nsam deploy\n```\n\
              ```text\nnot shell\n```\n";
    let found = blocks(md);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].line, found[0].text.as_str()), (1, "echo one"));
}
