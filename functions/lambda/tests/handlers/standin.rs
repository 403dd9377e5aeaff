//! The Conversations Service stand-in (`switchboard_lambda::standin`) driven with API Gateway
//! REST proxy events, on its own table and a conversations bus on the emulator: replies once per
//! idempotency key, history oldest first, a customer's message stored and put on the bus as
//! `message.new`, bad input as problem+json, tenants apart, the example order lookup's signature
//! check. Ends with the AWS example (`examples/aws/tenant.json`) end to end: a customer's message
//! posted to the stand-in → bus → router → executor (the order tool calling the stand-in) → the
//! reply in the stand-in's history.

use switchboard_domain::webhook;
use switchboard_lambda::standin::{self, StandIn, orders::Orders};
use switchboard_testkit::ManualClock;

use super::*;

const ORDERS_SECRET: &str = "whsec-example-orders-0123456789";

/// A stand-in on a fresh table, putting `message.new` on a fresh bus whose rule (the template's
/// `MessageNewRule` pattern) delivers to an SQS queue the test reads; its order lookup is
/// `orders_tenant`'s.
struct StandInWorld {
    sdk: aws_config::SdkConfig,
    standin: Arc<StandIn>,
    delivered_url: String,
}

async fn standin_world(orders_tenant: &str) -> StandInWorld {
    let sdk = AwsSettings::emulator(common::moto().endpoint.clone()).load().await;
    let suffix = ulid::Ulid::generate().to_string().to_lowercase();
    let (table, bus) = (format!("standin-{suffix}"), format!("conversations-{suffix}"));
    common::create_table(&aws_sdk_dynamodb::Client::new(&sdk), &table, None).await;
    let eb = aws_sdk_eventbridge::Client::new(&sdk);
    eb.create_event_bus().name(&bus).send().await.unwrap();
    let (delivered_url, arn) = queue_with_arn(&aws_sdk_sqs::Client::new(&sdk), &format!("message-new-{suffix}")).await;
    let pattern = json!({"source": ["conversations-service"], "detail-type": ["message.new"]});
    rule_to_queue(&eb, &bus, &format!("message-new-{suffix}"), pattern, &arn).await;
    let vars = |name: &str| match name {
        "SWITCHBOARD_STANDIN_TABLE" => Some(table.clone()),
        "SWITCHBOARD_STANDIN_EVENT_BUS" => Some(bus.clone()),
        "SWITCHBOARD_STANDIN_ORDERS_TENANT" => Some(orders_tenant.to_owned()),
        _ => None,
    };
    let standin = Arc::new(StandIn::from_vars(&sdk, vars).unwrap());
    StandInWorld { sdk, standin, delivered_url }
}

