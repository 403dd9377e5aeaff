//! The internal API over real HTTP against the embedded profile's server, wired as `switchboard
//! serve` wires it: keys and tenancy, CRUD with ETags, validation with pointers, references,
//! manual invoke, rate limits, and a cross-tenant corpus that must leak nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::{Api, Server, create_tenant, examples, pointers, tenant_key};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

fn agent_body(name: &str) -> Value {
    json!({ "name": name, "systemPrompt": "You help.", "model": "anthropic.claude-3-haiku", "tools": ["send_message"] })
}

#[tokio::test]
async fn keys_decide_who_may_see_which_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let acme = create_tenant(&server, "acme");
    let _globex = create_tenant(&server, "globex");

    // no key, a wrong key: 401 with a challenge
    let res = Client::new().get(format!("{}/tenants/acme/agents", server.base)).send().await.unwrap();
    assert_eq!(res.status(), 401);
    assert_eq!(res.headers()["www-authenticate"], "Bearer");
    assert_eq!(Api::new(&server, "sbk_wrong").get("/tenants/acme/agents").await.status, 401);
    // the tenant's own key works on its own tenant
    assert_eq!(Api::new(&server, &acme).get("/tenants/acme/agents").await.status, 200);
    // and answers as if another tenant did not exist
    let other = Api::new(&server, &acme).get("/tenants/globex/agents").await;
    assert_eq!(other.status, 404);
    assert_eq!(other.body["detail"], "no tenant 'globex'");
    assert_eq!(Api::new(&server, &acme).get("/tenants/nobody/agents").await.body, other.body.as_object().map(|_| {
        json!({"type": "urn:switchboard:problem:not-found", "title": "Not found", "status": 404, "detail": "no tenant 'nobody'"})
    }).unwrap());
    // an event for another tenant is refused like an unknown tenant
    let event = json!({ "id": "e-1", "source": "conversations-service", "detail-type": "message.new",
        "detail": { "tenantId": "globex", "conversationId": "c", "messageId": "m", "channel": {}, "conversation": {},
                    "message": { "direction": "inbound", "text": "hi" } } });
    let r = Api::new(&server, &acme).post("/events", event).await;
    assert_eq!((r.status, pointers(&r)), (StatusCode::UNPROCESSABLE_ENTITY, vec!["/detail/tenantId".to_owned()]));
    // health needs no key
    assert_eq!(Client::new().get(format!("{}/health", server.base)).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn an_agent_is_created_read_listed_replaced_and_deleted_with_etags() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let api = Api::new(&server, &create_tenant(&server, "acme"));

    let created = api.post("/tenants/acme/agents", agent_body("Support")).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.headers["etag"], "\"1\"");
    let id = created.body["agentId"].as_str().unwrap().to_owned();
    assert_eq!(created.headers["location"], format!("/tenants/acme/agents/{id}").as_str());
    assert_eq!(created.body["maxTurns"], 10, "brief defaults applied");

    let got = api.get(&format!("/tenants/acme/agents/{id}")).await;
    assert_eq!((got.status, got.body["name"].as_str()), (StatusCode::OK, Some("Support")));
    // ULIDs are case-insensitive
    assert_eq!(api.get(&format!("/tenants/acme/agents/{}", id.to_lowercase())).await.status, 200);

    api.post("/tenants/acme/agents", json!({ "name": "Draft", "systemPrompt": "p", "model": "m", "status": "draft" }))
        .await;
    let drafts = api.get("/tenants/acme/agents?status=draft").await;
    assert_eq!(drafts.body["items"].as_array().unwrap().len(), 1);
    let page = api.get("/tenants/acme/agents?limit=1").await;
    assert_eq!(page.body["items"].as_array().unwrap().len(), 1);
    let next = page.body["nextCursor"].as_str().unwrap();
    let page2 = api.get(&format!("/tenants/acme/agents?limit=1&cursor={next}")).await;
    assert_eq!(page2.body["items"].as_array().unwrap().len(), 1);
    assert_ne!(page.body["items"][0]["agentId"], page2.body["items"][0]["agentId"]);

    let path = format!("/tenants/acme/agents/{id}");
    let mut changed = agent_body("Support v2");
    // without If-Match: 428; with a stale one: 412; with the current one: 200 and a new ETag
    assert_eq!(api.call(Method::PUT, &path, Some(changed.clone()), &[]).await.status, 428);
    assert_eq!(api.call(Method::PUT, &path, Some(changed.clone()), &[("if-match", "\"7\"")]).await.status, 412);
    let replaced = api.call(Method::PUT, &path, Some(changed.clone()), &[("if-match", "\"1\"")]).await;
    assert_eq!((replaced.status, replaced.headers["etag"].to_str().unwrap()), (StatusCode::OK, "\"2\""));
    assert_eq!(replaced.body["createdAt"], created.body["createdAt"]);
    changed["name"] = json!("lost update");
    assert_eq!(api.call(Method::PUT, &path, Some(changed), &[("if-match", "\"1\"")]).await.status, 412);

    assert_eq!(api.call(Method::DELETE, &path, None, &[]).await.status, 204);
    assert_eq!(api.get(&path).await.status, 404);
    assert_eq!(api.call(Method::DELETE, &path, None, &[]).await.status, 404);
}

#[tokio::test]
async fn bad_bodies_name_the_field_at_fault_and_store_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let api = Api::new(&server, &create_tenant(&server, "acme"));

    let mut b = agent_body("A");
    b["colour"] = json!("red");
    let r = api.post("/tenants/acme/agents", b).await;
    assert_eq!(r.status, 400);
    assert_eq!(pointers(&r), ["/colour"]);
    assert!(r.body["errors"][0]["detail"].as_str().unwrap().starts_with("is not a field here; known fields: "));
    // a missing field is named by its own pointer, and no Rust type name reaches the client
    let mut b = agent_body("A");
    b.as_object_mut().unwrap().remove("name");
    let r = api.post("/tenants/acme/agents", b).await;
    assert_eq!((pointers(&r), &r.body["detail"]), (vec!["/name".to_owned()], &json!("/name is required")));
    let admin = Api::new(&server, &server.admin);
    let r = admin.post("/tenants", json!(1)).await;
    assert_eq!((r.status.as_u16(), &r.body["detail"]), (400, &json!("the body must be a JSON object")));
    let r = admin.call(Method::PATCH, "/tenants/acme", Some(json!([])), &[]).await;
    assert_eq!((r.status.as_u16(), &r.body["detail"]), (400, &json!("the body must be a JSON object")), "{}", r.body);
    let mut b = agent_body("A");
    b["agentId"] = json!("01JD0000SVPP0RT0AGENT00001");
    assert_eq!(pointers(&api.post("/tenants/acme/agents", b).await), ["/agentId"]);
    let mut b = agent_body("A");
    b["modelConfig"] = json!({ "temperature": 3 });
    b["maxIterations"] = json!(0);
    b["tools"] = json!(["send_message", "teleport"]);
    assert_eq!(
        pointers(&api.post("/tenants/acme/agents", b).await),
        ["/modelConfig/temperature", "/maxIterations", "/tools/1"]
    );
    let mut b = agent_body("A");
    b["modelConfig"] = json!({ "temperature": "warm" });
    assert_eq!(pointers(&api.post("/tenants/acme/agents", b).await), ["/modelConfig/temperature"]);
    // an array where an object is expected is not read as the object's fields in order (serde
    // alone would take `[0.5]` for a temperature), in a record, a tenant's limits or a body
    let mut b = agent_body("A");
    b["modelConfig"] = json!([0.5]);
    let r = api.post("/tenants/acme/agents", b).await;
    assert_eq!((r.status.as_u16(), pointers(&r)), (400, vec!["/modelConfig".to_owned()]), "{}", r.body);
    assert!(r.body["errors"][0]["detail"].as_str().unwrap().contains("JSON object"), "{}", r.body);
    let r = admin.call(Method::PATCH, "/tenants/acme", Some(json!({ "limits": [60] })), &[]).await;
    assert_eq!((r.status.as_u16(), pointers(&r)), (400, vec!["/limits".to_owned()]), "{}", r.body);
    // nor is a tagged setting read from an array whose first item is its tag
    let mut b = agent_body("A");
    b["onFailure"] = json!(["none"]);
    let r = api.post("/tenants/acme/agents", b).await;
    assert_eq!((r.status.as_u16(), pointers(&r)), (400, vec!["/onFailure".to_owned()]), "{}", r.body);
    let limits = json!({ "limits": { "invocationsPerMinute": 5, "onLimit": ["defer"] } });
    let r = admin.call(Method::PATCH, "/tenants/acme", Some(limits), &[]).await;
    assert_eq!((r.status.as_u16(), pointers(&r)), (400, vec!["/limits/onLimit".to_owned()]), "{}", r.body);
    let listed = api.get("/tenants/acme/agents").await;
    assert_eq!(listed.body["items"], json!([]), "nothing was stored");
    let r = api.call(Method::POST, "/tenants/acme/agents", None, &[("content-type", "application/json")]).await;
    assert_eq!(r.status, 400);
    // a trigger with a bad operator, a bad regex, and an agent that does not exist
    let agent = api.post("/tenants/acme/agents", agent_body("A")).await.body["agentId"].clone();
    let trig = |conditions: Value, agent: &Value| json!({ "name": "t", "agentId": agent, "eventType": "message.new", "conditions": conditions });
    let r = api
        .post(
            "/tenants/acme/triggers",
            trig(json!({ "all": [ { "field": "x", "operator": "resembles", "value": 1 } ] }), &agent),
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(pointers(&r), ["/conditions/all/0/operator"], "{}", r.body);
    // a trigger that could never fire is refused rather than stored
    let r = api.post("/tenants/acme/triggers", json!({ "name": "t", "agentId": agent, "eventType": "webhook" })).await;
    assert_eq!(pointers(&r), ["/webhook"]);
    let r = api
        .post(
            "/tenants/acme/triggers",
            json!({ "name": "t", "agentId": agent, "eventType": "webhook",
                "webhook": { "secretRef": "", "conversationPointer": "ticket" } }),
        )
        .await;
    assert_eq!(pointers(&r), ["/webhook/secretRef", "/webhook/conversationPointer"], "{}", r.body);
    let r = api
        .post(
            "/tenants/acme/triggers",
            json!({ "name": "t", "agentId": agent, "eventType": "manual", "webhook": { "secretRef": "s" } }),
        )
        .await;
    assert_eq!(pointers(&r), ["/webhook"]);
    let r = api.post("/tenants/acme/triggers", json!({ "name": "t", "agentId": agent, "eventType": "schedule" })).await;
    assert_eq!(pointers(&r), ["/schedule"]);
    let schedule = |expression: &str| {
        json!({ "name": "s", "agentId": agent, "eventType": "schedule",
        "schedule": { "expression": expression, "timeZone": "Europe/Paris", "input": "post the digest" } })
    };
    let r = api.post("/tenants/acme/triggers", schedule("0 9 * * MON-FRIDAY")).await;
    assert_eq!((r.status.as_u16(), pointers(&r)), (400, vec!["/schedule/expression".to_owned()]), "{}", r.body);
    // every write takes JSON only, and an oversized body is a problem+json too
    let r = api.call(Method::POST, "/tenants/acme/agents", None, &[("content-type", "text/plain")]).await;
    assert_eq!((r.status.as_u16(), r.headers["content-type"].to_str().unwrap()), (415, "application/problem+json"));
    // (its own connection: the server answers before reading the whole upload and closes it)
    let big = json!({ "name": "x".repeat(3 * 1024 * 1024) });
    let own = Api::new(&api, &api.key);
    let r = own.post("/tenants/acme/agents", big).await;
    assert_eq!((r.status.as_u16(), r.headers["content-type"].to_str().unwrap()), (413, "application/problem+json"));
    let r = api
        .post(
            "/tenants/acme/triggers",
            trig(json!({ "field": "message.text", "operator": "matches", "value": "(" }), &agent),
        )
        .await;
    assert_eq!(r.status, 400);
    let r = api.post("/tenants/acme/triggers", trig(json!({}), &json!("01JD0000PAYMENTS0AGENT0002"))).await;
    assert_eq!(pointers(&r), ["/agentId"]);
    // nothing of the refused triggers was stored
    assert_eq!(api.get("/tenants/acme/triggers").await.body["items"].as_array().unwrap().len(), 0);
    // a good schedule is kept as written, its time zone's default filled in
    let r = api.post("/tenants/acme/triggers", schedule("0 9 * * MON-FRI")).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.body["schedule"],
        json!({ "expression": "0 9 * * MON-FRI", "timeZone": "Europe/Paris", "input": "post the digest" })
    );
    let id = r.body["triggerId"].as_str().unwrap().to_owned();
    let r = api.call(Method::DELETE, &format!("/tenants/acme/triggers/{id}"), None, &[]).await;
    assert_eq!(r.status, 204, "{}", r.body);
    // bad queries
    assert_eq!(pointers(&api.get("/tenants/acme/agents?limit=0").await), ["/query/limit"]);
    assert_eq!(pointers(&api.get("/tenants/acme/agents?status=sleepy").await), ["/query/status"]);
    assert_eq!(pointers(&api.get("/tenants/acme/triggers?type=router").await), ["/query/type"]);
    assert_eq!(api.get("/tenants/acme/agents?bogus=1").await.status, 400);
}

