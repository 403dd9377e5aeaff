//! Skills: prompts and tools an agent loads on demand. Stored and validated here; loading them
//! into a running agent is the engine's business.

use serde::{Deserialize, Serialize};

use crate::ids::{SkillId, TenantId};
use crate::trigger::TriggerStatus;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Skill {
    pub tenant_id: TenantId,
    pub skill_id: SkillId,
    pub name: String,
    pub description: String,
    pub prompt: String,
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_skill: Option<SkillId>,
    #[serde(default)]
    pub status: TriggerStatus,
}
