//! The JSON Schema subset Switchboard accepts for tool parameters, and validation of a model's
//! arguments against it. Tool creation refuses keywords outside the subset, so every stored
//! schema is validated exactly — none is half-understood.
//!
//! Supported: `type` (one or a list of object, array, string, number, integer, boolean, null),
//! `properties`, `required`, `additionalProperties` (boolean or schema), `items`, `enum`,
//! `const`, `minLength`, `maxLength`, `pattern`, `minimum`, `maximum`, `exclusiveMinimum`,
//! `exclusiveMaximum`, `minItems`, `maxItems`, and the annotations `title`, `description`,
//! `default`, `examples`, `format` (not checked).

use serde_json::{Map, Value};

use crate::validation::ValidationErrors;

const KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
    "title",
    "description",
    "default",
    "examples",
    "format",
    "$schema",
];

const TYPES: &[&str] = &["object", "array", "string", "number", "integer", "boolean", "null"];

/// Most nesting a parameters schema may have.
const MAX_DEPTH: usize = 16;

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Checks that `schema` uses only the supported subset, correctly. Pointers start at `pointer`.
pub fn check_supported(schema: &Value, pointer: &str, errors: &mut ValidationErrors) {
    check_node(schema, pointer, 0, errors);
}

fn check_node(schema: &Value, at: &str, depth: usize, errors: &mut ValidationErrors) {
    if depth > MAX_DEPTH {
        errors.push(at, format!("nests deeper than {MAX_DEPTH} levels"));
        return;
    }
    let Some(obj) = schema.as_object() else {
        if !schema.is_boolean() {
            errors.push(at, "must be a schema (an object)");
        }
        return;
    };
    for (key, value) in obj {
        let here = format!("{at}/{}", escape(key));
        match key.as_str() {
            k if !KEYWORDS.contains(&k) => errors.push(here, format!("'{k}' is not a supported keyword")),
            "type" => {
                let ok = match value {
                    Value::String(t) => TYPES.contains(&t.as_str()),
                    Value::Array(ts) => {
                        !ts.is_empty() && ts.iter().all(|t| t.as_str().is_some_and(|t| TYPES.contains(&t)))
                    }
                    _ => false,
                };
                if !ok {
                    errors.push(here, format!("must be one of {} or a list of them", TYPES.join(", ")));
                }
            }
            "properties" => match value.as_object() {
                Some(props) => {
                    for (name, sub) in props {
                        check_node(sub, &format!("{here}/{}", escape(name)), depth + 1, errors);
                    }
                }
                None => errors.push(here, "must be an object of schemas"),
            },
            "additionalProperties" | "items" => check_node(value, &here, depth + 1, errors),
            "required" => {
                let props = obj.get("properties").and_then(Value::as_object);
                match value.as_array() {
                    Some(names) => {
                        for (i, n) in names.iter().enumerate() {
                            if !n.as_str().is_some_and(|n| props.is_some_and(|p| p.contains_key(n))) {
                                errors.push(format!("{here}/{i}"), "must name a property listed in properties");
                            }
                        }
                    }
                    None => errors.push(here, "must be an array of property names"),
                }
            }
            "enum" | "examples" if value.as_array().is_none_or(|a| a.is_empty()) => {
                errors.push(here, "must be a non-empty array");
            }
            "minLength" | "maxLength" | "minItems" | "maxItems" if value.as_u64().is_none() => {
                errors.push(here, "must be a non-negative integer");
            }
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" if !value.is_number() => {
                errors.push(here, "must be a number");
            }
            "pattern" => match value.as_str().map(|p| regex::RegexBuilder::new(p).size_limit(1 << 18).build()) {
                Some(Ok(_)) => {}
                Some(Err(e)) => errors.push(here, format!("is not a valid regex: {e}")),
                None => errors.push(here, "must be a string"),
            },
            "title" | "description" | "format" | "$schema" if !value.is_string() => {
                errors.push(here, "must be a string");
            }
            _ => {}
        }
    }
}

/// Validates `value` against a schema that passed [`check_supported`]; every violation is
/// reported as `<pointer into the value>: <what is wrong>`.
pub fn validate(schema: &Value, value: &Value) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    validate_node(schema, value, "", &mut errors);
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn has_type(t: &str, v: &Value) -> bool {
    match t {
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        other => type_name(v) == other,
    }
}

fn validate_node(schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    let obj: &Map<String, Value> = match schema {
        Value::Bool(true) => return,
        Value::Bool(false) => {
            errors.push(format!("{}: is not allowed", display(at)));
            return;
        }
        Value::Object(o) => o,
        _ => return,
    };
    let here = display(at);
    if let Some(t) = obj.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        if !types.is_empty() && !types.iter().any(|t| has_type(t, value)) {
            errors.push(format!("{here}: must be {} (got {})", types.join(" or "), type_name(value)));
            return;
        }
    }
    if let Some(options) = obj.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        errors.push(format!("{here}: must be one of {}", Value::Array(options.clone())));
    }
    if let Some(c) = obj.get("const")
        && c != value
    {
        errors.push(format!("{here}: must be {c}"));
    }
    if let Some(s) = value.as_str() {
        check_text(obj, s, &here, errors);
    }
    if let Some(n) = value.as_f64() {
        let bound = |k: &str| obj.get(k).and_then(Value::as_f64);
        if bound("minimum").is_some_and(|m| n < m) || bound("exclusiveMinimum").is_some_and(|m| n <= m) {
            errors.push(format!("{here}: is below the minimum"));
        }
        if bound("maximum").is_some_and(|m| n > m) || bound("exclusiveMaximum").is_some_and(|m| n >= m) {
            errors.push(format!("{here}: is above the maximum"));
        }
    }
    if let Some(items) = value.as_array() {
        check_items(obj, items, at, errors);
    }
    if let Some(fields) = value.as_object() {
        check_fields(obj, fields, at, errors);
    }
}

