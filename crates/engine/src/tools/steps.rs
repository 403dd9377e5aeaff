//! `transition_to_<stepId>`: the steps pattern's generated tools. Only the edges the current
//! step declares are offered; any other is refused by the toolbox before it gets here.

use serde_json::json;
use switchboard_domain::{AgentStep, Session};

use super::call::ToolOutcome;

/// Moves the session to `step`; the toolbox is rebuilt for the next model call.
pub(crate) fn transition(session: &mut Session, step: &AgentStep) -> ToolOutcome {
    let from = session.current_step.replace(step.step_id.clone());
    tracing::info!(from = ?from, to = %step.step_id, "step transition");
    ToolOutcome::ok(json!({ "step": step.step_id, "name": step.name }))
}
