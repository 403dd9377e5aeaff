//! Bursts on the AWS profile: an agent that coalesces them answers the messages of a burst in
//! one turn. Its first message's delivery waits for the window with SQS holding it (and its
//! group's later messages in the batch: their visibility is set the same); the batch that comes
//! once the burst is complete is answered by one turn, and the messages behind the first are
//! acknowledged with it. The test is the Lambda poller: it receives batches from the FIFO queue
//! on the emulator and ends the holds itself rather than wait for them.

use super::*;

/// Every message deliverable now (up to ten, SQS's batch), in group order.
async fn receive_batch(w: &World) -> Vec<aws_sdk_sqs::types::Message> {
    receive_up_to(w, 10).await
}

/// Ends SQS's hold of `messages` at once (what their visibility timeout does in time).
async fn end_hold(w: &World, messages: &[aws_sdk_sqs::types::Message]) {
    let sqs = aws_sdk_sqs::Client::new(&w.sdk);
    for m in messages {
        let visible = sqs.change_message_visibility().queue_url(&w.names.work_queue_url);
        visible.receipt_handle(m.receipt_handle().unwrap()).visibility_timeout(0).send().await.unwrap();
    }
}

/// Routes a customer's message `id` saying `text` in c-1.
async fn say(w: &World, id: &str, text: &str) {
    let mut e = fixture("eventbridge-message-new.json");
    e["id"] = json!(format!("evt-{id}"));
    e["detail"]["messageId"] = json!(id);
    e["detail"]["message"]["text"] = json!(text);
    let routed = event_router::handle(&w.wiring.intake, event(e)).await.unwrap();
    assert!(matches!(routed, RouteOutcome::Enqueued { .. }), "{routed:?}");
}

