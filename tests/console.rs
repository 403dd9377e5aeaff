//! The operator console in a real browser: Debian's headless Chromium driven over WebDriver
//! (chromedriver, started on a free loopback port and stopped by PID) against `switchboard serve`
//! with the example tenant. An operator signs in with a tenant key; a customer asks for a person
//! and the row appears in the inbox live; the operator claims, replies and hands back with a
//! note; the agent answers the next message with the note in its prompt and the human's reply in
//! its history; the execution viewer shows a model call and a tool call; an order lookup that
//! waits for approval is approved from the inbox with an edited order number. A builder makes an
//! agent and a trigger in the forms (a refusal shown at its field), tests the trigger, edits the
//! prompt and rolls it back (the next conversations answered by each prompt in turn), and reads
//! the session monitor and runs a manual trigger, every control labelled and reachable by keyboard;
//! and imports a tool from an MCP server built on the official Python SDK, its schema shown,
//! and refreshes it. Screenshots of each screen
//! are written to `target/console-screenshots/` (look at them after a change to the page).
//!
//! `scripts/test.sh` installs chromium and chromium-driver; only when it cannot does it set
//! `SWITCHBOARD_SKIP_BROWSER=1`, and then this test says loudly that it was skipped. Without that
//! variable a missing browser fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use base64::Engine as _;
use common::{Api, Server, examples};
use serde_json::{Value, json};

/// Where each step's screenshot lands (made if missing).
fn screenshots() -> PathBuf {
    let shots = common::workspace_root().join("target/console-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    shots
}

/// The W3C WebDriver element reference key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// chromedriver on a free loopback port; killed by its own PID when dropped.
struct Driver {
    child: Child,
    base: String,
}

impl Driver {
    fn start() -> Option<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut child = match Command::new("chromedriver")
            .args([format!("--port={port}"), "--allowed-ips=127.0.0.1".into()])
            // Its own process group, with the browsers it starts: dropped, the whole group goes,
            // even when a failed test never closed its browser.
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                assert!(
                    std::env::var("SWITCHBOARD_SKIP_BROWSER").is_ok_and(|v| v == "1"),
                    "chromedriver cannot be started ({e}); scripts/test.sh installs chromium and chromium-driver"
                );
                return None;
            }
        };
        // It says when it listens; reading that line is the wait.
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while out.read_line(&mut line).unwrap() > 0 && !line.contains("started successfully") {
            line.clear();
        }
        assert!(line.contains("started successfully"), "chromedriver did not start");
        Some(Self { child, base: format!("http://127.0.0.1:{port}") })
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The group chromedriver leads (its pid): chromedriver and every browser it started.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.wait();
    }
}

/// One browser session.
struct Browser {
    http: reqwest::Client,
    session: String,
    shots: PathBuf,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn open(driver: &Driver, shots: &Path) -> Self {
        let profile = tempfile::tempdir().unwrap();
        let http = reqwest::Client::new();
        let caps = json!({ "capabilities": { "alwaysMatch": { "browserName": "chrome",
            "goog:chromeOptions": { "binary": "/usr/bin/chromium", "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-breakpad",
                "--disable-crash-reporter",
                "--window-size=1280,900", format!("--user-data-dir={}", profile.path().display())
            ] } } } });
        let res: Value =
            http.post(format!("{}/session", driver.base)).json(&caps).send().await.unwrap().json().await.unwrap();
        let session = res["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {res}")).to_owned();
        let b = Self {
            http,
            session: format!("{}/session/{session}", driver.base),
            shots: shots.into(),
            _profile: profile,
        };
        // Finding an element waits up to 10 s for it to appear: the wait for the page's work.
        b.cmd("POST", "/timeouts", json!({ "implicit": 10_000, "script": 15_000 })).await;
        b
    }

    async fn cmd(&self, method: &str, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.session);
        let req = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url).json(&body),
        };
        let res: Value = req.send().await.unwrap().json().await.unwrap();
        if let Some(e) = res["value"].get("error") {
            panic!("webdriver {method} {path}: {e}: {}", res["value"]["message"]);
        }
        res["value"].clone()
    }

    async fn go(&self, url: &str) {
        self.cmd("POST", "/url", json!({ "url": url })).await;
    }

    async fn find(&self, css: &str) -> String {
        let v = self.cmd("POST", "/element", json!({ "using": "css selector", "value": css })).await;
        v[ELEMENT].as_str().unwrap_or_else(|| panic!("find {css}: {v}")).to_owned()
    }

    async fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.cmd("POST", &format!("/element/{e}/clear"), json!({})).await;
        self.cmd("POST", &format!("/element/{e}/value"), json!({ "text": text })).await;
    }

    async fn click(&self, css: &str) {
        let e = self.find(css).await;
        self.cmd("POST", &format!("/element/{e}/click"), json!({})).await;
    }

    async fn text(&self, css: &str) -> String {
        let e = self.find(css).await;
        self.cmd("GET", &format!("/element/{e}/text"), json!({})).await.as_str().unwrap().to_owned()
    }

    /// Waits (in the page, up to 10 s) until the element's text contains `needle`; its text.
    async fn wait_text(&self, css: &str, needle: &str) -> String {
        let script = "const [css, needle, done] = arguments; const until = Date.now() + 10000;
            const look = () => { const e = document.querySelector(css); const t = e ? e.innerText : '';
              if (t.includes(needle) || Date.now() > until) done(t); else requestAnimationFrame(look); };
            look();";
        let v = self.cmd("POST", "/execute/async", json!({ "script": script, "args": [css, needle] })).await;
        let text = v.as_str().unwrap_or_default().to_owned();
        assert!(text.contains(needle), "{css} never said {needle:?}: {text:?}");
        text
    }

    async fn js(&self, script: &str) -> Value {
        self.cmd("POST", "/execute/sync", json!({ "script": script, "args": [] })).await
    }

    async fn shot(&self, name: &str) {
        let png = self.cmd("GET", "/screenshot", json!({})).await;
        let bytes = base64::engine::general_purpose::STANDARD.decode(png.as_str().unwrap()).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "a PNG");
        std::fs::write(self.shots.join(format!("{name}.png")), bytes).unwrap();
    }

    /// A screenshot that `docs/` shows, written where the docs link it: each run of this test
    /// replaces them, so they show the page as it is.
    async fn shot_for_docs(&self, docs: &Path, name: &str) {
        self.shot(name).await;
        std::fs::copy(self.shots.join(format!("{name}.png")), docs.join(format!("{name}.png"))).unwrap();
    }

    /// Opens the console at `base` and signs in to the tenant `acme` with `key` (the caller waits
    /// for the page it expects).
    async fn sign_in(&self, base: &str, key: &str) {
        self.go(&format!("{base}/console/")).await;
        self.type_into("#tenant", "acme").await;
        self.type_into("#key", key).await;
        self.click("#sign-in button[type=submit]").await;
    }

    async fn close(&self) {
        self.cmd("DELETE", "", json!({})).await;
    }
}

