//! Skills: prompts and tools an agent loads on demand. Stored and validated here; loading them
//! into a running agent is the engine's business.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{SkillId, TenantId};
use crate::limits::{MAX_DESCRIPTION_LEN, MAX_PROMPT_BYTES};
use crate::trigger::TriggerStatus;
use crate::validation::ValidationErrors;
use crate::validation::check_name;

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
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[serde(default)]
    pub version: u64,
}

impl Skill {
    /// Checks the record on its own; references (tools, parent) are checked by whoever stores it.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errors = ValidationErrors::default();
        check_name(&mut errors, "/name", &self.name);
        if !self.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            errors.push("/name", "must be letters, digits, '_' or '-' (the model loads a skill by name)");
        }
        if self.description.trim().is_empty() || self.description.chars().count() > MAX_DESCRIPTION_LEN {
            errors.push("/description", format!("must be 1 to {MAX_DESCRIPTION_LEN} characters"));
        }
        if self.prompt.trim().is_empty() || self.prompt.len() > MAX_PROMPT_BYTES {
            errors.push("/prompt", format!("must be 1 to {MAX_PROMPT_BYTES} bytes"));
        }
        crate::tool::check_tool_refs(&mut errors, "/tools", &self.tools);
        if self.parent_skill == Some(self.skill_id) {
            errors.push("/parentSkill", "a skill cannot be its own parent");
        }
        errors.into_result()
    }
}
