//! The multi-agent patterns — steps, skills, supervisor, router — and the human handoff
//! lifecycle, run by the engine against the real embedded adapters with the scripted model (a
//! deterministic test double). A recording wrapper keeps every model request, so each test
//! asserts the exact sequence of model calls as well as the tool calls, sessions and events.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_domain::message::Message;
use switchboard_domain::{
    Action, Agent, AgentType, ExecutionRecord, ExecutionStatus, InboundEvent, Session, SessionStatus,
};
use switchboard_embedded::{Bundle, Embedded, EmbeddedOptions, ScriptedModel};
use switchboard_engine::{
    ExecOutcome, HandoffTo, Model, ModelError, ModelRequest, ModelResponse, SystemClock, WorkItem,
};

use crate::common;

const FRONT: &str = "01JD0000SVPP0RT0AGENT00001";
const BILLING: &str = "01JD0000PAYMENTS0AGENT0002";
const SHIPPING: &str = "01JD0000SH1PP1NG0AGENT0003";
const POLICIES: &str = "01JD0000SK1110P011C1ES0001";
const RETURNS: &str = "01JD0000SK1110RETVRNS00002";

/// One model request as the engine made it.
#[derive(Debug, Clone)]
struct Call {
    system: String,
    tools: Vec<String>,
    messages: Vec<String>,
}

impl Call {
    fn offers(&self, tool: &str) -> bool {
        self.tools.iter().any(|t| t == tool)
    }
}

/// Wraps the scripted model and keeps every request; the model `down` is unavailable.
struct Recording {
    inner: ScriptedModel,
    calls: Mutex<Vec<Call>>,
}

#[async_trait]
impl Model for Recording {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        self.calls.lock().unwrap().push(Call {
            system: request.system.clone(),
            tools: request.tools.iter().map(|t| t.name.clone()).collect(),
            messages: request.messages.iter().map(|m| m.text()).collect(),
        });
        if request.model == "down" {
            return Err(ModelError::Unavailable("503 overloaded".into()));
        }
        self.inner.converse(request).await
    }
}

fn agent(id: &str, name: &str, prompt: &str, extra: Value) -> Value {
    let mut a = json!({ "agentId": id, "name": name, "systemPrompt": prompt, "model": "test-model",
                        "tools": ["send_message", "handoff_to_human", "handoff_to_agent", "set_context"] });
    if let (Some(a), Value::Object(extra)) = (a.as_object_mut(), extra) {
        a.extend(extra);
    }
    a
}

fn bundle(agents: Vec<Value>, skills: Vec<Value>, entry: &str) -> String {
    json!({ "tenantId": "t-1", "name": "Patterns", "agents": agents, "skills": skills,
            "triggers": [ { "triggerId": "01JD0000TR1GGER0CHAT000001", "name": "all", "agentId": entry,
                            "eventType": "message.new", "priority": 1, "conditions": {} } ] })
    .to_string()
}

/// The common world with its model's requests kept; every story is one conversation, `c-1`.
struct World {
    base: common::World,
    model: Arc<Recording>,
}

impl std::ops::Deref for World {
    type Target = common::World;
    fn deref(&self) -> &common::World {
        &self.base
    }
}

const C: &str = "c-1";

impl World {
    async fn new(bundle_json: &str, script: Value) -> Self {
        let inner = ScriptedModel::from_json(&script.to_string()).unwrap();
        let model = Arc::new(Recording { inner, calls: Mutex::new(vec![]) });
        let base =
            common::World::open(model.clone(), Arc::new(SystemClock), EmbeddedOptions::default(), &[bundle_json]).await;
        Self { base, model }
    }

    /// A customer message; the records of the executions it caused, each one new.
    async fn say(&mut self, text: &str) -> Vec<ExecutionRecord> {
        let (_, outcomes) = self.base.say(C, text).await;
        outcomes
            .into_iter()
            .map(|o| match o {
                ExecOutcome::Recorded(r) => *r,
                other => panic!("expected a new record, got {other:?}"),
            })
            .collect()
    }

    /// A human operator writes in the conversation (an outbound `message.new`, never routed).
    async fn human_says(&mut self, text: &str) {
        let event = self.base.message(C, "outbound", text);
        assert!(self.base.deliver(&event).await.1.is_empty());
    }

    /// Model requests made since the last call of `take_calls`.
    fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut *self.model.calls.lock().unwrap())
    }

    async fn replies(&self) -> Vec<String> {
        self.base.replies(C).await
    }

    async fn sessions(&self) -> Vec<Session> {
        self.base.sessions(C).await
    }

    async fn session(&self) -> Session {
        self.base.session(C).await
    }
}

fn tool_names(r: &ExecutionRecord) -> Vec<&str> {
    r.tool_calls.iter().map(|c| c.name.as_str()).collect()
}

// ---------------------------------------------------------------------------------------------
// Steps

fn stepped_agent() -> Value {
    agent(
        FRONT,
        "Returns desk",
        "You run the returns desk.",
        json!({ "tools": ["send_message", "set_context", "handoff_to_human"], "steps": [
            { "stepId": "greet", "name": "Greet", "systemPrompt": "Greet the customer and ask what they need.",
              "tools": ["send_message"], "transitionTools": ["collect"], "isInitial": true },
            { "stepId": "collect", "name": "Collect", "systemPrompt": "Collect the order number.",
              "tools": ["send_message", "set_context"], "transitionTools": ["done"] },
            { "stepId": "done", "name": "Done", "systemPrompt": "Confirm the return and say goodbye.",
              "tools": ["send_message"], "isFinal": true }
        ] }),
    )
}