#[tokio::test]
async fn references_must_exist_and_block_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let api = Api::new(&server, &create_tenant(&server, "acme"));
    // a custom webhook tool, listed after the built-in system tools
    let tool = api
        .post("/tenants/acme/tools", json!({
            "name": "lookup_order", "description": "Finds an order",
            "parameters": { "type": "object", "properties": { "orderId": { "type": "string" } }, "required": ["orderId"] },
            "handler": { "type": "webhook", "url": "https://example.invalid/hook", "timeoutMs": 5000 }
        }))
        .await;
    assert_eq!(tool.status, 201, "{}", tool.body);
    let tool_id = tool.body["toolId"].as_str().unwrap().to_owned();
    let tools = api.get("/tenants/acme/tools").await.body["items"].clone();
    assert_eq!(tools[0]["name"], "send_message");
    assert_eq!(tools[0]["type"], "system");
    assert!(tools.as_array().unwrap().iter().any(|t| t["toolId"] == tool_id.as_str()));
    let bad_schema = api
        .post(
            "/tenants/acme/tools",
            json!({
                "name": "send_message", "description": "d", "parameters": { "type": "object", "required": ["x"] },
                "handler": { "type": "webhook", "url": "ftp://x", "timeoutMs": 60000 }
            }),
        )
        .await;
    assert_eq!(pointers(&bad_schema), ["/name", "/parameters/required/0", "/handler/url", "/handler/timeoutMs"]);
    // a webhook signs in one of two schemes; any other is named at its own pointer
    let signed = |scheme: &str| {
        json!({ "name": "notify", "description": "d", "parameters": { "type": "object" },
                "handler": { "type": "webhook", "url": "https://example.invalid/hook", "signature": scheme } })
    };
    let r = api.post("/tenants/acme/tools", signed("svix")).await;
    assert_eq!((r.status.as_u16(), pointers(&r)), (400, vec!["/handler/signature".to_owned()]), "{}", r.body);
    let r = api.post("/tenants/acme/tools", signed("standard-webhooks")).await;
    assert_eq!((r.status.as_u16(), &r.body["handler"]["signature"]), (201, &json!("standard-webhooks")), "{}", r.body);
    // a skill using the tool, and an agent using both
    let skill = api
        .post("/tenants/acme/skills", json!({ "name": "orders", "description": "Order lookups", "prompt": "Look orders up.", "tools": [tool_id] }))
        .await;
    assert_eq!(skill.status, 201, "{}", skill.body);
    let skill_id = skill.body["skillId"].as_str().unwrap().to_owned();
    let mut a = agent_body("A");
    a["tools"] = json!(["send_message", tool_id]);
    a["skills"] = json!([skill_id]);
    let agent = api.post("/tenants/acme/agents", a).await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    let agent_id = agent.body["agentId"].as_str().unwrap().to_owned();
    let trigger = api
        .post("/tenants/acme/triggers", json!({ "name": "all", "agentId": agent_id, "eventType": "message.new" }))
        .await;
    let trigger_id = trigger.body["triggerId"].as_str().unwrap().to_owned();
    // an agent naming a missing skill is refused
    let mut bad = agent_body("B");
    bad["skills"] = json!(["01JD0000SK1LL0000000000001"]);
    assert_eq!(pointers(&api.post("/tenants/acme/agents", bad).await), ["/skills/0"]);
    // what is still used cannot be deleted
    for (path, used_by) in [
        (format!("/tenants/acme/agents/{agent_id}"), "trigger"),
        (format!("/tenants/acme/tools/{tool_id}"), "agent"),
        (format!("/tenants/acme/skills/{skill_id}"), "agent"),
    ] {
        let r = api.call(Method::DELETE, &path, None, &[]).await;
        assert_eq!(r.status, 409, "{path}");
        assert!(r.body["detail"].as_str().unwrap().contains(used_by), "{}", r.body);
    }
    // once the users are gone, it can
    assert_eq!(api.call(Method::DELETE, &format!("/tenants/acme/triggers/{trigger_id}"), None, &[]).await.status, 204);
    assert_eq!(api.call(Method::DELETE, &format!("/tenants/acme/agents/{agent_id}"), None, &[]).await.status, 204);
    assert_eq!(api.call(Method::DELETE, &format!("/tenants/acme/skills/{skill_id}"), None, &[]).await.status, 204);
    assert_eq!(api.call(Method::DELETE, &format!("/tenants/acme/tools/{tool_id}"), None, &[]).await.status, 204);
}

#[tokio::test]
async fn a_trigger_created_over_the_api_routes_the_next_message_and_invoke_runs_an_agent() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let api = Api::new(&server, &create_tenant(&server, "acme"));
    let agent = api.post("/tenants/acme/agents", agent_body("Echo")).await.body["agentId"].as_str().unwrap().to_owned();
    let event = |id: &str| {
        json!({ "id": id, "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": "acme", "conversationId": "c-1", "messageId": format!("m-{id}"), "channel": {},
                        "conversation": {}, "message": { "direction": "inbound", "text": "Hi there" } } })
    };
    assert_eq!(api.post("/events", event("e-1")).await.body["outcome"], "no_match");
    api.post("/tenants/acme/triggers", json!({ "name": "all", "agentId": agent, "eventType": "message.new" })).await;
    // no waiting for a cache to expire: the write invalidated it
    let routed = api.post("/events?wait=30", event("e-2")).await;
    assert_eq!(routed.body["outcome"], "enqueued");
    assert_eq!(routed.body["execution"]["status"], "success");

    // manual invoke on another conversation, retried with the same Idempotency-Key
    let path = format!("/tenants/acme/agents/{agent}/invoke");
    let body =
        json!({ "conversationId": "c-2", "message": "Where is my order #1234?", "metadata": { "source": "crm" } });
    let first = api.call(Method::POST, &path, Some(body.clone()), &[("idempotency-key", "crm-77")]).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body["status"], "success");
    assert_eq!(first.body["actions"][0]["type"], "reply");
    let again = api.call(Method::POST, &path, Some(body), &[("idempotency-key", "crm-77")]).await;
    assert_eq!(again.body["executionId"], first.body["executionId"]);
    let convo = api.get("/tenants/acme/conversations/c-2/messages").await;
    assert_eq!(convo.body["messages"].as_array().unwrap().len(), 1, "one reply, no inbound line for an invoke");
    // invoke refuses bad input and conversations that belong to someone else
    assert_eq!(pointers(&api.post(&path, json!({ "conversationId": "bad id!" })).await), ["/conversationId"]);
    assert_eq!(pointers(&api.post(&path, json!({ "conversationId": "c", "extra": 1 })).await), ["/extra"]);
    let other =
        api.post("/tenants/acme/agents", agent_body("Other")).await.body["agentId"].as_str().unwrap().to_owned();
    let r = api.post(&format!("/tenants/acme/agents/{other}/invoke"), json!({ "conversationId": "c-2" })).await;
    assert_eq!(r.status, 409);
}

#[tokio::test]
async fn a_message_posted_again_under_a_new_event_id_is_answered_with_the_first_outcome() {
    // given a tenant whose agent answers every message
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let api = Api::new(&server, &create_tenant(&server, "acme"));
    let agent = api.post("/tenants/acme/agents", agent_body("Echo")).await.body["agentId"].as_str().unwrap().to_owned();
    api.post("/tenants/acme/triggers", json!({ "name": "all", "agentId": agent, "eventType": "message.new" })).await;
    let event = |id: &str| {
        json!({ "id": id, "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": "acme", "conversationId": "c-1", "messageId": "m-1", "channel": {},
                        "conversation": {}, "message": { "direction": "inbound", "text": "Where is my order?" } } })
    };
    let first = api.post("/events?wait=30", event("e-1")).await;
    assert_eq!((first.status, &first.body["outcome"]), (StatusCode::ACCEPTED, &json!("enqueued")), "{}", first.body);
    assert_eq!(first.body["execution"]["status"], "success");
    assert_eq!(first.body["sourceId"], "message-c-1:m-1");
    // when the producer posts the same message under a new event id (a retry after a timeout)
    let again = api.post("/events?wait=30", event("e-2")).await;
    // then it is a duplicate answered with the first one's execution, and nothing ran again
    assert_eq!((again.status, &again.body["outcome"]), (StatusCode::ACCEPTED, &json!("duplicate")), "{}", again.body);
    assert_eq!((&again.body["eventId"], &again.body["sourceId"]), (&json!("e-2"), &first.body["sourceId"]));
    assert_eq!(again.body["execution"], first.body["execution"]);
    let convo = api.get("/tenants/acme/conversations/c-1/messages").await;
    let directions: Vec<&str> =
        convo.body["messages"].as_array().unwrap().iter().map(|m| m["direction"].as_str().unwrap()).collect();
    assert_eq!(directions, ["inbound", "outbound"], "one message in, one reply out");
    // and the execution is found by the message's source id
    let found = api.get("/tenants/acme/executions?sourceId=message-c-1:m-1").await;
    assert_eq!(found.body["executionId"], first.body["execution"]["executionId"]);
}

