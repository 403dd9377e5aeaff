//! Converts the API's contract, `contracts/openapi.yaml`, to the compact JSON that
//! `GET /openapi.json` serves (`resources/openapi.rs`). At build time, so that no YAML parser is
//! linked into the server or the internal-api Lambda (docs/decisions.md, "The internal API").

use std::error::Error;
use std::path::Path;

fn main() -> Result<(), Box<dyn Error>> {
    let contract = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contracts/openapi.yaml");
    println!("cargo::rerun-if-changed={}", contract.display());
    let yaml = std::fs::read_to_string(&contract)?;
    // YAML 1.2's booleans (`no` stays a string), as the contract tests read the file.
    let options = serde_saphyr::options! { strict_booleans: true };
    let mut doc: serde_json::Value = serde_saphyr::from_str_with_options(&yaml, options)?;
    if std::env::var_os("CARGO_FEATURE_CONTRACT_PROSE").is_none() {
        leave_out_prose(&mut doc);
    }
    let out = Path::new(&std::env::var("OUT_DIR")?).join("openapi.json");
    std::fs::write(out, serde_json::to_string(&doc)?)?;
    Ok(())
}

/// Removes the contract's prose: every `description` and `summary` whose value is text (a schema
/// property that happens to be named so has an object for its value, and stays).
fn leave_out_prose(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(fields) => {
            fields.retain(|k, value| !(matches!(k.as_str(), "description" | "summary") && value.is_string()));
            fields.values_mut().for_each(leave_out_prose);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(leave_out_prose),
        _ => {}
    }
}
