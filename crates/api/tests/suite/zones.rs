//! A tenant's time zone over real HTTP: set with `PATCH /tenants/{t}`, it is the zone a schedule
//! trigger, a time condition or a calendar written without one is stored with (the answer shows
//! it); without it a schedule is in UTC, as before, and a time condition must name its zone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::{Api, Server, create_tenant, pointers};
use reqwest::Method;
use serde_json::{Value, json};

fn schedule(agent: &str) -> Value {
    json!({ "name": "digest", "agentId": agent, "eventType": "schedule",
            "schedule": { "expression": "0 9 * * MON-FRI", "input": "post the digest" } })
}

fn after_hours(agent: &str) -> Value {
    json!({ "name": "evenings", "agentId": agent, "eventType": "message.new", "priority": 1,
            "conditions": { "any": [{ "time": { "from": "18:00", "to": "08:00" } },
                                    { "time": { "timeZone": "Asia/Tokyo", "weekdays": ["SAT"] } }] } })
}

#[tokio::test]
async fn what_is_written_without_a_time_zone_is_stored_in_the_tenants() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let api = Api::new(&server, &create_tenant(&server, "acme"));
    let made = api
        .post(
            "/tenants/acme/agents",
            json!({ "name": "Desk", "systemPrompt": "You help.",
        "model": "anthropic.claude-3-haiku", "tools": ["send_message"] }),
        )
        .await;
    let agent = made.body["agentId"].as_str().unwrap().to_owned();

    // given a tenant without a zone: a schedule is in UTC, and a time condition must name one
    let utc = api.post("/tenants/acme/triggers", schedule(&agent)).await;
    assert_eq!((utc.status.as_u16(), &utc.body["schedule"]["timeZone"]), (201, &json!("UTC")), "{}", utc.body);
    let refused = api.post("/tenants/acme/triggers", after_hours(&agent)).await;
    assert_eq!(pointers(&refused), ["/conditions/any/0/time/timeZone"], "{}", refused.body);
    assert!(refused.body["errors"][0]["detail"].as_str().unwrap().contains("tenant's timeZone"));

    // when the tenant sets its zone (a bad one is refused at its field, and nothing changes)
    let bad = api.call(Method::PATCH, "/tenants/acme", Some(json!({ "timeZone": "europe/paris" })), &[]).await;
    assert_eq!(pointers(&bad), ["/timeZone"]);
    assert!(bad.body["errors"][0]["detail"].as_str().unwrap().contains("Europe/Paris"), "{}", bad.body);
    let set = api.call(Method::PATCH, "/tenants/acme", Some(json!({ "timeZone": "Europe/Paris" })), &[]).await;
    assert_eq!((set.status.as_u16(), &set.body["timeZone"]), (200, &json!("Europe/Paris")), "{}", set.body);

    // then what is written without a zone is stored in it, and a zone written is kept
    let paris = api.post("/tenants/acme/triggers", schedule(&agent)).await;
    assert_eq!((paris.status.as_u16(), &paris.body["schedule"]["timeZone"]), (201, &json!("Europe/Paris")));
    let evenings = api.post("/tenants/acme/triggers", after_hours(&agent)).await;
    assert_eq!(evenings.status.as_u16(), 201, "{}", evenings.body);
    let id = evenings.body["triggerId"].as_str().unwrap();
    let stored = api.get(&format!("/tenants/acme/triggers/{id}")).await.body;
    let any = &stored["conditions"]["any"];
    assert_eq!(
        (&any[0]["time"]["timeZone"], &any[1]["time"]["timeZone"]),
        (&json!("Europe/Paris"), &json!("Asia/Tokyo"))
    );
    // a replaced trigger too, and the one stored before keeps the zone it was stored with
    let mut edited = after_hours(&agent);
    edited["conditions"] = json!({ "time": { "weekdays": ["SUN"] } });
    let etag = evenings.headers["etag"].to_str().unwrap().to_owned();
    let put =
        api.call(Method::PUT, &format!("/tenants/acme/triggers/{id}"), Some(edited), &[("if-match", &etag)]).await;
    assert_eq!((put.status.as_u16(), &put.body["conditions"]["time"]["timeZone"]), (200, &json!("Europe/Paris")));
    let first = api.get(&format!("/tenants/acme/triggers/{}", utc.body["triggerId"].as_str().unwrap())).await;
    assert_eq!(first.body["schedule"]["timeZone"], json!("UTC"));
    // and a calendar written without a zone takes the tenant's
    let calendars = json!({ "calendars": { "desk": { "hours": { "MON": ["09:00-17:00"] } } } });
    let set = api.call(Method::PATCH, "/tenants/acme", Some(calendars), &[]).await;
    assert_eq!((set.status.as_u16(), &set.body["calendars"]["desk"]["timeZone"]), (200, &json!("Europe/Paris")));
}