#[tokio::test]
async fn an_edited_message_is_answered_only_by_a_trigger_for_edits_once_per_text() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let api = Api::new(&server, &create_tenant(&server, "acme"));
    let agent = api.post("/tenants/acme/agents", agent_body("Echo")).await.body["agentId"].as_str().unwrap().to_owned();
    api.post("/tenants/acme/triggers", json!({ "name": "all", "agentId": agent, "eventType": "message.new" })).await;
    let envelope = |id: &str, kind: &str, text: &str| {
        json!({ "id": id, "source": "conversations-service", "detail-type": kind,
            "detail": { "tenantId": "acme", "conversationId": "c-1", "messageId": "m-1", "channel": {},
                        "conversation": {}, "message": { "direction": "inbound", "text": text } } })
    };
    let first = api.post("/events?wait=30", envelope("e-1", "message.new", "Where is my order?")).await;
    assert_eq!(first.body["execution"]["status"], "success", "{}", first.body);
    // an edit, and no trigger listens for edits: not answered, nothing queued
    let edited = api.post("/events?wait=30", envelope("e-2", "message.updated", "Where is my order #1234?")).await;
    assert_eq!((edited.status, &edited.body["outcome"]), (StatusCode::ACCEPTED, &json!("no_match")), "{}", edited.body);
    assert!(edited.body.get("sourceId").is_none() && edited.body.get("execution").is_none(), "{}", edited.body);
    // once one does, the edit is answered with its new text, under a source of its own
    let on_edits = json!({ "name": "edits", "agentId": agent, "eventType": "message.updated",
        "conditions": { "field": "message.text", "operator": "contains", "value": "#" } });
    assert_eq!(api.post("/tenants/acme/triggers", on_edits).await.status, 201);
    let answered = api.post("/events?wait=30", envelope("e-3", "message.updated", "Where is my order #1234?")).await;
    assert_eq!(answered.body["outcome"], "enqueued", "{}", answered.body);
    let source = answered.body["sourceId"].as_str().unwrap().to_owned();
    assert!(source.starts_with("edit-c-1:m-1:"), "{source}");
    assert_eq!(answered.body["execution"]["input"]["text"], "Where is my order #1234?");
    assert_ne!(answered.body["execution"]["executionId"], first.body["execution"]["executionId"]);
    // the same edit again is the same work; an edit its trigger does not match is not answered
    let again = api.post("/events?wait=30", envelope("e-4", "message.updated", "Where is my order #1234?")).await;
    assert_eq!((&again.body["outcome"], &again.body["sourceId"]), (&json!("duplicate"), &json!(source)));
    assert_eq!(again.body["execution"]["executionId"], answered.body["execution"]["executionId"]);
    let plain = api.post("/events", envelope("e-5", "message.updated", "Where is my parcel?")).await;
    assert_eq!(plain.body["outcome"], "no_match", "{}", plain.body);
    // the tester judges edits against the edit triggers
    let tested = api
        .post(
            "/tenants/acme/triggers/test",
            json!({ "eventType": "message.updated",
            "detail": envelope("e-6", "message.updated", "order #9")["detail"] }),
        )
        .await;
    assert_eq!(
        (&tested.body["eventType"], tested.body["triggers"].as_array().unwrap().len()),
        (&json!("message.updated"), 1)
    );
    // and another detail-type is refused at its pointer
    let refused = api.post("/events", envelope("e-7", "message.deleted", "x")).await;
    assert_eq!(pointers(&refused), ["/detail-type"]);
}

#[tokio::test]
async fn a_tenants_business_hours_calendar_routes_by_its_hours_and_holidays_and_stays_while_named() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let api = Api::new(&server, &create_tenant(&server, "acme"));
    let agent = |name: &'static str| {
        let api = &api;
        async move { api.post("/tenants/acme/agents", agent_body(name)).await.body["agentId"].as_str().unwrap().to_owned() }
    };
    let (desk, night) = (agent("Desk").await, agent("Night").await);
    // given two calendars: one open round the clock, one closed for three days around today
    // (holidays, whatever the hour the test runs at)
    let today = chrono::Utc::now().date_naive();
    let days = [today.pred_opt().unwrap(), today, today.succ_opt().unwrap()].map(|d| json!({ "date": d.to_string() }));
    let week: serde_json::Map<String, Value> = ["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"]
        .iter()
        .map(|d| (d.to_string(), json!(["00:00-24:00"])))
        .collect();
    let calendars = json!({
        "always": { "timeZone": "Pacific/Auckland", "hours": week },
        "closed": { "timeZone": "America/New_York", "hours": week, "holidays": days },
        "spare": { "timeZone": "UTC" },
    });
    let set = api.call(Method::PATCH, "/tenants/acme", Some(json!({ "calendars": calendars })), &[]).await;
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!(
        api.get("/tenants/acme").await.body["calendars"]["closed"]["holidays"][1]["date"],
        json!(today.to_string())
    );
    // a bad calendar is refused at its field, and nothing changes
    let bad = json!({ "calendars": { "x": { "timeZone": "Mars/Base", "hours": { "MON": ["18:00-09:00"] } } } });
    let refused = api.call(Method::PATCH, "/tenants/acme", Some(bad), &[]).await;
    assert_eq!(pointers(&refused), ["/calendars/x/timeZone", "/calendars/x/hours/MON/0"]);
    assert!(api.get("/tenants/acme").await.body["calendars"]["always"].is_object());
    // a trigger may name only a calendar the tenant has
    let after_hours = |calendar: &str| {
        json!({ "name": "after hours", "agentId": night, "eventType": "message.new", "priority": 1,
                "conditions": { "all": [{ "time": { "calendar": calendar, "outside": true } }] } })
    };
    let unknown = api.post("/tenants/acme/triggers", after_hours("weekend")).await;
    assert_eq!(pointers(&unknown), ["/conditions/all/0/time/calendar"]);
    assert_eq!(api.post("/tenants/acme/triggers", after_hours("closed")).await.status, 201);
    let open_hours = json!({ "name": "desk", "agentId": desk, "eventType": "message.new", "priority": 2,
        "conditions": { "time": { "calendar": "always" } } });
    assert_eq!(api.post("/tenants/acme/triggers", open_hours).await.status, 201);
    // when a message comes in while "closed" is closed: the after-hours agent answers it
    let event = json!({ "id": "e-1", "source": "conversations-service", "detail-type": "message.new",
        "detail": { "tenantId": "acme", "conversationId": "c-1", "messageId": "m-1", "channel": {},
                    "conversation": {}, "message": { "direction": "inbound", "text": "Anyone there?" } } });
    let routed = api.post("/events?wait=30", event.clone()).await;
    assert_eq!(routed.body["execution"]["agentId"], json!(night), "{}", routed.body);
    // and the tester says why: closed, for a holiday, at the local time it judged
    let tested = api.post("/tenants/acme/triggers/test", json!({ "detail": event["detail"] })).await;
    let node = &tested.body["triggers"][0]["conditions"]["all"][0];
    assert_eq!((&node["held"], &node["open"]), (&json!(true), &json!(false)), "{}", tested.body);
    assert!(node["holiday"].as_str().is_some_and(|h| h.len() == 10) && node["localTime"].is_string(), "{node}");
    assert_eq!(tested.body["triggers"][1]["conditions"]["open"], json!(true));
    // a calendar a trigger names is not removed; one no trigger names is
    let only_always = json!({ "calendars": { "always": calendars["always"] } });
    let in_use = api.call(Method::PATCH, "/tenants/acme", Some(only_always), &[]).await;
    assert_eq!(pointers(&in_use), ["/calendars/closed"]);
    assert!(in_use.body["errors"][0]["detail"].as_str().unwrap().contains("after hours"), "{}", in_use.body);
    let unused = json!({ "calendars": { "always": calendars["always"], "closed": calendars["closed"] } });
    assert_eq!(api.call(Method::PATCH, "/tenants/acme", Some(unused), &[]).await.status, 200);
    let kept = api.get("/tenants/acme").await.body["calendars"].clone();
    assert_eq!(kept.as_object().unwrap().keys().collect::<Vec<_>>(), ["always", "closed"], "spare is gone");
}

#[tokio::test]
async fn a_bundle_sets_the_tenants_calendars_with_the_triggers_that_name_them_for_an_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let owner = Api::new(&server, &create_tenant(&server, "acme"));
    let issued = owner.post("/tenants/acme/keys", json!({ "principal": "bob", "role": "builder" })).await;
    let builder = Api::new(&server, issued.body["key"].as_str().unwrap());
    let agent = "01JD0000SVPP0RT0AGENT00001";
    let bundle = |calendars: Value| {
        json!({ "tenantId": "acme", "name": "Acme", "calendars": calendars,
            "agents": [{ "agentId": agent, "name": "Desk", "systemPrompt": "Help.", "tools": ["send_message"] }],
            "triggers": [{ "triggerId": "01JD0000TR1GGER0CHAT000001", "name": "office", "agentId": agent,
                           "eventType": "message.new", "conditions": { "time": { "calendar": "office" } } }] })
    };
    let office = json!({ "office": { "timeZone": "Europe/Paris", "hours": { "MON": ["09:00-17:00"] } } });
    // a builder may not change the tenant's calendars, and nothing of the bundle is written
    let refused = builder.post("/tenants/acme/apply", bundle(office.clone())).await;
    assert_eq!((refused.status.as_u16(), pointers(&refused)), (400, vec!["/calendars".to_owned()]), "{}", refused.body);
    assert_eq!(owner.get("/tenants/acme/triggers").await.body["items"], json!([]));
    // the owner's dry run says what would change, checking the trigger against the new calendar
    let dry = owner.post("/tenants/acme/apply?dryRun=true", bundle(office.clone())).await;
    assert_eq!((dry.status.as_u16(), &dry.body["calendars"]), (200, &json!("updated")), "{}", dry.body);
    assert_eq!(owner.get("/tenants/acme").await.body.get("calendars"), None, "a dry run writes nothing");
    // the owner's apply sets the calendar and writes the trigger naming it
    let applied = owner.post("/tenants/acme/apply", bundle(office.clone())).await;
    assert_eq!((applied.status.as_u16(), &applied.body["calendars"]), (200, &json!("updated")), "{}", applied.body);
    assert_eq!(owner.get("/tenants/acme").await.body["calendars"], office);
    assert_eq!(owner.get("/tenants/acme/triggers").await.body["items"][0]["name"], "office");
    // the same bundle again changes nothing, and a builder may apply it then
    let again = builder.post("/tenants/acme/apply", bundle(office)).await;
    assert_eq!((again.status.as_u16(), &again.body["calendars"]), (200, &json!("unchanged")), "{}", again.body);
    // a bundle whose trigger names a calendar it removes is refused at the trigger; one that
    // removes a calendar a stored trigger names, at the calendar
    let removed = owner.post("/tenants/acme/apply", bundle(json!({}))).await;
    assert_eq!(pointers(&removed), ["/triggers/0/conditions/time/calendar"], "{}", removed.body);
    let bare = json!({ "tenantId": "acme", "name": "Acme", "calendars": {} });
    let in_use = owner.post("/tenants/acme/apply", bare).await;
    assert_eq!(pointers(&in_use), ["/calendars/office"], "{}", in_use.body);
    assert!(owner.get("/tenants/acme").await.body["calendars"]["office"].is_object());
}

