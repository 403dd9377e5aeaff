//! JSON Schema for tool parameters: the check a schema passes when a tool is written, and the
//! validation of a model's arguments against it before any call.
//!
//! The whole of JSON Schema is understood, through the `jsonschema` crate: draft 2020-12 unless
//! the schema's `$schema` names an earlier draft (Zod and older Pydantic write draft-07), with
//! `anyOf`, `oneOf`, `allOf`, `not`, `if`/`then`/`else`, `$ref` into the schema's own `$defs` or
//! `definitions`, and `format` checked. What Switchboard adds are bounds: nesting depth and, in
//! [`crate::tool`], size; patterns run on the `regex` crate (linear time, bounded size) rather
//! than a backtracking engine; and a `$ref` outside the schema is refused, since nothing is ever
//! fetched. A schema is compiled once per tool version and kept (see [`validate_cached`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jsonschema::error::ValidationErrorKind;
use serde_json::Value;

use crate::validation::ValidationErrors;

/// Most nesting a parameters schema may have.
const MAX_DEPTH: usize = 16;

/// Largest compiled form of one `pattern` (the `regex` crate's size limit).
const PATTERN_SIZE_LIMIT: usize = 1 << 18;

/// Compiled schemas kept per process; past this many the cache starts over.
const CACHED: usize = 1024;

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn compile(schema: &Value) -> Result<jsonschema::Validator, jsonschema::ValidationError<'static>> {
    jsonschema::options()
        .should_validate_formats(true)
        .offline()
        .with_pattern_options(jsonschema::PatternOptions::regex().size_limit(PATTERN_SIZE_LIMIT))
        .build(schema)
}

/// Checks that `schema` is a valid JSON Schema within Switchboard's bounds, which compiles (its
/// patterns are regular expressions, its references resolve within it). Pointers start at
/// `pointer`.
pub fn check_supported(schema: &Value, pointer: &str, errors: &mut ValidationErrors) {
    if let Some(at) = too_deep(schema, pointer, 0) {
        errors.push(at, format!("nests deeper than {MAX_DEPTH} levels"));
        return;
    }
    if let Err(e) = jsonschema::meta::validate(schema) {
        errors.push(format!("{pointer}{}", e.instance_path()), meta_message(&e));
        return;
    }
    if let Err(e) = compile(schema) {
        let at = match e.instance_path().as_str() {
            "" => pointer.to_owned(),
            inner => format!("{pointer}{inner}"),
        };
        errors.push(at, format!("does not compile: {}", e.masked()));
    }
}

/// The first pointer under `at` deeper than [`MAX_DEPTH`] schema levels, if any.
fn too_deep(schema: &Value, at: &str, depth: usize) -> Option<String> {
    if depth > MAX_DEPTH {
        return Some(at.to_owned());
    }
    match schema {
        Value::Object(o) => {
            o.iter().find_map(|(k, v)| too_deep(v, &format!("{at}/{}", escape(k)), depth + usize::from(v.is_object())))
        }
        Value::Array(a) => a.iter().enumerate().find_map(|(i, v)| too_deep(v, &format!("{at}/{i}"), depth)),
        _ => None,
    }
}

fn meta_message(e: &jsonschema::ValidationError<'_>) -> String {
    match e.kind() {
        ValidationErrorKind::Type { .. } | ValidationErrorKind::Enum { .. } | ValidationErrorKind::AnyOf { .. } => {
            format!("is not valid here ({})", e.masked())
        }
        _ => e.masked().to_string(),
    }
}

/// Validates `value` against a schema that passed [`check_supported`]; every violation is
/// reported as `<pointer into the value>: <what is wrong>`. Compiles the schema each time: for
/// a tool's calls, use [`validate_cached`].
pub fn validate(schema: &Value, value: &Value) -> Result<(), Vec<String>> {
    match compile(schema) {
        Ok(validator) => problems(&validator, value),
        Err(e) => Err(vec![format!("(schema): does not compile: {}", e.masked())]),
    }
}

type Cache = Mutex<HashMap<String, (Value, Arc<jsonschema::Validator>)>>;

static COMPILED: std::sync::LazyLock<Cache> = std::sync::LazyLock::new(Cache::default);

