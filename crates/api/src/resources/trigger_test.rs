//! `POST /tenants/{t}/triggers/test`: the trigger tester. Given an event's `detail` (or a
//! message's text and channel, made into the detail a web chat message would have), it answers
//! which trigger routing would pick and, for each active trigger in evaluation order, which
//! condition held or failed with the value the event holds there. It queues nothing, records
//! nothing and calls no agent.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_domain::limits::{MAX_EXTERNAL_ID_LEN, MAX_MESSAGE_TEXT_BYTES};
use switchboard_domain::trigger::EventType;
use switchboard_domain::{TenantId, ValidationErrors};

use crate::extract::{JsonBody, Tenant};
use crate::problem::Problem;
use crate::state::ApiState;

/// What to test: an event's `detail`, or a `message` (with its `channel`, default `webchat`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TestBody {
    /// Default `message.new`.
    #[serde(default)]
    event_type: Option<EventType>,
    #[serde(default)]
    detail: Option<Value>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    channel: Option<String>,
}

impl TestBody {
    /// The detail object to test, `tenantId` set to the path's tenant; or what is wrong.
    fn detail(self, tenant: &TenantId) -> Result<Value, ValidationErrors> {
        let mut detail = match (self.detail, self.message) {
            (Some(_), Some(_)) => {
                return Err(ValidationErrors::single("/message", "give either detail or message, not both"));
            }
            (None, None) => {
                return Err(ValidationErrors::single(
                    "/detail",
                    "give an event's detail, or a message (and its channel)",
                ));
            }
            (Some(_), None) if self.channel.is_some() => {
                return Err(ValidationErrors::single("/channel", "goes with message; a detail names its own channel"));
            }
            (Some(detail), None) if !detail.is_object() => {
                return Err(ValidationErrors::single("/detail", "must be an object (an event's detail)"));
            }
            (Some(detail), None) => detail,
            (None, Some(text)) => message_detail(text, self.channel.as_deref().unwrap_or("webchat"))?,
        };
        detail["tenantId"] = json!(tenant.as_str());
        Ok(detail)
    }
}

/// The detail of an inbound message on `channel` saying `text`, as the Conversations Service
/// would send it for a new conversation.
fn message_detail(text: String, channel: &str) -> Result<Value, ValidationErrors> {
    let mut errors = ValidationErrors::default();
    if text.len() > MAX_MESSAGE_TEXT_BYTES {
        errors.push("/message", format!("must be at most {MAX_MESSAGE_TEXT_BYTES} bytes"));
    }
    if channel.is_empty() || channel.len() > MAX_EXTERNAL_ID_LEN {
        errors.push("/channel", format!("must be 1 to {MAX_EXTERNAL_ID_LEN} characters"));
    }
    errors.into_result()?;
    Ok(json!({
        "conversationId": "trigger-test", "messageId": "trigger-test",
        "channel": { "platform": channel }, "conversation": { "status": "open" },
        "message": { "direction": "inbound", "text": text },
    }))
}

/// `POST /tenants/{t}/triggers/test`
pub(crate) async fn test(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    JsonBody(body): JsonBody<TestBody>,
) -> Result<Response, Problem> {
    let event_type = body.event_type.unwrap_or(EventType::MessageNew);
    let detail = body.detail(&t).map_err(Problem::invalid)?;
    let now = state.executor.deps().clock.now();
    let tested = switchboard_engine::config::test_triggers(state.config.as_ref(), &t, event_type, &detail, now).await?;
    Ok(Json(tested).into_response())
}