#[tokio::test]
async fn a_tenant_over_its_request_rate_gets_429_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--rate-limit", "3"]);
    let api = Api::new(&server, &create_tenant(&server, "acme"));
    for _ in 0..3 {
        assert_eq!(api.get("/tenants/acme/agents").await.status, 200);
    }
    let limited = api.get("/tenants/acme/agents").await;
    assert_eq!(limited.status, 429);
    let retry: u64 = limited.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry));
    assert_eq!(limited.body["type"], "urn:switchboard:problem:rate-limited");
}

#[tokio::test]
async fn another_tenants_key_with_the_first_tenants_ids_sees_nothing_on_any_route() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let admin = Api::new(&server, &server.admin);
    let intruder = Api::new(&server, &create_tenant(&server, "intruder"));
    // given acme data of every kind
    let tool = admin
        .post(
            "/tenants/acme/tools",
            json!({ "name": "t1", "description": "d", "parameters": { "type": "object" },
            "handler": { "type": "webhook", "url": "https://example.invalid", "timeoutMs": 1000 } }),
        )
        .await
        .body["toolId"]
        .as_str()
        .unwrap()
        .to_owned();
    let skill = admin
        .post("/tenants/acme/skills", json!({ "name": "s1", "description": "d", "prompt": "p" }))
        .await
        .body["skillId"]
        .as_str()
        .unwrap()
        .to_owned();
    let run = admin
        .post("/events?wait=30", json!({ "id": "x-1", "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": "acme", "conversationId": "c-x", "messageId": "m-x", "channel": { "platform": "webchat" },
                        "conversation": { "status": "open" }, "message": { "direction": "inbound", "text": "a human please" } } }))
        .await;
    let session = run.body["execution"]["sessionId"].as_str().unwrap().to_owned();
    let execution = run.body["execution"]["executionId"].as_str().unwrap().to_owned();
    let agent = "01JD0000SVPP0RT0AGENT00001";
    let trigger = "01JD0000TR1GGER0CHAT000001";
    // and a turn of acme's paused for a person's approval of its handoff
    let gated = json!({ "name": "Gated", "systemPrompt": "You hand over.", "model": "anthropic.claude-3-haiku-20240307-v1:0",
                        "tools": ["send_message", "handoff_to_human"], "approvals": { "handoff_to_human": {} } });
    let gated = admin.post("/tenants/acme/agents", gated).await.body["agentId"].as_str().unwrap().to_owned();
    let invoked = json!({ "conversationId": "c-gated", "message": "a human please" });
    let paused = admin.post(&format!("/tenants/acme/agents/{gated}/invoke"), invoked).await;
    assert_eq!(paused.status, 200, "{}", paused.body);
    let paused_session = paused.body["sessionId"].as_str().unwrap().to_owned();
    let approvals = admin.get("/tenants/acme/approvals").await.body;
    let approval = approvals["approvals"][0]["approvalId"].as_str().unwrap_or_else(|| panic!("{approvals}")).to_owned();
    // and a manual trigger of acme's
    let manual = json!({ "name": "by hand", "agentId": agent, "eventType": "manual" });
    let manual = admin.post("/tenants/acme/triggers", manual).await.body["triggerId"].as_str().unwrap().to_owned();
    // when the intruder uses acme's ids, under acme's path and under its own
    let mut corpus: Vec<(Method, String, Option<Value>)> = Vec::new();
    for base in ["/tenants/acme", "/tenants/intruder"] {
        for (kind, id) in
            [("agents", agent), ("triggers", trigger), ("tools", tool.as_str()), ("skills", skill.as_str())]
        {
            corpus.push((Method::GET, format!("{base}/{kind}/{id}"), None));
            corpus.push((Method::PUT, format!("{base}/{kind}/{id}"), Some(agent_body("x"))));
            corpus.push((Method::DELETE, format!("{base}/{kind}/{id}"), None));
            corpus.push((Method::GET, format!("{base}/{kind}/{id}/versions"), None));
            corpus.push((Method::GET, format!("{base}/{kind}/{id}/versions/1"), None));
            corpus.push((Method::GET, format!("{base}/{kind}/{id}/versions/1/diff?to=1"), None));
            corpus.push((Method::POST, format!("{base}/{kind}/{id}/rollback"), Some(json!({ "version": 1 }))));
        }
        corpus.push((Method::POST, format!("{base}/agents/{agent}/invoke"), Some(json!({ "conversationId": "c-x" }))));
        corpus.push((
            Method::POST,
            format!("{base}/triggers/{manual}/run"),
            Some(json!({ "input": "a human please" })),
        ));
        corpus.push((
            Method::POST,
            format!("{base}/triggers/{manual}/run"),
            Some(json!({ "input": "mine", "conversationId": "c-x" })),
        ));
        corpus.push((Method::GET, format!("{base}/sessions/{session}"), None));
        corpus.push((
            Method::POST,
            format!("{base}/sessions/{session}/handoff"),
            Some(json!({ "targetType": "agent", "targetAgentId": agent, "reason": "x" })),
        ));
        corpus.push((Method::POST, format!("{base}/sessions/{session}/claim"), Some(json!({}))));
        corpus.push((
            Method::POST,
            format!("{base}/sessions/{session}/messages"),
            Some(json!({ "text": "hello from elsewhere" })),
        ));
        corpus.push((Method::POST, format!("{base}/sessions/{session}/end"), Some(json!({}))));
        for s in [&session, &paused_session] {
            corpus.push((Method::POST, format!("{base}/sessions/{s}/cancel"), Some(json!({ "reason": "mine now" }))));
        }
        corpus.push((Method::GET, format!("{base}/sessions/{session}/executions"), None));
        corpus.push((Method::GET, format!("{base}/executions/{execution}"), None));
        corpus.push((Method::GET, format!("{base}/executions/{execution}/model-calls"), None));
        corpus.push((Method::POST, format!("{base}/executions/{execution}/replay"), Some(json!({}))));
        corpus.push((Method::GET, format!("{base}/executions?sourceId=x-1"), None));
        corpus.push((Method::GET, format!("{base}/conversations/c-x/sessions"), None));
        corpus.push((Method::GET, format!("{base}/conversations/c-x/messages"), None));
        corpus.push((Method::GET, format!("{base}/usage"), None));
        corpus.push((Method::GET, format!("{base}/activity"), None));
        corpus.push((Method::GET, format!("{base}/insights?groupBy=agent,version,variant,channel,day"), None));
        corpus.push((Method::GET, format!("{base}/sessions?status=handed_off"), None));
        corpus.push((Method::POST, format!("{base}/triggers/test"), Some(json!({ "message": "a human please" }))));
        corpus.push((Method::POST, format!("{base}/tools/{tool}/refresh"), Some(json!({}))));
        let mcp_server = json!({ "url": "https://127.0.0.1:9/mcp", "secretRef": "hooks" });
        corpus.push((Method::POST, format!("{base}/tools/discover"), Some(mcp_server)));
        corpus.push((Method::GET, format!("{base}/approvals"), None));
        corpus.push((Method::GET, format!("{base}/approvals/{approval}"), None));
        corpus.push((Method::POST, format!("{base}/approvals/{approval}/approve"), Some(json!({}))));
        corpus.push((Method::POST, format!("{base}/approvals/{approval}/deny"), Some(json!({ "reason": "mine now" }))));
    }
    corpus.push((Method::GET, "/tenants/acme".into(), None));
    corpus.push((Method::PATCH, "/tenants/acme".into(), Some(json!({ "status": "suspended" }))));
    corpus.push((Method::PATCH, "/tenants/acme".into(), Some(json!({ "limits": { "invocationsPerMinute": 1 } }))));
    corpus.push((Method::PATCH, "/tenants/acme".into(), Some(json!({ "recording": "off" }))));
    corpus.push((Method::PATCH, "/tenants/intruder".into(), Some(json!({ "status": "active" }))));
    corpus.push((Method::DELETE, "/tenants/acme".into(), None));
    corpus.push((Method::DELETE, "/tenants/intruder".into(), None));
    for kind in ["agents", "triggers", "tools", "skills", "events"] {
        corpus.push((Method::GET, format!("/tenants/acme/{kind}"), None));
        corpus.push((Method::POST, format!("/tenants/acme/{kind}"), Some(agent_body("x"))));
    }
    corpus.push((Method::GET, "/tenants/acme/events/stream".into(), None));
    corpus.push((Method::POST, "/tenants/acme/events/push".into(), Some(json!({}))));
    corpus.push((Method::POST, "/tenants/intruder/events/push".into(), Some(json!({}))));
    let acme_bundle: Value =
        serde_json::from_str(&std::fs::read_to_string(examples().join("tenant.json")).unwrap()).unwrap();
    corpus.push((Method::POST, "/tenants/acme/apply".into(), Some(acme_bundle.clone())));
    corpus.push((Method::POST, "/tenants/acme/apply?dryRun=true".into(), Some(acme_bundle)));
    corpus.push((Method::POST, "/tenants".into(), Some(json!({ "tenantId": "acme2", "name": "x" }))));
    // the contract is no tenant's: anyone may read it
    corpus.push((Method::GET, "/openapi.json".into(), None));
    // acme's keys and who is signed in there are acme's
    let grant = json!({ "principal": "acme-bot", "role": "viewer" });
    let acme_key = admin.post("/tenants/acme/keys", grant.clone()).await.body["keyId"].as_str().unwrap().to_owned();
    corpus.push((Method::POST, "/tenants/acme/keys".into(), Some(grant)));
    corpus.push((Method::GET, "/tenants/acme/keys".into(), None));
    corpus.push((Method::DELETE, format!("/tenants/acme/keys/{acme_key}"), None));
    corpus.push((Method::POST, format!("/tenants/acme/keys/{acme_key}/rotate"), Some(json!({}))));
    corpus.push((Method::GET, "/tenants/acme/me".into(), None));
    let secrets = [
        agent,
        trigger,
        &tool,
        &skill,
        &session,
        &execution,
        "a human please",
        "Front-line support",
        &approval,
        &gated,
        &paused_session,
        &manual,
    ];
    for (method, path, body) in corpus {
        let r = intruder.call(method.clone(), &path, body, &[("if-match", "\"1\""), ("idempotency-key", "k-1")]).await;
        let own_tenant_listing_or_public = path.starts_with("/tenants/intruder/conversations")
            || path == "/tenants/intruder/usage"
            || path == "/tenants/intruder/activity"
            || path.starts_with("/tenants/intruder/insights?")
            || path.starts_with("/tenants/intruder/sessions?")
            || path == "/tenants/intruder/triggers/test"
            || path == "/tenants/intruder/approvals"
            || path == "/openapi.json";
        // then nothing is found, nothing is changed, and no acme data appears in any answer
        if own_tenant_listing_or_public {
            assert_eq!(r.status, 200, "{method} {path}");
        } else if path == "/tenants/intruder/tools/discover" {
            // its own tenant's listing of a server, which the address rules refuse
            assert_eq!(r.status, 422, "{method} {path} → {}", r.body);
        } else if path == "/tenants" || path == "/tenants/intruder" && method != Method::GET {
            // the platform's: an owner's role does not reach it (its own tenant's status,
            // limits and deletion are an admin's), whatever it names
            assert_eq!(r.status, 403, "{method} {path} → {}", r.body);
        } else {
            assert!(matches!(r.status.as_u16(), 404 | 405), "{method} {path} → {} {}", r.status, r.body);
        }
        let text = r.body.to_string();
        // (an id the intruder sent itself may be echoed in "no agent '…'"; nothing else may appear)
        for s in secrets.iter().filter(|s| !path.contains(**s)) {
            assert!(!text.contains(*s), "{method} {path} leaked {s}: {text}");
        }
    }
    // acme's approval is still waiting, undecided (neither decided nor its turn cancelled)
    let still = admin.get(&format!("/tenants/acme/approvals/{approval}")).await;
    assert_eq!(still.body["status"], "pending", "{}", still.body);
    // a streamed invoke of acme's agent is refused before any stream starts
    for base in ["/tenants/acme", "/tenants/intruder"] {
        let path = format!("{base}/agents/{agent}/invoke");
        let r = intruder
            .call(Method::POST, &path, Some(json!({ "conversationId": "c-x" })), &[("accept", "text/event-stream")])
            .await;
        assert_eq!(r.status, 404, "{path}: {}", r.body);
        assert_eq!(r.headers["content-type"], "application/problem+json", "{path}");
    }
    // the intruder's usage is its own (none), while acme's counts the message it answered
    let theirs = intruder.get("/tenants/intruder/usage").await;
    assert_eq!((theirs.body["rows"].clone(), theirs.body["total"]["calls"].clone()), (json!([]), json!(0)));
    let acme = admin.get("/tenants/acme/usage").await;
    assert!(acme.body["total"]["calls"].as_u64().unwrap() >= 1, "{}", acme.body);
    // and so is its activity
    let theirs = intruder.get("/tenants/intruder/activity").await;
    assert_eq!((theirs.body["total"].clone(), theirs.body["executions"].clone()), (json!(0), json!({})));
    assert!(admin.get("/tenants/acme/activity").await.body["total"].as_u64().unwrap() >= 1);
    // and its insights
    let theirs = intruder.get("/tenants/intruder/insights?groupBy=agent").await;
    assert_eq!((theirs.body["total"]["executions"].clone(), theirs.body["groups"].clone()), (json!(0), json!([])));
    assert!(admin.get("/tenants/acme/insights").await.body["total"]["executions"].as_u64().unwrap() >= 1);
    // and acme's records are intact
    assert_eq!(admin.get(&format!("/tenants/acme/agents/{agent}")).await.headers["etag"], "\"1\"");
    assert_eq!(admin.get(&format!("/tenants/acme/tools/{tool}")).await.status, 200);
    let s = admin.get(&format!("/tenants/acme/sessions/{session}")).await;
    assert_eq!((s.body["status"].as_str(), s.body.get("claim")), (Some("handed_off"), None), "{}", s.body);
    let log = admin.get("/tenants/acme/conversations/c-x/messages").await.body.to_string();
    assert!(!log.contains("hello from elsewhere"), "{log}");
}

