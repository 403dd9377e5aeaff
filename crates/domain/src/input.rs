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
    read_value(Value::Object(object), prefix)
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
    read_value(Value::Object(object), prefix)
}

/// `value` as `T`, a struct read only from a JSON object (never from an array of its fields, as
/// serde alone would), or the field at fault under `prefix`. Every client body is read so.
pub fn read_value<T: DeserializeOwned>(value: Value, prefix: &str) -> Result<T, ValidationErrors> {
    serde_path_to_error::deserialize::<_, T>(crate::strict_json::Strict(value)).map_err(|e| shape_error(prefix, e))
}

/// A JSON value that does not have the shape of its type, as the field at fault under `prefix`:
/// a missing field and an unknown one are named by their own pointer (`/name: is required`); a
/// value of the wrong JSON type, or a number out of its type's range, is told what it must be in
/// JSON's words (`must be a JSON object`, `must be a string, not integer 7`), never with a Rust
/// type's name; text that is not JSON says so. Anything else keeps serde's words, with the line
/// and column when the input was text (a file's position helps).
pub fn shape_error(prefix: &str, e: serde_path_to_error::Error<serde_json::Error>) -> ValidationErrors {
    let at = format!("{prefix}{}", pointer_of(e.path()));
    let inner = e.into_inner();
    let message = inner.to_string();
    let bare = match inner.line() {
        0 => message.as_str(),
        line => message.strip_suffix(&format!(" at line {line} column {}", inner.column())).unwrap_or(&message),
    };
    if matches!(inner.classify(), serde_json::error::Category::Syntax | serde_json::error::Category::Eof) {
        return ValidationErrors::single(at, format!("is not valid JSON: {message}"));
    }
    described(at, bare, &message, FIELD)
}

/// Text that is not JSON, as an error about the whole document.
pub fn not_json(e: &serde_json::Error) -> ValidationErrors {
    ValidationErrors::single("", format!("is not valid JSON: {e}"))
}

/// [`shape_error`] for a URL's query string, its pointers under `/query`: every value there is
/// text, so a number that does not parse says so (`/query/limit: must be a whole number`).
pub fn query_error<E: std::fmt::Display>(e: serde_path_to_error::Error<E>) -> ValidationErrors {
    let at = format!("/query{}", pointer_of(e.path()));
    let message = e.into_inner().to_string();
    let detail = match message.as_str() {
        "invalid digit found in string" | "cannot parse integer from empty string" => "must be a whole number",
        "number too large to fit in target type" => "is too large",
        "number too small to fit in target type" => "is too small",
        "invalid float literal" => "must be a number",
        "provided string was not `true` or `false`" => "must be true or false",
        _ => {
            if let Some((name, _)) = message.strip_prefix("duplicate field `").and_then(|rest| rest.split_once('`')) {
                return ValidationErrors::single(format!("/query/{}", escape(name)), "is given more than once");
            }
            return described(at, &message, &message, PARAMETER);
        }
    };
    ValidationErrors::single(at, detail)
}

/// What an unknown name is called, and how the known ones are introduced.
struct Noun {
    one: &'static str,
    known: &'static str,
}

const FIELD: Noun = Noun { one: "field", known: "known fields" };
const PARAMETER: Noun = Noun { one: "parameter", known: "known ones" };