#[tokio::test]
async fn a_stepped_agent_moves_only_along_declared_edges_and_its_final_step_ends_the_conversation() {
    let script = json!({ "rules": [
        { "when": { "systemContains": "Current step: Greet", "afterTool": "transition_to_done" },
          "then": { "text": "Let us start with your order first." } },
        { "when": { "systemContains": "Current step: Greet", "userText": { "contains": "skip" } },
          "then": { "toolCalls": [ { "name": "transition_to_done", "input": {} } ] } },
        { "when": { "systemContains": "Current step: Greet", "userText": { "contains": "return" } },
          "then": { "toolCalls": [ { "name": "transition_to_collect", "input": { "reason": "wants a return" } } ] } },
        { "when": { "systemContains": "Current step: Collect", "afterTool": "transition_to_collect" },
          "then": { "text": "What is the order number?" } },
        { "when": { "systemContains": "Current step: Collect", "afterTool": "set_context" },
          "then": { "toolCalls": [ { "name": "transition_to_done", "input": {} } ] } },
        { "when": { "systemContains": "Current step: Collect" },
          "then": { "toolCalls": [ { "name": "set_context", "input": { "key": "order", "value": "4711" } } ] } },
        { "when": { "systemContains": "Current step: Done", "afterTool": "transition_to_done" },
          "then": { "toolCalls": [ { "name": "send_message", "input": { "text": "Return booked. Goodbye!" } },
                                   { "name": "end_conversation", "input": { "summary": "return booked" } } ] } }
    ] });
    let mut w = World::new(&bundle(vec![stepped_agent()], vec![], FRONT), script).await;

    // A transition the step does not declare is refused and fed back to the model.
    let r = w.say("skip everything").await;
    let calls = w.take_calls();
    assert_eq!(calls.len(), 2);
    assert!(calls[0].offers("transition_to_collect") && !calls[0].offers("transition_to_done"));
    assert!(!calls[0].offers("set_context"), "greet offers only its own tools");
    assert_eq!(tool_names(&r[0]), ["transition_to_done"]);
    assert!(r[0].tool_calls[0].is_error);
    assert!(r[0].tool_calls[0].output["error"].as_str().unwrap().contains("cannot move to 'done'"));
    assert_eq!(w.session().await.current_step, None, "still in the initial step");

    // Greet → Collect within one turn: the second call already has the new step's prompt and tools.
    let r = w.say("I want a return").await;
    let calls = w.take_calls();
    assert_eq!(calls.len(), 2);
    assert!(calls[0].system.contains("Current step: Greet") && calls[1].system.contains("Current step: Collect"));
    assert_eq!(calls[1].tools, ["send_message", "set_context", "transition_to_done"]);
    assert_eq!(tool_names(&r[0]), ["transition_to_collect"]);
    assert_eq!(w.session().await.current_step.as_deref(), Some("collect"));

    // Collect → Done; the final step offers end_conversation although the agent does not list it.
    let r = w.say("order 4711").await;
    let calls = w.take_calls();
    assert_eq!(calls.len(), 3);
    assert!(!calls[1].offers("end_conversation"));
    assert!(calls[2].system.contains("Current step: Done") && calls[2].offers("end_conversation"));
    assert_eq!(tool_names(&r[0]), ["set_context", "transition_to_done", "send_message", "end_conversation"]);
    assert_eq!(r[0].status, ExecutionStatus::Ended);
    let s = w.session().await;
    assert_eq!((s.status, s.current_step.as_deref()), (SessionStatus::Completed, Some("done")));
    assert_eq!(s.memory["order"], json!("4711"));
    assert_eq!(
        w.replies().await,
        ["Let us start with your order first.", "What is the order number?", "Return booked. Goodbye!"]
    );
    assert!(w.events().await.iter().any(|e| e.detail_type == "session.ended"));
}

#[tokio::test]
async fn a_bundle_with_a_broken_step_graph_is_refused_with_pointers() {
    let mut a = stepped_agent();
    a["steps"][1]["transitionTools"] = json!(["nowhere"]);
    a["steps"][0]["isInitial"] = json!(false);
    let errors = Bundle::parse(&bundle(vec![a], vec![], FRONT), &SystemClock).unwrap_err();
    let pointers: Vec<_> = errors.0.iter().map(|e| e.pointer.as_str()).collect();
    assert_eq!(pointers, ["/agents/0/steps/1/transitionTools/0", "/agents/0/steps"]);
}

// ---------------------------------------------------------------------------------------------
// Skills

fn skills() -> Vec<Value> {
    vec![
        json!({ "skillId": POLICIES, "name": "policies", "description": "Store policies",
                "prompt": "Policies: be generous." }),
        json!({ "skillId": RETURNS, "name": "returns", "description": "How returns work",
                "prompt": "Returns are free within 30 days.", "parentSkill": POLICIES, "tools": ["trigger_flow"] }),
    ]
}

#[tokio::test]
async fn loading_a_skill_loads_its_parent_first_and_keeps_both_for_the_rest_of_the_session() {
    let script = json!({ "rules": [
        { "when": { "afterTool": "load_skill", "systemContains": "## Skill: returns" },
          "then": { "text": "Returns are free within 30 days." } },
        { "when": { "afterTool": "load_skill" }, "then": { "text": "I could not load that." } },
        { "when": { "userText": { "contains": "bogus" } },
          "then": { "toolCalls": [ { "name": "load_skill", "input": { "name": "astrology" } } ] } },
        { "when": { "userText": { "contains": "return" } },
          "then": { "toolCalls": [ { "name": "load_skill", "input": { "name": "returns" } } ] } },
        { "then": { "text": "Anything else?" } }
    ] });
    let front = agent(FRONT, "Front", "You are the front desk.", json!({ "skills": [POLICIES, RETURNS] }));
    let mut w = World::new(&bundle(vec![front], skills(), FRONT), script).await;

    let r = w.say("bogus skill please").await;
    w.take_calls();
    assert!(r[0].tool_calls[0].is_error);
    assert!(r[0].tool_calls[0].output["error"].as_str().unwrap().contains("available: policies, returns"));
    assert!(w.session().await.loaded_skills.is_empty());

    let r = w.say("how do returns work?").await;
    let calls = w.take_calls();
    assert_eq!(calls.len(), 2);
    assert!(calls[0].offers("load_skill") && !calls[0].offers("trigger_flow"));
    assert!(!calls[0].system.contains("## Skill:"));
    let (policies, returns) =
        (calls[1].system.find("## Skill: policies").unwrap(), calls[1].system.find("## Skill: returns").unwrap());
    assert!(policies < returns, "the parent's prompt comes first");
    assert!(calls[1].offers("trigger_flow"), "the skill's tools are offered from the next call on");
    assert_eq!(r[0].tool_calls[0].output, json!({ "loaded": ["policies", "returns"], "tools": ["trigger_flow"] }));
    let s = w.session().await;
    assert_eq!(s.loaded_skills.iter().map(|i| i.to_string()).collect::<Vec<_>>(), [POLICIES, RETURNS]);

    // The next turn starts with both skills loaded.
    w.say("thanks").await;
    let calls = w.take_calls();
    assert_eq!(calls.len(), 1);
    assert!(calls[0].system.contains("## Skill: returns") && calls[0].offers("trigger_flow"));
    assert_eq!(w.replies().await, ["I could not load that.", "Returns are free within 30 days.", "Anything else?"]);
}

