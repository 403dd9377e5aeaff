//! What the fuzz targets of `fuzz/` check on the event parser and the condition parser, here so
//! that the test replaying their corpus (`tests/properties.rs`) runs the same code. Not part of
//! the crate's API (hidden from its docs). A check panics only if the code under test does; a
//! property that does not hold is returned as an `Err` for the caller to panic on.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use chrono::DateTime;
use serde_json::{Value, json};

use crate::condition::Conditions;
use crate::event::InboundEvent;
use crate::ids::{AgentId, TenantId, TriggerId};
use crate::trigger::{EventType, Trigger, TriggerIndex, TriggerStatus};
use crate::validation::ValidationErrors;

/// A property that did not hold, in words.
pub type Broken = String;

/// `bytes` as an inbound event (`InboundEvent::parse_bytes`, what `POST /events` and the
/// router run). A refusal names at least one field; an accepted event is accepted again, equal,
/// from its own JSON written out again, and the trigger conditions of [`probes`] evaluate on its
/// detail.
pub fn event(bytes: &[u8]) -> Result<(), Broken> {
    let event = match InboundEvent::parse_bytes(bytes) {
        Ok(event) => event,
        Err(e) => return named(&e),
    };
    for probe in probes() {
        probe.matches(&event.raw_detail);
    }
    // It parsed, so it is JSON.
    let value: Value = serde_json::from_slice(bytes).map_err(|e| format!("accepted, yet not JSON: {e}"))?;
    let again = serde_json::to_vec(&value).map_err(|e| format!("cannot be written out: {e}"))?;
    let reparsed =
        InboundEvent::parse_bytes(&again).map_err(|e| format!("accepted, then refused when written out: {e}"))?;
    let same = reparsed.id == event.id
        && reparsed.source == event.source
        && reparsed.detail_type == event.detail_type
        && reparsed.detail == event.detail
        && same_json(&reparsed.raw_detail, &event.raw_detail);
    if !same {
        return Err(format!("written out and parsed again, the event differs: {event:?} then {reparsed:?}"));
    }
    Ok(())
}

/// `bytes` as a trigger condition (`Conditions::parse`, what a trigger write runs) and, when
/// accepted, evaluated on an event detail: `[conditions, detail]` when the input is a
/// two-element array (a condition tree is never an array), otherwise the whole input against
/// the detail of a typical `message.new`. Routing's index must answer what evaluation answers,
/// and the tree must parse again from its own JSON and answer the same.
pub fn condition(bytes: &[u8]) -> Result<(), Broken> {
    let Ok(input) = serde_json::from_slice::<Value>(bytes) else { return Ok(()) };
    let (tree, detail) = match &input {
        Value::Array(pair) if pair.len() == 2 => (&pair[0], &pair[1]),
        tree => (tree, sample_detail()),
    };
    let conditions = match Conditions::parse(tree) {
        Ok(c) => c,
        Err(e) if e.pointer.is_empty() || e.pointer.starts_with('/') => return Ok(()),
        Err(e) => return Err(format!("refused with a pointer that is not one: {e:?}")),
    };
    let matched = conditions.matches(detail);
    let tenant: TenantId = "t-1".parse().map_err(|e| format!("the fuzz tenant: {e}"))?;
    let indexed = TriggerIndex::new(&[trigger(tenant, conditions.clone())], EventType::MessageNew);
    if indexed.first_match(detail, 0).is_some() != matched {
        return Err(format!("evaluation says {matched}, the trigger index says otherwise"));
    }
    let text = serde_json::to_vec(&conditions).map_err(|e| format!("cannot be written out: {e}"))?;
    let value: Value = serde_json::from_slice(&text).map_err(|e| format!("written out, not JSON: {e}"))?;
    let again = Conditions::parse(&value).map_err(|e| format!("accepted, then refused when written out: {e}"))?;
    if !same_json(again.as_json(), conditions.as_json()) {
        return Err(format!("written out and parsed again, the tree differs: {}", again.as_json()));
    }
    // A number a digit off after the trip through text may sit right at a bound; only an exact
    // copy must answer the same.
    if again.as_json() == conditions.as_json() && again.matches(detail) != matched {
        return Err("written out and parsed again, the tree answers differently".to_owned());
    }
    Ok(())
}

