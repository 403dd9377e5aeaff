//! Trigger conditions: parses, validates and evaluates the JSON condition trees tenants attach
//! to triggers to decide whether an inbound event (its `detail` object) should start an agent.
//! It does not decide what happens after a match, does not load triggers, and never mutates events.
//!
//! # Shape
//!
//! A *group* is an object with optional `all` and `any` arrays of nodes; a *leaf* is an object
//! with `field`, `operator`, an optional `value` and an optional `caseInsensitive` (default
//! `false`). An object holding `field` or `operator` is a leaf; any other object is a group.
//! Mixing the two kinds of keys, or any other key, is rejected with a pointer to that key.
//! The root is normally a group; a single leaf at the root is accepted as shorthand.
//!
//! # Group logic
//!
//! A group matches when every node in `all` matches and at least one node in `any` matches.
//! An absent key imposes nothing, so `{}` matches every event. This is standard logic:
//! `"all": []` is vacuously true and `"any": []` matches nothing (no member can be satisfied).
//!
//! # Fields, missing data and null
//!
//! `field` is a dotted path into the detail object (`message.text`, `conversation.tags.0`); a
//! segment made only of digits also indexes arrays. A path that does not resolve is *missing*:
//! then every operator is false except `not_exists`, so `neq`, `not_in` and `not_contains` are
//! false too, because a trigger should never fire on data it cannot see. An explicit JSON `null`
//! is *present*: `exists` is true for it and `eq null` matches it.
//!
//! # Operators
//!
//! * `eq` / `neq`: JSON equality (numbers compare as `f64`, so `1 == 1.0`). On a present field
//!   `neq` is exactly `!eq`, whatever the types. `value` is required; `null` is allowed.
//! * `in` / `not_in`: `eq` against a non-empty list of strings, numbers or booleans; on a present
//!   field `not_in` is exactly `!in`.
//! * `contains` / `not_contains`: substring when the field is a string (value must be a string),
//!   membership when the field is an array. On any other field type both are false.
//! * `starts_with`, `ends_with`, `matches` (regex): string fields only.
//! * `gt`, `gte`, `lt`, `lte`: number against number, or string against string (byte-wise
//!   lexicographic, which orders ISO-8601 UTC timestamps). Mixed types are false.
//! * `exists` / `not_exists`: take no value (or `null`).
//!
//! A type mismatch is never an error at evaluation time, only a non-match.
//!
//! # Time
//!
//! A node `{"time": {...}}` (the key alone) holds when the moment of evaluation falls in a
//! window of local time — weekdays, `from`/`to` times of day, a `dates` range — in its
//! `timeZone`, or outside it with `outside: true`; see `time.rs`. It reads no field of the event.
//!
//! `caseInsensitive` lowercases both sides with `str::to_lowercase` for `eq`, `neq`, `in`,
//! `not_in`, `contains`, `not_contains`, `starts_with` and `ends_with` (full Unicode mappings:
//! `"ÉCOLE"` equals `"école"`, but `"STRASSE"` does not equal `"straße"` and `"İ"` lowers to
//! `"i̇"`, not `"i"`). For `matches` it sets the regex engine's Unicode case-insensitive mode.
//! It is accepted and ignored by the ordering and existence operators.
//!
//! # Cost
//!
//! Regexes are compiled and case-insensitive values lowercased once, at parse time. Evaluation
//! allocates nothing except when a case-insensitive comparison meets non-ASCII text, which must
//! be lowercased once per comparison.

mod eval;
mod explain;
mod parse;
pub(crate) mod time;
mod tree;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

pub use parse::{
    ConditionError, MAX_CONDITION_DEPTH, MAX_CONDITION_NODES, MAX_FIELD_SEGMENTS, MAX_PATTERN_BYTES,
    MAX_PATTERN_NESTING, regex_set,
};
pub use tree::{Atom, FieldPath, Requirement};
use tree::{Group, Node};

/// A validated, compiled trigger condition tree. Serializes back to the JSON it was parsed from.
#[derive(Debug, Clone)]
pub struct Conditions {
    raw: Value,
    root: Node,
}

impl Conditions {
    /// Parses and validates; regexes compiled once here.
    pub fn parse(value: &Value) -> Result<Self, ConditionError> {
        let root = parse::parse(value)?;
        Ok(Self { raw: value.clone(), root })
    }

    /// A condition set that matches every event (`{}`).
    pub fn always() -> Self {
        Self { raw: Value::Object(Map::new()), root: Node::Group(Group { all: Vec::new(), any: None }) }
    }

    /// Evaluates against the event detail object (e.g. {"tenantId":..,"channel":{"platform":"facebook"},"message":{"text":".."}})
    /// at the moment `now` (what time conditions are judged at).
    pub fn matches_at(&self, detail: &Value, now: chrono::DateTime<chrono::Utc>) -> bool {
        self.matches_in(detail, now, &eval::NO_CALENDARS)
    }