// ---------------------------------------------------------------------------------------------
// Supervisor

fn supervisor_bundle() -> String {
    let sup = agent(
        FRONT,
        "Concierge",
        "You supervise specialists.",
        json!({ "type": "supervisor", "subAgents": [BILLING, SHIPPING], "tools": ["send_message"] }),
    );
    let billing =
        agent(BILLING, "Billing", "You are the billing specialist.", json!({ "description": "Refunds and invoices." }));
    let shipping = agent(SHIPPING, "Shipping", "You are the shipping specialist.", json!({}));
    bundle(vec![sup, billing, shipping], vec![], FRONT)
}

fn supervisor_script() -> Value {
    json!({ "rules": [
        { "when": { "systemContains": "billing specialist" }, "then": { "text": "Refund of 20 EUR issued." } },
        { "when": { "systemContains": "shipping specialist" }, "then": { "text": "The parcel arrives Monday." } },
        { "when": { "afterTool": "ask_shipping" }, "then": { "text": "Summary: {{toolResult}}" } },
        { "then": { "toolCalls": [
            { "name": "ask_billing", "input": { "task": "Refund order 4711", "context": { "order": "4711" } } },
            { "name": "ask_shipping", "input": { "task": "Where is order 4711?" } } ] } }
    ] })
}

#[tokio::test]
async fn a_supervisor_calls_its_sub_agents_as_tools_in_isolated_contexts_and_records_them_as_children() {
    let mut w = World::new(&supervisor_bundle(), supervisor_script()).await;
    let r = w.say("refund my order and tell me where it is").await;
    let calls = w.take_calls();
    assert_eq!(calls.len(), 4, "supervisor, two sub-agents, supervisor");
    assert_eq!(calls[0].tools, ["send_message", "ask_billing", "ask_shipping"]);
    // Each sub-agent sees only its task (and the context passed), never the conversation.
    let sub_calls: Vec<&Call> = calls[1..3].iter().collect();
    for c in &sub_calls {
        assert_eq!(c.messages.len(), 1);
        assert!(!c.messages[0].contains("refund my order"));
        assert!(c.tools.is_empty(), "a sub-agent gets its webhook tools only");
    }
    assert!(sub_calls.iter().any(|c| c.messages[0] == "Refund order 4711\n\nContext: {\"order\":\"4711\"}"));

    let record = &r[0];
    assert_eq!(record.status, ExecutionStatus::Success);
    let children: Vec<(String, Option<&str>)> =
        record.children.iter().map(|c| (c.agent_id.to_string(), c.result.as_deref())).collect();
    assert_eq!(
        children,
        [
            (BILLING.to_owned(), Some("Refund of 20 EUR issued.")),
            (SHIPPING.to_owned(), Some("The parcel arrives Monday."))
        ]
    );
    let own: u64 = record.model_calls.iter().map(|m| m.usage.total()).sum();
    let theirs: u64 = record.children.iter().map(|c| c.token_usage.total()).sum();
    assert!(theirs > 0);
    assert_eq!(record.token_usage.total(), own + theirs, "children's tokens count in the supervisor's total");
    assert_eq!(
        w.replies().await,
        [
            r#"Summary: {"agent":"Billing","result":"Refund of 20 EUR issued."}; {"agent":"Shipping","result":"The parcel arrives Monday."}"#
        ]
    );
    assert_eq!(w.sessions().await.len(), 1, "sub-agents do not take the conversation");
}

/// Holds the first sub-agent's answer until the second has answered: if the calls ran one after
/// the other the first would wait forever (the test's timeout then fails it); run concurrently,
/// they finish in the reverse order and each result must still reach its own call.
struct ReverseOrder {
    inner: ScriptedModel,
    second_done: tokio::sync::Notify,
}

#[async_trait]
impl Model for ReverseOrder {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        if request.system.contains("billing specialist") {
            self.second_done.notified().await;
        }
        let response = self.inner.converse(request).await;
        if request.system.contains("shipping specialist") {
            self.second_done.notify_one();
        }
        response
    }
}

#[tokio::test]
async fn sub_agent_calls_of_one_turn_run_concurrently_and_results_match_their_calls() {
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(ReverseOrder {
        inner: ScriptedModel::from_json(&supervisor_script().to_string()).unwrap(),
        second_done: tokio::sync::Notify::new(),
    });
    let embedded = Embedded::open(dir.path(), model, Arc::new(SystemClock), EmbeddedOptions::default()).unwrap();
    Bundle::parse(&supervisor_bundle(), &SystemClock).unwrap().install(&embedded.store).await.unwrap();
    let event = InboundEvent::parse(&json!({
        "id": "evt-1", "source": "conversations-service", "detail-type": "message.new",
        "detail": { "tenantId": "t-1", "conversationId": "c-1", "messageId": "m-1",
                    "channel": {"platform": "webchat"}, "conversation": {"status": "open"},
                    "message": {"direction": "inbound", "text": "both please"} }
    }))
    .unwrap();
    embedded.ingest(&event).await.unwrap();
    let d = embedded.queue.receive().await.unwrap().unwrap();
    let item: WorkItem = serde_json::from_str(&d.body).unwrap();
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(60), embedded.executor.execute(&item))
        .await
        .expect("sub-agent calls ran one after the other")
        .unwrap();
    let ExecOutcome::Recorded(record) = outcome else { panic!("{outcome:?}") };
    let by_call: Vec<(&str, &str)> =
        record.tool_calls.iter().map(|c| (c.name.as_str(), c.output["result"].as_str().unwrap())).collect();
    assert_eq!(by_call, [("ask_billing", "Refund of 20 EUR issued."), ("ask_shipping", "The parcel arrives Monday.")]);
}