/// [`validate`] with the compiled schema kept under `key` (a tool id and version): the schema is
/// compiled on its first use and again only if the schema under that key changed.
pub fn validate_cached(key: &str, schema: &Value, value: &Value) -> Result<(), Vec<String>> {
    let kept =
        COMPILED.lock().ok().and_then(|cache| cache.get(key).filter(|(s, _)| s == schema).map(|(_, v)| Arc::clone(v)));
    let validator = match kept {
        Some(v) => v,
        None => {
            let v = Arc::new(compile(schema).map_err(|e| vec![format!("(schema): does not compile: {}", e.masked())])?);
            if let Ok(mut cache) = COMPILED.lock() {
                if cache.len() >= CACHED {
                    cache.clear();
                }
                cache.insert(key.to_owned(), (schema.clone(), Arc::clone(&v)));
            }
            v
        }
    };
    problems(&validator, value)
}

fn problems(validator: &jsonschema::Validator, value: &Value) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    for e in validator.iter_errors(value) {
        let at = e.instance_path().as_str().to_owned();
        match e.kind() {
            ValidationErrorKind::AdditionalProperties { unexpected }
            | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
                for name in unexpected {
                    errors.push(format!("{at}/{}: is not allowed", escape(name)));
                }
            }
            ValidationErrorKind::Required { property } => {
                let name = property.as_str().map_or_else(|| property.to_string(), escape);
                errors.push(format!("{at}/{name}: is required"));
            }
            ValidationErrorKind::FalseSchema => errors.push(format!("{}: is not allowed", display(&at))),
            _ => errors.push(format!("{}: {}", display(&at), e.masked())),
        }
    }
    errors.sort_by(|a, b| a.split(": ").next().cmp(&b.split(": ").next()).then(a.cmp(b)));
    errors.dedup();
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

/// Largest schema, inlined, that a model is shown in place of one with references.
const MAX_INLINED_BYTES: usize = 64 * 1024;

/// The schema as a model provider is shown it: references into the schema's own definitions
/// inlined, and `$schema` left out, so that a provider which does not follow `$ref` (or refuses
/// the keyword) sees the same constraints. A recursive reference stays (with its definitions),
/// and so does a schema that would inline to more than 64 KiB. Validation always uses the schema
/// as written.
pub fn for_model(schema: &Value) -> std::borrow::Cow<'_, Value> {
    use std::borrow::Cow;
    if !has_key(schema, &["$ref", "$schema"]) {
        return Cow::Borrowed(schema);
    }
    let Ok(mut inlined) = jsonschema::options().offline().dereference(schema) else {
        return Cow::Borrowed(schema);
    };
    if let Some(top) = inlined.as_object_mut() {
        top.remove("$schema");
        if !has_key(&inlined, &["$ref"])
            && let Some(top) = inlined.as_object_mut()
        {
            top.remove("$defs");
            top.remove("definitions");
        }
    }
    if inlined.to_string().len() > MAX_INLINED_BYTES { Cow::Borrowed(schema) } else { Cow::Owned(inlined) }
}

