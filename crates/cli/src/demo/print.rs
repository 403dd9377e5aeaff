//! What `switchboard demo` prints of an example's agents, sessions, executions and events, with
//! names instead of ids. It reads records; it runs nothing.

use std::collections::BTreeMap;

use serde_json::json;
use switchboard_domain::{
    Action, Agent, AgentId, AgentType, ExecutionRecord, ExecutionStatus, OutboundEvent, Session, SkillId,
};
use switchboard_engine::execute::describe;

/// Names to print instead of ids.
pub struct Names {
    pub agents: BTreeMap<AgentId, Agent>,
    pub skills: BTreeMap<SkillId, String>,
}

impl Names {
    fn agent(&self, id: &AgentId) -> String {
        self.agents.get(id).map_or_else(|| id.to_string(), |a| a.name.clone())
    }
}

/// One line per agent: its pattern and what it is made of.
pub fn print_agent(a: &Agent, names: &Names) {
    let agents = |ids: &[AgentId]| ids.iter().map(|id| names.agent(id)).collect::<Vec<_>>().join(", ");
    let shape = match a.agent_type {
        AgentType::Supervisor => format!("supervisor · sub-agents: {}", agents(&a.sub_agents)),
        AgentType::Router => format!(
            "router{} · candidates: {} · default: {}",
            a.fan_out.as_ref().map_or_else(String::new, |f| format!(
                " · asks up to {} at once, {}",
                f.max_agents,
                match f.combine {
                    switchboard_domain::Combine::Synthesize => "synthesizes their answers",
                    switchboard_domain::Combine::FirstSuccess => "sends the first answer",
                }
            )),
            agents(&a.sub_agents),
            a.default_agent_id.map_or_else(|| "-".to_owned(), |d| names.agent(&d))
        ),
        _ if !a.steps.is_empty() => {
            let steps: Vec<String> = a
                .steps
                .iter()
                .map(|s| {
                    let mut line = s.step_id.clone();
                    if s.is_initial {
                        line.push_str(" (initial)");
                    }
                    if s.is_final {
                        line.push_str(" (final)");
                    }
                    if !s.transition_tools.is_empty() {
                        line.push_str(&format!(" → {}", s.transition_tools.join(" | ")));
                    }
                    line
                })
                .collect();
            format!("steps: {}", steps.join(" · "))
        }
        _ if !a.skills.is_empty() => {
            let skills: Vec<&str> = a.skills.iter().filter_map(|id| names.skills.get(id).map(String::as_str)).collect();
            format!("skills it may load: {}", skills.join(", "))
        }
        _ => "standard".to_owned(),
    };
    println!("  agent \"{}\" · {shape}", a.name);
}

pub fn print_session(s: &Session, names: &Names) {
    let mut extra = String::new();
    // A stepped agent's session without `currentStep` is in the initial step.
    if let Some(step) = names.agents.get(&s.agent_id).and_then(|a| a.step(s.current_step.as_deref())) {
        extra.push_str(&format!(" · step {} (\"{}\")", step.step_id, step.name));
    }
    if !s.loaded_skills.is_empty() {
        let loaded: Vec<String> =
            s.loaded_skills.iter().map(|id| names.skills.get(id).cloned().unwrap_or_else(|| id.to_string())).collect();
        extra.push_str(&format!(" · skills loaded: {}", loaded.join(", ")));
    }
    if !s.memory.is_empty() {
        extra.push_str(&format!(" · memory {}", json!(s.memory)));
    }
    println!(
        "   session {} · agent \"{}\" · {:?} · {} turn(s){extra}",
        s.session_id,
        names.agent(&s.agent_id),
        s.status,
        s.turn_count
    );
}