fn event(id: &str, conversation: &str, text: &str) -> Value {
    json!({ "version": "0", "id": id, "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": "acme", "conversationId": conversation, "messageId": format!("m-{id}"),
                        "channel": { "platform": "webchat" }, "conversation": { "status": "open" },
                        "message": { "direction": "inbound", "text": text } } })
}

/// The example script with one rule first: an agent whose prompt carries the operator's note
/// says so.
fn script_with_note_rule(dir: &Path) -> PathBuf {
    let mut script: Value =
        serde_json::from_str(&std::fs::read_to_string(examples().join("script.json")).unwrap()).unwrap();
    let rules = script["rules"].as_array_mut().unwrap();
    rules.insert(
        0,
        json!({ "when": { "systemContains": "parcel is waiting at the depot" },
                            "then": { "text": "Welcome back! My colleague told me your parcel is at the depot." } }),
    );
    let path = dir.join("script.json");
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

#[tokio::test]
async fn an_operator_takes_over_replies_and_hands_back_in_a_real_browser() {
    let Some(driver) = Driver::start() else {
        eprintln!("!!! SKIPPED: the console's browser test (SWITCHBOARD_SKIP_BROWSER=1: no chromium here)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let script = script_with_note_rule(dir.path());
    // As docs/running.md runs it: the example order system beside the server, which signs its
    // calls with the example's secret.
    let receiver = OrderSystem::start();
    let tenant = receiver.tenant(dir.path());
    let secrets = examples().join("secrets.json");
    let server = Server::start_with_script(
        dir.path(),
        &script,
        &[
            "--tenant",
            tenant.to_str().unwrap(),
            "--secrets-file",
            secrets.to_str().unwrap(),
            "--allow-private-webhooks",
        ],
    );
    let admin = Api::new(&server, &server.admin);
    // Alice's own key: the console names her from it, and so do the records of what she does
    let issued = admin.post("/tenants/acme/keys", json!({ "principal": "Alice", "role": "operator" })).await;
    assert_eq!(issued.status, 201, "{:?}", issued.body);
    let key = issued.body["key"].as_str().unwrap().to_owned();
    let api = Api::new(&server, &key);
    let shots = screenshots();
    let b = Browser::open(&driver, &shots).await;
    let docs = common::workspace_root().join("docs/console");

    // Sign in with the tenant's key.
    b.go(&format!("{}/console/", server.base)).await;
    b.find("#sign-in").await;
    b.shot("1-sign-in").await;
    b.type_into("#tenant", "acme").await;
    b.type_into("#key", &key).await;
    b.click("#sign-in button[type=submit]").await;
    b.wait_text("#inbox", "Nobody is waiting").await;
    assert_eq!(b.text("#who").await, "Alice (operator) · acme", "who is signed in, from the key");
    assert_eq!(b.js("return sessionStorage.length").await, 1, "the key is kept for the tab only");
    assert_eq!(b.js("return localStorage.length").await, 0);

    // A customer asks about an order (a model call and a webhook tool call), then for a person:
    // the row appears without a reload.
    let r = api.post("/events?wait=30", event("e-1", "c-42", "Where is my order #1234?")).await;
    let first_execution = r.body["execution"]["executionId"].as_str().unwrap().to_owned();
    b.js("window.__same_page = true").await;
    let r = api.post("/events?wait=30", event("e-2", "c-42", "Can I talk to a human please?")).await;
    assert_eq!(r.body["execution"]["status"], "handed_off", "{}", r.body);
    b.find("#inbox tr[data-session]").await;
    assert_eq!(b.js("return window.__same_page === true").await, true, "the row came live, not by a reload");
    let row = b.text("#inbox tbody tr").await;
    assert!(
        row.contains("high") && row.contains("c-42") && row.contains("Customer asked to talk to a person"),
        "{row}"
    );
    assert!(row.contains("unclaimed") && row.contains("webchat"), "the channel: {row}");
    b.shot("2-inbox").await;
    b.shot_for_docs(&docs, "inbox").await;

    // Open it: the transcript marks who wrote what; claim, then reply as a human.
    b.click("#inbox tbody tr a").await;
    b.find("#messages li.customer").await;
    b.wait_text("#messages", "connecting you with a teammate").await;
    let agent = b.text("#session-agent").await;
    assert!(agent.starts_with("Front-line support 01JD0000SVPP0RT0AGENT00001"), "the agent by name: {agent}");
    b.click("#claim").await;
    b.wait_text("main", "Claimed by Alice").await;
    let session_id = b.js("return location.hash.split('/')[2]").await.as_str().unwrap().to_owned();
    b.type_into("#reply-text", "Hi, Alice here. Your parcel is waiting at the depot.").await;
    b.click("#reply button[type=submit]").await;
    b.wait_text("#messages", "Alice here").await;
    assert!(b.text("#messages li.human").await.contains("Alice here"), "marked as the human's");
    b.shot("3-conversation").await;
    b.shot_for_docs(&docs, "conversation").await;
    let claimed = api.get(&format!("/tenants/acme/sessions/{session_id}")).await;
    assert_eq!(claimed.body["claim"]["operator"], "Alice");

    // Hand back to the agent with a note; the next customer message is the agent's again.
    b.type_into("#hand-back-note", "The parcel is waiting at the depot; the customer knows.").await;
    b.click("#hand-back button[type=submit]").await;
    b.wait_text("#status", "Handed back").await;
    let r = api.post("/events?wait=30", event("e-3", "c-42", "Thanks, and can I pick it up today?")).await;
    let answer = &r.body["execution"];
    assert_eq!(answer["status"], "success", "{answer}");
    assert_eq!(
        answer["actions"][0]["text"], "Welcome back! My colleague told me your parcel is at the depot.",
        "the handback note is in the agent's prompt"
    );
    let next = api.get(&format!("/tenants/acme/sessions/{}", answer["sessionId"].as_str().unwrap())).await;
    let history = next.body["transcript"].to_string();
    assert!(
        history.contains("[human operator] Hi, Alice here. Your parcel is waiting at the depot."),
        "the human's reply is in the agent's history: {history}"
    );

    // The first execution as a timeline: its model calls and the order-status tool call.
    b.type_into("#execution-id", &first_execution).await;
    b.click("#find-execution button").await;
    let timeline = b.wait_text("#timeline", "order_status").await;
    assert!(timeline.contains("Model call"), "{timeline}");
    b.find("#timeline li.tool-call").await;
    let calls = b.js("return [...document.querySelectorAll('#timeline li.tool-call')].map(li => li.innerText)").await;
    let tool_call = calls.as_array().unwrap().iter().filter_map(Value::as_str).find(|t| t.contains("order_status"));
    let tool_call = tool_call.expect("an order_status tool call");
    assert!(tool_call.contains("HTTP 200, 1 attempt"), "the order system answered: {tool_call}");
    assert!(b.text("#execution-agent").await.starts_with("Front-line support "), "the agent by name");
    b.shot("4-execution").await;
    b.shot_for_docs(&docs, "execution").await;

    // What the first model call was sent and answered: the prompt, opened, with its messages
    // and tools, and the answer (the order-status tool call), each with its tokens.
    let answer = b.text("#answer-own-0").await;
    assert!(answer.contains("Answer ·") && answer.contains("order_status"), "{answer}");
    b.click("#prompt-own-0 > summary").await;
    b.click("#prompt-own-0 ol.prompt-messages li:last-child summary").await;
    let prompt = b.wait_text("#prompt-own-0", "Where is my order #1234?").await;
    assert!(prompt.contains("You are Acme Outdoor's front-line support agent"), "the system prompt: {prompt}");
    assert!(prompt.contains("Tools ·") && prompt.contains("order_status") && prompt.contains("tokens"), "{prompt}");
    // copied as JSON: what the page puts on the clipboard (or, without one, in the box to copy)
    b.click("#copy-request-own-0").await;
    let copied = b.js("return document.getElementById('request-json-own-0').value").await;
    let copied: Value = serde_json::from_str(copied.as_str().unwrap()).unwrap();
    assert!(copied["system"].as_str().unwrap().starts_with("You are Acme Outdoor's front-line support agent"));
    assert_eq!(copied["messages"][0]["content"][0]["text"], "Where is my order #1234?");
    assert!(copied["tools"].as_array().unwrap().iter().any(|t| t["name"] == "order_status"), "{copied}");
    b.js("document.getElementById('prompt-own-0').scrollIntoView()").await;
    b.shot("5-execution-prompt").await;
    b.shot_for_docs(&docs, "execution-prompt").await;
    // every control of the view is reachable by keyboard: summaries and the copy button take focus
    let focusable = b
        .js("return [...document.querySelectorAll('#prompt-own-0 summary, #copy-request-own-0')].every(e => { e.focus(); return document.activeElement === e; })")
        .await;
    assert_eq!(focusable, true);

    b.click("a[href='#/overview']").await;
    b.find("#waiting-count").await;
    assert_eq!(b.text("#waiting-count").await, "0", "nobody waits after the handback");
    // the last 24 hours' executions, as the activity report counts them: the agents' turns and
    // the operator's claim and reply (the handback is a handoff)
    let activity = api.get("/tenants/acme/activity").await.body;
    let total = activity["total"].as_u64().unwrap();
    assert!(total >= 5 && activity["executions"]["operator"].as_u64().unwrap() >= 2, "{activity}");
    assert_eq!(b.text("#executions-24h").await, total.to_string());
    assert_eq!(b.text("#failing-24h").await, "0");
    let operator = activity["executions"]["operator"].as_u64().unwrap();
    assert_eq!(b.text("#messages-24h").await, (total - operator).to_string(), "the customer's messages only");
    assert_eq!((activity["deadLetters"].as_u64(), b.text("#dead-letters").await.as_str()), (Some(0), "0"));
    assert_eq!(b.js("return document.querySelectorAll('.bars .bar').length").await, json!(24));
    let table = b.text("#activity").await;
    assert!(table.contains("operator") && table.contains("success"), "{table}");
    b.shot("5-overview").await;
    b.shot_for_docs(&docs, "overview").await;

    // Every control is reachable by keyboard and labelled.
    b.go(&format!("{}/console/#/session/{session_id}", server.base)).await;
    b.find("#executions li").await;
    let unlabelled = b
        .js("return [...document.querySelectorAll('input, select, textarea')]
                 .filter((e) => !e.labels || e.labels.length === 0).map((e) => e.id || e.name)")
        .await;
    assert_eq!(unlabelled, json!([]), "every field has a label");
    let unreachable = b
        .js("return [...document.querySelectorAll('a, button, input, select, textarea')]
                 .filter((e) => e.tabIndex < 0 || e.disabled).map((e) => e.outerHTML.slice(0, 60))")
        .await;
    assert_eq!(unreachable, json!([]), "every control takes keyboard focus");
    b.close().await;
}

#[tokio::test]
async fn an_operator_approves_a_tool_call_with_edited_arguments_in_a_real_browser() {
    let Some(driver) = Driver::start() else {
        eprintln!("!!! SKIPPED: the console's approval test (SWITCHBOARD_SKIP_BROWSER=1: no chromium here)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // the example tenant, whose order lookups wait for a person's approval
    let receiver = OrderSystem::start();
    let tenant = receiver.tenant(dir.path());
    let mut bundle: Value = serde_json::from_str(&std::fs::read_to_string(&tenant).unwrap()).unwrap();
    bundle["tools"][0]["approval"] = json!({ "timeoutSeconds": 3600 });
    std::fs::write(&tenant, bundle.to_string()).unwrap();
    let secrets = examples().join("secrets.json");
    let args =
        ["--tenant", tenant.to_str().unwrap(), "--secrets-file", secrets.to_str().unwrap(), "--allow-private-webhooks"];
    let server = Server::start(dir.path(), &args);
    let admin = Api::new(&server, &server.admin);
    let issued = admin.post("/tenants/acme/keys", json!({ "principal": "Alice", "role": "operator" })).await;
    let key = issued.body["key"].as_str().unwrap().to_owned();
    let api = Api::new(&server, &key);
    let shots = screenshots();
    let b = Browser::open(&driver, &shots).await;
    b.sign_in(&server.base, &key).await;
    b.wait_text("#inbox", "Nobody is waiting").await;

    // A customer asks about an order: the lookup waits, and shows up in the inbox live
    let r = api.post("/events?wait=30", event("e-1", "c-7", "Where is my order #1234?")).await;
    assert_eq!(r.body["execution"]["status"], "awaiting_approval", "{}", r.body);
    let execution = r.body["execution"]["executionId"].as_str().unwrap().to_owned();
    let item = b.wait_text("#approvals", "order_status").await;
    assert!(item.contains("c-7") && item.contains("Front-line support"), "{item}");
    let shown = b.js("return document.querySelector('#approvals textarea').value").await;
    let shown: Value = serde_json::from_str(shown.as_str().unwrap()).unwrap();
    assert_eq!(shown, json!({ "orderId": "1234" }));
    // arguments the tool's schema refuses are named, and nothing is decided
    b.type_into("#approvals textarea", r#"{"orderId": "not a number"}"#).await;
    b.click("#approvals form.approve button").await;
    b.wait_text("#status", "/arguments/orderId").await;
    assert_eq!(api.get("/tenants/acme/approvals").await.body["approvals"][0]["status"], "pending");
    // corrected to the customer's other order and approved: the turn resumes with it
    b.type_into("#approvals textarea", r#"{"orderId": "5678"}"#).await;
    let unlabelled = b
        .js("return [...document.querySelectorAll('#approvals input, #approvals textarea')]
                 .filter((e) => !e.labels || e.labels.length === 0).map((e) => e.id)")
        .await;
    assert_eq!(unlabelled, json!([]), "every field of an approval has a label");
    b.shot("6-approval").await;
    b.shot_for_docs(&common::workspace_root().join("docs/console"), "approval").await;
    b.click("#approvals form.approve button").await;
    b.wait_text("#status", "Approved order_status").await;
    // the resumed turn commits with approval.resolved, which the page hears and drops the item
    let script = "const done = arguments[0]; const until = Date.now() + 10000;
        const look = () => { const gone = !document.querySelector('#approvals');
          if (gone || Date.now() > until) done(gone); else requestAnimationFrame(look); };
        look();";
    let gone = b.cmd("POST", "/execute/async", json!({ "script": script, "args": [] })).await;
    assert_eq!(gone, json!(true), "the approval left the inbox once decided and resumed");
    let record = api.get(&format!("/tenants/acme/executions/{execution}")).await.body;
    assert_eq!(record["status"], "success", "{record}");
    let calls = record["toolCalls"].as_array().unwrap();
    let lookup = calls.iter().find(|c| c["name"] == "order_status").unwrap_or_else(|| panic!("{record}"));
    assert_eq!(lookup["input"], json!({ "orderId": "5678" }), "the order system was asked for the edited order");
    assert_eq!(
        (lookup["webhook"]["outcome"].as_str(), lookup["output"]["orderId"].as_str()),
        (Some("ok"), Some("5678")),
        "{record}"
    );
    assert_eq!(record["approvals"][0]["decidedBy"], "Alice");
    assert!(record["actions"][0]["text"].as_str().is_some_and(|t| !t.is_empty()), "the agent answered: {record}");

    // Another customer's lookup waits; the operator would rather take the conversation: the
    // turn is cancelled from the inbox, the lookup never runs, and the conversation joins the
    // list for a person with the reason given
    let r = api.post("/events?wait=30", event("e-2", "c-8", "Where is my order #1234?")).await;
    assert_eq!(r.body["execution"]["status"], "awaiting_approval", "{}", r.body);
    let execution = r.body["execution"]["executionId"].as_str().unwrap().to_owned();
    b.wait_text("#approvals", "c-8").await;
    b.type_into("#approvals input", "I will call the customer").await;
    b.click("#approvals button.cancel").await;
    b.wait_text("#status", "Cancelled the turn").await;
    let row = b.wait_text("#inbox", "turn cancelled by Alice: I will call the customer").await;
    assert!(row.contains("c-8"), "{row}");
    b.shot("7-turn-cancelled").await;
    b.shot_for_docs(&common::workspace_root().join("docs/console"), "turn-cancelled").await;
    let gone = b.cmd("POST", "/execute/async", json!({ "script": script, "args": [] })).await;
    assert_eq!(gone, json!(true), "the cancelled approval left the inbox");
    let record = api.get(&format!("/tenants/acme/executions/{execution}")).await.body;
    assert_eq!((&record["status"], &record["approvals"][0]["status"]), (&json!("handed_off"), &json!("cancelled")));
    assert!(record["toolCalls"].as_array().unwrap().iter().all(|c| c["webhook"].is_null()), "no lookup ran: {record}");
    b.close().await;
}

/// The builder's pages against a scripted model (a test double) that answers by the prompt it
/// sees.
fn script_by_prompt(dir: &Path) -> PathBuf {
    let rules = json!({ "description": "console builder test double", "rules": [
        { "when": { "systemContains": "Prompt one" }, "then": { "text": "answered by prompt one" } },
        { "when": { "systemContains": "Prompt two" }, "then": { "text": "answered by prompt two" } }
    ] });
    let path = dir.join("script.json");
    std::fs::write(&path, rules.to_string()).unwrap();
    path
}

/// Every field of the page has a label, and every control takes keyboard focus (Tab reaches it).
async fn every_control_is_labelled_and_reachable(b: &Browser, page: &str) {
    let unlabelled = b
        .js("return [...document.querySelectorAll('main input, main select, main textarea')]
                 .filter((e) => !e.labels || e.labels.length === 0).map((e) => e.id || e.name)")
        .await;
    assert_eq!(unlabelled, json!([]), "{page}: every field has a label");
    let unreachable = b
        .js("return [...document.querySelectorAll('main a, main button, main input, main select, main textarea, main summary')]
                 .filter((e) => !e.closest('[hidden]'))
                 .filter((e) => { e.focus(); return document.activeElement !== e; }).map((e) => e.outerHTML.slice(0, 80))")
        .await;
    assert_eq!(unreachable, json!([]), "{page}: every control takes keyboard focus");
}

#[tokio::test]
async fn a_builder_makes_an_agent_and_a_trigger_tests_edits_and_rolls_back_in_a_real_browser() {
    let Some(driver) = Driver::start() else {
        eprintln!("!!! SKIPPED: the console's builder test (SWITCHBOARD_SKIP_BROWSER=1: no chromium here)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let script = script_by_prompt(dir.path());
    let server = Server::start_with_script(dir.path(), &script, &[]);
    let admin = Api::new(&server, &server.admin);
    assert_eq!(admin.post("/tenants", json!({ "tenantId": "acme", "name": "Acme" })).await.status, 201);
    // Bea builds; messages come in through the admin key (a builder does not operate)
    let issued = admin.post("/tenants/acme/keys", json!({ "principal": "Bea", "role": "builder" })).await;
    assert_eq!(issued.status, 201, "{:?}", issued.body);
    let key = issued.body["key"].as_str().unwrap().to_owned();
    let api = Api::new(&server, &key);
    let shots = screenshots();
    let docs = common::workspace_root().join("docs/console");
    let b = Browser::open(&driver, &shots).await;
    b.sign_in(&server.base, &key).await;
    b.wait_text("#who", "Bea (builder)").await;

    // An agent made in the form: a bad temperature is named next to its field, nothing is written
    b.click("a[href='#/agents']").await;
    b.wait_text("#agents-list", "No agents yet").await;
    b.click("#new-agent").await;
    b.type_into("#agent-name", "Desk").await;
    b.type_into("#agent-prompt", "Prompt one. You help customers.").await;
    b.type_into("#agent-model", "scripted:desk").await;
    b.type_into("#agent-temperature", "7").await;
    // messages that come close together: a newer one interrupts a turn that has not replied
    let modes = b.js("return [...document.getElementById('agent-bursts').options].map((o) => o.value)").await;
    assert_eq!(modes, json!(["enqueue", "coalesce", "interrupt"]));
    b.js("const s = document.getElementById('agent-bursts'); s.value = 'interrupt'; s.dispatchEvent(new Event('change'))")
        .await;
    b.click("#agent-form button[type=submit]").await;
    let error = b.wait_text("[data-pointer='/modelConfig/temperature'] .field-error", "temperature").await;
    assert!(error.contains("/modelConfig/temperature"), "{error}");
    assert_eq!(b.js("return document.getElementById('agent-temperature').getAttribute('aria-invalid')").await, "true");
    assert_eq!(b.js("return document.activeElement.id").await, "agent-temperature", "the field at fault takes focus");
    b.shot("8-agent-error").await;
    assert_eq!(api.get("/tenants/acme/agents").await.body["items"], json!([]), "nothing written");
    b.type_into("#agent-temperature", "0.2").await;
    b.click("#agent-form button[type=submit]").await;
    b.wait_text("#status", "Saved agent Desk (version 1)").await;
    b.wait_text("h1", "Agent Desk").await;
    let agents = api.get("/tenants/acme/agents").await.body;
    let agent = &agents["items"][0];
    assert_eq!(
        (&agent["systemPrompt"], &agent["modelConfig"]["temperature"]),
        (&json!("Prompt one. You help customers."), &json!(0.2))
    );
    assert_eq!(agent["tools"], json!(["send_message"]), "the default tool, checked in the form");
    assert_eq!(agent["bursts"], json!({ "mode": "interrupt", "windowSeconds": 2, "maxMessages": 10 }));
    let agent_id = agent["agentId"].as_str().unwrap().to_owned();
    every_control_is_labelled_and_reachable(&b, "agent").await;

    // A trigger made with the condition builder: any message that mentions an order, or is on sms
    b.click("a[href='#/triggers']").await;
    b.click("#new-trigger").await;
    b.type_into("#trigger-name", "Orders").await;
    let leaf = "#trigger-form ol.root > li.group > ol.members > li.leaf";
    b.js(&format!("document.querySelector('{leaf} input[list]').value = 'message.text'")).await;
    b.type_into(&format!("{leaf} .field:nth-child(3) input"), "order").await;
    let add = b.js("return document.querySelector('#trigger-form ol.root > li.group > button.secondary').id").await;
    b.click(&format!("#{}", add.as_str().unwrap())).await;
    let second = "#trigger-form ol.root > li.group > ol.members > li.leaf:nth-child(2)";
    b.type_into(&format!("{second} input[list]"), "channel.platform").await;
    b.js(&format!(
        "const s = document.querySelector('{second} select'); s.value = 'eq'; s.dispatchEvent(new Event('change'))"
    ))
    .await;
    b.type_into(&format!("{second} .field:nth-child(3) input"), "sms").await;
    b.js("const s = document.querySelector('#trigger-form ol.root > li.group select'); s.value = 'any'").await;
    // a pattern that does not compile is refused at that condition's value; nothing is written
    b.js(&format!("const s = document.querySelector('{second} select'); s.value = 'matches'")).await;
    b.type_into(&format!("{second} .field:nth-child(3) input"), "(sms").await;
    b.click("#trigger-form button[type=submit]").await;
    let refused = b.wait_text(&format!("{second} .field:nth-child(3) .field-error"), "/conditions/any/1/value").await;
    assert!(!refused.is_empty(), "{refused}");
    assert_eq!(api.get("/tenants/acme/triggers").await.body["items"], json!([]), "nothing written");
    b.js(&format!("const s = document.querySelector('{second} select'); s.value = 'eq'")).await;
    b.type_into(&format!("{second} .field:nth-child(3) input"), "sms").await;
    b.click("#trigger-form button[type=submit]").await;
    b.wait_text("#status", "Saved trigger Orders (version 1)").await;
    let triggers = api.get("/tenants/acme/triggers").await.body;
    let trigger = &triggers["items"][0];
    assert_eq!((&trigger["agentId"], &trigger["eventType"]), (&json!(agent_id), &json!("message.new")));
    assert_eq!(
        trigger["conditions"],
        json!({ "any": [
            { "field": "message.text", "operator": "contains", "value": "order", "caseInsensitive": true },
            { "field": "channel.platform", "operator": "eq", "value": "sms" } ] }),
        "the builder wrote what was drawn"
    );
    // tested beside the form: a message about an order matches, one about the weather does not
    b.wait_text("h1", "Trigger Orders").await;
    b.type_into("#tester-message", "Where is my ORDER?").await;
    b.click("#tester button[type=submit]").await;
    let verdict = b.wait_text("#tester-verdict", "would answer").await;
    assert!(verdict.contains(&agent_id), "{verdict}");
    let explained = b.text("#tester-triggers").await;
    assert!(explained.contains("✓ message.text contains \"order\": is \"Where is my ORDER?\""), "{explained}");
    b.shot("9-trigger").await;
    b.shot_for_docs(&docs, "trigger").await;
    b.type_into("#tester-message", "Nice weather").await;
    b.click("#tester button[type=submit]").await;
    b.wait_text("#tester-verdict", "No trigger would answer").await;
    every_control_is_labelled_and_reachable(&b, "trigger").await;

    // a customer asks: the new agent answers by its prompt
    let answered = |id: &'static str, conversation: &'static str| {
        let admin = &admin;
        async move {
            let r = admin.post("/events?wait=30", event(id, conversation, "Where is my order?")).await;
            assert_eq!(r.body["execution"]["status"], "success", "{}", r.body);
            let execution = &r.body["execution"];
            let text = execution["actions"][0]["text"].as_str().unwrap().to_owned();
            (text, execution["sessionId"].as_str().unwrap().to_owned())
        }
    };
    assert_eq!(answered("e-1", "c-1").await.0, "answered by prompt one");

    // the prompt edited in the form: the next conversation gets the new one
    b.go(&format!("{}/console/#/agent/{agent_id}", server.base)).await;
    b.wait_text("h1", "Agent Desk").await;
    b.type_into("#agent-prompt", "Prompt two. You help customers briefly.").await;
    b.click("#agent-form button[type=submit]").await;
    b.wait_text("#status", "(version 2)").await;
    assert_eq!(answered("e-2", "c-2").await.0, "answered by prompt two");
    // compared with version 1 and rolled back to it: the next conversation has the old prompt again
    b.wait_text("#versions", "Bea").await;
    b.click("#diff-1").await;
    let diff = b.wait_text("#version-diff", "/systemPrompt").await;
    assert!(diff.contains("Prompt one.") && diff.contains("Prompt two."), "{diff}");
    b.js("window.scrollTo(0, 0)").await;
    b.shot("10-agent-versions").await;
    b.shot_for_docs(&docs, "agent").await;
    b.click("#rollback-1").await;
    b.wait_text("#status", "Rolled back to version 1: now version 3").await;
    // the page drawn again around version 3
    b.find("#versions tr[data-version='3']").await;
    assert_eq!(
        b.js("return document.getElementById('agent-prompt').value").await,
        "Prompt one. You help customers.",
        "the form shows the rolled-back prompt"
    );
    let (reply, last_session) = answered("e-3", "c-3").await;
    assert_eq!(reply, "answered by prompt one");

    // the session monitor lists every conversation, narrowed by status and agent
    b.click("a[href='#/sessions']").await;
    let monitor = b.wait_text("#sessions", "c-3").await;
    assert!(monitor.contains("c-1") && monitor.contains("c-2") && monitor.contains("Desk"), "{monitor}");
    assert_eq!(b.js("return document.querySelectorAll('#sessions tbody tr[data-session]').length").await, 3);
    // a conversation handed to a person changes its row live (the handoff's event), no reload
    b.js("window.__same_page = true").await;
    let handed = admin
        .post(
            &format!("/tenants/acme/sessions/{last_session}/handoff"),
            json!({ "targetType": "human", "reason": "VIP" }),
        )
        .await;
    assert_eq!(handed.status, 200, "{:?}", handed.body);
    b.wait_text(&format!("#sessions tr[data-session='{last_session}']"), "handed off").await;
    assert_eq!(b.js("return window.__same_page === true").await, true, "the row changed without a reload");
    b.shot("11-sessions").await;
    b.shot_for_docs(&docs, "sessions").await;
    b.js("const s = document.getElementById('filter-status'); s.value = 'completed'; s.dispatchEvent(new Event('change'))")
        .await;
    b.wait_text("#sessions", "No sessions").await;
    b.js(
        "const s = document.getElementById('filter-status'); s.value = 'active'; s.dispatchEvent(new Event('change'))",
    )
    .await;
    b.wait_text("#sessions-count", "2 sessions").await;
    every_control_is_labelled_and_reachable(&b, "sessions").await;

    // a tool written as JSON: a schema the server refuses is named by its pointer
    b.click("a[href='#/tools']").await;
    b.click("#new-tool").await;
    let bad = json!({ "name": "lookup", "description": "Finds an order", "parameters": { "type": "array" },
        "handler": { "type": "webhook", "url": "https://example.com/order" } });
    b.type_into("#tool-json", &bad.to_string()).await;
    b.click("#tool-form button[type=submit]").await;
    let refused = b.wait_text("#tool-form", "/parameters").await;
    assert!(refused.contains("/parameters"), "{refused}");
    b.type_into("#tool-json", "{ not json").await;
    b.click("#tool-form button[type=submit]").await;
    b.wait_text("#tool-form .field-error", "is not JSON").await;
    every_control_is_labelled_and_reachable(&b, "tool").await;

    // a manual trigger is run from its page, and the agent's answer is shown
    let manual = api
        .post("/tenants/acme/triggers", json!({ "name": "By hand", "agentId": agent_id, "eventType": "manual" }))
        .await;
    assert_eq!(manual.status, 201, "{:?}", manual.body);
    b.go(&format!("{}/console/#/trigger/{}", server.base, manual.body["triggerId"].as_str().unwrap())).await;
    b.wait_text("h1", "Trigger By hand").await;
    b.type_into("#run-input", "Where is my order?").await;
    b.type_into("#run-conversation", "c-run").await;
    b.click("#run-form button[type=submit]").await;
    b.wait_text("#run-status", "success").await;
    assert_eq!(b.text("#run-replies").await, "answered by prompt one");
    let ran = admin.get("/tenants/acme/conversations/c-run/sessions").await;
    assert_eq!(ran.body["sessions"].as_array().map(Vec::len), Some(1), "{:?}", ran.body);
    every_control_is_labelled_and_reachable(&b, "manual trigger").await;
    b.close().await;
}

#[tokio::test]
async fn a_support_lead_reads_what_the_agents_achieved_on_the_insights_page_in_a_real_browser() {
    let Some(driver) = Driver::start() else {
        eprintln!("!!! SKIPPED: the console's insights test (SWITCHBOARD_SKIP_BROWSER=1: no chromium here)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tenant = examples().join("tenant.json");
    let server = Server::start(dir.path(), &["--tenant", tenant.to_str().unwrap()]);
    let admin = Api::new(&server, &server.admin);
    // Lena leads the support team: she reads, she does not operate
    let issued = admin.post("/tenants/acme/keys", json!({ "principal": "Lena", "role": "viewer" })).await;
    let key = issued.body["key"].as_str().unwrap().to_owned();
    // a morning of conversations (the example's scripted test double answers): two thank the
    // agent and are ended by it, one asks for a person, one is handed to the billing agent, one
    // only says hello
    let script = [
        ("c-1", vec!["Hi there", "thanks a lot"]),
        ("c-2", vec!["Hello", "thank you!"]),
        ("c-3", vec!["Can I talk to a human?"]),
        ("c-4", vec!["I was charged twice"]),
        ("c-5", vec!["Hello again"]),
    ];
    for (conversation, messages) in &script {
        for (i, text) in messages.iter().enumerate() {
            let id = format!("{conversation}-{i}");
            let r = admin.post("/events?wait=30", event(&id, conversation, text)).await;
            assert_eq!(r.body["outcome"], "enqueued", "{}", r.body);
        }
    }
    let shots = screenshots();
    let b = Browser::open(&driver, &shots).await;
    b.sign_in(&server.base, &key).await;
    b.wait_text("#who", "Lena (viewer)").await;

    // the headline figures: five conversations, two resolved by an agent and one handed to a
    // person (two of three outcomes resolved), new this period
    b.click("a[href='#/insights']").await;
    let conversations = b.wait_text("#insight-conversations", "conversations").await;
    assert!(conversations.starts_with('5') && conversations.contains("new this period"), "{conversations}");
    assert!(b.text("#insight-human").await.starts_with('1'), "one to a person");
    assert!(b.text("#insight-resolution").await.starts_with("66.7 %"), "resolved 2 of 3 outcomes");
    assert!(b.text("#insight-first-response").await.ends_with("no figure before"));
    // the example tenant keeps idle sessions open: none abandoned; the card leads to the closed ones
    assert!(b.text("#insight-abandoned").await.starts_with('0'), "none abandoned");
    let abandoned = b.js("return document.getElementById('insight-abandoned').getAttribute('href')").await;
    assert!(abandoned.as_str().unwrap().contains("status=abandoned"), "{abandoned}");
    let reasons = b.text("#handoff-reasons").await;
    assert!(reasons.contains("the agent asked") && reasons.contains('1'), "{reasons}");
    // the charts: three bars for each of the seven days, today's with the counts; the
    // first-response line's p50 and p90 for today; each chart described for a screen reader
    assert_eq!(b.js("return document.querySelectorAll('#outcomes-chart rect').length").await, json!(21));
    let today_bars = b.js("return [...document.querySelectorAll('#outcomes-chart g.day')].pop().textContent").await;
    let today_bars = today_bars.as_str().unwrap().to_owned();
    assert!(
        today_bars.contains("5 opened")
            && today_bars.contains("2 resolved")
            && today_bars.contains("1 handed to a person"),
        "{today_bars}"
    );
    assert_eq!(b.js("return document.querySelectorAll('#response-chart circle').length").await, json!(2));
    let label = b.js("return document.getElementById('outcomes-chart').getAttribute('aria-label')").await;
    assert!(label.as_str().unwrap().contains("5 opened, 2 resolved, 1 to a person"), "{label}");
    // the table by agent and version: the front-line agent and the billing specialist it handed to
    let table = b.text("#insights-table").await;
    assert!(table.contains("Front-line support · v1") && table.contains("Billing specialist · v1"), "{table}");
    every_control_is_labelled_and_reachable(&b, "the insights page").await;
    // the whole page in one picture for the docs
    b.cmd("POST", "/window/rect", json!({ "width": 1280, "height": 1700 })).await;
    b.js("window.scrollTo(0, 0)").await;
    b.shot("13-insights").await;
    b.shot_for_docs(&common::workspace_root().join("docs/console"), "insights").await;

    // by keyboard: Enter on the card of hand-offs opens the sessions behind it
    let card = b.find("#insight-human").await;
    b.cmd("POST", &format!("/element/{card}/value"), json!({ "text": "\u{E007}" })).await;
    b.wait_text("#sessions", "c-3").await;
    let listed = b.text("#sessions tbody").await;
    assert!(!listed.contains("c-1") && !listed.contains("c-5"), "only the handed-off sessions: {listed}");
    assert_eq!(
        b.js("return document.querySelector('#filter-status select, select#filter-status')?.value").await,
        json!("handed_off")
    );

    // the table by channel instead
    b.go(&format!("{}/console/#/insights", server.base)).await;
    b.find("#insights-group").await;
    b.js("const s = document.getElementById('insights-group'); s.value = 'channel';").await;
    b.click("#insights-form button[type=submit]").await;
    b.wait_text("#insights-table", "webchat").await;
    b.close().await;
}

#[tokio::test]
async fn a_builder_imports_a_tool_from_an_mcp_server_and_refreshes_it_in_a_real_browser() {
    use switchboard_testkit::mcp::{OrdersServer, TOKEN};
    let Some(driver) = Driver::start() else {
        eprintln!("!!! SKIPPED: the console's MCP test (SWITCHBOARD_SKIP_BROWSER=1: no chromium here)");
        return;
    };
    // a tenant's MCP server built on the official Python SDK, its token the tenant's secret `mcp`
    let orders = OrdersServer::start();
    let dir = tempfile::tempdir().unwrap();
    let secrets = dir.path().join("secrets.json");
    std::fs::write(&secrets, json!({ "acme": { "mcp": format!("Bearer {TOKEN}") } }).to_string()).unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &["--secrets-file", secrets.to_str().unwrap(), "--allow-private-webhooks"]);
    let admin = Api::new(&server, &server.admin);
    assert_eq!(admin.post("/tenants", json!({ "tenantId": "acme", "name": "Acme" })).await.status, 201);
    let issued = admin.post("/tenants/acme/keys", json!({ "principal": "Bea", "role": "builder" })).await;
    let key = issued.body["key"].as_str().unwrap().to_owned();
    let api = Api::new(&server, &key);
    let shots = screenshots();
    let b = Browser::open(&driver, &shots).await;
    b.sign_in(&server.base, &key).await;
    b.wait_text("#who", "Bea (builder)").await;

    // the server's tools listed: a timeout out of range is named at its field first
    b.click("a[href='#/tools']").await;
    b.type_into("#mcp-url", &orders.url).await;
    b.type_into("#mcp-timeout", "0").await;
    b.click("#mcp-form button[type=submit]").await;
    b.wait_text("[data-pointer='/timeoutMs'] .field-error", "/timeoutMs").await;
    b.type_into("#mcp-timeout", "5000").await;
    b.type_into("#mcp-secret", "mcp").await;
    b.click("#mcp-form button[type=submit]").await;
    b.wait_text("#status", "The server lists 3 tools").await;
    let listed = b.text("#mcp-tools").await;
    assert!(listed.contains("lookup_order") && listed.contains("Finds an order's status."), "{listed}");
    // each with the schema the server gave (Pydantic's, with $defs)
    b.click("[data-mcp-tool='lookup_order'] summary").await;
    let schema = b.text("[data-mcp-tool='lookup_order'] pre").await;
    assert!(schema.contains("$defs") && schema.contains("OrderRef"), "{schema}");
    every_control_is_labelled_and_reachable(&b, "the tools page").await;
    b.js("document.getElementById('mcp-h').scrollIntoView()").await;
    b.shot("12-mcp-tools").await;
    b.shot_for_docs(&common::workspace_root().join("docs/console"), "mcp-tools").await;

    // added as the server describes it, then refreshed: unchanged
    b.click("[data-mcp-tool='lookup_order'] button").await;
    b.wait_text("#status", "Added tool lookup_order").await;
    b.wait_text("h1", "Tool lookup_order").await;
    let tools = api.get("/tenants/acme/tools?limit=100").await.body;
    let tool = tools["items"].as_array().unwrap().iter().find(|t| t["name"] == "lookup_order").unwrap().clone();
    assert_eq!(
        (tool["handler"]["type"].as_str(), tool["handler"]["url"].as_str()),
        (Some("mcp"), Some(orders.url.as_str()))
    );
    b.click("#mcp-refresh").await;
    b.wait_text("#mcp-refreshed", "Unchanged").await;
    // the list says where it comes from
    b.click("a[href='#/tools']").await;
    b.wait_text("#tools-list", "MCP: lookup_order on 127.0.0.1").await;
    b.close().await;
}

#[tokio::test]
async fn the_console_served_by_switchboard_console_forwards_calls_and_the_live_stream() {
    use std::io::{BufRead, BufReader};
    let Some(driver) = Driver::start() else {
        eprintln!("!!! SKIPPED: the console's browser test (SWITCHBOARD_SKIP_BROWSER=1: no chromium here)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tenant = examples().join("tenant.json");
    let server = Server::start(dir.path(), &["--tenant", tenant.to_str().unwrap()]);
    let admin = Api::new(&server, &server.admin);
    let grant = json!({ "principal": "Bea", "role": "operator" });
    let key = admin.post("/tenants/acme/keys", grant).await.body["key"].as_str().unwrap().to_owned();
    // The console in front of the server, passing the page's key through (no --aws-sigv4).
    let mut console = Stopped(
        common::bin()
            .args(["console", "--endpoint", &server.base, "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(console.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let base = line.trim().strip_prefix("listening on ").unwrap().to_owned();
    let shots = screenshots();
    let b = Browser::open(&driver, &shots).await;
    b.sign_in(&base, &key).await;
    b.wait_text("#inbox", "Nobody is waiting").await;
    let api = Api::new(&server, &key);
    let r = api.post("/events?wait=30", event("p-1", "c-7", "I need a person")).await;
    assert_eq!(r.body["execution"]["status"], "handed_off", "{}", r.body);
    // the row arrives over the event stream, streamed through the console
    b.find("#inbox tr[data-session]").await;
    assert_eq!(b.js("return document.body.dataset.live").await, "on");
    b.wait_text("main", "Updates live").await;
    b.shot("6-through-switchboard-console").await;
    b.close().await;
}

/// A child process killed by its own PID when dropped, whatever the test did.
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The example order system (`switchboard example-receiver`) on a free loopback port, stopped by
/// its PID when dropped.
struct OrderSystem {
    _process: Stopped,
    url: String,
}

impl OrderSystem {
    fn start() -> Self {
        let secrets = examples().join("secrets.json");
        let mut child = common::bin()
            .args(["example-receiver", "--listen", "127.0.0.1:0", "--secrets-file", secrets.to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line.trim().strip_prefix("example order system listening on ").expect(&line).to_owned();
        Self { _process: Stopped(child), url }
    }

    /// The example tenant with its order tool pointed at this receiver.
    fn tenant(&self, dir: &Path) -> PathBuf {
        let text = std::fs::read_to_string(examples().join("tenant.json")).unwrap();
        assert!(text.contains("http://127.0.0.1:8088/orders"), "the example's order tool URL moved");
        let path = dir.join("tenant.json");
        std::fs::write(&path, text.replace("http://127.0.0.1:8088/orders", &self.url)).unwrap();
        path
    }
}