// ---------------------------------------------------------------------------------------------
// Router

fn router_bundle() -> String {
    router_bundle_with(json!({}))
}

/// The router bundle, with `extra` fields on the router.
fn router_bundle_with(extra: Value) -> String {
    let mut fields = json!({ "type": "router", "subAgents": [BILLING, SHIPPING], "defaultAgentId": SHIPPING });
    if let (Some(f), Value::Object(extra)) = (fields.as_object_mut(), extra) {
        f.extend(extra);
    }
    let router = agent(FRONT, "Router", "You route customers.", fields);
    let billing = agent(BILLING, "Billing", "You are the billing specialist.", json!({ "description": "Invoices." }));
    let shipping =
        agent(SHIPPING, "Shipping", "You are the shipping specialist.", json!({ "description": "Parcels." }));
    bundle(vec![router, billing, shipping], vec![], FRONT)
}

fn router_script() -> Value {
    json!({ "rules": [
        { "when": { "systemContains": "billing specialist" }, "then": { "text": "Billing here." } },
        { "when": { "systemContains": "shipping specialist" }, "then": { "text": "Shipping here." } },
        { "when": { "userText": { "contains": "invoice" } },
          "then": { "toolCalls": [ { "name": "choose_agent", "input": { "agentId": BILLING, "reason": "invoice" } } ] } },
        { "when": { "userText": { "contains": "mystery" } },
          "then": { "toolCalls": [ { "name": "choose_agent", "input": { "agentId": "01JD0000NKN0WN0AGENT000009" } } ] } },
        { "then": { "text": "I am not sure." } }
    ] })
}

#[tokio::test]
async fn a_router_classifies_once_and_the_chosen_agent_keeps_the_conversation() {
    let mut w = World::new(&router_bundle(), router_script()).await;
    let r = w.say("my invoice is wrong").await;
    let calls = w.take_calls();
    assert_eq!(calls.len(), 2, "one classification, then the chosen agent");
    assert_eq!(calls[0].tools, ["choose_agent"]);
    assert!(calls[0].system.contains(&format!("- {BILLING} (Billing): Invoices.")));
    assert!(calls[1].system.contains("billing specialist"));
    assert_eq!((r[0].agent_id.to_string(), r[0].status), (FRONT.to_owned(), ExecutionStatus::HandedOff));
    assert_eq!(tool_names(&r[0]), ["choose_agent"]);
    assert!(!r[0].tool_calls[0].is_error);
    assert_eq!((r[1].agent_id.to_string(), r[1].status), (BILLING.to_owned(), ExecutionStatus::Success));
    let sessions = w.sessions().await;
    assert_eq!(sessions.len(), 2);
    let s = w.session().await;
    assert_eq!(s.agent_id.to_string(), BILLING);
    assert_eq!(s.parent_session_id, Some(sessions[0].session_id));

    // The next message goes straight to the chosen agent; the router is not asked again.
    w.say("and another thing").await;
    let calls = w.take_calls();
    assert_eq!(calls.len(), 1);
    assert!(calls[0].system.contains("billing specialist"));
    assert_eq!(w.replies().await, ["Billing here.", "Billing here."]);
}

#[tokio::test]
async fn a_router_whose_model_is_down_classifies_with_its_fallback_model() {
    let bundle = router_bundle_with(json!({"model": "down", "modelConfig": {"fallbackModels": ["test-model"]}}));
    let mut w = World::new(&bundle, router_script()).await;
    let r = w.say("my invoice is wrong").await;
    assert_eq!(w.take_calls().len(), 3, "the model that is down, its fallback, then billing");
    assert_eq!(r[0].status, ExecutionStatus::HandedOff);
    let call = &r[0].model_calls[0];
    assert_eq!(call.fallback_from.iter().map(|f| f.model.as_str()).collect::<Vec<_>>(), ["down"]);
    assert_eq!(w.session().await.agent_id.to_string(), BILLING);
}

#[tokio::test]
async fn an_invalid_pick_or_no_pick_falls_back_to_the_default_agent() {
    for text in ["a mystery question", "hello"] {
        let mut w = World::new(&router_bundle(), router_script()).await;
        let r = w.say(text).await;
        assert_eq!(r.len(), 2, "{text}");
        let choice = &r[0].tool_calls[0];
        assert!(choice.is_error, "{text}: the fallback is marked in the record");
        assert_eq!(choice.output["agentId"], json!(SHIPPING));
        assert!(choice.output["fallback"].is_string());
        assert_eq!(r[1].agent_id.to_string(), SHIPPING);
        assert_eq!(w.replies().await, ["Shipping here."], "{text}");
        let s = w.session().await;
        assert_eq!(s.handoff_context.unwrap().relevant_info["routerFallback"], choice.output["fallback"]);
    }
}

/// The router bundle with a fan-out that `combine`s the answers of up to two agents.
fn fan_out_bundle(combine: &str) -> String {
    router_bundle_with(json!({ "fanOut": { "maxAgents": 2, "combine": combine } }))
}