#[tokio::test]
async fn a_suspended_tenant_records_messages_without_answering_them_until_reactivated() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let admin = Api::new(&server, &server.admin);
    let own = Api::new(&server, &tenant_key(&server, "acme"));
    // the tenant reads its own record; only an admin changes its status or limits
    let record = own.get("/tenants/acme").await;
    assert_eq!((record.status.as_u16(), record.body["status"].as_str()), (200, Some("active")), "{}", record.body);
    for body in [json!({ "status": "suspended" }), json!({ "limits": { "invocationsPerMinute": 1000 } })] {
        let r = own.call(Method::PATCH, "/tenants/acme", Some(body), &[]).await;
        assert_eq!(r.status, 403, "{}", r.body);
        assert!(r.body["detail"].as_str().unwrap().contains("admin"), "{}", r.body);
    }
    for (body, pointer) in [
        (json!({ "status": "paused" }), "/status"),
        (json!({ "name": "" }), "/name"),
        (json!({ "plan": "gold" }), "/plan"),
    ] {
        let r = admin.call(Method::PATCH, "/tenants/acme", Some(body.clone()), &[]).await;
        assert_eq!((r.status.as_u16(), pointers(&r)), (400, vec![pointer.to_owned()]), "{body}");
    }
    let r = admin
        .call(Method::PATCH, "/tenants/acme", Some(json!({ "status": "suspended", "name": "Acme (paused)" })), &[])
        .await;
    assert_eq!((r.body["status"].as_str(), r.body["name"].as_str()), (Some("suspended"), Some("Acme (paused)")));
    // suspended: a message is recorded but not answered, and invoke is refused
    let event = |id: &str| {
        json!({ "id": id, "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": "acme", "conversationId": "c-p", "messageId": format!("m-{id}"),
                        "channel": { "platform": "webchat" }, "conversation": { "status": "open" },
                        "message": { "direction": "inbound", "text": "Hi there" } } })
    };
    let r = admin.post("/events?wait=5", event("p-1")).await;
    assert_eq!((r.body["outcome"].as_str(), r.body.get("execution")), (Some("suspended"), None), "{}", r.body);
    let log = admin.get("/tenants/acme/conversations/c-p/messages").await;
    assert_eq!(log.body["messages"].as_array().unwrap().len(), 1, "the customer's message is kept");
    let invoke =
        admin.post("/tenants/acme/agents/01JD0000SVPP0RT0AGENT00001/invoke", json!({ "conversationId": "c-q" })).await;
    assert_eq!(invoke.status.as_u16(), 409, "{}", invoke.body);
    // the configuration stays readable
    assert_eq!(admin.get("/tenants/acme/agents").await.status, 200);
    // active again: the next message is answered
    admin.call(Method::PATCH, "/tenants/acme", Some(json!({ "status": "active" })), &[]).await;
    let r = admin.post("/events?wait=30", event("p-2")).await;
    assert_eq!(r.body["execution"]["status"], "success", "{}", r.body);
}

