//! Events in and out. Inbound: the Conversations Service's `message.new` (and `message.updated`,
//! an edit of a message, with the same detail) in its EventBridge envelope, parsed strictly with
//! a pointer to every bad field. Outbound: what Switchboard
//! publishes under the source `switchboard`.

use serde::{Deserialize, Serialize};

use crate::ids::{TenantId, check_external_id};
use crate::limits::{MAX_EVENT_BYTES, MAX_MESSAGE_TEXT_BYTES};
use crate::validation::ValidationErrors;

/// The EventBridge source of inbound messages.
pub const INBOUND_SOURCE: &str = "conversations-service";
/// The EventBridge detail-type of a new message.
pub const MESSAGE_NEW: &str = "message.new";
/// The EventBridge detail-type of an edited message: its detail names the message and carries
/// the new text. Routed only to triggers that listen for it (docs/decisions.md, "Edited
/// messages").
pub const MESSAGE_UPDATED: &str = "message.updated";
/// The EventBridge source of everything Switchboard publishes.
pub const OUTBOUND_SOURCE: &str = "switchboard";

/// Which way a message travelled. Only inbound messages are routed to agents, so an agent's own
/// replies echoed back by the Conversations Service can never start a loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Inbound,
    Outbound,
}

/// The typed part of a `message.new` detail; the whole detail is kept for trigger conditions.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageNewDetail {
    pub tenant_id: TenantId,
    pub conversation_id: String,
    pub message_id: String,
    pub direction: Direction,
    pub text: String,
}

/// A parsed inbound event.
#[derive(Debug, Clone, PartialEq)]
pub struct InboundEvent {
    /// EventBridge's event id. Not what the work is deduplicated on: that is the message
    /// (tenant, conversation and message id), which a producer may send again under a new id.
    pub id: String,
    pub source: String,
    pub detail_type: String,
    pub detail: MessageNewDetail,
    /// The detail as received, which trigger conditions look into.
    pub raw_detail: serde_json::Value,
}

impl InboundEvent {
    /// Which triggers listen for it: `message.new`, or `message.updated` for an edit.
    pub fn event_type(&self) -> crate::EventType {
        if self.detail_type == MESSAGE_UPDATED {
            crate::EventType::MessageUpdated
        } else {
            crate::EventType::MessageNew
        }
    }

    /// Parses an EventBridge envelope from bytes, refusing oversized bodies and bad JSON.
    pub fn parse_bytes(body: &[u8]) -> Result<Self, ValidationErrors> {
        if body.len() > MAX_EVENT_BYTES {
            return Err(ValidationErrors::single("", format!("is larger than {MAX_EVENT_BYTES} bytes")));
        }
        let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| crate::input::not_json(&e))?;
        Self::parse(&value)
    }

    /// Parses an EventBridge envelope, collecting every bad field.
    pub fn parse(envelope: &serde_json::Value) -> Result<Self, ValidationErrors> {
        let mut errors = ValidationErrors::default();
        let Some(obj) = envelope.as_object() else {
            return Err(ValidationErrors::single("", "must be a JSON object (an EventBridge event)"));
        };
        let id = checked_str(&mut errors, envelope, "/id", |id| {
            check_external_id(id).map_err(|_| "must be 1 to 63 characters of letters, digits, '-', '_' or '.'".into())
        });
        let source = checked_str(&mut errors, envelope, "/source", |s| {
            if s == INBOUND_SOURCE { Ok(()) } else { Err(format!("must be '{INBOUND_SOURCE}'")) }
        });
        let detail_type = checked_str(&mut errors, envelope, "/detail-type", |t| {
            if t == MESSAGE_NEW || t == MESSAGE_UPDATED {
                Ok(())
            } else {
                Err(format!("must be '{MESSAGE_NEW}' or '{MESSAGE_UPDATED}'"))
            }
        });
        let detail = obj.get("detail");
        let detail_ok = matches!(detail, Some(serde_json::Value::Object(_)));
        if !detail_ok {
            errors.push("/detail", "must be an object");
        }
        let message = check_detail(&mut errors, envelope, detail_ok);
        if !errors.is_empty() {
            return Err(errors);
        }
        match (id, source, detail_type, message, detail) {
            (Some(id), Some(source), Some(dt), Some(detail), Some(d)) => Ok(Self {
                id: id.to_owned(),
                source: source.to_owned(),
                detail_type: dt.to_owned(),
                detail,
                raw_detail: d.clone(),
            }),
            _ => Err(ValidationErrors::single("", "is not a complete event")),
        }
    }
}