/// Billing and shipping answer (unless `billing` is false: then its call matches no rule and
/// fails), the synthesis call combines, and the classification picks both for "both", an
/// unknown agent for "mystery".
fn fan_out_script(billing: bool) -> Value {
    let mut rules = vec![
        json!({ "when": { "systemContains": "What your agents answered" }, "then": { "text": "Refund issued; the parcel arrives Monday." } }),
        json!({ "when": { "systemContains": "shipping specialist" }, "then": { "text": "The parcel arrives Monday." } }),
        json!({ "when": { "systemContains": "Agents you can ask", "userText": { "contains": "both" } },
                "then": { "toolCalls": [ { "name": "choose_agents", "input": { "agentIds": [BILLING, SHIPPING] } } ] } }),
        json!({ "when": { "systemContains": "Agents you can ask", "userText": { "contains": "mystery" } },
                "then": { "toolCalls": [ { "name": "choose_agents", "input": { "agentIds": ["01JD0000NKN0WN0AGENT000009"] } } ] } }),
    ];
    if billing {
        rules.insert(1, json!({ "when": { "systemContains": "billing specialist" }, "then": { "text": "Refund of 20 EUR issued." } }));
    }
    json!({ "rules": rules })
}

#[tokio::test]
async fn a_fan_out_asks_its_picks_at_once_and_replies_with_one_synthesis_of_their_answers() {
    let mut w = World::new(&fan_out_bundle("synthesize"), fan_out_script(true)).await;
    let r = w.say("both: my refund and my parcel").await;
    // one execution, the router's: it answered the customer itself, nothing was handed off
    assert_eq!(r.len(), 1);
    let record = &r[0];
    assert_eq!((record.agent_id.to_string(), record.status), (FRONT.to_owned(), ExecutionStatus::Success));
    assert_eq!(tool_names(record), ["choose_agents"]);
    assert_eq!(record.tool_calls[0].output, json!({ "agentIds": [BILLING, SHIPPING] }));
    // each pick is a child execution of the router's, with its own model call and answer
    let children: Vec<_> = record
        .children
        .iter()
        .map(|c| (c.agent_id.to_string(), c.status, c.result.clone().unwrap_or_default()))
        .collect();
    assert_eq!(
        children,
        [
            (BILLING.to_owned(), ExecutionStatus::Success, "Refund of 20 EUR issued.".to_owned()),
            (SHIPPING.to_owned(), ExecutionStatus::Success, "The parcel arrives Monday.".to_owned()),
        ]
    );
    assert!(record.children.iter().all(|c| c.model_calls.len() == 1));
    assert_eq!(record.model_calls.len(), 2, "the classification and the synthesis");
    let calls = w.take_calls();
    assert_eq!(calls.len(), 4, "classify, the two picks, synthesize: {calls:?}");
    assert_eq!(calls[0].tools, ["choose_agents"]);
    // each pick saw the customer's message alone, in its own context
    for pick in &calls[1..3] {
        assert_eq!(pick.messages, ["both: my refund and my parcel"]);
        assert!(pick.system.contains("Working for a supervisor") || pick.system.contains("specialist"));
    }
    let synthesis = &calls[3];
    assert!(synthesis.tools.is_empty());
    assert!(
        synthesis.system.contains("Refund of 20 EUR issued.")
            && synthesis.system.contains("The parcel arrives Monday.")
    );
    // the customer got one reply, the synthesis; the router keeps the conversation, with its reply in the transcript
    assert_eq!(w.replies().await, ["Refund issued; the parcel arrives Monday."]);
    let s = w.session().await;
    assert_eq!((s.agent_id.to_string(), w.sessions().await.len()), (FRONT.to_owned(), 1));
    assert_eq!(s.transcript.last().map(|m| m.text()), Some("Refund issued; the parcel arrives Monday.".to_owned()));
    let tokens: u64 = record
        .model_calls
        .iter()
        .chain(record.children.iter().flat_map(|c| c.model_calls.iter()))
        .map(|c| c.usage.total())
        .sum();
    assert_eq!(record.token_usage.total(), tokens, "the children's tokens are the router's too");
}

#[tokio::test]
async fn a_fan_out_keeps_the_answers_that_came_when_one_pick_fails() {
    // first_success: the first answer in the router's order that came is sent as it is
    let mut w = World::new(&fan_out_bundle("first_success"), fan_out_script(false)).await;
    let r = w.say("both: my refund and my parcel").await;
    let record = &r[0];
    assert_eq!(record.status, ExecutionStatus::Success, "{record:?}");
    let statuses: Vec<_> = record.children.iter().map(|c| (c.agent_id.to_string(), c.status)).collect();
    assert_eq!(
        statuses,
        [(BILLING.to_owned(), ExecutionStatus::Failed), (SHIPPING.to_owned(), ExecutionStatus::Success)]
    );
    assert!(record.children[0].error.as_ref().is_some_and(|e| !e.message.is_empty()), "the failure is recorded");
    assert_eq!(record.model_calls.len(), 1, "no synthesis call for first_success");
    assert_eq!(w.replies().await, ["The parcel arrives Monday."]);
}

#[tokio::test]
async fn a_fan_out_whose_picks_all_fail_is_a_failed_turn_and_an_invalid_pick_asks_the_default_alone() {
    // the default alone answers an invalid pick
    let mut w = World::new(&fan_out_bundle("synthesize"), fan_out_script(true)).await;
    let r = w.say("a mystery question").await;
    let choice = &r[0].tool_calls[0];
    assert!(choice.is_error && choice.output["fallback"].is_string(), "{choice:?}");
    assert_eq!(choice.output["agentIds"], json!([SHIPPING]));
    assert_eq!(r[0].children.iter().map(|c| c.agent_id.to_string()).collect::<Vec<_>>(), [SHIPPING]);
    assert_eq!(w.replies().await, ["Refund issued; the parcel arrives Monday."], "synthesized from the one answer");

    // no pick answers: the turn fails, and the customer is not left in silence (onFailure)
    let mut rules = fan_out_script(false);
    rules["rules"].as_array_mut().unwrap().remove(1); // no shipping answer either
    let mut w = World::new(&fan_out_bundle("synthesize"), rules).await;
    let r = w.say("both: my refund and my parcel").await;
    let record = &r[0];
    assert_eq!(record.status, ExecutionStatus::Failed);
    assert!(record.error.as_ref().unwrap().message.contains("none of the 2 agents"), "{:?}", record.error);
    assert_eq!(record.children.len(), 2);
    assert!(record.actions.iter().any(|a| matches!(a, Action::HandoffToHuman { .. })), "{:?}", record.actions);
}