pub fn print_execution(r: &ExecutionRecord, names: &Names) {
    println!(
        "     execution {} · {:?} · {} iteration(s) · {} tool call(s) [{}] · {} tokens ({} in / {} out) · {} ms",
        r.execution_id,
        r.status,
        r.iterations,
        r.tool_calls.len(),
        r.tool_calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", "),
        r.token_usage.total(),
        r.token_usage.input_tokens,
        r.token_usage.output_tokens,
        r.latency_ms
    );
    for call in &r.tool_calls {
        if let Some(w) = &call.webhook {
            println!(
                "       ↔ webhook {} → {} · HTTP {} · {} attempt(s) · {}",
                call.name,
                w.host,
                w.status.map_or("-".to_owned(), |s| s.to_string()),
                w.attempts,
                w.outcome
            );
        } else if call.name == "choose_agent" {
            print_router_pick(call, names);
        } else if call.name == "choose_agents" {
            print_fan_out_pick(call, names);
        } else if call.is_error {
            let why = call.output["error"].as_str().map_or_else(|| call.output.to_string(), str::to_owned);
            println!("       ✗ {} refused: {why}", call.name);
        } else if call.name.starts_with("transition_to_") {
            println!(
                "       ⇒ moved to step {} (\"{}\")",
                call.output["step"].as_str().unwrap_or("?"),
                call.output["name"].as_str().unwrap_or("?")
            );
        } else if call.name == "load_skill" {
            let asked = call.input["name"].as_str().unwrap_or("?");
            let loaded: Vec<&str> =
                call.output["loaded"].as_array().into_iter().flatten().filter_map(|v| v.as_str()).collect();
            match loaded.as_slice() {
                [] => println!("       ⇒ load_skill \"{asked}\": already loaded"),
                [one] => println!("       ⇒ load_skill \"{asked}\" loaded: {one}"),
                _ => println!("       ⇒ load_skill \"{asked}\" loaded: {} (parent first)", loaded.join(", ")),
            }
        }
    }
    for child in &r.children {
        let outcome = match (&child.result, &child.error) {
            (_, Some(e)) => format!("error: {}", e.message),
            (Some(result), None) => format!("result \"{result}\""),
            (None, None) => "no result".to_owned(),
        };
        println!(
            "       ⤷ sub-agent \"{}\" · {:?} · {} iteration(s) · {} tokens · {outcome}",
            names.agent(&child.agent_id),
            child.status,
            child.iterations,
            child.token_usage.total()
        );
    }
    for a in &r.actions {
        match a {
            Action::HandoffToAgent { agent_id, reason, .. } => {
                println!("       → handoff to agent \"{}\": {reason}", names.agent(agent_id));
            }
            _ => println!("       → {}", describe(a)),
        }
    }
    match &r.error {
        // A skip is not a failure: the record says why nothing ran.
        Some(e) if r.status == ExecutionStatus::Skipped => println!("       – skipped: {}", e.message),
        Some(e) => println!("       ! {:?}: {}", e.kind, e.message),
        None => {}
    }
}

/// A fan-out router's decision: the agents it asked at once, or the default it fell back to.
fn print_fan_out_pick(call: &switchboard_domain::ToolCallRecord, names: &Names) {
    let picked: Vec<String> = call.output["agentIds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|id| id.as_str()?.parse::<AgentId>().ok())
        .map(|id| format!("\"{}\"", names.agent(&id)))
        .collect();
    match call.output["fallback"].as_str() {
        None => println!("       ⇢ router asks {} at once", picked.join(", ")),
        Some(why) => {
            println!("       ⇢ router pick invalid ({why}) → asks the default agent {}", picked.join(", "))
        }
    }
}

/// The router's decision: the agent it chose, or the default it fell back to and why.
fn print_router_pick(call: &switchboard_domain::ToolCallRecord, names: &Names) {
    let target = call.output["agentId"].as_str().and_then(|id| id.parse::<AgentId>().ok());
    let Some(target) = target else {
        println!("       ⇢ router: no agent could take it: {}", call.output);
        return;
    };
    match call.output["fallback"].as_str() {
        None => println!(
            "       ⇢ router picked \"{}\" · reason \"{}\"",
            names.agent(&target),
            call.input["reason"].as_str().unwrap_or("")
        ),
        Some(why) => println!(
            "       ⇢ router pick invalid ({why}) → fallback to the default agent \"{}\"",
            names.agent(&target)
        ),
    }
}

pub fn print_event(e: &OutboundEvent) {
    let d = &e.detail;
    match e.detail_type.as_str() {
        "session.handoff.human" => println!(
            "   ⚑ event {} · reason \"{}\" · priority {} · context {}",
            e.detail_type,
            d["reason"].as_str().unwrap_or(""),
            d["priority"].as_str().unwrap_or(""),
            d["context"]
        ),
        _ => println!("   ⚑ event {} · {}", e.detail_type, d),
    }
}
