//! `load_skill`: the skills pattern's one tool. A loaded skill's prompt and tools stay with the
//! session for the rest of the conversation.

use serde_json::{Value, json};
use switchboard_domain::tool::LOAD_SKILL;
use switchboard_domain::{Session, Skill, TriggerStatus};

use super::call::ToolOutcome;
use crate::ports::{Deps, StoreError};

/// Deepest chain of parent skills followed when loading one.
const MAX_SKILL_DEPTH: usize = 5;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadSkill {
    name: String,
}

/// `load_skill`: adds the named skill — its parents first, root first — to the session's loaded
/// skills. Its prompt and tools are in the next model call and every later turn.
pub(crate) async fn load_skill(
    deps: &Deps,
    skills: &[Skill],
    session: &mut Session,
    input: &Value,
) -> Result<ToolOutcome, StoreError> {
    let error = |message: String| ToolOutcome { output: json!({ "error": message }), is_error: true };
    let name = match serde_json::from_value::<LoadSkill>(input.clone()) {
        Ok(a) => a.name,
        Err(e) => return Ok(error(format!("invalid arguments for {LOAD_SKILL}: {e}"))),
    };
    let Some(skill) = skills.iter().find(|s| s.name == name) else {
        let known: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
        return Ok(error(format!("no skill '{name}'; available: {}", known.join(", "))));
    };
    let mut chain = vec![skill.clone()];
    while let Some(parent_id) = chain.last().and_then(|s| s.parent_skill) {
        if chain.len() > MAX_SKILL_DEPTH || chain.iter().any(|s| s.skill_id == parent_id) {
            return Ok(error(format!("the skill '{name}' has a parent chain that is too deep or circular")));
        }
        match deps.config.get_skill(&session.tenant_id, parent_id).await? {
            Some(p) if p.status == TriggerStatus::Active => chain.push(p),
            _ => return Ok(error(format!("the parent skill {parent_id} of '{name}' is not available"))),
        }
    }
    let mut loaded = Vec::new();
    let mut new_tools = Vec::new();
    for s in chain.into_iter().rev() {
        if !session.loaded_skills.contains(&s.skill_id) {
            session.loaded_skills.push(s.skill_id);
            loaded.push(s.name.clone());
            new_tools.extend(s.tools.iter().cloned());
        }
    }
    if loaded.is_empty() {
        return Ok(ToolOutcome {
            output: json!({ "loaded": [], "note": format!("'{name}' is already loaded") }),
            is_error: false,
        });
    }
    Ok(ToolOutcome { output: json!({ "loaded": loaded, "tools": new_tools }), is_error: false })
}