/// A refusal must name at least one field, each by a JSON Pointer (`""` or `/…`).
pub fn named(errors: &ValidationErrors) -> Result<(), Broken> {
    if errors.is_empty() {
        return Err("refused without saying why".to_owned());
    }
    match errors.0.iter().find(|f| !(f.pointer.is_empty() || f.pointer.starts_with('/'))) {
        Some(f) => Err(format!("refused at '{}', which is not a JSON Pointer", f.pointer)),
        None => Ok(()),
    }
}

/// JSON equality, but numbers that are floats need only agree to a rounding: this crate's
/// `serde_json` (without its `float_roundtrip` feature, as `switchboard-api` builds it) may read
/// back the shortest text of a float one unit in the last place off.
pub fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y || (x - y).abs() <= 4.0 * f64::EPSILON * x.abs().max(y.abs()),
            _ => false,
        },
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

/// Conditions using every operator on the fields a `message.new` detail has, to evaluate
/// accepted events on.
fn probes() -> &'static [Conditions] {
    static PROBES: OnceLock<Vec<Conditions>> = OnceLock::new();
    PROBES.get_or_init(|| {
        let trees = [
            json!({"all": [{"field": "channel.platform", "operator": "eq", "value": "webchat"}]}),
            json!({"any": [
                {"field": "message.text", "operator": "contains", "value": "ORDER", "caseInsensitive": true},
                {"field": "message.text", "operator": "matches", "value": "^[a-z]+\\s\\d{2,}"},
                {"field": "conversation.tags.0", "operator": "in", "value": ["vip", 1, true]}
            ]}),
            json!({"all": [
                {"field": "customer.score", "operator": "gte", "value": 3.5},
                {"field": "message.text", "operator": "starts_with", "value": "É", "caseInsensitive": true},
                {"field": "conversation.status", "operator": "not_exists"}
            ]}),
        ];
        trees.iter().filter_map(|t| Conditions::parse(t).ok()).collect()
    })
}

/// The detail of the contract's `message.new` example.
fn sample_detail() -> &'static Value {
    static DETAIL: OnceLock<Value> = OnceLock::new();
    DETAIL.get_or_init(|| {
        json!({
            "tenantId": "t-1", "conversationId": "c-1", "messageId": "m-1",
            "channel": {"platform": "webchat"}, "conversation": {"status": "open", "tags": ["vip"]},
            "message": {"direction": "inbound", "text": "I need help with my order"},
            "customer": {"score": 4}
        })
    })
}

/// An active `message.new` trigger holding `conditions`.
fn trigger(tenant_id: TenantId, conditions: Conditions) -> Trigger {
    static IDS: OnceLock<(TriggerId, AgentId)> = OnceLock::new();
    let (trigger_id, agent_id) = *IDS.get_or_init(|| (TriggerId::generate(), AgentId::generate()));
    Trigger {
        tenant_id,
        trigger_id,
        name: "fuzz".to_owned(),
        agent_id,
        event_type: EventType::MessageNew,
        conditions,
        priority: 0,
        status: TriggerStatus::Active,
        schedule: None,
        webhook: None,
        split: vec![],
        created_at: DateTime::default(),
        updated_at: DateTime::default(),
        version: 1,
    }
}

/// Every input kept for `target` under `fuzz` (the repository's `fuzz/`): its corpus, then the
/// crashes kept from it (`regressions/`), each in name order. `Err` when the corpus is missing or
/// empty, for a replay of nothing would pass.
pub fn kept_inputs(fuzz: &Path, target: &str) -> Result<Vec<(PathBuf, Vec<u8>)>, String> {
    let corpus = files(&fuzz.join("corpus").join(target))?;
    if corpus.is_empty() {
        return Err(format!("fuzz/corpus/{target} is missing or empty"));
    }
    Ok(corpus.into_iter().chain(files(&fuzz.join("regressions").join(target))?).collect())
}

/// The files of `dir` with their bytes, in name order; none when there is no `dir`.
fn files(dir: &Path) -> Result<Vec<(PathBuf, Vec<u8>)>, String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(Vec::new()) };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        if path.is_file() {
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            files.push((path, bytes));
        }
    }
    files.sort();
    Ok(files)
}