/// The typed fields of a `message.new` detail, each bad one reported at its pointer; `None`
/// when any is missing or bad. The nested objects are checked only once `detail` itself is one
/// (`detail_ok`), so a missing detail is one error, not four.
fn check_detail(
    errors: &mut ValidationErrors,
    envelope: &serde_json::Value,
    detail_ok: bool,
) -> Option<MessageNewDetail> {
    let tenant = required_str(errors, envelope, "/detail/tenantId");
    let tenant_id = tenant.and_then(|t| match t.parse::<TenantId>() {
        Ok(t) => Some(t),
        Err(e) => {
            errors.push("/detail/tenantId", e.to_string());
            None
        }
    });
    let external = |id: &str| check_external_id(id).map_err(|e| e.to_string());
    let conversation_id = checked_str(errors, envelope, "/detail/conversationId", external);
    let message_id = checked_str(errors, envelope, "/detail/messageId", external);
    for object in ["/detail/channel", "/detail/conversation", "/detail/message"] {
        if detail_ok && !matches!(envelope.pointer(object), Some(serde_json::Value::Object(_))) {
            errors.push(object, "must be an object");
        }
    }
    let direction = match required_str(errors, envelope, "/detail/message/direction") {
        Some("inbound") => Some(Direction::Inbound),
        Some("outbound") => Some(Direction::Outbound),
        Some(_) => {
            errors.push("/detail/message/direction", "must be 'inbound' or 'outbound'");
            None
        }
        None => None,
    };
    let text = checked_str(errors, envelope, "/detail/message/text", |t| {
        if t.len() > MAX_MESSAGE_TEXT_BYTES {
            Err(format!("is {} bytes; the limit is {MAX_MESSAGE_TEXT_BYTES} bytes of UTF-8", t.len()))
        } else {
            Ok(())
        }
    });
    Some(MessageNewDetail {
        tenant_id: tenant_id?,
        conversation_id: conversation_id?.to_owned(),
        message_id: message_id?.to_owned(),
        direction: direction?,
        text: text?.to_owned(),
    })
}

/// A required string at `pointer`; what `check` refuses of it is reported there too (the
/// string is still returned: the errors decide whether the event is refused).
fn checked_str<'a>(
    errors: &mut ValidationErrors,
    root: &'a serde_json::Value,
    pointer: &str,
    check: impl FnOnce(&str) -> Result<(), String>,
) -> Option<&'a str> {
    let s = required_str(errors, root, pointer);
    if let Some(s) = s
        && let Err(message) = check(s)
    {
        errors.push(pointer, message);
    }
    s
}

fn required_str<'a>(errors: &mut ValidationErrors, root: &'a serde_json::Value, pointer: &str) -> Option<&'a str> {
    match root.pointer(pointer) {
        Some(serde_json::Value::String(s)) => Some(s.as_str()),
        Some(_) => {
            errors.push(pointer, "must be a string");
            None
        }
        None => {
            // A missing parent object is reported once, at the parent.
            let parent_missing = pointer
                .rsplit_once('/')
                .is_some_and(|(parent, _)| !parent.is_empty() && root.pointer(parent).is_none());
            if !parent_missing {
                errors.push(pointer, "is required");
            }
            None
        }
    }
}

