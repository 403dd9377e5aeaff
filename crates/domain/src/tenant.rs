//! Tenants: who owns agents, triggers, tools, skills, sessions and executions. A suspended
//! tenant keeps its configuration and records, but nothing new runs for it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::TenantId;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TenantStatus {
    #[default]
    Active,
    /// Inbound messages are recorded but not answered, and `invoke` is refused.
    Suspended,
}

impl TenantStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TenantStatus::Active => "active",
            TenantStatus::Suspended => "suspended",
        }
    }

    /// The stored form back; anything unknown reads as active (the column's default).
    pub fn parse(s: &str) -> Self {
        if s == "suspended" { TenantStatus::Suspended } else { TenantStatus::Active }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tenant {
    pub tenant_id: TenantId,
    pub name: String,
    pub status: TenantStatus,
    pub created_at: DateTime<Utc>,
}