/// `bare` is serde's message without a position, `message` with it.
fn described(at: String, bare: &str, message: &str, noun: Noun) -> ValidationErrors {
    let quoted = |rest: &str| rest.split_once('`').map(|(name, after)| (name.to_owned(), after.to_owned()));
    if let Some((field, _)) = bare.strip_prefix("missing field `").and_then(quoted) {
        return ValidationErrors::single(format!("{at}/{}", escape(&field)), "is required");
    }
    if let Some((field, after)) = bare.strip_prefix("unknown field `").and_then(quoted) {
        let detail = match after.strip_prefix(", expected one of ").or_else(|| after.strip_prefix(", expected ")) {
            Some(known) => format!("is not a {} here; {}: {}", noun.one, noun.known, known.replace('`', "")),
            None => format!("is not a {} here", noun.one),
        };
        // The path ends where the field was met: at the object, or at the field itself.
        let pointer = match at.ends_with(&format!("/{}", escape(&field))) {
            true => at,
            false => format!("{at}/{}", escape(&field)),
        };
        return ValidationErrors::single(pointer, detail);
    }
    // "invalid type: integer `1`, expected struct X", "invalid length 0, expected struct X with 3
    // elements" (an array where an object belongs), and the same refused by `read_value`.
    if bare.contains(", expected struct ") || bare.ends_with(", expected a JSON object") {
        return ValidationErrors::single(at, "must be a JSON object");
    }
    // A value of another type is told the kind it must be; a number out of its type's range
    // (serde says "invalid value") is told the range.
    let (wrong, range) = match bare.strip_prefix("invalid type: ") {
        Some(rest) => (Some(rest), false),
        None => (bare.strip_prefix("invalid value: "), true),
    };
    if let Some((got, expected)) = wrong.and_then(|rest| rest.split_once(", expected "))
        && let Some(kind) = json_kind(expected, range)
    {
        let got = got.replace('`', "");
        let got = match got.as_str() {
            "map" => "an object".to_owned(),
            "sequence" => "an array".to_owned(),
            _ => got.replace("floating point", "number"),
        };
        return ValidationErrors::single(at, format!("must be {kind}, not {got}"));
    }
    ValidationErrors::single(at, message)
}