/// A string's length (in characters) and `pattern`; a pattern that does not compile is ignored.
fn check_text(obj: &Map<String, Value>, s: &str, here: &str, errors: &mut Vec<String>) {
    let len = u64::try_from(s.chars().count()).unwrap_or(u64::MAX);
    if obj.get("minLength").and_then(Value::as_u64).is_some_and(|m| len < m) {
        errors.push(format!("{here}: is shorter than {}", obj["minLength"]));
    }
    if obj.get("maxLength").and_then(Value::as_u64).is_some_and(|m| len > m) {
        errors.push(format!("{here}: is longer than {}", obj["maxLength"]));
    }
    if let Some(p) = obj.get("pattern").and_then(Value::as_str)
        && regex::Regex::new(p).is_ok_and(|r| !r.is_match(s))
    {
        errors.push(format!("{here}: does not match {p}"));
    }
}

/// An array's length, then each item against `items`.
fn check_items(obj: &Map<String, Value>, items: &[Value], at: &str, errors: &mut Vec<String>) {
    let here = display(at);
    let len = u64::try_from(items.len()).unwrap_or(u64::MAX);
    if obj.get("minItems").and_then(Value::as_u64).is_some_and(|m| len < m) {
        errors.push(format!("{here}: has fewer than {} items", obj["minItems"]));
    }
    if obj.get("maxItems").and_then(Value::as_u64).is_some_and(|m| len > m) {
        errors.push(format!("{here}: has more than {} items", obj["maxItems"]));
    }
    if let Some(item_schema) = obj.get("items") {
        for (i, item) in items.iter().enumerate() {
            validate_node(item_schema, item, &format!("{at}/{i}"), errors);
        }
    }
}

/// An object's `required` fields, then each field against its property's schema.
fn check_fields(obj: &Map<String, Value>, fields: &Map<String, Value>, at: &str, errors: &mut Vec<String>) {
    let props = obj.get("properties").and_then(Value::as_object);
    for name in obj.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        if !fields.contains_key(name) {
            errors.push(format!("{}: is required", display(&format!("{at}/{}", escape(name)))));
        }
    }
    for (name, v) in fields {
        let path = format!("{at}/{}", escape(name));
        // A property without its own schema falls to additionalProperties (absent: allowed).
        if let Some(sub) = props.and_then(|p| p.get(name)).or_else(|| obj.get("additionalProperties")) {
            validate_node(sub, v, &path, errors);
        }
    }
}

fn display(at: &str) -> String {
    if at.is_empty() { "(arguments)".to_owned() } else { at.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "orderId": { "type": "string", "pattern": "^[0-9]+$", "maxLength": 10 },
                "quantity": { "type": "integer", "minimum": 1, "maximum": 5 },
                "mode": { "enum": ["fast", "slow"] },
                "tags": { "type": "array", "items": { "type": "string" }, "maxItems": 2 }
            },
            "required": ["orderId"],
            "additionalProperties": false
        })
    }

    #[test]
    fn good_arguments_pass() {
        let mut e = ValidationErrors::default();
        check_supported(&schema(), "/parameters", &mut e);
        assert!(e.is_empty(), "{e}");
        assert_eq!(validate(&schema(), &json!({ "orderId": "123", "quantity": 2, "tags": ["a"] })), Ok(()));
    }

    #[test]
    fn every_violation_is_named_with_its_pointer() {
        let errs = validate(
            &schema(),
            &json!({ "orderId": "12a", "quantity": 9, "mode": "warp", "tags": ["a", 1, "c"], "extra": true }),
        )
        .unwrap_err();
        assert_eq!(
            errs,
            [
                "/extra: is not allowed",
                "/mode: must be one of [\"fast\",\"slow\"]",
                "/orderId: does not match ^[0-9]+$",
                "/quantity: is above the maximum",
                "/tags: has more than 2 items",
                "/tags/1: must be string (got integer)",
            ]
        );
        assert_eq!(validate(&schema(), &json!({})).unwrap_err(), ["/orderId: is required"]);
        assert_eq!(validate(&schema(), &json!([1])).unwrap_err(), ["(arguments): must be object (got array)"]);
    }

    #[test]
    fn unsupported_or_broken_keywords_are_refused_at_creation() {
        let mut e = ValidationErrors::default();
        check_supported(
            &json!({ "type": "object", "properties": { "a": { "oneOf": [] }, "b": { "type": "text" }, "c": { "pattern": "(" } },
                     "required": ["zz"] }),
            "/parameters",
            &mut e,
        );
        let pointers: Vec<_> = e.0.iter().map(|f| f.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            [
                "/parameters/properties/a/oneOf",
                "/parameters/properties/b/type",
                "/parameters/properties/c/pattern",
                "/parameters/required/0"
            ]
        );
    }
}