#[tokio::test]
async fn tenant_limits_change_over_the_api_and_refuse_events_and_invoke_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let admin = Api::new(&server, &server.admin);
    // the brief's defaults until changed
    let record = admin.get("/tenants/acme").await;
    assert_eq!(
        record.body["limits"],
        json!({ "invocationsPerMinute": 60, "tokensPerDay": 1_000_000, "concurrentSessions": 100,
                "sessionIdleMinutes": 30, "onLimit": { "action": "none" } })
    );
    for (body, pointer) in [
        (json!({ "limits": { "invocationsPerMinute": 0 } }), "/limits/invocationsPerMinute"),
        (json!({ "limits": { "tokensPerDay": -1 } }), "/limits/tokensPerDay"),
        (json!({ "limits": { "onLimit": { "action": "shout" } } }), "/limits/onLimit/action"),
        (json!({ "limits": { "onLimit": { "action": "message", "text": " " } } }), "/limits/onLimit/text"),
        (json!({ "limits": { "perHour": 5 } }), "/limits/perHour"),
        (json!({ "limits": { "concurrentSessions": 10_001 } }), "/limits/concurrentSessions"),
        (json!({ "limits": { "sessionIdleMinutes": "soon" } }), "/limits/sessionIdleMinutes"),
        (json!({ "limits": { "closeIdleSessions": "yes" } }), "/limits/closeIdleSessions"),
    ] {
        let r = admin.call(Method::PATCH, "/tenants/acme", Some(body.clone()), &[]).await;
        assert_eq!((r.status.as_u16(), pointers(&r)), (400, vec![pointer.to_owned()]), "{body} → {}", r.body);
    }
    // closing idle sessions is turned on and off like any other limit, and said only when on
    let r =
        admin.call(Method::PATCH, "/tenants/acme", Some(json!({ "limits": { "closeIdleSessions": true } })), &[]).await;
    assert_eq!((r.status.as_u16(), &r.body["limits"]["closeIdleSessions"]), (200, &json!(true)), "{}", r.body);
    let r = admin
        .call(Method::PATCH, "/tenants/acme", Some(json!({ "limits": { "closeIdleSessions": false } })), &[])
        .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.body);
    assert!(r.body["limits"].get("closeIdleSessions").is_none(), "{}", r.body);
    let busy =
        json!({ "limits": { "invocationsPerMinute": 1, "onLimit": { "action": "message", "text": "Busy, sorry." } } });
    let r = admin.call(Method::PATCH, "/tenants/acme", Some(busy), &[]).await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.body);
    assert_eq!(admin.get("/tenants/acme").await.body["limits"]["invocationsPerMinute"], 1);

    // one invocation a minute: of three quick messages at least one falls in a minute already
    // used (wherever the minute turns), and it is recorded, not run, and answered as configured
    let event = |id: &str| {
        json!({ "id": id, "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": "acme", "conversationId": format!("c-{id}"), "messageId": format!("m-{id}"),
                        "channel": { "platform": "webchat" }, "conversation": { "status": "open" },
                        "message": { "direction": "inbound", "text": "Hi there" } } })
    };
    let mut refused = None;
    for id in ["l-1", "l-2", "l-3"] {
        let r = admin.post("/events?wait=30", event(id)).await;
        if r.body["outcome"] == "rate_limited" {
            refused = Some((id, r.body));
            break;
        }
        assert_eq!(r.body["execution"]["status"], "success", "{}", r.body);
    }
    let (id, body) = refused.expect("a second message within a minute is refused");
    assert_eq!(body["limit"], "invocationsPerMinute", "{body}");
    let execution = &body["execution"];
    assert_eq!(
        (execution["status"].as_str(), execution["error"]["kind"].as_str()),
        (Some("rate_limited"), Some("limit"))
    );
    assert_eq!(execution["modelCalls"], json!([]));
    let log = admin.get(&format!("/tenants/acme/conversations/c-{id}/messages")).await;
    let texts: Vec<&str> = log.body["messages"].as_array().unwrap().iter().filter_map(|m| m["text"].as_str()).collect();
    assert_eq!(texts, ["Hi there", "Busy, sorry."]);

    // invoke: 429 with Retry-After (at most the minute), as problem+json; nothing runs
    let mut limited = None;
    for n in 0..3 {
        let r = admin
            .post(
                "/tenants/acme/agents/01JD0000SVPP0RT0AGENT00001/invoke",
                json!({ "conversationId": format!("c-i{n}") }),
            )
            .await;
        if r.status.as_u16() == 429 {
            limited = Some(r);
            break;
        }
        assert_eq!(r.status.as_u16(), 200, "{}", r.body);
    }
    let r = limited.expect("a second invoke within a minute is refused");
    let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(r.body["type"], "urn:switchboard:problem:rate-limited", "{}", r.body);
    assert!(r.body["detail"].as_str().unwrap().contains("invocationsPerMinute (1)"), "{}", r.body);
    // and the window's refusals were announced once
    let events = admin.get("/tenants/acme/events").await;
    let reached: Vec<&Value> = events.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"]["detailType"] == "tenant.limit.reached")
        .collect();
    assert!(!reached.is_empty() && reached.len() <= 2, "one per window (the test may span two): {reached:?}");
    // and every refusal, the invoke's included, is a limit hit on the admin's scrape
    let scrape = reqwest::Client::new()
        .get(format!("{}/metrics", server.base))
        .bearer_auth(&server.admin)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let hits: f64 = scrape
        .lines()
        .filter(|l| l.starts_with("switchboard_limit_hits_total{") && l.contains("tenant=\"acme\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(hits >= 2.0, "a refused event and a refused invoke at least: {scrape}");
}

#[tokio::test]
async fn an_owner_issues_lists_rotates_and_revokes_the_tenants_keys_for_named_principals() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let owner = Api::new(&server, &tenant_key(&server, "acme"));
    create_tenant(&server, "other");
    let grant = json!({ "principal": "alice@acme.example", "role": "builder", "expiresAt": "2099-01-01T00:00:00Z" });
    let issued = owner.post("/tenants/acme/keys", grant).await;
    assert_eq!(issued.status, 201, "{}", issued.body);
    let (key, id) =
        (issued.body["key"].as_str().unwrap().to_owned(), issued.body["keyId"].as_str().unwrap().to_owned());
    assert!(key.starts_with("sbk_") && id.len() == 16, "{}", issued.body);
    assert_eq!(
        (issued.body["principal"].as_str(), issued.body["role"].as_str(), issued.body["expiresAt"].as_str()),
        (Some("alice@acme.example"), Some("builder"), Some("2099-01-01T00:00:00Z"))
    );
    assert_eq!(issued.headers["location"], format!("/tenants/acme/keys/{id}").as_str());
    assert_eq!(issued.headers["cache-control"], "no-store");
    // the new key works for its tenant only, as its principal
    let alice = Api::new(&server, &key);
    let me = alice.get("/tenants/acme/me").await;
    assert_eq!(
        (me.body["principal"].as_str(), me.body["role"].as_str()),
        (Some("alice@acme.example"), Some("builder"))
    );
    assert_eq!(me.body["groups"], json!(["read", "configure", "invoke"]));
    assert_eq!(alice.get("/tenants/other/agents").await.status, 404);
    // listed by id with its principal and last use, never the key itself
    let listed = owner.get("/tenants/acme/keys").await;
    let row = listed.body["keys"].as_array().unwrap().iter().find(|k| k["keyId"] == id.as_str()).unwrap().clone();
    assert_eq!((row["principal"].as_str(), row["role"].as_str()), (Some("alice@acme.example"), Some("builder")));
    assert!(row["lastUsedAt"].is_string(), "used once already: {row}");
    assert!(!listed.body.to_string().contains(&key), "a listed key leaks: {}", listed.body);
    // a builder may not manage keys: 403 naming who may
    let refused = alice.post("/tenants/acme/keys", json!({ "principal": "mallory", "role": "owner" })).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(refused.body["type"], "urn:switchboard:problem:forbidden");
    assert!(refused.body["detail"].as_str().unwrap().contains("owner or admin"), "{}", refused.body);
    // bad grants name their fields
    for (body, pointer) in [
        (json!({ "principal": "", "role": "viewer" }), "/principal"),
        (json!({ "principal": "x", "role": "admin" }), "/role"),
        (json!({ "principal": "x", "role": "root" }), "/role"),
        (json!({ "principal": "x", "role": "viewer", "expiresAt": "2000-01-01T00:00:00Z" }), "/expiresAt"),
        (json!({ "principal": "x", "role": "viewer", "expiresAt": "tomorrow" }), "/expiresAt"),
        (json!({ "role": "viewer" }), "/principal"),
    ] {
        assert_eq!(pointers(&owner.post("/tenants/acme/keys", body.clone()).await), [pointer], "{body}");
    }
    // rotated: a new key for the same principal, and the old one stops at once
    let rotated = owner.post(&format!("/tenants/acme/keys/{id}/rotate"), json!({})).await;
    assert_eq!(rotated.status, 201, "{}", rotated.body);
    assert_eq!(rotated.body["principal"], "alice@acme.example");
    assert_eq!(alice.get("/tenants/acme/agents").await.status, 401);
    let new_id = rotated.body["keyId"].as_str().unwrap().to_owned();
    let alice = Api::new(&server, rotated.body["key"].as_str().unwrap());
    assert_eq!(alice.get("/tenants/acme/agents").await.status, 200);
    assert_eq!(owner.post(&format!("/tenants/acme/keys/{id}/rotate"), json!({})).await.status, 404);
    // revoked: the key stops working at once; revoking again, or a malformed id, finds nothing
    let revoked = owner.call(Method::DELETE, &format!("/tenants/acme/keys/{new_id}"), None, &[]).await;
    assert_eq!(revoked.status, 204);
    assert_eq!(alice.get("/tenants/acme/agents").await.status, 401);
    assert_eq!(owner.call(Method::DELETE, &format!("/tenants/acme/keys/{new_id}"), None, &[]).await.status, 404);
    assert_eq!(owner.call(Method::DELETE, "/tenants/acme/keys/zzzz", None, &[]).await.status, 404);
    // keys of a tenant that does not exist, or of another tenant
    let admin = Api::new(&server, &server.admin);
    assert_eq!(admin.post("/tenants/nobody/keys", json!({ "principal": "x", "role": "viewer" })).await.status, 404);
    assert_eq!(owner.get("/tenants/other/keys").await.status, 404);
}

#[tokio::test]
async fn the_sessions_cap_answers_invoke_with_429_until_a_slot_frees() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let admin = Api::new(&server, &server.admin);
    let r =
        admin.call(Method::PATCH, "/tenants/acme", Some(json!({ "limits": { "concurrentSessions": 1 } })), &[]).await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.body);
    assert_eq!(r.body["limits"]["invocationsPerMinute"], 60, "other limits unchanged: {}", r.body);
    let invoke = |conversation: &str| {
        let body = json!({ "conversationId": conversation, "message": "where is my order" });
        admin.post("/tenants/acme/agents/01JD0000SVPP0RT0AGENT00001/invoke", body)
    };
    let first = invoke("c-first").await;
    assert_eq!(first.status.as_u16(), 200, "{}", first.body);
    let session = first.body["sessionId"].as_str().unwrap().to_owned();
    // the same conversation goes on; a second one waits for a slot
    assert_eq!(invoke("c-first").await.status.as_u16(), 200);
    let r = invoke("c-second").await;
    assert_eq!(r.status.as_u16(), 429, "{}", r.body);
    assert_eq!(r.body["type"], "urn:switchboard:problem:rate-limited", "{}", r.body);
    assert!(r.body["detail"].as_str().unwrap().contains("concurrentSessions (1)"), "{}", r.body);
    let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=1800).contains(&retry), "Retry-After {retry}: when the first slot goes idle");
    // a human takes c-first over: its slot frees and c-second is answered
    let r = admin
        .post(&format!("/tenants/acme/sessions/{session}/handoff"), json!({ "targetType": "human", "reason": "VIP" }))
        .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.body);
    assert_eq!(invoke("c-second").await.status.as_u16(), 200);
}

#[tokio::test]
async fn usage_reports_tokens_by_day_agent_and_model_and_refuses_bad_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let api = Api::new(&server, &server.admin);
    let run = api
        .post("/events?wait=30", json!({ "id": "u-1", "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": "acme", "conversationId": "c-u", "messageId": "m-u", "channel": { "platform": "webchat" },
                        "conversation": { "status": "open" }, "message": { "direction": "inbound", "text": "where is my order" } } }))
        .await;
    let execution = &run.body["execution"];
    let calls = execution["modelCalls"].as_array().unwrap();
    assert!(!calls.is_empty(), "{execution}");
    // the scripted test double has no price: its cost is unknown (null), never 0
    assert_eq!(execution["costUsd"], Value::Null, "{execution}");
    assert!(calls.iter().all(|c| c["costUsd"].is_null()));
    let today = execution["createdAt"].as_str().unwrap()[..10].to_owned();
    let report = api.get(&format!("/tenants/acme/usage?from={today}&to={today}")).await;
    assert_eq!(report.status, 200, "{}", report.body);
    let rows = report.body["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{}", report.body);
    let row = &rows[0];
    assert_eq!((row["day"].as_str(), row["agentId"].clone()), (Some(today.as_str()), execution["agentId"].clone()));
    assert_eq!(row["model"], calls[0]["model"]);
    assert_eq!(row["calls"], json!(calls.len()));
    assert_eq!(row["unpricedCalls"], json!(calls.len()));
    assert_eq!(row["costUsd"], Value::Null);
    let input: u64 = calls.iter().map(|c| c["usage"]["inputTokens"].as_u64().unwrap()).sum();
    assert_eq!(row["inputTokens"], json!(input));
    assert_eq!(report.body["byDay"][0]["day"], json!(today));
    assert_eq!(report.body["total"]["calls"], json!(calls.len()));
    assert_eq!(report.body["currency"], "USD");
    // the default range (the last 30 days) includes today; a redelivered event adds nothing
    api.post(
        "/events?wait=30",
        json!({ "id": "u-1", "source": "conversations-service", "detail-type": "message.new",
        "detail": { "tenantId": "acme", "conversationId": "c-u", "messageId": "m-u", "channel": {}, "conversation": {},
                    "message": { "direction": "inbound", "text": "where is my order" } } }),
    )
    .await;
    assert_eq!(api.get("/tenants/acme/usage").await.body["total"]["calls"], json!(calls.len()));
    // bad ranges name the parameter at fault
    for (query, pointer) in [
        ("from=2026-13-01", "/query/from"),
        ("to=yesterday", "/query/to"),
        ("from=2026-11-02&to=2026-11-01", "/query/from"),
        ("from=2020-01-01&to=2026-11-01", "/query/from"),
        ("since=2026-11-01", "/query/since"),
        // the ends of what a date parses to (a signed year of more digits): refused, not
        // overflowed (29 days before chrono's first day panicked the request's task)
        ("to=-262143-01-01", "/query/to"),
        ("to=%2B262142-12-31", "/query/to"),
    ] {
        let r = api.get(&format!("/tenants/acme/usage?{query}")).await;
        assert_eq!(r.status, 400, "{query}: {}", r.body);
        assert_eq!(pointers(&r), [pointer], "{query}");
    }
}