#[tokio::test]
async fn only_a_router_fans_out_to_two_to_five_agents() {
    let router: Agent = serde_json::from_value({
        let mut a: Value = serde_json::from_str::<Value>(&fan_out_bundle("synthesize")).unwrap()["agents"][0].clone();
        a["tenantId"] = json!("t-1");
        a["createdAt"] = json!("2026-11-23T00:00:00Z");
        a["updatedAt"] = json!("2026-11-23T00:00:00Z");
        a
    })
    .unwrap();
    assert_eq!(router.validate(), Ok(()));
    let pointers = |a: &Agent| a.validate().unwrap_err().0.into_iter().map(|e| e.pointer).collect::<Vec<_>>();
    let mut many = router.clone();
    many.fan_out = Some(switchboard_domain::FanOut { max_agents: 6, combine: switchboard_domain::Combine::Synthesize });
    assert_eq!(pointers(&many), ["/fanOut/maxAgents"]);
    let mut standard = router.clone();
    (standard.agent_type, standard.sub_agents, standard.default_agent_id) = (AgentType::Standard, vec![], None);
    assert_eq!(pointers(&standard), ["/fanOut"]);
}

// ---------------------------------------------------------------------------------------------
// Handoffs

#[tokio::test]
async fn an_agent_handoff_carries_reason_summary_and_memory_into_the_next_agents_prompt() {
    let script = json!({ "rules": [
        { "when": { "systemContains": "billing specialist" }, "then": { "text": "Billing here." } },
        { "when": { "afterTool": "set_context" }, "then": { "toolCalls": [ { "name": "handoff_to_agent",
            "input": { "agentId": BILLING, "reason": "refund", "summary": "Customer wants 20 EUR back." } } ] } },
        { "then": { "toolCalls": [ { "name": "set_context", "input": { "key": "order", "value": "4711" } } ] } }
    ] });
    let agents = vec![
        agent(FRONT, "Front", "You are the front desk.", json!({})),
        agent(BILLING, "Billing", "You are the billing specialist.", json!({})),
    ];
    let mut w = World::new(&bundle(agents, vec![], FRONT), script).await;
    w.say("refund please").await;
    let calls = w.take_calls();
    let billing = calls.last().unwrap();
    assert!(billing.system.contains(&format!("Agent {FRONT} handed this conversation to you. Reason: refund")));
    assert!(billing.system.contains("Summary so far: Customer wants 20 EUR back."));
    assert!(billing.system.contains(r#"- order: "4711""#));
    let s = w.session().await;
    assert_eq!((s.handoff_depth, s.status), (1, SessionStatus::Active));
    let parent = w.sessions().await.into_iter().find(|p| Some(p.session_id) == s.parent_session_id).unwrap();
    assert_eq!(parent.status, SessionStatus::HandedOff);
}

#[tokio::test]
async fn a_human_owned_conversation_records_messages_without_replies_then_resumes_with_them() {
    let script = json!({ "rules": [
        { "when": { "userText": { "contains": "person" } }, "then": { "toolCalls": [ { "name": "handoff_to_human",
            "input": { "reason": "asked for a person", "priority": "high" } } ] } },
        { "then": { "text": "Agent back: {{userText}}" } }
    ] });
    let front = agent(FRONT, "Front", "You are the front desk.", json!({}));
    let mut w = World::new(&bundle(vec![front], vec![], FRONT), script).await;
    w.say("remember order 4711").await;
    w.say("I want a person").await;
    let handoff = w.events().await.into_iter().find(|e| e.detail_type == "session.handoff.human").unwrap();
    assert_eq!(handoff.detail["priority"], json!("high"));
    assert_eq!(handoff.detail["reason"], json!("asked for a person"));
    w.take_calls();

    // While the human owns it: recorded, skipped, no model call, no reply.
    for text in ["hello? anyone", "my address changed"] {
        let r = w.say(text).await;
        assert_eq!(r[0].status, ExecutionStatus::Skipped);
    }
    w.human_says("I have updated your address.").await;
    assert!(w.take_calls().is_empty());
    assert_eq!(w.replies().await, ["Agent back: remember order 4711"]);
    let human = w.session().await;
    assert!(human.is_human_owned());
    assert_eq!(human.transcript.last().unwrap().text(), "my address changed");

    // The operator hands it back; the agent answers the next message with the human-era messages in its history:
    // the conversation goes on as text, and the customer's messages in a row are one turn (roles alternate).
    let done = w
        .embedded
        .operator
        .hand_off(&w.tenant, human.session_id, HandoffTo::Agent(FRONT.parse().unwrap()), "resolved", "ops")
        .await
        .unwrap();
    assert!(done.new_session_id.is_some());
    w.say("thanks").await;
    let calls = w.take_calls();
    assert_eq!(calls.len(), 1);
    // The conversation log holds the operator's message too: the agent's first turn reads it.
    assert_eq!(
        calls[0].messages,
        [
            "remember order 4711",
            "Agent back: remember order 4711",
            "I want a person\nhello? anyone\nmy address changed",
            "[human operator] I have updated your address.",
            "thanks"
        ]
    );
    assert_eq!(w.replies().await.last().unwrap(), "Agent back: thanks");
}

// ---------------------------------------------------------------------------------------------
// Context that lasts: summaries, the first message, handoffs that carry the conversation

/// The scripted summariser's answer, and the rule that gives it (the summary call's system
/// prompt asks for "the running summary").
const SUMMARY: &str = "Customer Ana asked about order 4711 twice.";

fn summarizing_rule() -> Value {
    json!({ "when": { "systemContains": "running summary" }, "then": { "text": SUMMARY } })
}

#[tokio::test]
async fn older_messages_are_folded_into_a_summary_that_the_next_prompts_carry_with_the_first_message() {
    let script = json!({ "rules": [ summarizing_rule(), { "then": { "text": "You said: {{userText}}" } } ] });
    let front = agent(FRONT, "Front", "You are the front desk.", json!({ "history": { "summarizeAfter": 2 } }));
    let mut w = World::new(&bundle(vec![front], vec![], FRONT), script).await;
    for text in ["m1", "m2", "m3"] {
        w.say(text).await;
    }
    assert!(
        w.take_calls().iter().all(|c| !c.system.contains("running summary")),
        "2 customer messages kept as they are"
    );

    // The fourth message finds three customer messages beyond the (absent) summary: the oldest
    // two exchanges are folded, the newest customer message stays word for word.
    let records = w.say("m4").await;
    let calls = w.take_calls();
    assert_eq!(calls.len(), 2);
    assert!(calls[0].system.starts_with("You keep the running summary") && calls[0].tools.is_empty());
    assert_eq!(
        calls[0].messages,
        ["Summary so far:\n(none yet)\n\nNewer messages:\nCustomer: m1\nAgent: You said: m1\nCustomer: m2\n\
          Agent: You said: m2\n\nWrite the updated summary."]
    );
    assert_eq!(
        calls[1].system,
        format!(
            "You are the front desk.\n\n## Earlier in this conversation\n{SUMMARY}\n\n## The customer's first message\nm1"
        )
    );
    assert_eq!(calls[1].messages, ["m3", "You said: m3", "m4"]);
    let purposes: Vec<Option<String>> = records[0].model_calls.iter().map(|c| c.purpose.clone()).collect();
    assert_eq!(purposes, [Some("summary".to_owned()), None]);
    assert_eq!(records[0].token_usage.total(), records[0].model_calls.iter().map(|c| c.usage.total()).sum::<u64>());
    let s = w.session().await;
    let summary = s.summary.clone().unwrap();
    assert_eq!((summary.text.as_str(), summary.covers, summary.customer_messages), (SUMMARY, 4, 2));
    assert_eq!(s.first_message.as_deref(), Some("m1"));
    assert_eq!(s.transcript.len(), 8, "the transcript itself keeps every message");

    // The next message: two customer messages beyond the summary, no new fold; the summary and
    // the first message stay in the prompt.
    w.say("m5").await;
    let calls = w.take_calls();
    assert_eq!(calls.len(), 1);
    assert!(calls[0].system.contains(SUMMARY) && calls[0].system.ends_with("## The customer's first message\nm1"));
    assert_eq!(calls[0].messages, ["m3", "You said: m3", "m4", "You said: m4", "m5"]);
}

#[tokio::test]
async fn a_failed_summary_call_leaves_the_session_unsummarized_and_the_turn_answers() {
    // No rule answers the summary call: the scripted model refuses it, as a model would.
    let script = json!({ "rules": [ { "when": { "systemContains": "front desk" }, "then": { "text": "You said: {{userText}}" } } ] });
    let front = agent(FRONT, "Front", "You are the front desk.", json!({ "history": { "summarizeAfter": 1 } }));
    let mut w = World::new(&bundle(vec![front], vec![], FRONT), script).await;
    w.say("m1").await;
    w.say("m2").await;
    let records = w.say("m3").await;
    assert_eq!(records[0].status, ExecutionStatus::Success);
    assert_eq!(w.replies().await.last().unwrap(), "You said: m3");
    assert_eq!(records[0].model_calls.len(), 1, "the refused summary call answered nothing to record");
    assert!(w.session().await.summary.is_none());
}

#[tokio::test]
async fn an_agent_handoff_gives_the_next_agent_the_conversation_and_the_summary() {
    let script = json!({ "rules": [
        summarizing_rule(),
        { "when": { "systemContains": "billing specialist" }, "then": { "text": "Billing here." } },
        { "when": { "userText": { "contains": "refund" } }, "then": { "toolCalls": [ { "name": "handoff_to_agent",
            "input": { "agentId": BILLING, "reason": "refund" } } ] } },
        { "then": { "text": "You said: {{userText}}" } }
    ] });
    let agents = vec![
        agent(FRONT, "Front", "You are the front desk.", json!({ "history": { "summarizeAfter": 2 } })),
        agent(BILLING, "Billing", "You are the billing specialist.", json!({})),
    ];
    let mut w = World::new(&bundle(agents, vec![], FRONT), script).await;
    for text in ["hi, I am Ana", "order 4711 is late", "it was a gift"] {
        w.say(text).await;
    }
    w.take_calls();
    w.say("I want a refund").await;
    let calls = w.take_calls();
    // Front: summary call, then the handoff call; Billing answers the same message.
    assert_eq!(calls.len(), 3);
    let billing = &calls[2];
    assert!(billing.system.contains(&format!("## Earlier in this conversation\n{SUMMARY}")));
    assert!(billing.system.contains("## The customer's first message\nhi, I am Ana"));
    // The recent conversation as text (Front's handoff call is not in it), then the message.
    assert_eq!(billing.messages, ["it was a gift", "You said: it was a gift", "I want a refund"]);
    assert_eq!(w.replies().await.last().unwrap(), "Billing here.");
}

#[tokio::test]
async fn a_handoff_over_the_api_gives_the_next_agent_the_conversation_as_text() {
    let script = json!({ "rules": [
        { "when": { "systemContains": "billing specialist" }, "then": { "text": "Billing: {{userText}}" } },
        { "when": { "userText": { "contains": "order" } }, "then": { "toolCalls": [ { "name": "set_context",
            "input": { "key": "order", "value": "4711" } } ] } },
        { "then": { "text": "Noted." } }
    ] });
    let agents = vec![
        agent(FRONT, "Front", "You are the front desk.", json!({})),
        agent(BILLING, "Billing", "You are the billing specialist.", json!({})),
    ];
    let mut w = World::new(&bundle(agents, vec![], FRONT), script).await;
    w.say("my order is 4711").await;
    let front = w.session().await;
    assert!(front.transcript.iter().any(Message::has_tool_results), "Front's transcript holds its tool call");
    w.embedded
        .operator
        .hand_off(&w.tenant, front.session_id, HandoffTo::Agent(BILLING.parse().unwrap()), "billing question", "ops")
        .await
        .unwrap();
    w.take_calls();
    w.say("can I pay later?").await;
    let calls = w.take_calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].messages, ["my order is 4711", "Noted.", "can I pay later?"]);
    let billing = w.session().await;
    assert!(billing.transcript.iter().all(|m| !m.has_tool_results() && m.tool_uses().is_empty()));
}

