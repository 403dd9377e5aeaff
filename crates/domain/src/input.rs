//! Turning a client's JSON into a record: fields the server owns (ids, tenant, timestamps,
//! version) are filled in and refused if the client sent them, unknown fields are refused, and a
//! bad field is reported with its JSON Pointer. Used by the API and by tenant bundles.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::validation::ValidationErrors;

/// Builds `T` from `body` plus `server_fields`. `prefix` is prepended to every pointer (for a
/// record nested in a larger document, e.g. `/agents/0`).
pub fn record_from_input<T: DeserializeOwned>(
    body: Value,
    server_fields: &[(&str, Value)],
    prefix: &str,
) -> Result<T, ValidationErrors> {
    let Value::Object(mut object) = body else {
        return Err(ValidationErrors::single(prefix, "must be a JSON object"));
    };
    let mut errors = ValidationErrors::default();
    for (field, value) in server_fields {
        if object.contains_key(*field) {
            errors.push(format!("{prefix}/{field}"), "is set by the server; leave it out");
        }
        object.insert((*field).to_owned(), value.clone());
    }
    errors.into_result()?;
    serde_path_to_error::deserialize::<_, T>(Value::Object(object)).map_err(|e| {
        let pointer = format!("{prefix}{}", pointer_of(e.path()));
        ValidationErrors::single(pointer, e.into_inner().to_string())
    })
}

/// Like [`record_from_input`] but the client may send the server-owned fields (a bundle file
/// names its own ids); the given values are only defaults.
pub fn record_with_defaults<T: DeserializeOwned>(
    body: Value,
    defaults: &[(&str, Value)],
    prefix: &str,
) -> Result<T, ValidationErrors> {
    let Value::Object(mut object) = body else {
        return Err(ValidationErrors::single(prefix, "must be a JSON object"));
    };
    for (field, value) in defaults {
        object.entry((*field).to_owned()).or_insert_with(|| value.clone());
    }
    serde_path_to_error::deserialize::<_, T>(Value::Object(object)).map_err(|e| {
        let pointer = format!("{prefix}{}", pointer_of(e.path()));
        ValidationErrors::single(pointer, e.into_inner().to_string())
    })
}

/// RFC 6901 pointer of a serde path.
pub fn pointer_of(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("/{index}")),
            Segment::Map { key } => out.push_str(&format!("/{}", key.replace('~', "~0").replace('/', "~1"))),
            Segment::Enum { variant } => out.push_str(&format!("/{variant}")),
            Segment::Unknown => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Agent;
    use serde_json::json;

    fn server() -> Vec<(&'static str, Value)> {
        vec![
            ("tenantId", json!("t-1")),
            ("agentId", json!("01JD0000SVPP0RT0AGENT00001")),
            ("createdAt", json!("2026-11-23T00:00:00Z")),
            ("updatedAt", json!("2026-11-23T00:00:00Z")),
        ]
    }

    #[test]
    fn a_good_body_becomes_a_record() {
        let a: Agent =
            record_from_input(json!({"name": "A", "systemPrompt": "p", "model": "m"}), &server(), "").unwrap();
        assert_eq!(a.tenant_id.as_str(), "t-1");
    }

    #[test]
    fn the_bad_field_is_named_with_its_pointer() {
        let e = record_from_input::<Agent>(
            json!({"name": "A", "systemPrompt": "p", "model": "m", "modelConfig": {"temperature": "hot"}}),
            &server(),
            "",
        )
        .unwrap_err();
        assert_eq!(e.0[0].pointer, "/modelConfig/temperature");
        let e = record_from_input::<Agent>(
            json!({"name": "A", "systemPrompt": "p", "model": "m", "colour": 1}),
            &server(),
            "",
        )
        .unwrap_err();
        assert!(e.0[0].detail.contains("unknown field `colour`"), "{e}");
        let e = record_from_input::<Agent>(json!({"systemPrompt": "p", "model": "m"}), &server(), "").unwrap_err();
        assert!(e.0[0].detail.contains("missing field `name`"), "{e}");
    }

    #[test]
    fn server_owned_fields_are_refused() {
        let e = record_from_input::<Agent>(
            json!({"name": "A", "systemPrompt": "p", "model": "m", "tenantId": "t-2"}),
            &server(),
            "",
        )
        .unwrap_err();
        assert_eq!(e.0[0].pointer, "/tenantId");
    }

    #[test]
    fn a_non_object_is_refused_at_the_prefix() {
        let e = record_from_input::<Agent>(json!([1]), &server(), "/agents/3").unwrap_err();
        assert_eq!(e.0[0].pointer, "/agents/3");
    }
}
