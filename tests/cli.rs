//! The `switchboard` CLI against a running server: a tenant configured end to end with the
//! CLI alone, and errors shown with the field at fault.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{Server, bin, create_tenant, examples};
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

#[test]
fn an_owner_manages_the_tenants_keys_for_named_principals_with_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    create_tenant(&dir.path().join("data"), "acme");
    let admin = Cli { key: server.admin.clone(), server: &server };
    // an owner's key, made by the admin; the owner makes the others
    let owner_key = admin.ok(&["keys", "issue", "--principal", "olivia", "--role", "owner"]).trim().to_owned();
    let owner = Cli { key: owner_key, server: &server };
    assert_eq!(owner.ok(&["whoami"]).trim(), "olivia (owner of acme): read, configure, operate, invoke, own");
    let key =
        owner.ok(&["keys", "issue", "--principal", "vic@acme.example", "--role", "viewer", "--expires-in", "90d"]);
    let key = key.trim().to_owned();
    assert!(key.starts_with("sbk_"), "{key}");
    let listed = owner.ok(&["keys", "list"]);
    assert!(listed.starts_with("ID") && !listed.contains(&key), "{listed}");
    assert!(listed.contains("vic@acme.example") && listed.contains("viewer"), "{listed}");
    let keys: Vec<Value> = serde_json::from_str::<Value>(&owner.ok(&["keys", "list", "--json"])).unwrap()["keys"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(keys.len(), 3, "the tenant's first key, the owner's and the viewer's: {keys:?}");
    let vic = keys.iter().find(|k| k["principal"] == "vic@acme.example").unwrap();
    assert!(vic["expiresAt"].is_string(), "{vic}");
    let vic_id = vic["keyId"].as_str().unwrap().to_owned();
    // the viewer reads, and is told what it may not do
    let viewer = Cli { key: key.clone(), server: &server };
    assert!(viewer.ok(&["agents", "list"]).starts_with("ID"));
    let err = viewer.fails(&["keys", "revoke", &vic_id]);
    assert!(err.contains("403") && err.contains("owner or admin") && err.contains("viewer"), "{err}");
    // bad grants are named before anything is sent
    assert!(owner.fails(&["keys", "issue", "--role", "root"]).contains("--role"));
    assert!(owner.fails(&["keys", "issue", "--role", "admin"]).contains("--role"));
    assert!(owner.fails(&["keys", "issue", "--expires-in", "soon"]).contains("--expires-in"));
    // rotated: a new key, the old one refused at once
    let rotated = owner.ok(&["keys", "rotate", &vic_id]).trim().to_owned();
    assert!(rotated.starts_with("sbk_") && rotated != key, "{rotated}");
    assert!(viewer.fails(&["agents", "list"]).contains("401"));
    let viewer = Cli { key: rotated, server: &server };
    assert!(viewer.ok(&["agents", "list"]).starts_with("ID"));
    // revoked by its owner: the key stops working
    let keys: Value = serde_json::from_str(&owner.ok(&["keys", "list", "--json"])).unwrap();
    let new_id =
        keys["keys"].as_array().unwrap().iter().find(|k| k["principal"] == "vic@acme.example").unwrap()["keyId"]
            .as_str()
            .unwrap()
            .to_owned();
    assert_eq!(owner.ok(&["keys", "revoke", &new_id]).trim(), format!("revoked key {new_id}"));
    assert!(viewer.fails(&["agents", "list"]).contains("401"));
    assert!(owner.fails(&["keys", "revoke", &new_id]).contains("404"));
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
    assert!(invoked.contains("How can I help with your order?"), "the reply whole: {invoked}");
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
    // and when: the invoke's one execution, in its hour
    let activity = cli.ok(&["activity", "--hours", "2"]);
    let lines: Vec<&str> = activity.lines().collect();
    assert!(lines[1].starts_with("HOUR") && lines.len() >= 4, "{activity}");
    assert!(lines[lines.len() - 2].ends_with("success=1"), "{activity}");
    assert!(
        lines[lines.len() - 1].starts_with("total") && lines[lines.len() - 1].contains(" 1  success=1"),
        "{activity}"
    );
    let err = cli.fails(&["activity", "--hours", "169"]);
    assert!(err.contains("--hours"), "{err}");
    assert_eq!(
        cli.ok(&["sessions", "handoff", &session, "--to", "human", "--reason", "VIP"]).trim(),
        "handed off to a human"
    );
    // and what it achieved: one conversation opened, then handed to a person over the API
    let insights = cli.ok(&["insights", "--group-by", "agent,version"]);
    let row =
        |name: &str| insights.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}: {insights}"));
    assert!(row("conversations").split_whitespace().nth(1) == Some("1"), "{insights}");
    assert!(row("handed to a person").split_whitespace().nth(4) == Some("1"), "{insights}");
    assert!(insights.contains("hand-offs to a person by cause: api=1"), "{insights}");
    // the invoke under the agent's version 2; the hand-off, which ran no turn, under version 0
    let group = |version: &str| {
        let line = insights.lines().find(|l| l.starts_with(&format!("{agent} {version} ")));
        line.unwrap_or_else(|| panic!("version {version}: {insights}")).split_whitespace().collect::<Vec<_>>()
    };
    assert_eq!((group("2")[2], group("2")[8]), ("1", "1"), "one conversation, one execution: {insights}");
    assert_eq!((group("0")[4], group("0")[8]), ("1", "1"), "one hand-off to a person: {insights}");
    assert_eq!((group("2")[5], group("0")[5]), ("0", "0"), "none abandoned: {insights}");
    let json: Value = serde_json::from_str(&cli.ok(&["insights", "--json"])).unwrap();
    assert_eq!((json["total"]["executions"].as_u64(), json["total"]["handedToHuman"].as_u64()), (Some(2), Some(1)));
    let err = cli.fails(&["insights", "--group-by", "agent,week"]);
    assert!(err.contains("400") && err.contains("/query/groupBy") && err.contains("week"), "{err}");
    // the tenant-wide list finds the handed-off conversation; a bad filter names the field
    let handed: Value =
        serde_json::from_str(&cli.ok(&["sessions", "list", "--status", "handed_off", "--json"])).unwrap();
    assert_eq!(handed[0]["sessionId"], session.as_str());
    assert!(cli.ok(&["sessions", "list", "--status", "active"]).trim().lines().count() <= 1, "no active session");
    // narrowed by channel and variant on the server: no conversation came by SMS or in a split
    assert!(cli.ok(&["sessions", "list", "--channel", "sms"]).trim().lines().count() <= 1, "none by SMS");
    let split: Value = serde_json::from_str(&cli.ok(&["sessions", "list", "--variant", "b", "--json"])).unwrap();
    assert_eq!(split, serde_json::json!([]));
    // streamed: the turn line by line as it happens, the reply's text as it was written
    let streamed = cli.ok(&["agents", "invoke", &agent, "--conversation", "c-2", "--message", "Hi again", "--stream"]);
    let lines: Vec<&str> = streamed.lines().collect();
    assert!(lines[0].starts_with("execution ") && lines[0].contains("· session "), "{streamed}");
    assert!(lines[1].starts_with("  model ") && lines[1].ends_with('…'), "{streamed}");
    let text = lines.iter().find_map(|l| l.strip_prefix("  … ")).expect("the text line");
    let reply = lines.iter().find_map(|l| l.strip_prefix("  → reply ")).expect("the reply line");
    assert_eq!(text, reply, "{streamed}");
    // whole, though longer than a table's cell
    assert!(text.starts_with("Hi! ") && text.ends_with("How can I help with your order?"), "{streamed}");
    assert!(lines.last().unwrap().starts_with("session ") && lines.last().unwrap().ends_with("success"), "{streamed}");
    let json = cli.ok(&["agents", "invoke", &agent, "--conversation", "c-3", "--stream", "--json"]);
    let events: Vec<Value> = json.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(events[0]["event"], "execution.started", "{json}");
    assert_eq!(events.last().unwrap()["event"], "execution.finished", "{json}");
    assert_eq!(events.last().unwrap()["execution"]["status"], "success", "{json}");
    let err = cli.fails(&["sessions", "list", "--status", "waiting", "--agent", "nobody"]);
    assert!(err.contains("/query/status") && err.contains("/query/agentId"), "{err}");
    // a manual trigger run by hand, with the invoke's output; a message trigger is refused
    let manual_file = write(
        dir.path(),
        "manual.json",
        &format!(r#"{{"name": "by hand", "agentId": "{agent}", "eventType": "manual"}}"#),
    );
    let manual = last_word(&cli.ok(&["triggers", "create", "-f", &manual_file]));
    let ran = cli.ok(&["triggers", "run", &manual, "--input", "Hi by hand", "--conversation", "c-run"]);
    assert!(ran.contains("success") && ran.contains("→ reply"), "{ran}");
    let message_trigger = last_word(&created);
    let err = cli.fails(&["triggers", "run", &message_trigger, "--input", "Hi"]);
    assert!(err.contains("409") && err.contains("not a manual trigger"), "{err}");
    let err = cli.fails(&["triggers", "run", &manual, "--input", " "]);
    assert!(err.contains("/input"), "{err}");
    assert!(cli.fails(&["agents", "run", &agent, "--input", "Hi"]).contains("manual triggers only"));
    // a trigger that splits its runs between two agents: the activity report compares the variants
    let other_file = write(
        dir.path(),
        "other.json",
        r#"{"name": "Support B", "systemPrompt": "You help too.", "model": "m", "tools": ["send_message"]}"#,
    );
    let other = last_word(&cli.ok(&["agents", "create", "-f", &other_file]));
    let split_file = write(
        dir.path(),
        "split.json",
        &format!(
            r#"{{"name": "split", "agentId": "{agent}", "eventType": "manual", "split": [
                {{"name": "control", "agentId": "{agent}", "weight": 1}},
                {{"name": "shorter", "agentId": "{other}", "weight": 1}}]}}"#
        ),
    );
    let split = last_word(&cli.ok(&["triggers", "create", "-f", &split_file]));
    for c in ["c-split-1", "c-split-2", "c-split-3"] {
        assert!(cli.ok(&["triggers", "run", &split, "--input", "Hi", "--conversation", c]).contains("success"));
    }
    let activity = cli.ok(&["activity", "--hours", "2"]);
    let header = activity.lines().position(|l| l.starts_with("TRIGGER (SPLIT)")).expect("the variants' table");
    assert!(activity.lines().nth(header).unwrap().contains("VARIANT") && activity.contains("MEAN MS"), "{activity}");
    let runs: u64 = activity
        .lines()
        .skip(header + 1)
        .map(|l| {
            let columns: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(columns[0], split, "{activity}");
            assert!(["control", "shorter"].contains(&columns[1]), "{activity}");
            columns[2].parse::<u64>().unwrap()
        })
        .sum();
    assert_eq!(runs, 3, "{activity}");

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