#[tokio::test]
async fn activity_counts_executions_by_hour_and_status_and_refuses_bad_spans() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let api = Api::new(&server, &server.admin);
    let message = |id: &str, conversation: &str, text: &str| {
        json!({ "id": id, "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": "acme", "conversationId": conversation, "messageId": format!("m-{id}"),
                        "channel": { "platform": "webchat" }, "conversation": { "status": "open" },
                        "message": { "direction": "inbound", "text": text } } })
    };
    let answered = api.post("/events?wait=30", message("a-1", "c-a", "where is my order")).await;
    let handed = api.post("/events?wait=30", message("a-2", "c-b", "I want a human now")).await;
    let statuses = [&answered, &handed].map(|r| r.body["execution"]["status"].as_str().unwrap().to_owned());
    assert_eq!(statuses, ["success", "handed_off"], "{} {}", answered.body, handed.body);
    // a redelivery adds nothing
    api.post("/events?wait=30", message("a-1", "c-a", "where is my order")).await;

    let report = api.get("/tenants/acme/activity?hours=3").await;
    assert_eq!(report.status, 200, "{}", report.body);
    let hours = report.body["byHour"].as_array().unwrap();
    assert_eq!(hours.len(), 3, "every hour listed: {}", report.body);
    assert_eq!(report.body["from"], hours[0]["hour"]);
    assert_eq!(report.body["to"], hours[2]["hour"]);
    // both executions were committed in the current hour, which is the last (a turn of the clock
    // between them would put one in the hour before: count across the span)
    let created: Vec<&str> =
        [&answered, &handed].iter().map(|r| r.body["execution"]["createdAt"].as_str().unwrap()).collect();
    for (i, at) in created.iter().enumerate() {
        let hour = format!("{}:00:00Z", &at[..13]);
        let row = hours.iter().find(|h| h["hour"] == json!(hour)).unwrap_or_else(|| panic!("{hour}: {}", report.body));
        assert!(row["executions"][&statuses[i]].as_u64().unwrap() >= 1, "{row}");
    }
    assert_eq!(report.body["executions"], json!({ "success": 1, "handed_off": 1 }));
    assert_eq!(report.body["total"], 2);
    let summed: u64 = hours.iter().map(|h| h["total"].as_u64().unwrap()).sum();
    assert_eq!(summed, 2);
    // the default span is a day
    assert_eq!(api.get("/tenants/acme/activity").await.body["byHour"].as_array().unwrap().len(), 24);
    // bad spans name the parameter at fault
    for (query, pointer) in [
        ("hours=0", "/query/hours"),
        ("hours=169", "/query/hours"),
        ("hours=a", "/query/hours"),
        ("days=1", "/query/days"),
    ] {
        let r = api.get(&format!("/tenants/acme/activity?{query}")).await;
        assert_eq!(r.status, 400, "{query}: {}", r.body);
        assert_eq!(pointers(&r), [pointer], "{query}");
    }
}

#[tokio::test]
async fn an_operator_takes_a_conversation_over_and_hands_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let api = Api::new(&server, &server.admin);
    let event = |id: &str, text: &str| {
        json!({ "id": id, "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": "acme", "conversationId": "c-op", "messageId": format!("m-{id}"),
                        "channel": { "platform": "webchat" }, "conversation": { "status": "open" },
                        "message": { "direction": "inbound", "text": text } } })
    };
    let first = api.post("/events?wait=30", event("o-1", "Hi there")).await;
    let session = first.body["execution"]["sessionId"].as_str().unwrap().to_owned();
    let path = format!("/tenants/acme/sessions/{session}/handoff");

    // bad requests name the field
    assert_eq!(pointers(&api.post(&path, json!({ "targetType": "agent", "reason": "x" })).await), ["/targetAgentId"]);
    assert_eq!(pointers(&api.post(&path, json!({ "targetType": "robot", "reason": "x" })).await), ["/targetType"]);
    assert_eq!(pointers(&api.post(&path, json!({ "targetType": "human", "reason": " " })).await), ["/reason"]);
    let r = api
        .post(&path, json!({ "targetType": "agent", "targetAgentId": "01JD0000F0VRTH0AGENT000004", "reason": "x" }))
        .await;
    assert_eq!(pointers(&r), ["/targetAgentId"]);

    // an operator takes the conversation: the event goes out and agents stop answering
    let taken = api.post(&path, json!({ "targetType": "human", "reason": "VIP customer" })).await;
    assert_eq!(taken.status, 200, "{}", taken.body);
    assert!(taken.body["newSessionId"].is_null());
    let events = api.get("/tenants/acme/events").await.body["events"].clone();
    let handoff =
        events.as_array().unwrap().iter().find(|e| e["event"]["detailType"] == "session.handoff.human").unwrap();
    assert_eq!(handoff["event"]["detail"]["reason"], "VIP customer");
    // (waited for: the message joins the human's transcript, a commit a hand-back racing it
    // would meet as a version conflict)
    let owned = api.post("/events?wait=30", event("o-2", "hello?")).await.body;
    assert_eq!(
        (owned["outcome"].as_str(), owned["execution"]["status"].as_str()),
        (Some("human_owned"), Some("skipped"))
    );
    assert_eq!(api.post(&path, json!({ "targetType": "human", "reason": "again" })).await.status, 409);

    // and hands it back to the billing specialist, who answers the next message
    let back = api
        .post(&path, json!({ "targetType": "agent", "targetAgentId": "01JD0000PAYMENTS0AGENT0002", "reason": "refund approved" }))
        .await;
    assert_eq!(back.status, 200, "{}", back.body);
    let new_session = back.body["newSessionId"].as_str().unwrap().to_owned();
    let next = api.post("/events?wait=30", event("o-3", "so?")).await;
    assert_eq!(next.body["execution"]["sessionId"], new_session.as_str());
    assert_eq!(next.body["execution"]["agentId"], "01JD0000PAYMENTS0AGENT0002");
    let s = api.get(&format!("/tenants/acme/sessions/{new_session}")).await.body;
    assert_eq!((s["handoffDepth"].as_u64(), s["parentSessionId"].as_str()), (Some(0), Some(session.as_str())));
    // every move is in the old session's execution history
    let history = api.get(&format!("/tenants/acme/sessions/{session}/executions")).await.body["items"].clone();
    let kinds: Vec<_> = history.as_array().unwrap().iter().map(|e| e["actions"][0]["type"].clone()).collect();
    assert!(kinds.contains(&json!("handoff_to_human")) && kinds.contains(&json!("handoff_to_agent")), "{kinds:?}");
    // the old session can no longer be handed anywhere
    assert_eq!(api.post(&path, json!({ "targetType": "human", "reason": "late" })).await.status, 409);
    // nor can another tenant touch it
    let other = Api::new(&server, &create_tenant(&server, "other"));
    assert_eq!(other.post(&path, json!({ "targetType": "human", "reason": "x" })).await.status, 404);
}

