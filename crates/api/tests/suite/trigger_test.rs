//! `POST /tenants/{t}/triggers/test`: which trigger would answer an event, and why, without
//! queuing anything.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::{Api, Server, examples};
use serde_json::{Value, json};

const TRIGGER: &str = "01JD0000TR1GGER0CHAT000001";
const AGENT: &str = "01JD0000SVPP0RT0AGENT00001";

fn pointers(body: &Value) -> Vec<&str> {
    body["errors"].as_array().map(|a| a.iter().filter_map(|e| e["pointer"].as_str()).collect()).unwrap_or_default()
}

#[tokio::test]
async fn the_tester_names_the_trigger_that_would_answer_and_why_the_others_would_not() {
    // given the example tenant: one trigger for web chat and social messages not in a closed conversation
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let api = Api::new(&server, &server.admin);

    // when a web chat message is tested
    let r = api.post("/tenants/acme/triggers/test", json!({ "message": "Where is my order #1234?" })).await;

    // then the trigger matches, each of its conditions held, with the values the event holds
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!((r.body["matched"].as_str(), r.body["agentId"].as_str()), (Some(TRIGGER), Some(AGENT)), "{}", r.body);
    assert_eq!(r.body["eventType"], "message.new");
    let considered = &r.body["triggers"][0];
    assert_eq!((considered["outcome"].as_str(), considered["priority"].as_i64()), (Some("matched"), Some(10)));
    let all = considered["conditions"]["all"].as_array().unwrap();
    assert!(all.iter().all(|c| c["held"] == true), "{all:?}");
    assert_eq!((all[1]["field"].as_str(), all[1]["actual"].as_str()), (Some("channel.platform"), Some("webchat")));

    // when an SMS in a closed conversation is tested (a detail, as the event carries it)
    let detail = json!({ "conversationId": "c-1", "messageId": "m-1", "channel": { "platform": "sms" },
                         "conversation": { "status": "closed" }, "message": { "direction": "inbound", "text": "hi" } });
    let r = api.post("/tenants/acme/triggers/test", json!({ "detail": detail })).await;

    // then nothing would answer, and the explanation says which conditions failed on what
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["matched"], Value::Null);
    let considered = &r.body["triggers"][0];
    assert_eq!(considered["outcome"], "no_match");
    let all = &considered["conditions"]["all"];
    assert_eq!(
        (all[0]["held"].as_bool(), all[1]["held"].as_bool(), all[2]["held"].as_bool()),
        (Some(true), Some(false), Some(false))
    );
    assert_eq!((all[1]["actual"].as_str(), all[2]["actual"].as_str()), (Some("sms"), Some("closed")));

    // and a field the event lacks is said to be missing
    let r = api.post("/tenants/acme/triggers/test", json!({ "detail": { "message": { "text": "hi" } } })).await;
    assert_eq!(r.body["triggers"][0]["conditions"]["all"][1]["missing"], true, "{}", r.body);

    // and nothing was queued or answered
    let sessions = api.get("/tenants/acme/sessions").await;
    assert_eq!(sessions.body["items"], json!([]), "{}", sessions.body);
    let log = api.get("/tenants/acme/conversations/trigger-test/messages").await;
    assert_eq!(log.body["messages"], json!([]), "{}", log.body);
}

#[tokio::test]
async fn a_trigger_whose_agent_is_not_active_is_skipped_as_routing_skips_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let api = Api::new(&server, &server.admin);
    // given the front-line agent made inactive
    let path = format!("/tenants/acme/agents/{AGENT}");
    let mut agent = api.get(&path).await.body;
    let version = agent["version"].as_u64().unwrap();
    for field in ["tenantId", "agentId", "version", "createdAt", "updatedAt"] {
        agent.as_object_mut().unwrap().remove(field);
    }
    agent["status"] = json!("inactive");
    let r = api.call(reqwest::Method::PUT, &path, Some(agent), &[("if-match", &format!("\"{version}\""))]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // when a message its trigger accepts is tested
    let r = api.post("/tenants/acme/triggers/test", json!({ "message": "hello", "channel": "facebook" })).await;
    // then the trigger held but is skipped, and nothing would answer
    assert_eq!(r.body["matched"], Value::Null, "{}", r.body);
    assert_eq!(r.body["triggers"][0]["outcome"], "agent_not_active");
    assert_eq!(r.body["triggers"][0]["conditions"]["held"], true);
}

#[tokio::test]
async fn a_bad_test_names_the_field_at_fault() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let api = Api::new(&server, &server.admin);
    let cases = [
        (json!({}), "/detail"),
        (json!({ "message": "hi", "detail": {} }), "/message"),
        (json!({ "detail": [1, 2] }), "/detail"),
        (json!({ "detail": {}, "channel": "sms" }), "/channel"),
        (json!({ "message": "hi", "channel": "" }), "/channel"),
        (json!({ "message": "x".repeat(16 * 1024 + 1) }), "/message"),
        (json!({ "message": "hi", "eventType": "message.deleted" }), "/eventType"),
        (json!({ "message": "hi", "colour": "blue" }), "/colour"),
    ];
    for (body, pointer) in cases {
        let r = api.post("/tenants/acme/triggers/test", body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        assert_eq!(r.headers["content-type"], "application/problem+json");
        assert_eq!(pointers(&r.body), [pointer], "{body}: {}", r.body);
    }
}

#[tokio::test]
async fn a_time_condition_is_written_with_its_pointers_and_the_tester_says_what_local_time_it_judged() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let api = Api::new(&server, &server.admin);
    // a bad window is refused at the key at fault, nested where it was written
    let bad = json!({ "name": "night", "agentId": AGENT, "eventType": "message.new", "priority": 1,
        "conditions": { "all": [ { "time": { "timeZone": "Mars/Olympus" } } ] } });
    let r = api.post("/tenants/acme/triggers", bad).await;
    assert_eq!((r.status.as_u16(), pointers(&r.body)), (400, vec!["/conditions/all/0/time/timeZone"]), "{}", r.body);
    let bad = json!({ "name": "night", "agentId": AGENT, "eventType": "message.new",
        "conditions": { "time": { "timeZone": "UTC", "from": "9am" }, "field": "x" } });
    assert_eq!(api.post("/tenants/acme/triggers", bad).await.status, 400);
    // a window that is never open (every day, outside the whole day) routes nothing, and the
    // tester shows the moment it judged in the window's zone
    let closed = json!({ "name": "never", "agentId": AGENT, "eventType": "message.new", "priority": 1,
        "conditions": { "time": { "timeZone": "Asia/Tokyo", "outside": true } } });
    let r = api.post("/tenants/acme/triggers", closed).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let never = r.body["triggerId"].as_str().unwrap().to_owned();
    let open = json!({ "name": "always", "agentId": AGENT, "eventType": "message.new", "priority": 2,
        "conditions": { "time": { "timeZone": "Asia/Tokyo" } } });
    let always = api.post("/tenants/acme/triggers", open).await.body["triggerId"].as_str().unwrap().to_owned();
    let r = api.post("/tenants/acme/triggers/test", json!({ "message": "hello" })).await;
    assert_eq!(r.body["matched"], always.as_str(), "{}", r.body);
    let first = &r.body["triggers"][0];
    assert_eq!((first["triggerId"].as_str(), first["outcome"].as_str()), (Some(never.as_str()), Some("no_match")));
    let local = first["conditions"]["localTime"].as_str().unwrap();
    assert!(local.contains("+09:00"), "judged in Tokyo's offset: {local}");
    assert_eq!(first["conditions"]["time"]["timeZone"], "Asia/Tokyo", "the condition as written: {}", r.body);
}