/// Runs the CLI against `server` with `key` (no `--tenant`: `apply` takes it from the bundle).
fn apply(server: &Server, key: &str, args: &[&str]) -> Output {
    bin().arg("apply").args(args).args(["--endpoint", &server.base]).env("SWITCHBOARD_API_KEY", key).output().unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn a_bundle_is_applied_from_nothing_then_idempotently_and_a_bad_one_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let admin = common::Api::new(&server, &server.admin);
    let bundle_path = common::examples().join("tenant.json");
    let bundle = bundle_path.to_str().unwrap();
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&bundle_path).unwrap()).unwrap();
    let agent_id = doc["agents"][0]["agentId"].as_str().unwrap().to_owned();
    let records =
        ["agents", "triggers", "tools", "skills"].iter().map(|k| doc[k].as_array().map_or(0, Vec::len)).sum::<usize>();

    // a dry run says what would happen and writes nothing, not even the tenant
    let dry = stdout(&apply(&server, &server.admin, &["-f", bundle, "--dry-run"]));
    assert!(dry.starts_with("tenant acme: would be created"), "{dry}");
    assert!(dry.contains(&format!("would be created   agent {agent_id} (Front-line support)")), "{dry}");
    assert!(
        dry.trim_end().ends_with(&format!("{records} created, 0 updated, 0 unchanged (dry run: nothing written)")),
        "{dry}"
    );
    assert_eq!(admin.get("/tenants/acme/agents").await.status, 404);

    // applied: the tenant and every record are created; applied again, nothing changes
    let first = stdout(&apply(&server, &server.admin, &["-f", bundle]));
    assert!(first.starts_with("tenant acme: created"), "{first}");
    assert!(first.trim_end().ends_with(&format!("{records} created, 0 updated, 0 unchanged")), "{first}");
    let stored = admin.get(&format!("/tenants/acme/agents/{agent_id}")).await;
    assert_eq!(stored.headers["etag"], "\"1\"");
    let again = stdout(&apply(&server, &server.admin, &["-f", bundle]));
    assert_eq!(again.trim(), format!("0 created, 0 updated, {records} unchanged"));
    // the same bundle from standard input (`-f -`), as JSON and as YAML
    for text in [doc.to_string(), doc.as_object().unwrap().iter().map(|(k, v)| format!("{k}: {v}\n")).collect()] {
        use std::io::Write as _;
        let mut child = bin()
            .args(["apply", "-f", "-", "--dry-run", "--endpoint", &server.base])
            .env("SWITCHBOARD_API_KEY", &server.admin)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let out = stdout(&child.wait_with_output().unwrap());
        let last = out.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("0 created, 0 updated, ") && last.ends_with("unchanged (dry run: nothing written)"),
            "{out}"
        );
    }

    // one changed prompt: that agent alone is replaced, keeping its creation time
    doc["agents"][0]["systemPrompt"] = Value::from("You are terse.");
    let changed = write(dir.path(), "changed.json", &doc.to_string());
    let out = stdout(&apply(&server, &server.admin, &["-f", &changed]));
    assert!(out.contains(&format!("updated            agent {agent_id}")), "{out}");
    assert!(out.trim_end().ends_with(&format!("0 created, 1 updated, {} unchanged", records - 1)), "{out}");
    let replaced = admin.get(&format!("/tenants/acme/agents/{agent_id}")).await;
    assert_eq!(
        (replaced.headers["etag"].to_str().unwrap(), replaced.body["systemPrompt"].as_str()),
        ("\"2\"", Some("You are terse."))
    );
    assert_eq!(replaced.body["createdAt"], stored.body["createdAt"]);

    // a bundle with two bad records: every error listed, nothing written (not even its good change)
    doc["agents"][0]["systemPrompt"] = Value::from("Changed again.");
    doc["agents"][1]["modelConfig"] = serde_json::json!({ "temperature": 9 });
    doc["triggers"][0]["priority"] = Value::from("high");
    let bad = write(dir.path(), "bad.json", &doc.to_string());
    let out = apply(&server, &server.admin, &["-f", &bad]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/agents/1/modelConfig/temperature") && err.contains("/triggers/0/priority"), "{err}");
    let after = admin.get(&format!("/tenants/acme/agents/{agent_id}")).await;
    assert_eq!(after.body["systemPrompt"], "You are terse.");

    // another tenant's key cannot apply acme's bundle; acme's own key can, without creating
    let other = create_tenant(&dir.path().join("data"), "other");
    let out = apply(&server, &other, &["-f", bundle]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("404"), "{}", String::from_utf8_lossy(&out.stderr));
    let key = bin().args(["tenants", "key", "acme", "--data-dir"]).arg(dir.path().join("data")).output().unwrap();
    let acme_key = stdout(&key).trim().to_owned();
    let own = stdout(&apply(&server, &acme_key, &["-f", bundle]));
    assert!(own.contains("1 updated"), "the original prompt comes back: {own}");
    // and a tenant key cannot create a tenant by applying a new one
    doc["tenantId"] = Value::from("newco");
    let newco = write(dir.path(), "newco.json", &doc.to_string());
    assert!(!apply(&server, &acme_key, &["-f", &newco]).status.success());
    // the path's tenant and the bundle's must agree
    let r = admin.post("/tenants/acme/apply", doc.clone()).await;
    assert_eq!((r.status.as_u16(), r.body["errors"][0]["pointer"].as_str()), (400, Some("/tenantId")));
}

