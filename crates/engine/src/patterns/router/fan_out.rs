//! A router's fan-out (the module above says what it is): one classification call that picks
//! several agents, best first; their runs, all at once, each a child execution of the router's
//! record; and the reply made from their answers.

use std::time::Instant;

use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_domain::message::Message;
use switchboard_domain::{
    Agent, Combine, ErrorKind, ExecutionError, ExecutionRecord, ExecutionStatus, FanOut, ToolCallRecord,
};

use super::Routed;
use crate::fault::ExecError;
use crate::model_call::{converse, elapsed_ms};
use crate::moves::TurnState;
use crate::patterns::supervisor;
use crate::ports::{ModelRequest, ToolSpec};
use crate::tools::{CallContext, ToolCall};

/// The one tool of a fan-out's classification call.
pub(crate) const CHOOSE_AGENTS: &str = "choose_agents";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Choices {
    agent_ids: Vec<String>,
}

/// The router's whole turn with a fan-out: pick, run the picks at once, reply from their answers.
pub(super) async fn run(
    cx: CallContext<'_>,
    router: &Agent,
    fan: &FanOut,
    state: &mut TurnState,
    record: &mut ExecutionRecord,
    messages: Vec<Message>,
    key: &str,
) -> Result<Routed, ExecError> {
    let candidates = super::candidates(cx, router).await?;
    let picks = choose(cx, router, fan, &candidates, messages.clone(), record, key).await?;
    if picks.is_empty() {
        let message = "the router has no valid pick and its default agent is not active";
        return Ok(Routed::failed(ErrorKind::Config, message));
    }
    // Each pick answers the customer's message in its own context, all at once.
    let session = &state.session;
    let runs = picks.iter().enumerate().map(|(i, agent)| {
        let call = ToolCall {
            tool_use_id: format!("fan-out-{i}"),
            name: agent.name.clone(),
            input: json!({ "task": cx.item.text }),
            key: format!("{key}/fan-out/{i}"),
        };
        async move { supervisor::run(cx, session, agent, &call).await }
    });
    let mut answered: Vec<(&Agent, String)> = Vec::with_capacity(picks.len());
    for (agent, ran) in picks.iter().zip(futures::future::join_all(runs).await) {
        let (_, child) = ran?;
        let Some(child) = child else { continue };
        let answer = child.result.clone().filter(|r| !r.trim().is_empty());
        record.token_usage.add(child.token_usage);
        record.children.push(child);
        if let Some(answer) = answer {
            answered.push((agent, answer));
        }
    }
    if answered.is_empty() {
        let message = format!("none of the {} agents the router asked gave an answer", picks.len());
        return Ok(Routed::failed(ErrorKind::Model, &message));
    }
    let reply = match fan.combine {
        Combine::FirstSuccess => answered[0].1.clone(),
        Combine::Synthesize => match synthesize(cx, router, &answered, messages, record).await? {
            Ok(text) => text,
            Err(e) => return Ok(Routed { status: ExecutionStatus::Failed, failure: Some(e), said: None }),
        },
    };
    if let Some(by) = crate::execute::interrupt::newer(cx.deps, cx.item, router, &state.session, None).await? {
        state.interrupted_by = Some(by);
        return Ok(Routed { status: ExecutionStatus::Interrupted, failure: None, said: None });
    }
    match state.reply(cx.deps, &reply, &format!("{key}/reply")).await? {
        Ok((_, sent)) => {
            Ok(Routed { status: ExecutionStatus::Success, failure: None, said: Some(Message::assistant_text(sent)) })
        }
        Err(refused) => Ok(Routed::failed(ErrorKind::Config, &refused.to_string())),
    }
}

/// The classification call, recorded with its `choose_agents` call: the candidates picked, best
/// first (at most `maxAgents`, each once), or the router's default agent alone when the pick
/// cannot be used.
async fn choose(
    cx: CallContext<'_>,
    router: &Agent,
    fan: &FanOut,
    candidates: &[Agent],
    messages: Vec<Message>,
    record: &mut ExecutionRecord,
    key: &str,
) -> Result<Vec<Agent>, ExecError> {
    let request = classification_request(cx, router, fan, candidates, messages);
    let started = Instant::now();
    record.iterations = 1;
    let answer = converse(cx.deps, &request, &mut record.token_usage, &mut record.model_calls, None).await?;
    let (tool_use_id, input, verdict) = match answer {
        Err(e) => (String::new(), Value::Null, Err(format!("the classification call failed: {}", e.message))),
        Ok(message) => read_choices(&message, candidates, fan.max_agents),
    };
    let (picks, fallback) = match verdict {
        Ok(picks) => (picks, None),
        Err(why) => {
            tracing::info!(router = %router.agent_id, %why, "router pick invalid; using the default agent");
            let default = router.default_agent_id.and_then(|d| candidates.iter().find(|a| a.agent_id == d));
            (default.cloned().into_iter().collect(), Some(why))
        }
    };
    let ids: Vec<String> = picks.iter().map(|a| a.agent_id.to_string()).collect();
    let output = match &fallback {
        None => json!({ "agentIds": ids }),
        Some(why) => json!({ "agentIds": ids, "fallback": why }),
    };
    record.tool_calls.push(ToolCallRecord {
        tool_use_id,
        name: CHOOSE_AGENTS.to_owned(),
        input,
        is_error: fallback.is_some(),
        output,
        idempotency_key: key.to_owned(),
        latency_ms: elapsed_ms(started),
        after_model_call: u32::try_from(record.model_calls.len()).unwrap_or(u32::MAX),
        webhook: None,
    });
    Ok(picks)
}