/// Detail-types Switchboard publishes.
pub mod detail_type {
    pub const HANDOFF_HUMAN: &str = "session.handoff.human";
    pub const HANDOFF_AGENT: &str = "session.handoff.agent";
    pub const SESSION_ENDED: &str = "session.ended";
    pub const FLOW_TRIGGER_REQUESTED: &str = "flow.trigger.requested";
    pub const EXECUTION_FAILED: &str = "execution.failed";
    pub const TENANT_LIMIT_REACHED: &str = "tenant.limit.reached";
    pub const APPROVAL_REQUESTED: &str = "approval.requested";
    pub const APPROVAL_RESOLVED: &str = "approval.resolved";
}

/// An event Switchboard publishes (source [`OUTBOUND_SOURCE`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboundEvent {
    /// Stable across redeliveries of the work that caused it: consumers drop repeats by it.
    pub id: String,
    pub detail_type: String,
    pub tenant_id: TenantId,
    pub detail: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn envelope() -> serde_json::Value {
        json!({
            "version": "0", "id": "evt-1", "source": "conversations-service", "detail-type": "message.new",
            "time": "2026-11-23T07:00:00Z",
            "detail": {
                "tenantId": "t-1", "conversationId": "c-1", "messageId": "m-1",
                "channel": {"platform": "webchat"}, "conversation": {"status": "open"},
                "message": {"direction": "inbound", "text": "hello"}
            }
        })
    }

    fn pointers(e: ValidationErrors) -> Vec<String> {
        e.0.into_iter().map(|f| f.pointer).collect()
    }

    #[test]
    fn it_parses_a_well_formed_envelope() {
        let e = InboundEvent::parse(&envelope()).unwrap();
        assert_eq!(e.id, "evt-1");
        assert_eq!(e.detail.tenant_id.as_str(), "t-1");
        assert_eq!(e.detail.text, "hello");
        assert_eq!(e.detail.direction, Direction::Inbound);
    }

    #[test]
    fn it_names_every_bad_field() {
        let mut bad = envelope();
        bad["detail"]["tenantId"] = json!(7);
        bad["detail"]["message"]["text"] = json!("x".repeat(MAX_MESSAGE_TEXT_BYTES + 1));
        bad["source"] = json!("elsewhere");
        let errs = pointers(InboundEvent::parse(&bad).unwrap_err());
        assert_eq!(errs, ["/source", "/detail/tenantId", "/detail/message/text"]);
    }

    #[test]
    fn an_edit_parses_with_its_own_event_type_and_other_types_are_refused() {
        let mut edit = envelope();
        edit["detail-type"] = json!("message.updated");
        edit["detail"]["message"]["text"] = json!("hello, with order 1234");
        let e = InboundEvent::parse(&edit).unwrap();
        assert_eq!(
            (e.event_type(), e.detail.text.as_str()),
            (crate::EventType::MessageUpdated, "hello, with order 1234")
        );
        assert_eq!(InboundEvent::parse(&envelope()).unwrap().event_type(), crate::EventType::MessageNew);
        edit["detail-type"] = json!("message.deleted");
        assert_eq!(pointers(InboundEvent::parse(&edit).unwrap_err()), ["/detail-type"]);
    }

    #[test]
    fn a_missing_detail_is_reported_once() {
        let mut bad = envelope();
        bad.as_object_mut().unwrap().remove("detail");
        let errs = pointers(InboundEvent::parse(&bad).unwrap_err());
        assert_eq!(errs, ["/detail"]);
    }

    #[test]
    fn it_refuses_bytes_that_are_not_json() {
        let errs = InboundEvent::parse_bytes(b"{nope").unwrap_err();
        assert_eq!(errs.0[0].pointer, "");
        assert!(errs.0[0].detail.starts_with("is not valid JSON"));
    }

    #[test]
    fn a_tenant_id_with_key_separators_is_refused() {
        let mut bad = envelope();
        bad["detail"]["tenantId"] = json!("t#1");
        assert_eq!(pointers(InboundEvent::parse(&bad).unwrap_err()), ["/detail/tenantId"]);
    }
}