/// Whether any object in `value` has one of `keys` (a walk, nothing serialised).
fn has_key(value: &Value, keys: &[&str]) -> bool {
    match value {
        Value::Object(o) => o.iter().any(|(k, v)| keys.contains(&k.as_str()) || has_key(v, keys)),
        Value::Array(a) => a.iter().any(|v| has_key(v, keys)),
        _ => false,
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

    fn pointers(errors: &ValidationErrors) -> Vec<&str> {
        errors.0.iter().map(|f| f.pointer.as_str()).collect()
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
        let at: Vec<&str> = errs.iter().map(|e| e.split(':').next().unwrap_or("")).collect();
        assert_eq!(at, ["/extra", "/mode", "/orderId", "/quantity", "/tags", "/tags/1"], "{errs:?}");
        assert_eq!(errs[0], "/extra: is not allowed");
        assert_eq!(validate(&schema(), &json!({})).unwrap_err(), ["/orderId: is required"]);
        let not_object = validate(&schema(), &json!([1])).unwrap_err();
        assert!(not_object[0].starts_with("(arguments): ") && not_object[0].contains("object"), "{not_object:?}");
    }

    /// What Pydantic writes for a model with a nested model, an optional field and a union.
    fn generated() -> Value {
        json!({
            "$defs": {
                "Address": {
                    "type": "object",
                    "properties": { "zip": { "type": "string", "pattern": "^[0-9]{5}$" } },
                    "required": ["zip"],
                    "additionalProperties": false
                }
            },
            "type": "object",
            "properties": {
                "ship_to": { "$ref": "#/$defs/Address" },
                "email": { "type": "string", "format": "email" },
                "note": { "anyOf": [{ "type": "string" }, { "type": "null" }], "default": null },
                "when": { "oneOf": [{ "type": "string", "format": "date" }, { "type": "integer", "minimum": 0 }] },
                "kind": { "allOf": [{ "type": "string" }, { "not": { "const": "forbidden" } }] }
            },
            "required": ["ship_to", "email"]
        })
    }

    #[test]
    fn generated_schemas_with_refs_unions_and_formats_are_accepted_and_enforced() {
        let mut e = ValidationErrors::default();
        check_supported(&generated(), "/parameters", &mut e);
        assert!(e.is_empty(), "{e}");
        let good =
            json!({ "ship_to": { "zip": "75001" }, "email": "a@example.com", "note": null, "when": "2026-12-04" });
        assert_eq!(validate(&generated(), &good), Ok(()));
        let bad = json!({ "ship_to": { "zip": "7500" }, "email": "not an address", "note": 3, "when": true, "kind": "forbidden" });
        let errs = validate(&generated(), &bad).unwrap_err();
        let at: Vec<&str> = errs.iter().map(|e| e.split(':').next().unwrap_or("")).collect();
        assert_eq!(at, ["/email", "/kind", "/note", "/ship_to/zip", "/when"], "{errs:?}");
        // Zod writes draft-07, with `definitions`.
        let zod = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": { "id": { "$ref": "#/definitions/Id" } },
            "required": ["id"],
            "definitions": { "Id": { "type": "string", "minLength": 3 } }
        });
        let mut e = ValidationErrors::default();
        check_supported(&zod, "/parameters", &mut e);
        assert!(e.is_empty(), "{e}");
        assert_eq!(validate(&zod, &json!({ "id": "o-1" })), Ok(()));
        assert!(validate(&zod, &json!({ "id": "x" })).unwrap_err()[0].starts_with("/id: "));
    }

    #[test]
    fn invalid_schemas_are_refused_at_creation_with_their_pointer() {
        let refused = |schema: Value| {
            let mut e = ValidationErrors::default();
            check_supported(&schema, "/parameters", &mut e);
            pointers(&e).into_iter().map(str::to_owned).collect::<Vec<_>>()
        };
        assert_eq!(
            refused(json!({ "type": "object", "properties": { "b": { "type": "text" } } })),
            ["/parameters/properties/b/type"]
        );
        assert_eq!(
            refused(json!({ "type": "object", "properties": { "a": { "oneOf": [] } } })),
            ["/parameters/properties/a/oneOf"]
        );
        assert_eq!(refused(json!({ "type": "object", "properties": { "c": { "pattern": "(" } } })).len(), 1);
        // A reference that resolves nowhere, or outside the schema (nothing is fetched).
        assert_eq!(refused(json!({ "type": "object", "properties": { "a": { "$ref": "#/$defs/Missing" } } })).len(), 1);
        assert_eq!(
            refused(json!({ "type": "object", "properties": { "a": { "$ref": "https://example.com/s.json" } } })).len(),
            1
        );
        // Backtracking constructs are not regular expressions.
        assert_eq!(refused(json!({ "type": "object", "properties": { "a": { "pattern": "(a)\\1" } } })).len(), 1);
        let mut deep = json!({ "type": "string" });
        for _ in 0..20 {
            deep = json!({ "type": "object", "properties": { "x": deep } });
        }
        let at = refused(deep);
        assert!(at.len() == 1 && at[0].starts_with("/parameters/properties/x/properties/x"), "{at:?}");
    }

    #[test]
    fn a_model_is_shown_references_inlined_and_no_schema_keyword() {
        let shown = for_model(&generated()).into_owned();
        assert_eq!(shown.get("$defs"), None);
        assert_eq!(shown["properties"]["ship_to"]["properties"]["zip"]["pattern"], "^[0-9]{5}$");
        assert!(!shown.to_string().contains("$ref"), "{shown}");
        let plain = schema();
        assert!(matches!(for_model(&plain), std::borrow::Cow::Borrowed(_)));
        let recursive = json!({
            "type": "object",
            "properties": { "tree": { "$ref": "#/$defs/Node" } },
            "$defs": { "Node": { "type": "object", "properties": { "children": { "type": "array", "items": { "$ref": "#/$defs/Node" } } } } }
        });
        let shown = for_model(&recursive).into_owned();
        assert!(shown.get("$defs").is_some(), "a recursive definition stays: {shown}");
    }

    #[test]
    fn a_kept_schema_is_compiled_again_when_it_changed_under_its_key() {
        let key = "tool-test#1";
        assert!(validate_cached(key, &schema(), &json!({ "orderId": "1" })).is_ok());
        let stricter = json!({ "type": "object", "properties": { "orderId": { "type": "integer" } } });
        assert_eq!(validate_cached(key, &stricter, &json!({ "orderId": "1" })).unwrap_err().len(), 1);
        assert!(validate_cached(key, &schema(), &json!({ "orderId": "1" })).is_ok());
    }
}