/// The classification call: the router's prompt with the candidates listed, and
/// `choose_agents` as its one tool, an array of the candidates' ids.
fn classification_request(
    cx: CallContext<'_>,
    router: &Agent,
    fan: &FanOut,
    candidates: &[Agent],
    messages: Vec<Message>,
) -> ModelRequest {
    let mut system = router.system_prompt.trim().to_owned();
    system.push_str("\n\n## Agents you can ask\n");
    for a in candidates {
        let about = if a.description.trim().is_empty() { a.name.as_str() } else { a.description.as_str() };
        system.push_str(&format!("- {} ({}): {about}\n", a.agent_id, a.name));
    }
    system.push_str(&format!(
        "Call {CHOOSE_AGENTS} with the ids of the agents (at most {}, the most useful first) that should each \
         answer the customer's message; their answers come back to you.",
        fan.max_agents
    ));
    let ids: Vec<String> = candidates.iter().map(|a| a.agent_id.to_string()).collect();
    ModelRequest {
        model: router.model.clone(),
        system,
        messages,
        deadline: cx.deadline,
        tools: vec![ToolSpec {
            name: CHOOSE_AGENTS.to_owned(),
            description: "Pick the agents that should each answer this message, the most useful first.".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "agentIds": {
                        "type": "array", "items": { "type": "string", "enum": ids },
                        "minItems": 1, "maxItems": fan.max_agents, "uniqueItems": true
                    },
                    "reason": { "type": "string" }
                },
                "required": ["agentIds"],
                "additionalProperties": false
            }),
        }],
        config: router.model_config.clone(),
        recording: cx.item.recording,
    }
}

/// The model's `choose_agents` call in `message` — its id and input — and the candidates it
/// picked, in its order, each once, at most `max` (ids that are not candidates are left out),
/// or why the pick cannot be used.
fn read_choices(message: &Message, candidates: &[Agent], max: u32) -> (String, Value, Result<Vec<Agent>, String>) {
    let Some((id, input)) = super::tool_call(message, CHOOSE_AGENTS) else {
        return (String::new(), Value::Null, Err(format!("the model did not call {CHOOSE_AGENTS}")));
    };
    let verdict = match serde_json::from_value::<Choices>(input.clone()) {
        Err(e) => Err(format!("invalid {CHOOSE_AGENTS} arguments: {e}")),
        Ok(c) => {
            let mut picks: Vec<Agent> = Vec::new();
            for wanted in &c.agent_ids {
                if let Some(a) = candidates.iter().find(|a| a.agent_id.to_string() == *wanted)
                    && !picks.iter().any(|p| p.agent_id == a.agent_id)
                    && picks.len() < usize::try_from(max).unwrap_or(usize::MAX)
                {
                    picks.push(a.clone());
                }
            }
            if picks.is_empty() { Err("none of the ids picked is one of the candidates".to_owned()) } else { Ok(picks) }
        }
    };
    (id, input, verdict)
}

/// One more call of the router's model: the conversation as the router saw it, and every
/// answer that came back in its prompt; the reply it writes (or why there is none).
async fn synthesize(
    cx: CallContext<'_>,
    router: &Agent,
    answered: &[(&Agent, String)],
    messages: Vec<Message>,
    record: &mut ExecutionRecord,
) -> Result<Result<String, ExecutionError>, ExecError> {
    let mut system = router.system_prompt.trim().to_owned();
    system.push_str("\n\n## What your agents answered\nEach of these agents answered the customer's last message:\n");
    for (agent, answer) in answered {
        system.push_str(&format!("\n### {} ({})\n{}\n", agent.name, agent.agent_id, answer.trim()));
    }
    system.push_str(
        "\nWrite the one reply the customer gets: combine what helps from these answers, leave out what does \
         not, and do not mention the agents.",
    );
    let request = ModelRequest {
        model: router.model.clone(),
        system,
        messages,
        tools: vec![],
        config: router.model_config.clone(),
        deadline: cx.deadline,
        recording: cx.item.recording,
    };
    record.iterations += 1;
    let answer = converse(cx.deps, &request, &mut record.token_usage, &mut record.model_calls, None).await?;
    Ok(match answer {
        Ok(message) if !message.text().trim().is_empty() => Ok(message.text()),
        Ok(_) => Err(ExecutionError::new(ErrorKind::Model, "the router's synthesis call gave no text")),
        Err(e) => Err(e),
    })
}