/// An API Gateway REST proxy event for the stand-in's API (stage `prod`, IAM-signed as the
/// fixture is), as `lambda_http` reads it.
fn gateway_request(
    method: &str,
    path: &str,
    query: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> lambda_http::Request {
    let mut event = fixture("apigw-rest-get-agent.json");
    event["resource"] = json!(path);
    event["path"] = json!(path);
    event["httpMethod"] = json!(method);
    event["pathParameters"] = Value::Null;
    event["requestContext"]["httpMethod"] = json!(method);
    event["requestContext"]["resourcePath"] = json!(path);
    event["requestContext"]["path"] = json!(format!("/prod{path}"));
    for (name, value) in headers {
        event["headers"][*name] = json!(value);
        event["multiValueHeaders"][*name] = json!([value]);
    }
    if let Some((name, value)) = query.and_then(|q| q.split_once('=')) {
        event["queryStringParameters"] = json!({ name: value });
        event["multiValueQueryStringParameters"] = json!({ name: [value] });
    }
    event["body"] = body.map_or(Value::Null, |b| json!(b));
    lambda_http::request::from_str(&event.to_string()).unwrap()
}

/// What the stand-in answered: status, content type, body as JSON.
async fn answer(standin: &Arc<StandIn>, request: lambda_http::Request) -> (u16, String, Value) {
    let response = standin::app(standin.clone()).oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let content_type =
        response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, content_type, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// `POST …/messages` with `key`, as the executor sends a reply.
async fn reply(w: &StandInWorld, tenant: &str, conversation: &str, key: &str, body: Value) -> (u16, Value) {
    let path = format!("/tenants/{tenant}/conversations/{conversation}/messages");
    let headers = [("Content-Type", "application/json"), ("Idempotency-Key", key)];
    let (status, _, json) =
        answer(&w.standin, gateway_request("POST", &path, None, &headers, Some(&body.to_string()))).await;
    (status, json)
}

/// `POST …/customer-messages`, with a key when given.
async fn customer_says(
    w: &StandInWorld,
    tenant: &str,
    conversation: &str,
    text: &str,
    key: Option<&str>,
) -> (u16, Value) {
    let path = format!("/tenants/{tenant}/conversations/{conversation}/customer-messages");
    let mut headers = vec![("Content-Type", "application/json")];
    headers.extend(key.map(|k| ("Idempotency-Key", k)));
    let body = json!({ "text": text }).to_string();
    let (status, _, json) = answer(&w.standin, gateway_request("POST", &path, None, &headers, Some(&body))).await;
    (status, json)
}

/// `GET …/messages` (`limit=n` when given): `(sender, text)` of each message, and the ids.
async fn history(
    w: &StandInWorld,
    tenant: &str,
    conversation: &str,
    limit: Option<&str>,
) -> (Vec<(String, String)>, Vec<String>) {
    let path = format!("/tenants/{tenant}/conversations/{conversation}/messages");
    let (status, _, json) = answer(&w.standin, gateway_request("GET", &path, limit, &[], None)).await;
    assert_eq!(status, 200, "{json}");
    let messages = json["messages"].as_array().unwrap();
    let said =
        messages.iter().map(|m| (m["sender"].as_str().unwrap().to_owned(), m["text"].as_str().unwrap().to_owned()));
    (said.collect(), messages.iter().map(|m| m["messageId"].as_str().unwrap().to_owned()).collect())
}

fn pairs(said: &[(&str, &str)]) -> Vec<(String, String)> {
    said.iter().map(|(s, t)| ((*s).to_owned(), (*t).to_owned())).collect()
}

#[tokio::test]
async fn the_standin_keeps_a_reply_once_per_key_and_answers_the_newest_messages_oldest_first() {
    let w = standin_world("acme").await;
    // when the executor sends a reply, then sends it again under the same key (a redelivery)
    let (status, first) = reply(&w, "t-1", "c-1", "t-1/message-c-1:m-1/0", json!({"text": "one"})).await;
    assert_eq!(status, 201, "{first}");
    let (status, again) = reply(&w, "t-1", "c-1", "t-1/message-c-1:m-1/0", json!({"text": "one"})).await;
    // then the second is answered 200 with the first message's id, marked a duplicate
    assert_eq!((status, again.clone()), (200, json!({"messageId": first["messageId"], "duplicate": true})));
    // given an operator's message and a customer's after it
    let human = json!({"text": "two", "sender": "human", "operator": "Alice"});
    assert_eq!(reply(&w, "t-1", "c-1", "t-1/reply-k2", human).await.0, 201);
    assert_eq!(customer_says(&w, "t-1", "c-1", "three", None).await.0, 201);
    // then the history holds each once, oldest first, and `limit` keeps the newest
    let (all, ids) = history(&w, "t-1", "c-1", None).await;
    assert_eq!(all, pairs(&[("agent", "one"), ("human", "two"), ("customer", "three")]));
    assert_eq!(ids[0], first["messageId"].as_str().unwrap());
    let (newest, _) = history(&w, "t-1", "c-1", Some("limit=2")).await;
    assert_eq!(newest, pairs(&[("human", "two"), ("customer", "three")]));
}

#[tokio::test]
async fn a_customer_message_is_stored_and_put_on_the_bus_as_message_new_once_per_message_id() {
    let w = standin_world("acme").await;
    let sqs = aws_sdk_sqs::Client::new(&w.sdk);
    // when a person posts a customer's message with a key
    let (status, posted) = customer_says(&w, "t-1", "c-7", "I need help with my order", Some("try-1")).await;
    assert_eq!(status, 201, "{posted}");
    let id = posted["messageId"].as_str().unwrap().to_owned();
    // then the rule delivered one message.new from conversations-service, which the router takes
    let delivered = receive_all(&sqs, &w.delivered_url).await;
    assert_eq!(delivered.len(), 1);
    let envelope: Value = serde_json::from_str(delivered[0].body().unwrap()).unwrap();
    assert_eq!(
        (&envelope["source"], &envelope["detail-type"]),
        (&json!("conversations-service"), &json!("message.new"))
    );
    let inbound = switchboard_domain::InboundEvent::parse(&envelope).unwrap();
    assert_eq!((inbound.detail.tenant_id.as_str(), inbound.detail.conversation_id.as_str()), ("t-1", "c-7"));
    assert_eq!(
        (inbound.detail.message_id.as_str(), inbound.detail.text.as_str()),
        (id.as_str(), "I need help with my order")
    );
    assert_eq!(envelope["detail"]["channel"]["platform"], json!("webchat"));
    // and the conversation holds it as the customer's, under that id
    let (said, ids) = history(&w, "t-1", "c-7", None).await;
    assert_eq!((said, ids), (pairs(&[("customer", "I need help with my order")]), vec![id.clone()]));
    // when the post is retried under the same key
    let (status, again) = customer_says(&w, "t-1", "c-7", "I need help with my order", Some("try-1")).await;
    // then nothing new is stored, and the event is put again with the same message id, which
    // Switchboard's intake answers once (its work is deduplicated on the message)
    assert_eq!((status, again), (200, json!({"messageId": id, "duplicate": true})));
    let redelivered = receive_all(&sqs, &w.delivered_url).await;
    assert_eq!(redelivered.len(), 1);
    let second: Value = serde_json::from_str(redelivered[0].body().unwrap()).unwrap();
    assert_eq!(source_of(&second), source_of(&envelope));
    assert_eq!(history(&w, "t-1", "c-7", None).await.1, vec![id]);
}

#[tokio::test]
async fn bad_input_is_refused_with_a_problem_naming_what_is_at_fault() {
    let w = standin_world("acme").await;
    let path = "/tenants/t-1/conversations/c-1/messages";
    let json_header = ("Content-Type", "application/json");
    let cases: Vec<(lambda_http::Request, u16, &str)> = vec![
        (
            gateway_request("POST", path, None, &[json_header], Some(r#"{"text": "hi"}"#)),
            400,
            "/headers/Idempotency-Key",
        ),
        (gateway_request("POST", path, None, &[json_header, ("Idempotency-Key", "k")], Some("{not json")), 400, ""),
        (gateway_request("POST", path, None, &[json_header, ("Idempotency-Key", "k")], Some("{}")), 400, "/text"),
        (
            gateway_request("POST", path, None, &[json_header, ("Idempotency-Key", "k")], Some(r#"{"text": ""}"#)),
            400,
            "/text",
        ),
        (
            gateway_request(
                "POST",
                path,
                None,
                &[json_header, ("Idempotency-Key", "k")],
                Some(r#"{"text": "x", "sender": "customer"}"#),
            ),
            400,
            "/sender",
        ),
        (gateway_request("GET", path, Some("limit=0"), &[], None), 400, "/query/limit"),
        (
            gateway_request("GET", "/tenants/t-1/conversations/bad$id/messages", None, &[], None),
            400,
            "/path/conversationId",
        ),
    ];
    for (request, want_status, want_pointer) in cases {
        let (status, content_type, problem) = answer(&w.standin, request).await;
        assert_eq!((status, content_type.as_str()), (want_status, "application/problem+json"), "{problem}");
        assert_eq!(problem["errors"][0]["pointer"], json!(want_pointer), "{problem}");
        assert!(!problem["detail"].as_str().unwrap().is_empty());
    }
    // and a path it does not serve is a 404 problem, a method it does not take a 405, and nothing
    // was stored
    let (status, content_type, _) =
        answer(&w.standin, gateway_request("GET", "/tenants/t-1/other", None, &[], None)).await;
    assert_eq!((status, content_type.as_str()), (404, "application/problem+json"));
    let (status, content_type, _) = answer(&w.standin, gateway_request("DELETE", path, None, &[], None)).await;
    assert_eq!((status, content_type.as_str()), (405, "application/problem+json"));
    assert!(history(&w, "t-1", "c-1", None).await.0.is_empty());
}

#[tokio::test]
async fn one_tenants_conversation_is_not_seen_from_another_using_the_same_ids_and_keys() {
    let w = standin_world("acme").await;
    // given tenant a's reply in conversation c-1
    let (status, a) = reply(&w, "tenant-a", "c-1", "k-1", json!({"text": "for a"})).await;
    assert_eq!(status, 201);
    // then tenant b's conversation c-1 is empty, and b's reply under the same key is new
    assert!(history(&w, "tenant-b", "c-1", None).await.0.is_empty());
    let (status, b) = reply(&w, "tenant-b", "c-1", "k-1", json!({"text": "for b"})).await;
    assert_eq!(status, 201, "{b}");
    assert_ne!(a["messageId"], b["messageId"]);
    assert_eq!(history(&w, "tenant-a", "c-1", None).await.0, pairs(&[("agent", "for a")]));
    assert_eq!(history(&w, "tenant-b", "c-1", None).await.0, pairs(&[("agent", "for b")]));
}

#[tokio::test]
async fn the_example_order_lookup_answers_only_a_call_signed_for_the_example_tenant() {
    // given the example tenant's signing secret in Secrets Manager, and a stand-in whose clock
    // stands still
    let tenant = format!("acme-{}", ulid::Ulid::generate().to_string().to_lowercase());
    let w = standin_world(&tenant).await;
    aws_sdk_secretsmanager::Client::new(&w.sdk)
        .create_secret()
        .name(format!("switchboard/{tenant}/orders"))
        .secret_string(ORDERS_SECRET)
        .send()
        .await
        .unwrap();
    let clock = ManualClock::new();
    let now = switchboard_engine::Clock::now(clock.as_ref()).timestamp();
    let mut standin = (*w.standin).clone();
    let orders = standin.orders.take().unwrap();
    standin.orders = Some(Orders { clock: clock.clone(), ..orders });
    let standin = Arc::new(standin);
    let call = |for_tenant: &str, secret: &str| {
        let body = json!({"tool": "order_status", "arguments": {"orderId": "1234"}, "tenantId": for_tenant,
                          "sessionId": "s", "executionId": "e", "idempotencyKey": "k"})
        .to_string();
        let (ts, signature) = (now.to_string(), webhook::sign(secret.as_bytes(), now, body.as_bytes()));
        let headers = [
            ("Content-Type", "application/json"),
            ("Switchboard-Timestamp", ts.as_str()),
            ("Switchboard-Signature", signature.as_str()),
        ];
        gateway_request("POST", "/example/orders", None, &headers, Some(&body))
    };
    // when Switchboard calls it for the example tenant, signed with that secret
    let (status, _, answered) = answer(&standin, call(&tenant, ORDERS_SECRET)).await;
    // then it answers the order's status
    assert_eq!(status, 200, "{answered}");
    assert_eq!(answered, json!({"orderId": "1234", "status": "shipped", "shippedOn": "yesterday", "eta": "Thursday"}));
    // and a call signed with another secret, or for another tenant, is refused
    assert_eq!(answer(&standin, call(&tenant, "not-the-secret")).await.0, 401);
    assert_eq!(answer(&standin, call("someone-else", ORDERS_SECRET)).await.0, 403);
}

// ---- the AWS example end to end ----------------------------------------------------------------------

/// Serves the stand-in's routes on loopback under `/prod`, as its API's stage URL: the base URL.
async fn serve_standin(standin: Arc<StandIn>) -> String {
    let app = axum::Router::new().nest("/prod", standin::routes(standin));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/prod", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

#[tokio::test]
async fn the_aws_example_answers_a_customer_posted_to_the_standin_with_the_order_tool_and_a_reply_in_its_history() {
    // given the stand-in, served on loopback, with the example tenant's order secret
    let s = standin_world("acme").await;
    aws_sdk_secretsmanager::Client::new(&s.sdk)
        .create_secret()
        .name("switchboard/acme/orders")
        .secret_string(ORDERS_SECRET)
        .send()
        .await
        .unwrap();
    let base = serve_standin(s.standin.clone()).await;
    // and Switchboard wired to it as the Conversations Service, with a model that looks the
    // order up and then answers
    let script = vec![
        Reply::tool_use("tu-1", "order_status", json!({"orderId": "1234"})),
        Reply::text("Order 1234 shipped yesterday and arrives Thursday."),
    ];
    let mut w = world_with(script, Options { webhooks: LOCAL_WEBHOOKS, ..Options::default() }).await;
    let env = FunctionEnv { conversations_url: Some(base.clone()), ..env_with_secret(&w.names, None) };
    let clients = AwsClients {
        dynamodb: aws_sdk_dynamodb::Client::new(&w.sdk),
        sqs: aws_sdk_sqs::Client::new(&w.sdk),
        bedrock: w.bedrock.client(None).await,
        secretsmanager: aws_sdk_secretsmanager::Client::new(&w.sdk),
    };
    let api = ConversationsApi::new(&w.sdk, base.clone(), ConversationsLimits::default()).unwrap();
    let model: Arc<dyn Model> = Arc::new(BedrockModel::new(clients.bedrock.clone()));
    w.wiring = Wiring::with(clients, &env, Arc::new(api), model, LOCAL_WEBHOOKS);
    // and the AWS example bundle applied, its order tool at the stand-in
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/aws/tenant.json");
    let text = std::fs::read_to_string(path).unwrap().replace("${SWITCHBOARD_STANDIN_URL}", &base);
    let (status, report) =
        api_call(&w, "POST", "/tenants/acme/apply", Some(&serde_json::from_str(&text).unwrap())).await;
    assert_eq!(status, 200, "{report}");

    // when a person posts the customer's message to the stand-in
    let (status, posted) = customer_says(&s, "acme", "chat-1", "Where is my order 1234?", None).await;
    assert_eq!(status, 201, "{posted}");
    // and the bus delivers its message.new to the router, and the executor runs the work item
    let delivered = receive_all(&aws_sdk_sqs::Client::new(&s.sdk), &s.delivered_url).await;
    assert_eq!(delivered.len(), 1);
    let envelope: Value = serde_json::from_str(delivered[0].body().unwrap()).unwrap();
    let routed = event_router::handle(&w.wiring.intake, event::<EventBridgeEvent>(envelope)).await.unwrap();
    assert!(matches!(routed, RouteOutcome::Enqueued { .. }), "{routed:?}");
    let (_, response) = poll_once(&w).await.unwrap();
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);

    // then the order tool's signed call was answered by the stand-in, and the model saw it
    let second_call = w.bedrock.requests()[1].1.to_string();
    assert!(second_call.contains("shipped") && second_call.contains("Thursday"), "{second_call}");
    // and the stand-in's history holds the customer's message and the agent's reply, in order
    let (said, _) = history(&s, "acme", "chat-1", None).await;
    assert_eq!(
        said,
        pairs(&[
            ("customer", "Where is my order 1234?"),
            ("agent", "Order 1234 shipped yesterday and arrives Thursday.")
        ])
    );
}