#[tokio::test]
async fn a_bundles_limits_are_set_by_an_admin_and_only_kept_by_a_tenant_key() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let admin = common::Api::new(&server, &server.admin);
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(common::examples().join("tenant.json")).unwrap()).unwrap();
    doc["limits"] = serde_json::json!({ "concurrentSessions": 5, "onLimit": { "action": "handoff_to_human" } });
    let bundle = write(dir.path(), "limited.json", &doc.to_string());

    let out = stdout(&apply(&server, &server.admin, &["-f", &bundle]));
    assert!(out.contains("updated            tenant acme limits"), "{out}");
    let limits = admin.get("/tenants/acme").await.body["limits"].clone();
    assert_eq!(
        (&limits["concurrentSessions"], &limits["invocationsPerMinute"], &limits["onLimit"]["action"]),
        (&Value::from(5), &Value::from(60), &Value::from("handoff_to_human")),
        "what the bundle leaves out takes the defaults: {limits}"
    );
    let again = stdout(&apply(&server, &server.admin, &["-f", &bundle]));
    assert!(!again.contains("limits"), "unchanged limits are not reported as a change: {again}");

    // the tenant's own key may apply the same limits, not raise them; nothing is written then
    let key = bin().args(["tenants", "key", "acme", "--data-dir"]).arg(dir.path().join("data")).output().unwrap();
    let acme_key = stdout(&key).trim().to_owned();
    stdout(&apply(&server, &acme_key, &["-f", &bundle]));
    doc["limits"]["concurrentSessions"] = Value::from(500);
    doc["agents"][0]["systemPrompt"] = Value::from("Changed by the tenant.");
    let raised = write(dir.path(), "raised.json", &doc.to_string());
    let out = apply(&server, &acme_key, &["-f", &raised]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/limits") && err.contains("only an admin"), "{err}");
    assert_eq!(admin.get("/tenants/acme").await.body["limits"]["concurrentSessions"], 5);
    let agent = doc["agents"][0]["agentId"].as_str().unwrap();
    assert_ne!(
        admin.get(&format!("/tenants/acme/agents/{agent}")).await.body["systemPrompt"],
        "Changed by the tenant."
    );

    // limits out of range are named like any other field
    doc["limits"] = serde_json::json!({ "concurrentSessions": 0, "sessionIdleMinutes": 2000 });
    let r = admin.post("/tenants/acme/apply", doc).await;
    let pointers: Vec<&str> =
        r.body["errors"].as_array().unwrap().iter().filter_map(|e| e["pointer"].as_str()).collect();
    assert_eq!((r.status.as_u16(), pointers), (400, vec!["/limits/concurrentSessions", "/limits/sessionIdleMinutes"]));
}

#[tokio::test]
async fn an_admin_creates_a_tenant_once_and_a_tenant_key_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let admin = common::Api::new(&server, &server.admin);
    let created = admin.post("/tenants", serde_json::json!({ "tenantId": "beta", "name": "Beta Inc" })).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.headers["location"], "/tenants/beta");
    assert_eq!(admin.get("/tenants/beta/agents").await.status, 200);
    assert_eq!(admin.post("/tenants", serde_json::json!({ "tenantId": "beta", "name": "Again" })).await.status, 409);
    for (body, pointer) in [
        (serde_json::json!({ "tenantId": "bad id!", "name": "x" }), "/tenantId"),
        (serde_json::json!({ "tenantId": "ok", "name": " " }), "/name"),
        (serde_json::json!({ "tenantId": "ok" }), "/name"),
        (serde_json::json!({ "tenantId": "ok", "name": "x", "plan": "gold" }), "/plan"),
    ] {
        let r = admin.post("/tenants", body.clone()).await;
        assert_eq!(r.status, 400, "{body}");
        assert_eq!(r.body["errors"][0]["pointer"], pointer, "{body}: {}", r.body);
    }
    let tenant = common::Api::new(&server, &create_tenant(&dir.path().join("data"), "acme"));
    // a tenant's owner does not make tenants: 403, naming the role that does
    let refused = tenant.post("/tenants", serde_json::json!({ "tenantId": "gamma", "name": "G" })).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body["detail"].as_str().unwrap().contains("admin"), "{}", refused.body);
    assert_eq!(admin.get("/tenants/gamma/agents").await.status, 404);
}