#[tokio::test]
async fn a_trigger_firing_on_the_fifth_message_gives_the_model_the_four_before_it() {
    let script = json!({ "rules": [ { "then": { "text": "About your refund: {{userText}}" } } ] });
    let front = agent(FRONT, "Refunds", "You handle refunds.", json!({}));
    let bundle = json!({ "tenantId": "t-1", "name": "Patterns", "agents": [front],
        "triggers": [ { "triggerId": "01JD0000TR1GGER0CHAT000001", "name": "refunds", "agentId": FRONT,
                        "eventType": "message.new", "priority": 1,
                        "conditions": { "all": [ { "field": "message.text", "operator": "contains", "value": "refund" } ] } } ] });
    let mut w = World::new(&bundle.to_string(), script).await;
    // Four messages no trigger answers, one of them the operator's.
    assert!(w.say("hi").await.is_empty());
    assert!(w.say("I bought a kettle").await.is_empty());
    w.human_says("Sorry to hear that! What happened?").await;
    assert!(w.say("it leaks").await.is_empty());
    assert!(w.take_calls().is_empty());
    // The fifth fires the trigger: the new session opens on what was said before.
    let records = w.say("I want a refund").await;
    assert_eq!(records[0].status, ExecutionStatus::Success);
    let calls = w.take_calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].messages,
        ["hi\nI bought a kettle", "[human operator] Sorry to hear that! What happened?", "it leaks\nI want a refund"]
    );
    let s = w.session().await;
    assert_eq!(s.first_message.as_deref(), Some("hi"));
    // Read at the session's first turn only: the next turn goes on from the session's transcript.
    w.say("refund to my card please").await;
    let calls = w.take_calls();
    assert_eq!(calls[0].messages.len(), 5);
    assert_eq!(calls[0].messages[3], "About your refund: I want a refund");
}

