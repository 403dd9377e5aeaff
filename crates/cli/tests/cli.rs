//! The `switchboard` CLI against a running server: a tenant configured end to end with the
//! CLI alone, and errors shown with the field at fault.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::process::Output;

use common::{Server, bin, create_tenant};
use serde_json::Value;

struct Cli<'a> {
    server: &'a Server,
    key: String,
}

impl Cli<'_> {
    fn run(&self, args: &[&str]) -> Output {
        bin()
            .args(args)
            .args(["--endpoint", &self.server.base, "--tenant", "acme"])
            .env("SWITCHBOARD_API_KEY", &self.key)
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(!out.status.success(), "{args:?} should fail: {}", String::from_utf8_lossy(&out.stdout));
        String::from_utf8(out.stderr).unwrap()
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

fn last_word(s: &str) -> String {
    s.split_whitespace().last().unwrap().to_owned()
}

#[test]
fn a_tenant_is_configured_and_used_with_the_cli_alone() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let cli = Cli { key: create_tenant(&dir.path().join("data"), "acme"), server: &server };

    // an agent from YAML, a trigger from JSON
    let agent_file = write(
        dir.path(),
        "agent.yaml",
        "name: Support\nsystemPrompt: You help customers.\nmodel: anthropic.claude-3-haiku\ntools: [send_message, set_context]\n",
    );
    let agent = last_word(&cli.ok(&["agents", "create", "-f", &agent_file]));
    let trigger_file = write(
        dir.path(),
        "trigger.json",
        &format!(r#"{{"name": "everything", "agentId": "{agent}", "eventType": "message.new", "priority": 5}}"#),
    );
    let created = cli.ok(&["triggers", "create", "-f", &trigger_file]);
    assert!(created.starts_with("created trigger "), "{created}");

    // listed as tables and as JSON
    let table = cli.ok(&["agents", "list"]);
    assert!(table.starts_with("ID") && table.contains("Support") && table.contains(&agent), "{table}");
    let tools = cli.ok(&["tools", "list"]);
    assert!(tools.contains("send_message") && tools.contains("system"), "{tools}");
    let json: Value = serde_json::from_str(&cli.ok(&["triggers", "list", "--json"])).unwrap();
    assert_eq!(json[0]["agentId"], agent.as_str());

    // updated in place (the CLI sends the ETag it read)
    let v2 = write(
        dir.path(),
        "agent2.json",
        r#"{"name": "Support v2", "systemPrompt": "You help.", "model": "m", "tools": ["send_message"]}"#,
    );
    assert_eq!(cli.ok(&["agents", "update", &agent, "-f", &v2]).trim(), format!("updated agent {agent} (version 2)"));
    let got: Value = serde_json::from_str(&cli.ok(&["agents", "get", &agent])).unwrap();
    assert_eq!(got["name"], "Support v2");

    // run it, then look at what happened
    let invoked = cli.ok(&["agents", "invoke", &agent, "--conversation", "c-1", "--message", "Hi there"]);
    assert!(invoked.contains("success") && invoked.contains("→ reply"), "{invoked}");
    let sessions: Value =
        serde_json::from_str(&cli.ok(&["sessions", "list", "--conversation", "c-1", "--json"])).unwrap();
    let session = sessions[0]["sessionId"].as_str().unwrap().to_owned();
    let executions = cli.ok(&["executions", "list", "--session", &session]);
    assert!(executions.contains("success"), "{executions}");
    // what it used: one line per day, agent and model, and the total; the scripted double is unpriced
    let usage = cli.ok(&["usage"]);
    let lines: Vec<&str> = usage.lines().collect();
    assert!(lines[1].starts_with("DAY") && lines[1].contains("COST USD"), "{usage}");
    assert!(lines[2].contains(&agent) && lines[2].contains("scripted"), "{usage}");
    assert!(lines[3].starts_with("total") && lines[3].trim_end().ends_with('-'), "{usage}");
    assert!(usage.contains("without a price"), "{usage}");
    let err = cli.fails(&["usage", "--from", "2026-11-30", "--to", "2026-11-01"]);
    assert!(err.contains("400") && err.contains("/query/from"), "{err}");
    assert_eq!(
        cli.ok(&["sessions", "handoff", &session, "--to", "human", "--reason", "VIP"]).trim(),
        "handed off to a human"
    );

    // errors say which field is wrong, and what blocks a delete
    let bad = write(
        dir.path(),
        "bad.json",
        r#"{"name": "B", "systemPrompt": "p", "model": "m", "modelConfig": {"temperature": 9}}"#,
    );
    let err = cli.fails(&["agents", "create", "-f", &bad]);
    assert!(
        err.contains("400 Invalid input") && err.contains("/modelConfig/temperature: must be between 0 and 1"),
        "{err}"
    );
    let err = cli.fails(&["agents", "delete", &agent]);
    assert!(err.contains("409") && err.contains("trigger"), "{err}");
    let broken = write(dir.path(), "broken.yaml", "name: [unclosed\n");
    assert!(cli.fails(&["agents", "create", "-f", &broken]).contains("not valid YAML"));
    assert!(cli.fails(&["agents", "get", "01JD0000SVPP0RT0AGENT00001"]).contains("404"));
    let no_key = bin()
        .args(["agents", "list", "--endpoint", &server.base, "--tenant", "acme"])
        .env_remove("SWITCHBOARD_API_KEY")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&no_key.stderr).contains("--api-key"));
    let unreachable = bin()
        .args(["agents", "list", "--endpoint", "http://127.0.0.1:9", "--tenant", "acme", "--api-key", "k"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&unreachable.stderr).contains("cannot reach"));
}

#[cfg(not(feature = "aws"))]
#[test]
fn without_the_aws_feature_aws_sigv4_is_refused_with_a_clear_message() {
    let out = bin().args(["agents", "list", "--tenant", "acme", "--aws-sigv4"]).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--aws-sigv4 needs a switchboard built with the `aws` feature"), "{stderr}");
}