#[test]
fn ready_answers_for_a_running_server_and_names_the_reason_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir.path().join("data"), &[]);
    let out = bin().args(["ready", "--endpoint", &server.base]).env_remove("SWITCHBOARD_API_KEY").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout(&out).trim(), "ready");
    server.terminate();

    // nothing listening: the address is named
    let out = bin().args(["ready", "--endpoint", &server.base]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach") && err.contains(&server.base), "{err}");

    // a server that answers 503 with a problem: its detail is the reason
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let answering = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut conn, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        let n = conn.read(&mut buf).unwrap();
        let request = String::from_utf8_lossy(&buf[..n]).into_owned();
        let body = r#"{"type":"about:blank","title":"Not ready","status":503,"detail":"the workers have stopped"}"#;
        write!(
            conn,
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        request
    });
    let out = bin().args(["ready", "--endpoint", &base]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not ready: 503 Not ready: the workers have stopped"), "{err}");
    assert!(answering.join().unwrap().starts_with("GET /ready HTTP/1.1"));

    // a bad endpoint is named
    let out = bin().args(["ready", "--endpoint", "not a url"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--endpoint not a url is not a URL"));
}

#[test]
fn serve_refuses_a_bad_start_naming_the_flag_the_file_and_the_field_once() {
    let dir = tempfile::tempdir().unwrap();
    let serve = |args: &[&str]| {
        let data = dir.path().join("data");
        let out = bin().arg("serve").args(["--listen", "127.0.0.1:0", "--data-dir"]).arg(&data).args(args).output();
        let out = out.unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or_default().to_owned()
    };
    let bundle = write(dir.path(), "tenant.json", r#"{"tenantId": "acme"}"#);
    assert_eq!(serve(&["--tenant", &bundle]), format!("error: --tenant: {bundle}: /name: is required"));
    let broken = write(dir.path(), "broken.json", "{\n  \"tenantId\": \"acme\",\n  \"name\": \n");
    assert_eq!(
        serve(&["--tenant", &broken]),
        format!("error: --tenant: {broken}: /name: is not valid JSON: EOF while parsing a value at line 4 column 0")
    );
    // A file where the data directory should go: the cause is said once.
    let file = write(dir.path(), "file", "");
    let out = bin().arg("serve").args(["--listen", "127.0.0.1:0", "--data-dir", &format!("{file}/data")]).output();
    let stderr = String::from_utf8_lossy(&out.unwrap().stderr).into_owned();
    let line = stderr.lines().last().unwrap_or_default();
    assert!(line.starts_with(&format!("error: --data-dir: cannot create data directory {file}/data: ")), "{line}");
    assert_eq!(line.matches("(os error").count(), 1, "{line}");
}

#[test]
fn a_second_serve_on_a_data_directory_in_use_is_refused_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = Server::start(&data, &[]);
    let out = bin().arg("serve").args(["--listen", "127.0.0.1:0", "--data-dir"]).arg(&data).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let pid = std::fs::read_to_string(data.join("serve.lock")).unwrap().trim().to_owned();
    assert!(!pid.is_empty());
    assert!(
        stderr.contains(&format!("is in use by another `switchboard serve` (pid {pid}); stop that one first")),
        "names the first: {stderr}"
    );
    // beside it, the commands that share a data directory still work
    assert!(!create_tenant(&data, "beta").is_empty());
    // once the first has ended, the directory is free again
    drop(first);
    let second = Server::start(&data, &[]);
    assert_eq!(std::fs::read_to_string(data.join("serve.lock")).unwrap().trim(), second.pid().to_string());
}

/// The `switchboard tenants` commands over the API (the API itself is tested in `crates/api/tests`).
#[tokio::test]
async fn the_cli_shows_suspends_reactivates_and_deletes_a_tenant_over_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let cli = |args: &[&str]| {
        let out = bin()
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

#[test]
fn the_bash_completion_script_completes_commands_and_flags_in_bash() {
    // given the script the binary prints
    let out = bin().args(["completion", "bash"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("switchboard.bash");
    std::fs::write(&script, &out.stdout).unwrap();
    // when bash loads it and completes `switchboard ag` and `switchboard serve --data-`
    let complete = |words: &str| {
        let line = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             _switchboard switchboard \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\"; echo \"${{COMPREPLY[@]}}\"",
            script.display()
        );
        let out = std::process::Command::new("bash").args(["--norc", "-c", &line]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    // then it offers the command and the flag
    assert_eq!(complete("switchboard ag").split_whitespace().collect::<Vec<_>>(), ["agents"]);
    assert!(complete("switchboard serve --data-").split_whitespace().any(|w| w == "--data-dir"));
}

#[test]
fn events_tail_prints_the_log_and_follows_new_events_as_they_happen() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let tenant = examples().join("tenant.json");
    let server = Server::start(&dir.path().join("data"), &["--tenant", tenant.to_str().unwrap()]);
    let cli = Cli { key: server.admin.clone(), server: &server };
    assert_eq!(cli.ok(&["events", "tail"]), "", "nothing has happened yet");
    // given a follower
    let mut follower = bin()
        .args(["events", "tail", "--follow", "--endpoint", &server.base, "--tenant", "acme"])
        .env("SWITCHBOARD_API_KEY", &server.admin)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, seen) = std::sync::mpsc::channel::<String>();
    let stdout = follower.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    // when a customer asks the front-line agent for a person
    let front = "01JD0000SVPP0RT0AGENT00001";
    let invoked = cli.ok(&["agents", "invoke", front, "--conversation", "c-7", "--message", "a human, please"]);
    assert!(invoked.contains("handoff_to_human") || invoked.contains("handed_off"), "{invoked}");
    // then the follower prints the hand-off as it happens
    let line = seen.recv_timeout(std::time::Duration::from_secs(60)).expect("the follower printed nothing");
    let _ = follower.kill();
    let _ = follower.wait();
    assert!(line.contains("session.handoff.human") && line.contains("c-7"), "{line}");
    // and the log has it for a later tail, as JSON too
    let tail = cli.ok(&["events", "tail"]);
    assert_eq!(tail.lines().next().map(str::trim), Some(line.trim()), "{tail}");
    let json: Value = serde_json::from_str(cli.ok(&["events", "tail", "--json"]).lines().next().unwrap()).unwrap();
    assert_eq!(json["event"]["detailType"], "session.handoff.human");
    assert!(json["seq"].as_i64().is_some(), "{json}");
}

#[test]
fn a_context_gives_the_endpoint_tenant_and_key_that_flags_leave_out() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let tenant = examples().join("tenant.json");
    let server = Server::start(&dir.path().join("data"), &["--tenant", tenant.to_str().unwrap()]);
    let config = dir.path().join("home/.config/switchboard/config.yaml");
    let run = |args: &[&str], stdin: &str| {
        let mut child = bin()
            .args(args)
            .env("SWITCHBOARD_CONFIG", &config)
            .env_remove("SWITCHBOARD_ENDPOINT")
            .env_remove("SWITCHBOARD_API_KEY")
            .env_remove("SWITCHBOARD_TENANT")
            .env_remove("SWITCHBOARD_CONTEXT")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    let ok = |args: &[&str]| {
        let out = run(args, "");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        stdout(&out)
    };
    // with no context, a command has no key
    let out = run(&["agents", "list"], "");
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--api-key"), "{out:?}");
    // a context written with the key on standard input, made current
    let args = ["config", "set-context", "local", "--endpoint", &server.base, "-t", "acme", "--api-key-stdin", "--use"];
    let out = run(&args, &format!("{}\n", server.admin));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&config).unwrap().permissions().mode() & 0o777, 0o600);
    }
    assert_eq!(ok(&["config", "current-context"]).trim(), "local");
    let listed = ok(&["config", "get-contexts"]);
    assert!(listed.contains(&server.base) && listed.contains("api key") && !listed.contains(&server.admin), "{listed}");
    // then commands need no flags, and print in each format
    let table = ok(&["agents", "list"]);
    assert!(table.starts_with("ID") && table.contains("01JD0000SVPP0RT0AGENT00001"), "{table}");
    let wide = ok(&["agents", "list", "-o", "wide"]);
    assert!(wide.lines().next().unwrap().ends_with("VERSION  UPDATED"), "{wide}");
    let json: Value = serde_json::from_str(&ok(&["agents", "list", "--json"])).unwrap();
    assert!(json.as_array().is_some_and(|a| !a.is_empty()), "{json}");
    // (that YAML reads back as the same JSON is the printer's unit test)
    let yaml = ok(&["agents", "list", "-o", "yaml"]);
    assert!(yaml.starts_with("- ") && yaml.contains("agentId: 01JD0000SVPP0RT0AGENT00001"), "{yaml}");
    // a flag wins over the context
    let out = run(&["agents", "list", "--endpoint", "http://127.0.0.1:1"], "");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach http://127.0.0.1:1"), "{out:?}");
    // a context that is not there is named
    let out = run(&["agents", "list", "--context", "prod"], "");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no context 'prod'"), "{out:?}");
    let out = run(&["config", "use-context", "prod"], "");
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no context 'prod'"), "{out:?}");
    // a file others may read is refused while it holds the key
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
        let out = run(&["agents", "list"], "");
        assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("chmod 600"), "{out:?}");
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    // deleting the current context leaves none
    ok(&["config", "delete-context", "local"]);
    let out = run(&["config", "current-context"], "");
    assert!(!out.status.success(), "{out:?}");
}