#[tokio::test]
async fn two_operators_race_for_a_claim_and_a_double_clicked_reply_is_sent_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let api = Api::new(&server, &server.admin);
    // eight operators, each signed in with a key of their own
    let ops: Vec<(String, Api)> = (0..8)
        .map(|i| {
            let name = format!("op-{i}");
            let key = common::role_key(&server, "acme", &name, switchboard_domain::access::Role::Operator);
            (name, Api::new(&server, &key))
        })
        .collect();
    let op = |name: &str| &ops.iter().find(|(n, _)| n == name).unwrap().1;
    let event = |id: &str, text: &str| {
        json!({ "id": id, "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": "acme", "conversationId": "c-race", "messageId": format!("m-{id}"),
                        "channel": { "platform": "webchat" }, "conversation": { "status": "open" },
                        "message": { "direction": "inbound", "text": text } } })
    };
    let active = api.post("/events?wait=30", event("r-1", "Where is my order #1234?")).await;
    let session = active.body["execution"]["sessionId"].as_str().unwrap().to_owned();
    let base = format!("/tenants/acme/sessions/{session}");
    // nothing to claim, say or end while an agent has the conversation
    assert_eq!(op("op-0").post(&format!("{base}/claim"), json!({})).await.status, 409);
    let say = |text: &str| json!({ "text": text });
    let r =
        op("op-0").call(Method::POST, &format!("{base}/messages"), Some(say("hi")), &[("idempotency-key", "a")]).await;
    assert_eq!(r.status, 409);
    assert_eq!(op("op-0").post(&format!("{base}/end"), json!({})).await.status, 409);
    let handed = api.post("/events?wait=30", event("r-2", "I want a human")).await;
    assert_eq!(handed.body["execution"]["status"], "handed_off");

    // eight operators claim at once: exactly one wins, the others hear who
    let claims = ops.iter().map(|(_, api)| {
        let path = format!("{base}/claim");
        async move { api.post(&path, json!({})).await }
    });
    let answers = futures::future::join_all(claims).await;
    let won: Vec<_> = answers.iter().filter(|r| r.status == 200).collect();
    assert_eq!(won.len(), 1, "{:?}", answers.iter().map(|r| r.status).collect::<Vec<_>>());
    let winner = won[0].body["claim"]["operator"].as_str().unwrap().to_owned();
    for lost in answers.iter().filter(|r| r.status != 200) {
        assert_eq!(lost.status, 409);
        assert!(lost.body["detail"].as_str().unwrap().contains(&winner), "{}", lost.body);
    }
    let records = api.get(&format!("{base}/executions?limit=100")).await.body["items"].clone();
    let claimed = records.as_array().unwrap().iter().filter(|e| e["input"]["operator"]["action"] == "claim").count();
    assert_eq!(claimed, 1, "one claim recorded");

    // a double click: the same key five times at once sends one message and records one reply
    let replies = (0..5).map(|_| {
        let (api, path, body) = (op(&winner), format!("{base}/messages"), say("On it, one moment."));
        async move { api.call(Method::POST, &path, Some(body), &[("idempotency-key", "click-1")]).await }
    });
    let answers = futures::future::join_all(replies).await;
    assert!(
        answers.iter().all(|r| r.status == 200 || r.status == 201),
        "{:?}",
        answers.iter().map(|r| &r.body).collect::<Vec<_>>()
    );
    assert_eq!(answers.iter().filter(|r| r.body["duplicate"] == false).count(), 1);
    let ids: std::collections::BTreeSet<_> = answers.iter().map(|r| r.body["messageId"].to_string()).collect();
    assert_eq!(ids.len(), 1, "every answer names the one message: {ids:?}");
    let log = api.get("/tenants/acme/conversations/c-race/messages").await.body["messages"].clone();
    let said: Vec<_> = log.as_array().unwrap().iter().filter(|m| m["text"] == "On it, one moment.").collect();
    assert_eq!((said.len(), said[0]["sender"].as_str()), (1, Some("human")));
    let s = api.get(&base).await.body;
    let in_transcript = s["transcript"].to_string().matches("[human operator] On it, one moment.").count();
    assert_eq!(in_transcript, 1, "{}", s["transcript"]);

    // the loser cannot reply or end; bad input names the field and changes nothing
    let loser = if winner == "op-0" { "op-1" } else { "op-0" };
    let r =
        op(loser).call(Method::POST, &format!("{base}/messages"), Some(say("me")), &[("idempotency-key", "b")]).await;
    assert_eq!(r.status, 409);
    assert_eq!(op(loser).post(&format!("{base}/end"), json!({})).await.status, 409);
    let bad = |body: Value, key: &'static str| {
        let (api, path) = (op(&winner), format!("{base}/messages"));
        async move { pointers(&api.call(Method::POST, &path, Some(body), &[("idempotency-key", key)]).await) }
    };
    assert_eq!(bad(say("   "), "c").await, ["/text"]);
    assert_eq!(bad(say(&"x".repeat(16 * 1024 + 1)), "c").await, ["/text"]);
    // the operator is the key's principal: naming anyone else is refused
    assert_eq!(bad(json!({ "operator": loser, "text": "hi" }), "c").await, ["/operator"]);
    assert_eq!(bad(json!({ "operator": "", "text": "hi" }), "c").await, ["/operator"]);
    assert_eq!(bad(say("hi"), "not a key!").await, ["/headers/Idempotency-Key"]);
    assert_eq!(bad(json!({ "text": "hi", "cc": "x" }), "c").await, ["/cc"]);
    let long_note = json!({ "note": "n".repeat(1001) });
    assert_eq!(pointers(&op(&winner).post(&format!("{base}/end"), long_note).await), ["/note"]);
    assert_eq!(op(&winner).post("/tenants/acme/sessions/not-a-ulid/claim", json!({})).await.status, 404);
    let unknown = "/tenants/acme/sessions/01ARZ3NDEKTSV4RRFFQ69G5FAV/claim";
    assert_eq!(op(&winner).post(unknown, json!({})).await.status, 404);
    let s2 = api.get(&base).await.body;
    assert_eq!(s2["version"], s["version"], "nothing refused changed the session");

    // the winner ends it: the event says who, and the conversation is closed to operators
    let r = op(&winner).post(&format!("{base}/end"), json!({ "operator": winner, "note": "Sorted out" })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let events = api.get("/tenants/acme/events").await.body["events"].clone();
    let ended = events.as_array().unwrap().iter().find(|e| e["event"]["detailType"] == "session.ended").unwrap();
    let d = &ended["event"]["detail"];
    assert_eq!(
        (d["endedBy"].as_str(), d["operator"].as_str(), d["summary"].as_str()),
        (Some("human"), Some(winner.as_str()), Some("Sorted out"))
    );
    assert_eq!(api.get(&base).await.body["status"], "completed");
    let r = op(&winner)
        .call(Method::POST, &format!("{base}/messages"), Some(say("late")), &[("idempotency-key", "d")])
        .await;
    assert_eq!(r.status, 409);
}

#[tokio::test]
async fn an_admin_deletes_a_suspended_tenant_and_nothing_of_it_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let admin = Api::new(&server, &server.admin);
    let key = admin.post("/tenants/acme/keys", json!({ "principal": "acme-owner", "role": "owner" })).await.body["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let own = Api::new(&server, &key);
    let other = Api::new(&server, &create_tenant(&server, "other"));
    let event = |id: &str, tenant: &str, text: &str| {
        json!({ "id": id, "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": tenant, "conversationId": "c-1", "messageId": format!("m-{id}"),
                        "channel": { "platform": "webchat" }, "conversation": { "status": "open" },
                        "message": { "direction": "inbound", "text": text } } })
    };
    let run = admin.post("/events?wait=30", event("d-1", "acme", "I want a human")).await;
    let session = run.body["execution"]["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(admin.post("/events", event("d-1", "other", "hello")).await.status, 202);

    // a live tenant is not deleted, and never by its own key
    let r = admin.call(Method::DELETE, "/tenants/acme", None, &[]).await;
    assert_eq!(r.status, 409);
    assert!(r.body["detail"].as_str().unwrap().contains("suspend it first"), "{}", r.body);
    assert_eq!(own.call(Method::DELETE, "/tenants/acme", None, &[]).await.status, 403);
    assert_eq!(admin.call(Method::DELETE, "/tenants/nobody", None, &[]).await.status, 404);
    assert_eq!(admin.get("/tenants/acme").await.status, 200, "still there");

    // suspended, then deleted
    let r = admin.call(Method::PATCH, "/tenants/acme", Some(json!({ "status": "suspended" })), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(admin.post("/events", event("d-2", "acme", "anyone?")).await.body["outcome"], "suspended");
    assert_eq!(admin.call(Method::DELETE, "/tenants/acme", None, &[]).await.status, 204);

    // nothing of it answers: the tenant, its key, its records, its log
    assert_eq!(admin.get("/tenants/acme").await.status, 404);
    assert_eq!(own.get("/tenants/acme/agents").await.status, 401, "its keys are gone");
    assert_eq!(admin.get(&format!("/tenants/acme/sessions/{session}")).await.status, 404);
    let r = admin.post("/events", event("d-3", "acme", "hello?")).await;
    assert_eq!((r.status.as_u16(), pointers(&r)), (422, vec!["/detail/tenantId".to_owned()]));
    // a tenant made again with the same id starts from nothing
    assert_eq!(admin.post("/tenants", json!({ "tenantId": "acme", "name": "Acme again" })).await.status, 201);
    let log = admin.get("/tenants/acme/conversations/c-1/messages").await;
    assert_eq!(log.body["messages"], json!([]), "{}", log.body);
    assert_eq!(admin.get("/tenants/acme/events").await.body["events"], json!([]));
    assert_eq!(admin.get("/tenants/acme/usage").await.body["rows"], json!([]));
    assert_eq!(admin.get("/tenants/acme/agents").await.body["items"], json!([]));
    // the other tenant is untouched
    let log = other.get("/tenants/other/conversations/c-1/messages").await;
    assert_eq!(log.body["messages"].as_array().unwrap().len(), 1, "{}", log.body);
}

#[tokio::test]
async fn a_replay_answers_the_same_actions_and_refuses_what_it_cannot_replay_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let api = Api::new(&server, &server.admin);
    let message = |id: &str| {
        json!({ "id": id, "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": "acme", "conversationId": format!("c-{id}"), "messageId": "m-1", "channel": { "platform": "webchat" },
                        "conversation": { "status": "open" }, "message": { "direction": "inbound", "text": "where is my order" } } })
    };
    // given an execution recorded in full
    let run = api.post("/events?wait=30", message("r-1")).await;
    let execution = run.body["execution"]["executionId"].as_str().unwrap().to_owned();
    let path = format!("/tenants/acme/executions/{execution}/replay");
    // then it replays with the same actions
    let replay = api.post(&path, json!({})).await;
    assert_eq!((replay.status.as_u16(), &replay.body["same"]), (200, &json!(true)), "{}", replay.body);
    assert_eq!(replay.body["recorded"], replay.body["replayed"]);
    // an option it does not know is named, and so is one for a live run only
    let bad = api.post(&path, json!({ "liv": true })).await;
    assert_eq!((bad.status.as_u16(), pointers(&bad)), (400, vec!["/liv".to_owned()]), "{}", bad.body);
    let bad = api.post(&path, json!({ "model": "openai:gpt-4o-mini" })).await;
    assert_eq!((bad.status.as_u16(), pointers(&bad)), (400, vec!["/model".to_owned()]), "{}", bad.body);
    let bad = api.post(&path, json!({ "live": true, "model": "nope:" })).await;
    assert_eq!((bad.status.as_u16(), pointers(&bad)), (400, vec!["/model".to_owned()]), "{}", bad.body);
    let bad = api.post(&path, json!({ "live": true, "agent": { "maxIterations": "many" } })).await;
    assert_eq!((bad.status.as_u16(), pointers(&bad)), (400, vec!["/agent/maxIterations".to_owned()]), "{}", bad.body);
    let bad = api.post(&path, json!({ "live": true, "agent": { "agentId": "01ARZ3NDEKTSV4RRFFQ69G5FAV" } })).await;
    assert_eq!((bad.status.as_u16(), pointers(&bad)), (400, vec!["/agent/agentId".to_owned()]), "{}", bad.body);
    // a live run against the server's model (here the scripted test double) with another prompt
    let live = api.post(&path, json!({ "live": true, "agent": { "systemPrompt": "You are terse." } })).await;
    assert_eq!(live.status.as_u16(), 200, "{}", live.body);
    assert_eq!(live.body["recorded"]["actions"], live.body["live"]["actions"], "the double answers alike");
    assert!(live.body["live"]["models"][0].is_string() && live.body["live"]["tokens"].as_u64().unwrap() > 0);
    // an execution that does not exist, or is not an id, is not found
    assert_eq!(api.post("/tenants/acme/executions/01ARZ3NDEKTSV4RRFFQ69G5FAV/replay", json!({})).await.status, 404);
    assert_eq!(api.post("/tenants/acme/executions/nope/replay", json!({})).await.status, 404);
    // and once the tenant records nothing of its model calls, a new execution cannot be replayed
    let off = api.call(Method::PATCH, "/tenants/acme", Some(json!({ "recording": "off" })), &[]).await;
    assert_eq!((off.status.as_u16(), &off.body["recording"]), (200, &json!("off")), "{}", off.body);
    let run = api.post("/events?wait=30", message("r-2")).await;
    let execution = run.body["execution"]["executionId"].as_str().unwrap().to_owned();
    let refused = api.post(&format!("/tenants/acme/executions/{execution}/replay"), json!({})).await;
    assert_eq!(refused.status.as_u16(), 422, "{}", refused.body);
    assert!(refused.body["detail"].as_str().unwrap().contains("recording was off"), "{}", refused.body);
    // and a setting that is not one is named
    let bad = api.call(Method::PATCH, "/tenants/acme", Some(json!({ "recording": "everything" })), &[]).await;
    assert_eq!((bad.status.as_u16(), pointers(&bad)), (400, vec!["/recording".to_owned()]), "{}", bad.body);
}