#[tokio::test]
async fn a_burst_on_aws_waits_on_the_queue_then_one_turn_answers_its_batch_and_acks_it_whole() {
    let script =
        vec![Reply::tool_use("tu-1", "send_message", json!({"text": "Order 1234 is on its way."})), Reply::text("")];
    let mut w = world(script, false).await;
    let clock = common::ManualClock::new();
    w.wiring = w.wiring.with_clock(clock.clone());
    let mut agent: Agent =
        w.wiring.store.get_agent(&"t-1".parse().unwrap(), AGENT.parse().unwrap()).await.unwrap().unwrap();
    agent.bursts = serde_json::from_value(json!({ "mode": "coalesce", "windowSeconds": 2 })).unwrap();
    put(&w.wiring, ConfigRecord::Agent(agent)).await;

    // given a first message, whose delivery waits for the window
    say(&w, "m-1", "hi, I need help").await;
    let first = receive_batch(&w).await;
    assert_eq!(first.len(), 1);
    let response = executor::handle(&w.wiring, event::<SqsEvent>(as_sqs_event(&first))).await;
    assert_eq!(failed_ids(&response), [first[0].message_id().unwrap()], "reported failed, held by SQS");
    assert!(receive_batch(&w).await.is_empty(), "held: nothing of the group is deliverable");
    assert!(w.bedrock.requests().is_empty(), "no model call yet");

    // and two more within the window of the one before
    clock.advance(chrono::Duration::milliseconds(900));
    say(&w, "m-2", "help: it is about an order").await;
    clock.advance(chrono::Duration::milliseconds(900));
    say(&w, "m-3", "help with order 1234").await;
    clock.advance(chrono::Duration::milliseconds(200));
    end_hold(&w, &first).await;

    // when the batch comes at 2 s, the burst is not complete (its newest came at 1.8 s): the
    // whole group waits again, its later messages with it
    let second = receive_batch(&w).await;
    let ids: Vec<_> = second.iter().map(|m| m.message_id().unwrap().to_owned()).collect();
    assert_eq!(ids.len(), 3, "the group's three messages in one batch");
    let response = executor::handle(&w.wiring, event::<SqsEvent>(as_sqs_event(&second))).await;
    assert_eq!(failed_ids(&response), ids);
    assert!(receive_batch(&w).await.is_empty(), "every message of the group held, none left in flight");
    clock.advance(chrono::Duration::seconds(2));
    end_hold(&w, &second).await;

    // then at 4 s one turn answers the three, and the whole batch is done
    let third = receive_batch(&w).await;
    assert_eq!(third.len(), 3);
    let response = executor::handle(&w.wiring, event::<SqsEvent>(as_sqs_event(&third))).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    let sent: Vec<String> = w.conversations.accepted().into_iter().map(|r| r.text).collect();
    assert_eq!(sent, ["Order 1234 is on its way."], "one reply");
    let requests = w.bedrock.requests();
    assert_eq!(requests.len(), 2, "the turn's two model calls (reply, then done)");
    let asked = &requests[0].1["messages"];
    let last = asked.as_array().unwrap().last().unwrap();
    let texts: Vec<_> = last["content"].as_array().unwrap().iter().map(|b| b["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["hi, I need help", "help: it is about an order", "help with order 1234"]);
    let t1: TenantId = "t-1".parse().unwrap();
    let turn = w.wiring.store.execution_for_source(&t1, "message-c-1:m-3").await.unwrap().unwrap();
    assert_eq!(turn.status, ExecutionStatus::Success);
    assert_eq!(turn.coalesced.iter().map(|c| c.message_id.as_str()).collect::<Vec<_>>(), ["m-1", "m-2"]);
    for earlier in ["message-c-1:m-1", "message-c-1:m-2"] {
        let own = w.wiring.store.execution_for_source(&t1, earlier).await.unwrap().unwrap();
        assert_eq!((own.status, own.coalesced_into), (ExecutionStatus::Coalesced, Some(turn.execution_id)));
    }

    // and a delivery of the batch again (its acknowledgement lost) does nothing more
    end_hold(&w, &third).await;
    let again = receive_batch(&w).await;
    let response = executor::handle(&w.wiring, event::<SqsEvent>(as_sqs_event(&again))).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(w.conversations.accepted().len(), 1, "nothing sent twice");
    assert_eq!(w.bedrock.requests().len(), 2, "no model call again");
}

/// Deletes `messages` from the queue, as the event source mapping does with a batch's successes.
async fn delete(w: &World, messages: &[aws_sdk_sqs::types::Message]) {
    let sqs = aws_sdk_sqs::Client::new(&w.sdk);
    for m in messages {
        let done = sqs.delete_message().queue_url(&w.names.work_queue_url);
        done.receipt_handle(m.receipt_handle().unwrap()).send().await.unwrap();
    }
}

#[tokio::test]
async fn on_aws_a_turn_learns_of_a_newer_message_from_the_routers_note_and_the_next_turn_answers_both() {
    let script = vec![Reply::text("Here is what I found."), Reply::text("And the rest.")];
    let w = world(script, false).await;
    let t1: TenantId = "t-1".parse().unwrap();
    let mut agent: Agent = w.wiring.store.get_agent(&t1, AGENT.parse().unwrap()).await.unwrap().unwrap();
    agent.bursts = serde_json::from_value(json!({ "mode": "interrupt" })).unwrap();
    put(&w.wiring, ConfigRecord::Agent(agent)).await;

    // given two messages routed (the trigger answers those asking for help), the first
    // delivered alone: SQS shows no later message of its group while it is in flight
    say(&w, "m-1", "hi, I need help").await;
    say(&w, "m-2", "help with order 1234").await;
    let first = receive_up_to(&w, 1).await;
    let response = executor::handle(&w.wiring, event::<SqsEvent>(as_sqs_event(&first))).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    delete(&w, &first).await;
    // then its turn stopped as it started: the router's note named the second message
    let stopped = w.wiring.store.execution_for_source(&t1, "message-c-1:m-1").await.unwrap().unwrap();
    assert_eq!(stopped.status, ExecutionStatus::Interrupted);
    assert_eq!(stopped.interrupted_by.map(|b| b.message_id), Some("m-2".into()));
    assert!(w.bedrock.requests().is_empty() && w.conversations.accepted().is_empty(), "nothing ran or was said");

    // when the second is delivered, its turn answers both, once
    let second = receive_batch(&w).await;
    assert_eq!(second.len(), 1);
    let response = executor::handle(&w.wiring, event::<SqsEvent>(as_sqs_event(&second))).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    delete(&w, &second).await;
    let turn = w.wiring.store.execution_for_source(&t1, "message-c-1:m-2").await.unwrap().unwrap();
    assert_eq!(turn.status, ExecutionStatus::Success);
    assert_eq!(turn.coalesced.iter().map(|c| c.message_id.as_str()).collect::<Vec<_>>(), ["m-1"]);
    let sent: Vec<String> = w.conversations.accepted().into_iter().map(|r| r.text).collect();
    assert_eq!(sent, ["Here is what I found."]);
    let requests = w.bedrock.requests();
    let last = requests[0].1["messages"].as_array().unwrap().last().unwrap().clone();
    let texts: Vec<_> = last["content"].as_array().unwrap().iter().filter_map(|b| b["text"].as_str()).collect();
    assert_eq!(texts, ["hi, I need help", "help with order 1234"], "one customer turn of both");

    // and two messages delivered in one batch: the first's turn sees the second behind it
    say(&w, "m-3", "help: one more thing").await;
    say(&w, "m-4", "help with the address").await;
    let both = receive_batch(&w).await;
    assert_eq!(both.len(), 2);
    let response = executor::handle(&w.wiring, event::<SqsEvent>(as_sqs_event(&both))).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    let stopped = w.wiring.store.execution_for_source(&t1, "message-c-1:m-3").await.unwrap().unwrap();
    assert_eq!(stopped.status, ExecutionStatus::Interrupted);
    let turn = w.wiring.store.execution_for_source(&t1, "message-c-1:m-4").await.unwrap().unwrap();
    assert_eq!(turn.coalesced.iter().map(|c| c.message_id.as_str()).collect::<Vec<_>>(), ["m-3"]);
    assert_eq!(w.conversations.accepted().len(), 2, "one reply for each pair");
}