#[test]
fn triggers_test_says_which_trigger_would_answer_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = examples().join("tenant.json");
    let server = Server::start(&dir.path().join("data"), &["--tenant", tenant.to_str().unwrap()]);
    let cli = Cli { key: server.admin.clone(), server: &server };
    let yes = cli.ok(&["triggers", "test", "--message", "Where is my order #1234?"]);
    assert!(yes.starts_with("trigger 01JD0000TR1GGER0CHAT000001 would answer"), "{yes}");
    assert!(yes.contains("✓ channel.platform in [\"webchat\",\"facebook\",\"instagram\"]: is \"webchat\""), "{yes}");
    let no = cli.ok(&["triggers", "test", "--message", "hi", "--channel", "sms"]);
    assert!(no.starts_with("no trigger would answer") && no.contains("✗ channel.platform in"), "{no}");
    let json: Value = serde_json::from_str(&cli.ok(&["triggers", "test", "--message", "hi", "-o", "json"])).unwrap();
    assert_eq!(json["triggers"][0]["outcome"], "matched");
    // only triggers are tested, and a message or a detail is needed
    assert!(cli.fails(&["agents", "test", "--message", "hi"]).contains("test works on triggers only"));
    assert!(cli.fails(&["triggers", "test"]).contains("--message"));
}

#[test]
fn a_records_history_is_listed_compared_and_rolled_back_with_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let cli = Cli { key: create_tenant(&dir.path().join("data"), "acme"), server: &server };
    // given an agent written twice
    let v1 = write(
        dir.path(),
        "v1.yaml",
        "name: Support\nsystemPrompt: You help customers.\nmodel: m\ntools: [send_message]\n",
    );
    let agent = last_word(&cli.ok(&["agents", "create", "-f", &v1]));
    let v2 = write(dir.path(), "v2.yaml", "name: Support\nsystemPrompt: You help.\nmodel: m\ntools: [send_message]\n");
    cli.ok(&["agents", "update", &agent, "-f", &v2]);

    // its versions, newest first, as a table and as data
    let table = cli.ok(&["agents", "versions", &agent]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("VERSION") && lines[0].contains("WRITTEN BY"), "{table}");
    // written by the key's principal (`tenants create` issues the owner's key)
    assert!(lines[1].starts_with('2') && lines[1].contains("owner") && lines[2].starts_with('1'), "{table}");
    let listed: Value = serde_json::from_str(&cli.ok(&["agents", "versions", &agent, "-o", "json"])).unwrap();
    assert_eq!(listed[1]["record"]["systemPrompt"], "You help customers.");
    // what changed between them
    let diff = cli.ok(&["agents", "diff", &agent, "1", "2"]);
    assert!(
        diff.starts_with("POINTER") && diff.contains("/systemPrompt") && diff.contains("You help customers."),
        "{diff}"
    );
    assert!(cli.ok(&["agents", "diff", &agent, "2", "2"]).contains("are the same"));
    let as_yaml = cli.ok(&["agents", "diff", &agent, "1", "2", "-o", "yaml"]);
    assert!(as_yaml.contains("pointer: /systemPrompt"), "{as_yaml}");

    // rolled back: the old prompt is the record again, as version 3
    let rolled = cli.ok(&["agents", "rollback", &agent, "1"]);
    assert_eq!(rolled.trim(), format!("rolled agent {agent} back to version 1 (now version 3)"));
    let got: Value = serde_json::from_str(&cli.ok(&["agents", "get", &agent])).unwrap();
    assert_eq!((got["systemPrompt"].as_str(), got["version"].as_u64()), (Some("You help customers."), Some(3)));
    let err = cli.fails(&["agents", "rollback", &agent, "9"]);
    assert!(err.contains("400") && err.contains("/version"), "{err}");
    // the same verbs serve the other kinds
    let trigger_file = write(
        dir.path(),
        "trigger.json",
        &format!(r#"{{"name": "everything", "agentId": "{agent}", "eventType": "message.new"}}"#),
    );
    let trigger = last_word(&cli.ok(&["triggers", "create", "-f", &trigger_file]));
    assert!(cli.ok(&["triggers", "versions", &trigger]).lines().nth(1).unwrap().starts_with('1'));
}

/// One customer message to `server` in conversation `c-<id>`, waited for: `POST /events`'s answer.
async fn say(server: &Server, id: &str, text: &str) -> Value {
    say_in(server, &format!("c-{id}"), "m-1", text).await
}