    /// [`matches_at`](Self::matches_at) with the tenant's `calendars`, which time conditions
    /// may name (`{"time": {"calendar": …}}`; one it does not have never holds).
    pub fn matches_in(
        &self,
        detail: &Value,
        now: chrono::DateTime<chrono::Utc>,
        calendars: &crate::calendar::Calendars,
    ) -> bool {
        match moment(now) {
            Some(now) => self.root.matches(detail, eval::InCalendars(now, calendars)),
            None => self.root.matches(detail, ()),
        }
    }

    /// [`explain_at`](Self::explain_at) with the tenant's `calendars`: a calendar's condition
    /// says whether it was `open` and the `holiday` that closed it.
    pub fn explain_in(
        &self,
        detail: &Value,
        now: chrono::DateTime<chrono::Utc>,
        calendars: &crate::calendar::Calendars,
    ) -> Value {
        match moment(now) {
            Some(now) => self.root.explain(&self.raw, detail, eval::InCalendars(now, calendars)),
            None => self.root.explain(&self.raw, detail, ()),
        }
    }

    /// The tenant calendars its time conditions name: `(pointer, name)`, for a write to check
    /// that the tenant has them.
    pub fn calendar_refs(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        self.root.calendar_refs(&mut out);
        out
    }

    /// Evaluates against the event detail alone, at no moment: a time condition does not hold.
    /// What routing runs is [`matches_at`](Self::matches_at).
    pub fn matches(&self, detail: &Value) -> bool {
        self.root.matches(detail, ())
    }

    /// Why this tree matches `detail` at `now` or not, node by node, as JSON: each group with
    /// `held` and its members, each leaf as written with `held` and the value it saw (`actual`,
    /// or `missing: true`), each time condition as written with `held` and the local time it
    /// was judged at (`localTime`). Its root's `held` is [`matches_at`](Self::matches_at).
    pub fn explain_at(&self, detail: &Value, now: chrono::DateTime<chrono::Utc>) -> Value {
        self.explain_in(detail, now, &eval::NO_CALENDARS)
    }

    /// [`explain_at`](Self::explain_at) at no moment (time conditions `missing`).
    pub fn explain(&self, detail: &Value) -> Value {
        self.root.explain(&self.raw, detail, ())
    }

    /// The time conditions whose zone this host's tz database does not know, each as the error
    /// a write refuses it with (parsing checks the shape only, so that reading a stored trigger
    /// needs no tz database).
    pub fn zone_faults(&self) -> Vec<ConditionError> {
        let mut out = Vec::new();
        self.root.zone_faults(&mut out, false);
        out
    }

    /// The time conditions written without a zone, each as the error a write refuses it with
    /// when there is no tenant zone to fill in ([`Conditions::fill_zone`]).
    pub fn missing_zones(&self) -> Vec<ConditionError> {
        let mut out = Vec::new();
        self.root.zone_faults(&mut out, true);
        out
    }

    /// These conditions with `zone` written into every time condition that names neither a
    /// zone nor a calendar; `None` when there is none.
    pub fn fill_zone(&self, zone: &str) -> Option<Conditions> {
        fn walk(value: &mut Value, zone: &str) -> bool {
            match value {
                Value::Object(map) => {
                    let mut filled = false;
                    if let Some(Value::Object(time)) = map.get_mut("time")
                        && !time.contains_key("timeZone")
                        && !time.contains_key("calendar")
                    {
                        time.insert("timeZone".into(), Value::String(zone.to_owned()));
                        filled = true;
                    }
                    for (key, v) in map.iter_mut() {
                        if key != "time" {
                            filled |= walk(v, zone);
                        }
                    }
                    filled
                }
                Value::Array(items) => items.iter_mut().fold(false, |filled, v| walk(v, zone) | filled),
                _ => false,
            }
        }
        if self.missing_zones().is_empty() {
            return None;
        }
        let mut raw = self.raw.clone();
        walk(&mut raw, zone);
        Conditions::parse(&raw).ok()
    }

    pub fn as_json(&self) -> &Value {
        &self.raw
    }

    /// What routing may index this tree by: tests that every event the tree matches passes
    /// (leaves required by the root's `all` chain, and `any` groups whose members are all such
    /// leaves). Only necessary, never sufficient: a tree whose requirements hold is still
    /// evaluated. Leaves no index can answer (negations, `exists`, text bounds, members of
    /// `any` groups holding groups) add nothing.
    pub fn requirements(&self) -> Vec<Requirement> {
        let mut out = Vec::new();
        self.root.requirements(&mut out);
        out
    }
}

fn moment(now: chrono::DateTime<chrono::Utc>) -> Option<jiff::Timestamp> {
    jiff::Timestamp::from_millisecond(now.timestamp_millis()).ok()
}

impl PartialEq for Conditions {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl Serialize for Conditions {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Conditions {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::parse(&value).map_err(D::Error::custom)
    }
}