// ---------------------------------------------------------------------------------------------
// Failure paths

#[tokio::test]
async fn a_sub_agent_cannot_use_system_tools_and_its_failures_are_errors_for_the_supervisor() {
    let script = json!({ "rules": [
        { "when": { "systemContains": "billing specialist", "afterTool": "send_message" },
          "then": { "text": "Could not message the customer." } },
        { "when": { "systemContains": "billing specialist" },
          "then": { "toolCalls": [ { "name": "send_message", "input": { "text": "Hi customer!" } } ] } },
        { "when": { "afterTool": "ask_shipping" }, "then": { "text": "Done: {{toolResult}}" } },
        { "when": { "systemContains": "You supervise" }, "then": { "toolCalls": [
            { "name": "ask_billing", "input": { "task": "Refund order 4711" } },
            { "name": "ask_billing", "input": { "context": { "no": "task" } } },
            { "name": "ask_shipping", "input": { "task": "Where is it?" } } ] } }
    ] });
    let mut w = World::new(&supervisor_bundle(), script).await;
    let r = w.say("help").await;
    let record = &r[0];
    // the billing child tried send_message: refused inside the child, never sent
    let billing = &record.children[0];
    assert_eq!(billing.tool_calls[0].name, "send_message");
    assert!(billing.tool_calls[0].is_error);
    assert_eq!(billing.result.as_deref(), Some("Could not message the customer."));
    // a call without a task never starts a child
    assert!(record.tool_calls[1].is_error);
    assert!(record.tool_calls[1].output["error"].as_str().unwrap().contains("invalid arguments"));
    // the shipping specialist has no rule in this script: the model refuses, the child fails
    let shipping = &record.children[1];
    assert_eq!(shipping.status, ExecutionStatus::Failed);
    assert!(record.tool_calls[2].is_error);
    assert_eq!(record.children.len(), 2);
    assert_eq!(record.status, ExecutionStatus::Success, "the supervisor carries on with the errors");
    let replies = w.replies().await;
    assert_eq!(replies.len(), 1);
    assert!(replies[0].contains("the Shipping agent did not finish"), "{}", replies[0]);
}

#[tokio::test]
async fn a_router_whose_pick_and_default_both_fail_records_a_failed_execution() {
    let mut bundle: Value = serde_json::from_str(&router_bundle()).unwrap();
    bundle["agents"][2]["status"] = json!("inactive"); // the default, Shipping
    let mut w = World::new(&bundle.to_string(), router_script()).await;
    let r = w.say("a mystery question").await;
    assert_eq!(r.len(), 1, "nobody to hand to");
    assert_eq!(r[0].status, ExecutionStatus::Failed);
    assert_eq!(r[0].error.as_ref().unwrap().kind, switchboard_domain::ErrorKind::Config);
    assert!(w.events().await.iter().any(|e| e.detail_type == "execution.failed"));
    assert!(w.replies().await.is_empty());
}

#[tokio::test]
async fn a_skill_whose_parent_is_inactive_is_not_loaded() {
    let script = json!({ "rules": [
        { "when": { "afterTool": "load_skill" }, "then": { "text": "{{toolResult}}" } },
        { "then": { "toolCalls": [ { "name": "load_skill", "input": { "name": "returns" } } ] } }
    ] });
    let mut skills = skills();
    skills[0]["status"] = json!("inactive");
    let front = agent(FRONT, "Front", "You are the front desk.", json!({ "skills": [RETURNS] }));
    let mut w = World::new(&bundle(vec![front], skills, FRONT), script).await;
    let r = w.say("returns?").await;
    assert!(r[0].tool_calls[0].is_error);
    assert!(w.replies().await[0].contains(&format!("the parent skill {POLICIES} of 'returns' is not available")));
    assert!(w.session().await.loaded_skills.is_empty());
}