/// Customer message `message` to `server` in `conversation`, waited for: `POST /events`'s answer.
async fn say_in(server: &Server, conversation: &str, message: &str, text: &str) -> Value {
    let event = serde_json::json!({ "id": format!("{conversation}-{message}"), "source": "conversations-service", "detail-type": "message.new",
        "detail": { "tenantId": "acme", "conversationId": conversation, "messageId": message, "channel": { "platform": "webchat" },
                    "conversation": { "status": "open" }, "message": { "direction": "inbound", "text": text } } });
    let res = reqwest::Client::new()
        .post(format!("{}/events?wait=30", server.base))
        .bearer_auth(&server.admin)
        .json(&event)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 202);
    res.json().await.unwrap()
}

#[tokio::test]
async fn replay_says_an_execution_takes_the_same_actions_and_fails_for_one_it_cannot_find() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = examples().join("tenant.json");
    let server = Server::start(&dir.path().join("data"), &["--tenant", tenant.to_str().unwrap()]);
    let cli = Cli { key: server.admin.clone(), server: &server };
    let body = say(&server, "rp-1", "Where is my order #1234?").await;
    let id = body["execution"]["executionId"].as_str().unwrap().to_owned();
    let same = cli.ok(&["replay", &id]);
    assert!(same.starts_with("same actions as recorded ("), "{same}");
    let json: Value = serde_json::from_str(&cli.ok(&["replay", &id, "-o", "json"])).unwrap();
    assert_eq!((json["same"].clone(), json["recorded"].clone()), (Value::Bool(true), json["replayed"].clone()));
    assert!(cli.fails(&["replay", "01ARZ3NDEKTSV4RRFFQ69G5FAV"]).contains("no execution"));
    // live, with a changed prompt from a file: the record and the live run side by side
    let agent = dir.path().join("agent.yaml");
    std::fs::write(&agent, "systemPrompt: You are terse.\n").unwrap();
    let live = cli.ok(&["replay", &id, "--live", "--agent-file", agent.to_str().unwrap()]);
    assert!(
        live.lines().next().unwrap().contains("recorded") && live.contains("tool calls") && live.contains("latency"),
        "{live}"
    );
    assert!(live.trim_end().ends_with("same actions as recorded"), "the test double answers alike: {live}");
    // --model is for a live run only
    assert!(cli.fails(&["replay", &id, "--model", "openai:gpt-4o-mini"]).contains("--live"));
}

/// A stand-in for a server that does not replay (the AWS internal API): `POST …/replay` answers
/// `501` as it does; everything else goes to `server`. Its base URL; it stops with the runtime.
/// A stand-in for `server` that answers 501 to a `POST` whose path ends with one of `suffixes`,
/// as the AWS internal API does for what it does not offer, and forwards everything else.
async fn answering_501(server: &Server, suffixes: &'static [&'static str]) -> String {
    use axum::http::{Method, StatusCode, Uri};
    let base = server.base.clone();
    let forward = move |method: Method, uri: Uri, headers: axum::http::HeaderMap, body: axum::body::Bytes| {
        let base = base.clone();
        async move {
            if method == Method::POST && suffixes.iter().any(|s| uri.path().ends_with(s)) {
                let problem = serde_json::json!({ "type": "about:blank", "title": "Not Implemented", "status": 501,
                    "detail": "not offered by this deployment" });
                return (
                    StatusCode::NOT_IMPLEMENTED,
                    [("content-type", "application/problem+json")],
                    problem.to_string(),
                );
            }
            let url = format!("{base}{}", uri.path_and_query().map_or("", |p| p.as_str()));
            let mut req = reqwest::Client::new().request(method, url).body(body);
            for name in ["authorization", "content-type"] {
                if let Some(v) = headers.get(name) {
                    req = req.header(name, v);
                }
            }
            let res = req.send().await.unwrap();
            let status = StatusCode::from_u16(res.status().as_u16()).unwrap();
            (status, [("content-type", "application/json")], res.text().await.unwrap())
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, axum::Router::new().fallback(forward)).await.unwrap() });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_runs_here_when_the_server_does_not_and_gives_the_servers_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = examples().join("tenant.json");
    let server = Server::start(&dir.path().join("data"), &["--tenant", tenant.to_str().unwrap()]);
    let cli = Cli { key: server.admin.clone(), server: &server };
    let body = say(&server, "rl-1", "Where is my order #1234?").await;
    let id = body["execution"]["executionId"].as_str().unwrap().to_owned();
    // the server's own verdict, and the same run made here from what its API serves
    let served: Value = serde_json::from_str(&cli.ok(&["replay", &id, "-o", "json"])).unwrap();
    let local: Value = serde_json::from_str(&cli.ok(&["replay", &id, "--local", "-o", "json"])).unwrap();
    assert_eq!(served["same"], Value::Bool(true), "{served}");
    assert!(served["recorded"]["toolCalls"].as_array().is_some_and(|c| !c.is_empty()), "a turn with a tool call");
    assert_eq!(local, served, "the same report, made here");
    // a server that answers 501 for replay: the CLI says so and replays here
    let stand_in = answering_501(&server, &["/replay"]).await;
    let run = |args: &[&str]| {
        bin()
            .args(args)
            .args(["--endpoint", &stand_in, "--tenant", "acme"])
            .env("SWITCHBOARD_API_KEY", &server.admin)
            .output()
            .unwrap()
    };
    let out = run(&["replay", &id, "-o", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("replaying"), "says where it replays");
    assert_eq!(serde_json::from_slice::<Value>(&out.stdout).unwrap(), served);
    // what cannot be replayed says why, here too
    let missing = run(&["replay", "01ARZ3NDEKTSV4RRFFQ69G5FAV"]);
    assert!(!missing.status.success() && String::from_utf8_lossy(&missing.stderr).contains("no execution"));
    assert!(cli.fails(&["replay", &id, "--local", "--live"]).contains("--live"));
}