/// What serde's name for an expected Rust type is in JSON's words, for the common ones.
fn json_kind(expected: &str, range: bool) -> Option<&'static str> {
    Some(match expected {
        "a string" | "a borrowed string" | "a character" => "a string",
        "a boolean" => "true or false",
        "u8" if range => "a whole number from 0 to 255",
        "u16" if range => "a whole number from 0 to 65535",
        "u32" if range => "a whole number from 0 to 4294967295",
        "i32" if range => "a whole number from -2147483648 to 2147483647",
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number, 0 or more",
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        "a sequence" => "an array",
        "a map" => "a JSON object",
        _ => return None,
    })
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// RFC 6901 pointer of a serde path.
pub fn pointer_of(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("/{index}")),
            Segment::Map { key } => out.push_str(&format!("/{}", escape(key))),
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
        assert_eq!(e.0[0].pointer, "/colour", "{e}");
        assert!(e.0[0].detail.starts_with("is not a field here; known fields: "), "{e}");
        assert!(e.0[0].detail.contains("systemPrompt"), "{e}");
        let e = record_from_input::<Agent>(json!({"systemPrompt": "p", "model": "m"}), &server(), "").unwrap_err();
        assert_eq!((e.0[0].pointer.as_str(), e.0[0].detail.as_str()), ("/name", "is required"));
        let e = record_from_input::<Agent>(
            json!({"name": "A", "systemPrompt": "p", "model": "m", "modelConfig": {"maxTokens": 10, "tmp": 1}}),
            &server(),
            "/agents/2",
        )
        .unwrap_err();
        assert_eq!(e.0[0].pointer, "/agents/2/modelConfig/tmp", "{e}");
        let e = record_from_input::<Agent>(
            json!({"name": "A", "systemPrompt": "p", "model": "m", "modelConfig": "warm"}),
            &server(),
            "",
        )
        .unwrap_err();
        assert_eq!((e.0[0].pointer.as_str(), e.0[0].detail.as_str()), ("/modelConfig", "must be a JSON object"));
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        #[allow(dead_code)]
        items: Vec<Inner>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        #[allow(dead_code)]
        #[serde(rename = "a/b")]
        ab: u32,
    }

    fn from_text(text: &str) -> ValidationErrors {
        serde_path_to_error::deserialize::<_, Outer>(&mut serde_json::Deserializer::from_str(text))
            .map_err(|e| shape_error("", e))
            .unwrap_err()
    }

    #[test]
    fn a_shape_error_in_text_names_the_field_and_keeps_the_position_only_where_it_helps() {
        let e = from_text("{\"items\": [{\"a/b\": 1}, {}]}");
        assert_eq!((e.0[0].pointer.as_str(), e.0[0].detail.as_str()), ("/items/1/a~1b", "is required"));
        let e = from_text("{\"items\": [{\"a/b\": 1, \"c\": 2}]}");
        assert_eq!(
            (e.0[0].pointer.as_str(), e.0[0].detail.as_str()),
            ("/items/0/c", "is not a field here; known fields: a/b")
        );
        let e = from_text("{\"items\": [7]}");
        assert_eq!((e.0[0].pointer.as_str(), e.0[0].detail.as_str()), ("/items/0", "must be a JSON object"));
        let e = from_text("{\"items\": [");
        assert_eq!(e.0[0].detail, "is not valid JSON: EOF while parsing a list at line 1 column 11");
        let e = from_text("[]");
        assert_eq!((e.0[0].pointer.as_str(), e.0[0].detail.as_str()), ("", "must be a JSON object"));
        let e = from_text("{\"items\": [{\"a/b\": \"x\"}]}");
        assert_eq!(
            (e.0[0].pointer.as_str(), e.0[0].detail.as_str()),
            ("/items/0/a~1b", "must be a whole number, 0 or more, not string \"x\"")
        );
        let e = from_text("{\"items\": {}}");
        assert_eq!((e.0[0].pointer.as_str(), e.0[0].detail.as_str()), ("/items", "must be an array, not an object"));
        let e = from_text("{\"items\": [{\"a/b\": -1}]}");
        assert_eq!(
            (e.0[0].pointer.as_str(), e.0[0].detail.as_str()),
            ("/items/0/a~1b", "must be a whole number from 0 to 4294967295, not integer -1")
        );
        let e = from_text("{\"items\": [{\"a/b\": 1.5}]}");
        assert_eq!(e.0[0].detail, "must be a whole number, 0 or more, not number 1.5");
        let e = from_text("{\"items\": [{\"a/b\": 1}], \"items\": []}");
        assert!(e.0[0].detail.starts_with("duplicate field `items` at line 1"), "{e}");
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct Page {
        #[allow(dead_code)]
        limit: Option<u32>,
        #[allow(dead_code)]
        dry_run: Option<bool>,
        #[allow(dead_code)]
        source_id: String,
    }

    fn from_query(query: &str) -> (String, String) {
        let form = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        let e = serde_path_to_error::deserialize::<_, Page>(form).map_err(query_error).unwrap_err();
        (e.0[0].pointer.clone(), e.0[0].detail.clone())
    }

    #[test]
    fn a_query_string_names_the_parameter_at_fault() {
        let at = |pointer: &str, detail: &str| (pointer.to_owned(), detail.to_owned());
        assert_eq!(from_query("sourceId=e&limit=abc"), at("/query/limit", "must be a whole number"));
        assert_eq!(from_query("sourceId=e&limit="), at("/query/limit", "must be a whole number"));
        assert_eq!(from_query("sourceId=e&limit=99999999999"), at("/query/limit", "is too large"));
        assert_eq!(from_query("sourceId=e&dryRun=maybe"), at("/query/dryRun", "must be true or false"));
        assert_eq!(from_query("limit=1"), at("/query/sourceId", "is required"));
        assert_eq!(from_query("sourceId=e&limit=1&limit=2"), at("/query/limit", "is given more than once"));
        assert_eq!(
            from_query("sourceId=e&colour=red"),
            at("/query/colour", "is not a parameter here; known ones: limit, dryRun, sourceId")
        );
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
