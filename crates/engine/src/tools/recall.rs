//! Large tool results: a webhook tool's or a sub-agent's answer longer than the agent's
//! `history.maxToolResultBytes` reaches the model shortened — the same JSON with long strings cut,
//! long arrays cut to their first items, deep nesting elided — with a handle (the call's tool use
//! id) and its full size. The full answer is kept with the session (bounded: see
//! [`switchboard_domain::limits::MAX_RECALL_BYTES`]) and `recall_details` returns it on demand, in
//! the same session, for as long as the session lives. What a `recall_details` call returned is
//! shown in full to the turn that asked for it; the stored transcript keeps a note in its place,
//! so that the session stays small.

use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_domain::Session;
use switchboard_domain::message::cut_chars;

use super::ToolOutcome;

/// Strings in a shortened result are cut at this many characters.
const PREVIEW_STRING_CHARS: usize = 200;
/// Arrays in a shortened result keep this many items.
const PREVIEW_ITEMS: usize = 3;
/// Nesting below this depth is elided.
const PREVIEW_DEPTH: usize = 4;

/// What the model is shown instead of `output`, when `output` is longer than `max_bytes` as
/// JSON; `None` when it fits.
pub(crate) fn shorten(output: &Value, max_bytes: usize, handle: &str) -> Option<Value> {
    let full = output.to_string();
    if full.len() <= max_bytes {
        return None;
    }
    let mut preview = shrink(output, 0);
    // Half the room for the preview, the rest for the wrapper; a preview that is still too long
    // becomes the start of the JSON text.
    if preview.to_string().len() > max_bytes / 2 {
        preview = Value::String(cut_chars(&full, max_bytes / 2));
    }
    Some(json!({
        "shortened": true,
        "handle": handle,
        "fullBytes": full.len(),
        "preview": preview,
        "readAll": format!("call recall_details with {{\"handle\": \"{handle}\"}} for the full result"),
    }))
}

/// The note a `recall_details` result leaves in the stored transcript.
pub(crate) fn stored_note(handle: &str) -> Value {
    json!({ "recalled": handle, "note": "shown in full when it was asked for; call recall_details again to read it" })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Recall {
    handle: String,
}

/// `recall_details`: the full result stored under the handle.
pub(crate) fn recall(session: &Session, input: &Value) -> ToolOutcome {
    let handle = match serde_json::from_value::<Recall>(input.clone()) {
        Ok(r) => r.handle,
        Err(e) => return ToolOutcome::error(format!("invalid arguments for recall_details: {e}")),
    };
    match session.recalled(&handle) {
        Some(stored) => ToolOutcome::ok(json!({ "handle": handle, "tool": stored.tool, "result": stored.content })),
        None => {
            let known: Vec<&str> = session.recallable.iter().map(|r| r.handle.as_str()).collect();
            ToolOutcome::error(format!(
                "no stored result '{handle}' in this session (stored: {})",
                if known.is_empty() { "none".to_owned() } else { known.join(", ") }
            ))
        }
    }
}

fn shrink(value: &Value, depth: usize) -> Value {
    match value {
        Value::String(s) => Value::String(cut_chars(s, PREVIEW_STRING_CHARS)),
        Value::Array(items) if depth >= PREVIEW_DEPTH => json!(format!("[{} items]", items.len())),
        Value::Object(map) if depth >= PREVIEW_DEPTH => json!(format!("{{{} fields}}", map.len())),
        Value::Array(items) => {
            let mut out: Vec<Value> = items.iter().take(PREVIEW_ITEMS).map(|v| shrink(v, depth + 1)).collect();
            if items.len() > PREVIEW_ITEMS {
                out.push(json!(format!("… {} more items", items.len() - PREVIEW_ITEMS)));
            }
            Value::Array(out)
        }
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), shrink(v, depth + 1))).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn orders(n: usize) -> Value {
        json!({ "customer": "Ana", "orders": (0..n).map(|i| json!({ "id": i, "note": "x".repeat(500) })).collect::<Vec<_>>() })
    }

    #[test]
    fn a_result_that_fits_is_left_alone() {
        assert_eq!(shorten(&json!({"ok": true}), 100, "t1"), None);
    }

    #[test]
    fn a_long_result_keeps_its_shape_with_long_parts_cut_and_names_its_handle() {
        let short = shorten(&orders(50), 4096, "tooluse_1").unwrap();
        assert_eq!(short["shortened"], json!(true));
        assert_eq!(short["handle"], json!("tooluse_1"));
        assert_eq!(short["fullBytes"], json!(orders(50).to_string().len()));
        let preview = &short["preview"];
        assert_eq!(preview["customer"], json!("Ana"));
        assert_eq!(preview["orders"].as_array().unwrap().len(), 4);
        assert_eq!(preview["orders"][3], json!("… 47 more items"));
        assert_eq!(preview["orders"][0]["note"].as_str().unwrap().chars().count(), 201);
        assert!(short.to_string().len() <= 4096);
    }

    #[test]
    fn a_preview_still_too_long_becomes_the_start_of_the_text() {
        let wide: serde_json::Map<String, Value> = (0..200).map(|i| (format!("k{i}"), json!(i))).collect();
        let short = shorten(&Value::Object(wide), 600, "t").unwrap();
        let preview = short["preview"].as_str().unwrap();
        assert!(preview.starts_with("{\"k0\":0,") && preview.ends_with('…'));
        assert!(short.to_string().len() <= 600 + 200, "the wrapper adds a bounded note");
    }

    #[test]
    fn deep_nesting_is_elided() {
        let deep = json!({ "a": { "b": { "c": { "d": { "e": [1, 2] } } } } });
        assert_eq!(shrink(&deep, 0), json!({ "a": { "b": { "c": { "d": "{1 fields}" } } } }));
    }
}