/// `switchboard eval` on the example tenant's bundle and scripted model, with `extra` arguments.
fn eval(dataset: &Path, extra: &[&str]) -> Output {
    let (tenant, script) = (examples().join("tenant.json"), examples().join("script.json"));
    bin()
        .args(["eval", dataset.to_str().unwrap(), "--bundle", tenant.to_str().unwrap()])
        .args(["--scripted-model", script.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn eval_runs_the_example_dataset_and_fails_a_case_whose_expectation_does_not_hold() {
    let dir = tempfile::tempdir().unwrap();
    // the example dataset passes, case by case
    let out = eval(&examples().join("eval.yaml"), &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = stdout(&out);
    assert!(
        text.contains("✓ an order's status is looked up and told") && text.ends_with("4 of 4 cases passed\n"),
        "{text}"
    );
    // a case that expects what the agent does not do fails, named, with why; the JUnit report says so
    let mut dataset = std::fs::read_to_string(examples().join("eval.yaml")).unwrap();
    dataset = dataset.replace("replyContains: refunded", "replyContains: store credit");
    let broken = write(dir.path(), "broken.yaml", &dataset);
    let junit = dir.path().join("report.xml");
    let out = eval(Path::new(&broken), &["--junit", junit.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert!(
        text.contains("✗ a double charge goes to the billing specialist")
            && text.contains("no reply contains \"store credit\""),
        "{text}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 of 4 cases failed"));
    // read by another XML parser (Python's): four test cases, one failure, on that case
    let check = "import sys, xml.etree.ElementTree as E; s = E.parse(sys.argv[1]).getroot(); \
        f = [c.get('name') for c in s.iter('testcase') if c.find('failure') is not None]; \
        print(s.get('tests'), s.get('failures'), f[0])";
    let py = Command::new("python3").args(["-c", check, junit.to_str().unwrap()]).output().unwrap();
    assert_eq!(stdout(&py).trim(), "4 1 a double charge goes to the billing specialist, who refunds it");
    // -o json gives every case
    let json: Value = serde_json::from_slice(&eval(Path::new(&broken), &["-o", "json"]).stdout).unwrap();
    assert_eq!((json["passed"].clone(), json["failed"].clone()), (serde_json::json!(3), serde_json::json!(1)));
    // a dataset that is not one is refused naming the field
    let bad =
        write(dir.path(), "bad.yaml", "cases:\n  - name: x\n    messages: [hi]\n    expect: { replyContain: x }\n");
    let out = eval(Path::new(&bad), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/cases/0/expect/replyContain"), "{out:?}");
    let empty = write(dir.path(), "empty.json", r#"{"cases": [{"name": "", "messages": []}]}"#);
    let stderr = String::from_utf8(eval(Path::new(&empty), &[]).stderr).unwrap();
    assert!(stderr.contains("/cases/0/name: is empty") && stderr.contains("/cases/0/messages"), "{stderr}");
}

#[tokio::test]
async fn eval_takes_the_agent_from_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = examples().join("tenant.json");
    let server = Server::start(&dir.path().join("data"), &["--tenant", tenant.to_str().unwrap()]);
    let cli = Cli { key: server.admin.clone(), server: &server };
    let script = examples().join("script.json");
    let dataset = examples().join("eval.yaml");
    let args = ["eval", dataset.to_str().unwrap(), "--agent", "01JD0000SVPP0RT0AGENT00001"];
    let out = cli.ok(&[&args[..], &["--scripted-model", script.to_str().unwrap()]].concat());
    assert!(out.ends_with("4 of 4 cases passed\n"), "{out}");
    // and nothing reached the server's conversations
    let api = reqwest::Client::new();
    let convos: Value = api
        .get(format!("{}/tenants/acme/conversations/eval-0/messages", server.base))
        .bearer_auth(&server.admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(convos["messages"].as_array().is_none_or(Vec::is_empty), "{convos}");
    // a dataset built from the server's recent hand-offs: each recorded message, expecting what it did
    for (id, text) in [("fe-1", "I want to talk to a human"), ("fe-2", "Where is my order #1234?")] {
        assert!(say(&server, id, text).await["execution"].is_object());
    }
    let built: Value = serde_json::from_str(&cli.ok(&["eval", "--from-executions", "--status", "handed_off"])).unwrap();
    let cases = built["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 1, "only the hand-off: {built}");
    assert_eq!(cases[0]["messages"], serde_json::json!(["I want to talk to a human"]));
    assert_eq!(cases[0]["expect"]["handoff"], true);
    assert_eq!(cases[0]["expect"]["toolCalled"]["name"], "send_message");
    // and it runs as a dataset
    let path = dir.path().join("handoffs.json");
    std::fs::write(&path, built.to_string()).unwrap();
    let args = ["eval", path.to_str().unwrap(), "--agent", "01JD0000SVPP0RT0AGENT00001"];
    let out = cli.ok(&[&args[..], &["--scripted-model", script.to_str().unwrap()]].concat());
    assert!(out.ends_with("1 of 1 cases passed\n"), "{out}");
    assert!(cli.fails(&["eval", "--from-executions", "--status", "gone"]).contains("--status gone"));
    // a later message of a conversation: its case starts from the conversation before it
    for (message, text) in [("m-1", "Where is my order #1234?"), ("m-2", "And when will it arrive?")] {
        assert!(say_in(&server, "c-fe-h", message, text).await["execution"].is_object());
    }
    let built: Value = serde_json::from_str(&cli.ok(&["eval", "--from-executions", "--status", "success"])).unwrap();
    let later = built["cases"].as_array().unwrap().iter().find(|c| c["messages"][0] == "And when will it arrive?");
    let later = later.unwrap_or_else(|| panic!("no case for the later message: {built}"));
    let history = later["history"].as_array().unwrap();
    assert_eq!(history[0], serde_json::json!({ "role": "user", "text": "Where is my order #1234?" }), "{later}");
    assert!(history.last().unwrap()["role"] == "assistant" && history.len() >= 2, "{later}");
    let path = dir.path().join("later.json");
    std::fs::write(&path, serde_json::json!({ "cases": [later] }).to_string()).unwrap();
    let args = ["eval", path.to_str().unwrap(), "--agent", "01JD0000SVPP0RT0AGENT00001"];
    let out = cli.ok(&[&args[..], &["--scripted-model", script.to_str().unwrap()]].concat());
    assert!(out.ends_with("1 of 1 cases passed\n"), "{out}");
}

#[tokio::test]
async fn an_operator_lists_and_decides_approvals_with_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = examples().join("tenant.json");
    let server = Server::start(&dir.path().join("data"), &["--tenant", tenant.to_str().unwrap()]);
    let cli = Cli { key: server.admin.clone(), server: &server };
    // given an agent whose handoff to a person waits for approval, and a turn paused on it
    let http = reqwest::Client::new();
    let agent = serde_json::json!({ "name": "Gated", "systemPrompt": "You hand over.",
        "model": "anthropic.claude-3-haiku-20240307-v1:0", "tools": ["send_message", "handoff_to_human"],
        "approvals": { "handoff_to_human": {} } });
    let created: Value = http
        .post(format!("{}/tenants/acme/agents", server.base))
        .bearer_auth(&server.admin)
        .json(&agent)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["agentId"].as_str().unwrap();
    // the gated agent asked for a person in `conversation`: its turn waits for approval
    let invoke = |conversation: &'static str| {
        let request = http
            .post(format!("{}/tenants/acme/agents/{id}/invoke", server.base))
            .bearer_auth(&server.admin)
            .json(&serde_json::json!({ "conversationId": conversation, "message": "a human please" }));
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let invoked = invoke("c-gated").await;
    assert_eq!(invoked["status"], "awaiting_approval", "{invoked}");
    // the operator sees it waiting, with its arguments
    let listed = cli.ok(&["approvals", "list"]);
    assert!(listed.starts_with("ID") && listed.contains("handoff_to_human") && listed.contains("pending"), "{listed}");
    let approvals: Value = serde_json::from_str(&cli.ok(&["approvals", "list", "-o", "json"])).unwrap();
    let approval = approvals[0]["approvalId"].as_str().unwrap().to_owned();
    let one: Value = serde_json::from_str(&cli.ok(&["approvals", "get", &approval])).unwrap();
    assert_eq!(one["arguments"]["reason"], approvals[0]["arguments"]["reason"]);
    // edited arguments that are not an object, or do not meet the tool's schema, are refused
    assert!(cli.fails(&["approvals", "approve", &approval, "--arguments", "[1]"]).contains("--arguments"));
    assert!(cli.fails(&["approvals", "approve", &approval, "--arguments", "{"]).contains("--arguments"));
    let err = cli.fails(&["approvals", "approve", &approval, "--arguments", r#"{"reason": 5}"#]);
    assert!(err.contains("400") && err.contains("/arguments/reason"), "{err}");
    assert!(cli.fails(&["approvals", "deny", &approval]).contains("--reason"));
    // denied with a reason: said plainly, and the turn resumes
    let denied = cli.ok(&["approvals", "deny", &approval, "--reason", "we answer this one ourselves"]);
    assert_eq!(denied.trim(), format!("denied {approval} (handoff_to_human); the turn resumes"));
    assert!(cli.fails(&["approvals", "get", "01ARZ3NDEKTSV4RRFFQ69G5FAV"]).contains("404"));
    // another gated turn, cancelled: the reason is required, and the answer says what follows
    let invoked = invoke("c-cancel").await;
    let session = invoked["sessionId"].as_str().unwrap();
    assert!(cli.fails(&["sessions", "cancel", session]).contains("--reason"));
    let cancelled = cli.ok(&["sessions", "cancel", session, "--reason", "a person takes it"]);
    assert!(cancelled.starts_with("cancelled approval ") && cancelled.contains("goes to a human"), "{cancelled}");
    let err = cli.fails(&["sessions", "cancel", session, "--reason", "again"]);
    assert!(err.contains("409"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_of_an_mcp_server_are_added_listed_and_refreshed_with_the_cli_and_a_turn_calls_one() {
    use serde_json::json;
    use switchboard_testkit::mcp::{OrdersServer, TOKEN};
    // given a tenant's MCP server built on the official Python SDK, and its token as a secret
    let mut orders = OrdersServer::start();
    let dir = tempfile::tempdir().unwrap();
    let secrets =
        write(dir.path(), "secrets.json", &json!({ "acme": { "mcp": format!("Bearer {TOKEN}") } }).to_string());
    let rules = json!({ "rules": [
        { "when": { "afterTool": "orders_lookup_order" }, "then": { "text": "Your order has shipped." } },
        { "then": { "toolCalls": [{ "name": "orders_lookup_order", "input": { "order": { "id": "4321" } } }] } }
    ] });
    let script = write(dir.path(), "script.json", &rules.to_string());
    let data = dir.path().join("data");
    let server =
        Server::start_with_script(&data, Path::new(&script), &["--secrets-file", &secrets, "--allow-private-webhooks"]);
    let cli = Cli { key: create_tenant(&data, "acme"), server: &server };

    // when one of its tools is added
    let unknown = cli.fails(&["tools", "mcp", "add", &orders.url, "--secret-ref", "mcp", "--allow", "nope"]);
    assert!(unknown.contains("no tool 'nope' (it has lookup_order, cancel_order, slow_lookup)"), "{unknown}");
    let no_token = cli.fails(&["tools", "mcp", "add", &orders.url]);
    assert!(no_token.contains("refused the credential"), "{no_token}");
    let add =
        ["tools", "mcp", "add", &orders.url, "--secret-ref", "mcp", "--allow", "lookup_order", "--prefix", "orders_"];
    let added: Value = serde_json::from_str(&cli.ok(&[&add[..], &["-o", "json"]].concat())).unwrap();
    let tool_id = added[0]["toolId"].as_str().unwrap().to_owned();
    assert_eq!(
        (added[0]["name"].as_str(), added[0]["handler"]["tool"].as_str()),
        (Some("orders_lookup_order"), Some("lookup_order"))
    );
    let listed = cli.ok(&["tools", "mcp", "list"]);
    assert!(
        listed.contains(&orders.url) && listed.contains(&tool_id) && listed.contains("orders_lookup_order"),
        "{listed}"
    );

    // then an agent's turn calls it on the server
    let agent = write(
        dir.path(),
        "agent.json",
        &json!({ "name": "Orders", "systemPrompt": "You look orders up.",
        "model": "m", "tools": ["send_message", tool_id] })
        .to_string(),
    );
    let agent_id = last_word(&cli.ok(&["agents", "create", "-f", &agent]));
    let trigger = write(
        dir.path(),
        "trigger.json",
        &json!({ "name": "all", "agentId": agent_id, "eventType": "message.new" }).to_string(),
    );
    cli.ok(&["triggers", "create", "-f", &trigger]);
    let answered = say(&server, "mcp-1", "Where is order 4321?").await;
    let call = &answered["execution"]["toolCalls"][0];
    assert_eq!(call["output"], json!({ "status": "shipped", "order": "4321" }), "{answered}");
    assert_eq!(orders.next_call()["arguments"], json!({ "order": { "id": "4321" } }));
    assert_eq!(cli.ok(&["tools", "mcp", "refresh"]).trim(), format!("{tool_id} orders_lookup_order: unchanged"));

    // and against a deployment whose API lists no server, the CLI lists it from here
    let stand_in = answering_501(&server, &["/discover", "/refresh"]).await;
    let here = |args: &[&str], env: &[(&str, String)]| {
        let mut cmd = bin();
        cmd.args(args).args(["--endpoint", &stand_in, "--tenant", "acme"]).env("SWITCHBOARD_API_KEY", &cli.key);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let add = ["tools", "mcp", "add", &orders.url, "--secret-ref", "mcp", "--allow", "cancel_order"];
    let refused = here(&add, &[]);
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("--credential-env"));
    let token = [("MCP_TOKEN", format!("Bearer {TOKEN}"))];
    let added = here(&[&add[..], &["--credential-env", "MCP_TOKEN", "--allow-private"]].concat(), &token);
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    assert!(String::from_utf8_lossy(&added.stderr).contains("from here"));
    assert!(stdout(&added).contains("cancel_order (cancel_order on"), "{}", stdout(&added));
    let refreshed =
        here(&["tools", "mcp", "refresh", &tool_id, "--credential-env", "MCP_TOKEN", "--allow-private"], &token);
    assert_eq!(
        stdout(&refreshed).trim(),
        format!("{tool_id} orders_lookup_order: unchanged"),
        "{}",
        String::from_utf8_lossy(&refreshed.stderr)
    );
}
