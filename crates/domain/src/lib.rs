//! Switchboard's vocabulary: tenants, agents, triggers and their conditions, tools, skills,
//! sessions, execution records and the events that flow in and out.
//!
//! Pure data and pure logic only: no async, no I/O, no clock. Everything that talks to the
//! outside world lives behind the ports of `switchboard-engine`.

pub mod access;
pub mod agent;
pub mod approval;
pub mod archive;
pub mod burst;
pub mod calendar;
pub mod condition;
pub mod cost;
pub mod event;
pub mod execution;
/// The fuzz targets' checks (`fuzz/`), shared with the replay of their corpus; not an API.
#[doc(hidden)]
pub mod fuzzing;
pub mod hook;
pub mod ids;
pub mod input;
pub mod insights;
pub mod limits;
pub mod mcp;
pub mod message;
pub mod model_ref;
pub mod recording;
pub mod schedule;
pub mod schema;
pub mod session;
pub mod skill;
mod strict_json;
pub mod tenant;
pub mod tool;
pub mod trigger;
pub mod usage;
pub mod validation;
pub mod webhook;

pub use agent::{
    Agent, AgentStatus, AgentStep, AgentType, Combine, FanOut, GuardrailConfig, HandoffBehavior, HistoryConfig,
    ModelConfig, OnFailure,
};
pub use approval::{Approval, ApprovalPolicy, ApprovalStatus, HeldMessage, PausedTurn};
pub use condition::{ConditionError, Conditions};
pub use cost::{Cost, Price, PriceTable};
pub use event::{InboundEvent, MessageNewDetail, OutboundEvent};
pub use execution::{
    Action, ChildExecution, CoalescedMessage, ErrorKind, ExecutionError, ExecutionRecord, ExecutionStatus,
    ModelCallRecord, ModelFailure, RanWith, TokenUsage, ToolCallRecord, WebhookAudit,
};
pub use ids::{AgentId, ExecutionId, SessionId, SkillId, TenantId, ToolId, TriggerId};
pub use message::{ContentBlock, Message, Role};
pub use model_ref::{ModelRef, Provider};
pub use recording::{Blob, CallRequest, CallResponse, ContentRef, Recording, StoredContent};
pub use schedule::{Missed, Schedule, Slots};
pub use session::{
    Claim, ConversationSummary, HandoffCause, HandoffContext, HandoffTarget, IdleClose, Priority, Session,
    SessionStatus, StoredResult,
};
pub use skill::Skill;
pub use tenant::{LimitName, OnLimit, Refusal, Tenant, TenantLimits, TenantNameError, TenantStatus, tenant_name};
pub use tool::{RetryPolicy, SystemTool, Tool, ToolHandler, ToolType, WebhookHandler};
pub use trigger::{Assignment, EventType, Trigger, TriggerStatus, Variant, WebhookSource};
pub use usage::{ActivityRow, UsageCounts, UsageLine, UsageRow, VariantRow, hour_of};
pub use validation::{FieldError, ValidationErrors};
pub use webhook::SignatureScheme;
