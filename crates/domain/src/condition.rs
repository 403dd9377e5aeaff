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

use std::fmt;

use regex::{Regex, RegexBuilder};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// Most nodes (groups and leaves, the root included) one condition tree may hold.
pub const MAX_CONDITION_NODES: usize = 256;
/// Deepest a node may sit; the root is at depth 1.
pub const MAX_CONDITION_DEPTH: usize = 8;
/// Most dotted segments in one `field` path.
pub const MAX_FIELD_SEGMENTS: usize = 16;
/// Longest regex pattern accepted by `matches`, in bytes.
pub const MAX_PATTERN_BYTES: usize = 1024;
/// Compiled-program budget per regex, so one tenant cannot make routing slow or memory-hungry.
const REGEX_SIZE_LIMIT: usize = 256 * 1024;
/// Budget of a tenant's `matches` patterns compiled together for routing (past it, they are
/// evaluated one by one).
const REGEX_SET_SIZE_LIMIT: usize = 16 * 1024 * 1024;

/// A validated, compiled trigger condition tree. Serializes back to the JSON it was parsed from.
#[derive(Debug, Clone)]
pub struct Conditions {
    raw: Value,
    root: Node,
}

/// Why a condition tree was rejected, and where.
///
/// `pointer` is an RFC 6901 JSON Pointer relative to the conditions object (`""` for the root);
/// the `Display` form shows the root as `/` so the location is never blank.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", shown_pointer(pointer))]
pub struct ConditionError {
    /// JSON Pointer (RFC 6901) to the offending node, relative to the conditions object, e.g. "/all/1/any/0/operator".
    pub pointer: String,
    pub message: String,
}

fn shown_pointer(pointer: &str) -> &str {
    if pointer.is_empty() { "/" } else { pointer }
}

impl Conditions {
    /// Parses and validates; regexes compiled once here.
    pub fn parse(value: &Value) -> Result<Self, ConditionError> {
        let mut parser = Parser { pointer: String::new(), nodes: 0 };
        let root = parser.node(value, 1)?;
        Ok(Self { raw: value.clone(), root })
    }

    /// A condition set that matches every event (`{}`).
    pub fn always() -> Self {
        Self { raw: Value::Object(Map::new()), root: Node::Group(Group { all: Vec::new(), any: None }) }
    }

    /// Evaluates against the event detail object (e.g. {"tenantId":..,"channel":{"platform":"facebook"},"message":{"text":".."}}).
    pub fn matches(&self, detail: &Value) -> bool {
        self.root.matches(detail)
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

/// One necessary test of a condition tree ([`Conditions::requirements`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Requirement {
    Atom(Atom),
    /// At least one of these holds (an `any` group; empty: the group matches nothing).
    AnyOf(Vec<Atom>),
}

/// A test on one field that an index can answer for many trees at once.
#[derive(Debug, Clone, PartialEq)]
pub enum Atom {
    /// The field is text equal to one of `values` (both lowercased with `str::to_lowercase`
    /// when `case_insensitive`; `values` already are).
    OneOf { field: FieldPath, case_insensitive: bool, values: Vec<Box<str>> },
    /// The field is text containing `needle` (lowercased as above), or an array (membership,
    /// which an index does not check).
    Contains { field: FieldPath, case_insensitive: bool, needle: Box<str> },
    /// The field is text the regular expression `pattern` matches.
    Matches { field: FieldPath, case_insensitive: bool, pattern: Box<str> },
    /// The field is a number above `bound` (or equal, when `inclusive`).
    Above { field: FieldPath, bound: f64, inclusive: bool },
    /// The field is a number below `bound` (or equal, when `inclusive`).
    Below { field: FieldPath, bound: f64, inclusive: bool },
}

/// A leaf's `field`, resolved against event details the way the leaf resolves it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldPath(Box<[Segment]>);

impl FieldPath {
    /// The value at this path, if it resolves.
    pub fn resolve<'a>(&self, detail: &'a Value) -> Option<&'a Value> {
        resolve(&self.0, detail)
    }
}

/// The regex options of a `matches` leaf, for a set of patterns compiled together.
pub fn regex_set(patterns: &[&str], case_insensitive: bool) -> Result<regex::RegexSet, regex::Error> {
    regex::RegexSetBuilder::new(patterns)
        .case_insensitive(case_insensitive)
        .size_limit(REGEX_SIZE_LIMIT.saturating_mul(patterns.len().max(1)).min(REGEX_SET_SIZE_LIMIT))
        .build()
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

// ---------------------------------------------------------------------------------------------
// Compiled tree
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Node {
    Group(Group),
    Leaf(Leaf),
}

#[derive(Debug, Clone)]
struct Group {
    all: Vec<Node>,
    // `None` (no key) must stay distinct from `Some(vec![])`, which matches nothing.
    any: Option<Vec<Node>>,
}

#[derive(Debug, Clone)]
struct Leaf {
    path: Box<[Segment]>,
    case_insensitive: bool,
    test: Test,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Segment {
    key: Box<str>,
    index: Option<usize>,
}

/// Expected values are stored pre-lowercased when the leaf is case-insensitive, so evaluation
/// only ever lowers the event side.
#[derive(Debug, Clone)]
enum Test {
    Eq { expected: Value, negate: bool },
    In { options: Box<[Value]>, negate: bool },
    Contains { needle: Value, negate: bool },
    StartsWith(Box<str>),
    EndsWith(Box<str>),
    Matches(Regex),
    Order { op: OrderOp, bound: Bound },
    Exists { negate: bool },
}

#[derive(Debug, Clone, Copy)]
enum OrderOp {
    Gt,
    Gte,
    Lt,
    Lte,
}

#[derive(Debug, Clone)]
enum Bound {
    Number(f64),
    Text(Box<str>),
}

impl Node {
    fn matches(&self, detail: &Value) -> bool {
        match self {
            Node::Group(group) => {
                group.all.iter().all(|node| node.matches(detail))
                    && group.any.as_ref().is_none_or(|any| any.iter().any(|node| node.matches(detail)))
            }
            Node::Leaf(leaf) => leaf.matches(detail),
        }
    }
}

impl Node {
    fn requirements(&self, out: &mut Vec<Requirement>) {
        match self {
            Node::Leaf(leaf) => out.extend(leaf.atom().map(Requirement::Atom)),
            Node::Group(group) => {
                for node in &group.all {
                    node.requirements(out);
                }
                if let Some(any) = &group.any {
                    let atoms: Option<Vec<Atom>> = any
                        .iter()
                        .map(|node| match node {
                            Node::Leaf(leaf) => leaf.atom(),
                            Node::Group(_) => None,
                        })
                        .collect();
                    out.extend(atoms.map(Requirement::AnyOf));
                }
            }
        }
    }
}

impl Leaf {
    fn resolve<'a>(&self, detail: &'a Value) -> Option<&'a Value> {
        resolve(&self.path, detail)
    }

    /// The test an index can answer that this leaf's match implies, if there is one.
    fn atom(&self) -> Option<Atom> {
        let field = FieldPath(self.path.clone());
        let case_insensitive = self.case_insensitive;
        match &self.test {
            Test::Eq { expected: Value::String(text), negate: false } => {
                Some(Atom::OneOf { field, case_insensitive, values: vec![text.as_str().into()] })
            }
            Test::In { options, negate: false } => {
                let mut values: Vec<Box<str>> =
                    options.iter().map(|o| o.as_str().map(Box::from)).collect::<Option<_>>()?;
                values.sort_unstable();
                values.dedup();
                Some(Atom::OneOf { field, case_insensitive, values })
            }
            Test::Contains { needle: Value::String(needle), negate: false } if !needle.is_empty() => {
                Some(Atom::Contains { field, case_insensitive, needle: needle.as_str().into() })
            }
            Test::Matches(regex) => Some(Atom::Matches { field, case_insensitive, pattern: regex.as_str().into() }),
            Test::Order { op, bound: Bound::Number(bound) } => {
                let bound = *bound;
                Some(match op {
                    OrderOp::Gt => Atom::Above { field, bound, inclusive: false },
                    OrderOp::Gte => Atom::Above { field, bound, inclusive: true },
                    OrderOp::Lt => Atom::Below { field, bound, inclusive: false },
                    OrderOp::Lte => Atom::Below { field, bound, inclusive: true },
                })
            }
            _ => None,
        }
    }

    fn matches(&self, detail: &Value) -> bool {
        let Some(actual) = self.resolve(detail) else {
            return matches!(self.test, Test::Exists { negate: true });
        };
        let ci = self.case_insensitive;
        match &self.test {
            Test::Exists { negate } => !negate,
            Test::Eq { expected, negate } => json_eq(actual, expected, ci) != *negate,
            Test::In { options, negate } => in_options(actual, options, ci) != *negate,
            Test::Contains { needle, negate } => match actual {
                Value::String(text) => match needle {
                    Value::String(needle) => text_contains(text, needle, ci) != *negate,
                    _ => false,
                },
                Value::Array(items) => items.iter().any(|item| json_eq(item, needle, ci)) != *negate,
                _ => false,
            },
            Test::StartsWith(prefix) => actual.as_str().is_some_and(|text| {
                if ci { Folded::new(text).starts_with(prefix) } else { text.starts_with(&**prefix) }
            }),
            Test::EndsWith(suffix) => actual
                .as_str()
                .is_some_and(|text| if ci { Folded::new(text).ends_with(suffix) } else { text.ends_with(&**suffix) }),
            Test::Matches(regex) => actual.as_str().is_some_and(|text| regex.is_match(text)),
            Test::Order { op, bound } => {
                let ordering = match (bound, actual) {
                    (Bound::Number(bound), Value::Number(n)) => n.as_f64().and_then(|n| n.partial_cmp(bound)),
                    (Bound::Text(bound), Value::String(text)) => Some(text.as_str().cmp(bound)),
                    _ => None,
                };
                ordering.is_some_and(|o| match op {
                    OrderOp::Gt => o.is_gt(),
                    OrderOp::Gte => o.is_ge(),
                    OrderOp::Lt => o.is_lt(),
                    OrderOp::Lte => o.is_le(),
                })
            }
        }
    }
}

fn resolve<'a>(path: &[Segment], detail: &'a Value) -> Option<&'a Value> {
    path.iter().try_fold(detail, |current, segment| match current {
        Value::Object(map) => map.get(&*segment.key),
        Value::Array(items) => segment.index.and_then(|i| items.get(i)),
        _ => None,
    })
}

fn numbers_eq(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// `expected` comes from the condition (already lowercased when `ci`); `actual` from the event.
fn json_eq(actual: &Value, expected: &Value, ci: bool) -> bool {
    match (actual, expected) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(a), Value::Bool(b)) => a == b,
        (Value::Number(a), Value::Number(b)) => numbers_eq(a, b),
        (Value::String(a), Value::String(b)) => {
            if ci {
                Folded::new(a).eq(b)
            } else {
                a == b
            }
        }
        (Value::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(a, b)| json_eq(a, b, ci)),
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(key, a)| b.get(key).is_some_and(|b| json_eq(a, b, ci)))
        }
        _ => false,
    }
}

fn in_options(actual: &Value, options: &[Value], ci: bool) -> bool {
    match actual {
        // Lowercase the event text once for the whole list rather than once per option.
        Value::String(text) if ci => {
            let folded = Folded::new(text);
            options.iter().any(|option| option.as_str().is_some_and(|option| folded.eq(option)))
        }
        _ => options.iter().any(|option| json_eq(actual, option, ci)),
    }
}

fn text_contains(text: &str, needle: &str, ci: bool) -> bool {
    if ci { Folded::new(text).contains(needle) } else { text.contains(needle) }
}

/// Event text as seen through `str::to_lowercase`, without allocating for ASCII text: the
/// lowercase of ASCII is its ASCII lowercase, so bytes can be folded on the fly.
enum Folded<'a> {
    Ascii(&'a [u8]),
    Lowered(String),
}

impl<'a> Folded<'a> {
    fn new(text: &'a str) -> Self {
        if text.is_ascii() { Folded::Ascii(text.as_bytes()) } else { Folded::Lowered(text.to_lowercase()) }
    }

    fn eq(&self, lowered: &str) -> bool {
        match self {
            Folded::Ascii(bytes) => ascii_folded_eq(bytes, lowered.as_bytes()),
            Folded::Lowered(text) => text == lowered,
        }
    }

    fn starts_with(&self, lowered: &str) -> bool {
        match self {
            Folded::Ascii(bytes) => {
                bytes.get(..lowered.len()).is_some_and(|head| ascii_folded_eq(head, lowered.as_bytes()))
            }
            Folded::Lowered(text) => text.starts_with(lowered),
        }
    }

    fn ends_with(&self, lowered: &str) -> bool {
        match self {
            Folded::Ascii(bytes) => bytes
                .len()
                .checked_sub(lowered.len())
                .and_then(|start| bytes.get(start..))
                .is_some_and(|tail| ascii_folded_eq(tail, lowered.as_bytes())),
            Folded::Lowered(text) => text.ends_with(lowered),
        }
    }

    fn contains(&self, lowered: &str) -> bool {
        match self {
            // `windows(0)` would panic, and the empty string is a substring of everything.
            Folded::Ascii(_) if lowered.is_empty() => true,
            Folded::Ascii(bytes) => {
                bytes.windows(lowered.len()).any(|window| ascii_folded_eq(window, lowered.as_bytes()))
            }
            Folded::Lowered(text) => text.contains(lowered),
        }
    }
}

/// A non-ASCII `lowered` byte never equals a folded ASCII byte, which is the right answer: the
/// lowercase of ASCII text is ASCII.
fn ascii_folded_eq(ascii: &[u8], lowered: &[u8]) -> bool {
    ascii.len() == lowered.len() && ascii.iter().zip(lowered).all(|(a, l)| a.to_ascii_lowercase() == *l)
}

// ---------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    Eq,
    Neq,
    In,
    NotIn,
    Contains,
    NotContains,
    StartsWith,
    EndsWith,
    Matches,
    Gt,
    Gte,
    Lt,
    Lte,
    Exists,
    NotExists,
}

impl Operator {
    const ALL: [Operator; 15] = [
        Operator::Eq,
        Operator::Neq,
        Operator::In,
        Operator::NotIn,
        Operator::Contains,
        Operator::NotContains,
        Operator::StartsWith,
        Operator::EndsWith,
        Operator::Matches,
        Operator::Gt,
        Operator::Gte,
        Operator::Lt,
        Operator::Lte,
        Operator::Exists,
        Operator::NotExists,
    ];

    fn name(self) -> &'static str {
        match self {
            Operator::Eq => "eq",
            Operator::Neq => "neq",
            Operator::In => "in",
            Operator::NotIn => "not_in",
            Operator::Contains => "contains",
            Operator::NotContains => "not_contains",
            Operator::StartsWith => "starts_with",
            Operator::EndsWith => "ends_with",
            Operator::Matches => "matches",
            Operator::Gt => "gt",
            Operator::Gte => "gte",
            Operator::Lt => "lt",
            Operator::Lte => "lte",
            Operator::Exists => "exists",
            Operator::NotExists => "not_exists",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.name() == name)
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

const GROUP_KEYS: [&str; 2] = ["all", "any"];
const LEAF_KEYS: [&str; 4] = ["field", "operator", "value", "caseInsensitive"];

struct Parser {
    /// Pointer to the node being parsed; grows and shrinks as the walk descends and returns.
    pointer: String,
    nodes: usize,
}

impl Parser {
    fn error(&self, message: impl Into<String>) -> ConditionError {
        ConditionError { pointer: self.pointer.clone(), message: message.into() }
    }

    fn error_at(&self, segment: &str, message: impl Into<String>) -> ConditionError {
        let mut pointer = self.pointer.clone();
        push_segment(&mut pointer, segment);
        ConditionError { pointer, message: message.into() }
    }

    fn within<T>(
        &mut self,
        segment: &str,
        parse: impl FnOnce(&mut Self) -> Result<T, ConditionError>,
    ) -> Result<T, ConditionError> {
        let len = self.pointer.len();
        push_segment(&mut self.pointer, segment);
        let result = parse(self);
        self.pointer.truncate(len);
        result
    }

    fn node(&mut self, value: &Value, depth: usize) -> Result<Node, ConditionError> {
        let Value::Object(map) = value else {
            return Err(self.error(format!(
                "expected a condition object (a group with \"all\"/\"any\" or a leaf with \"field\"/\"operator\"), found {}",
                kind(value)
            )));
        };
        // Checked before descending so an over-deep or oversized tree is never walked further.
        if depth > MAX_CONDITION_DEPTH {
            return Err(self.error(format!("conditions are nested too deeply (at most {MAX_CONDITION_DEPTH} levels)")));
        }
        self.nodes += 1;
        if self.nodes > MAX_CONDITION_NODES {
            return Err(self.error(format!("too many conditions (at most {MAX_CONDITION_NODES} nodes in total)")));
        }
        if map.contains_key("field") || map.contains_key("operator") {
            self.leaf(map).map(Node::Leaf)
        } else {
            self.group(map, depth).map(Node::Group)
        }
    }

    fn group(&mut self, map: &Map<String, Value>, depth: usize) -> Result<Group, ConditionError> {
        if let Some(key) = map.keys().find(|key| !GROUP_KEYS.contains(&key.as_str())) {
            return Err(self.error_at(
                key,
                format!(
                    "unknown key {key:?} in a group: a group has only \"all\" and \"any\", a leaf needs \"field\" and \"operator\""
                ),
            ));
        }
        let all = match map.get("all") {
            Some(list) => self.within("all", |p| p.list("all", list, depth))?,
            None => Vec::new(),
        };
        let any = match map.get("any") {
            Some(list) => Some(self.within("any", |p| p.list("any", list, depth))?),
            None => None,
        };
        Ok(Group { all, any })
    }

    fn list(&mut self, key: &str, list: &Value, depth: usize) -> Result<Vec<Node>, ConditionError> {
        let Value::Array(items) = list else {
            return Err(self.error(format!("\"{key}\" must be an array of conditions, found {}", kind(list))));
        };
        let mut nodes = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            nodes.push(self.within(&i.to_string(), |p| p.node(item, depth + 1))?);
        }
        Ok(nodes)
    }

    fn leaf(&mut self, map: &Map<String, Value>) -> Result<Leaf, ConditionError> {
        if let Some(key) = map.keys().find(|key| !LEAF_KEYS.contains(&key.as_str())) {
            let message = if GROUP_KEYS.contains(&key.as_str()) {
                format!(
                    "key {key:?} is not allowed in a leaf: a node is either a group (\"all\"/\"any\") or a leaf (\"field\"/\"operator\"), not both"
                )
            } else {
                format!(
                    "unknown key {key:?} in a leaf: expected \"field\", \"operator\", \"value\" or \"caseInsensitive\""
                )
            };
            return Err(self.error_at(key, message));
        }

        let path = self.field_path(map.get("field"))?;
        let operator = self.operator(map.get("operator"))?;
        let case_insensitive = match map.get("caseInsensitive") {
            None => false,
            Some(Value::Bool(flag)) => *flag,
            Some(other) => {
                return Err(self.error_at(
                    "caseInsensitive",
                    format!("\"caseInsensitive\" must be true or false, found {}", kind(other)),
                ));
            }
        };
        let test = self.within("value", |p| p.test(operator, map.get("value"), case_insensitive))?;
        Ok(Leaf { path, case_insensitive, test })
    }

    fn field_path(&self, field: Option<&Value>) -> Result<Box<[Segment]>, ConditionError> {
        let path = match field {
            Some(Value::String(path)) => path,
            Some(other) => {
                return Err(
                    self.error_at("field", format!("\"field\" must be a dotted path string, found {}", kind(other)))
                );
            }
            None => {
                return Err(self.error_at("field", "a leaf condition needs a \"field\""));
            }
        };
        if path.is_empty() {
            return Err(self.error_at("field", "\"field\" must not be empty"));
        }
        let count = path.split('.').count();
        if count > MAX_FIELD_SEGMENTS {
            return Err(
                self.error_at("field", format!("\"field\" has {count} segments (at most {MAX_FIELD_SEGMENTS})"))
            );
        }
        path.split('.')
            .map(|segment| {
                if segment.is_empty() {
                    return Err(self.error_at("field", format!("\"field\" {path:?} has an empty segment")));
                }
                // Only plain digits index arrays, so "+1" or " 1" stay ordinary object keys.
                let index = if segment.bytes().all(|b| b.is_ascii_digit()) { segment.parse().ok() } else { None };
                Ok(Segment { key: segment.into(), index })
            })
            .collect()
    }

    fn operator(&self, operator: Option<&Value>) -> Result<Operator, ConditionError> {
        match operator {
            Some(Value::String(name)) => Operator::from_name(name).ok_or_else(|| {
                self.error_at("operator", format!("unknown operator {name:?}; expected one of: {}", operator_list()))
            }),
            Some(other) => Err(self.error_at(
                "operator",
                format!("\"operator\" must be a string, found {}; expected one of: {}", kind(other), operator_list()),
            )),
            None => Err(self.error_at(
                "operator",
                format!("a leaf condition needs an \"operator\"; expected one of: {}", operator_list()),
            )),
        }
    }

    /// Runs with the pointer already at `/…/value`.
    fn test(&self, op: Operator, value: Option<&Value>, ci: bool) -> Result<Test, ConditionError> {
        let fold = |text: &str| -> Box<str> { if ci { text.to_lowercase().into() } else { text.into() } };
        match op {
            Operator::Eq | Operator::Neq => {
                let Some(value) = value else {
                    return Err(
                        self.error(format!("operator \"{op}\" needs a \"value\" (use null to compare with JSON null)"))
                    );
                };
                Ok(Test::Eq {
                    expected: if ci { lowercase_strings(value) } else { value.clone() },
                    negate: op == Operator::Neq,
                })
            }
            Operator::In | Operator::NotIn => {
                let expectation = format!("operator \"{op}\" needs a non-empty array of strings, numbers or booleans");
                let items = match value {
                    Some(Value::Array(items)) if !items.is_empty() => items,
                    Some(Value::Array(_)) => {
                        return Err(self.error(format!("{expectation}, found an empty array")));
                    }
                    Some(other) => {
                        return Err(self.error(format!("{expectation}, found {}", kind(other))));
                    }
                    None => return Err(self.error(format!("{expectation}, found no value"))),
                };
                let mut options = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    if !is_scalar(item) {
                        return Err(self.error_at(&i.to_string(), format!("{expectation}, found {}", kind(item))));
                    }
                    options.push(if ci { lowercase_strings(item) } else { item.clone() });
                }
                Ok(Test::In { options: options.into(), negate: op == Operator::NotIn })
            }
            Operator::Contains | Operator::NotContains => match value {
                Some(item) if is_scalar(item) => Ok(Test::Contains {
                    needle: if ci { lowercase_strings(item) } else { item.clone() },
                    negate: op == Operator::NotContains,
                }),
                other => Err(self
                    .error(format!("operator \"{op}\" needs a string, number or boolean, found {}", kind_of(other)))),
            },
            Operator::StartsWith | Operator::EndsWith => match value {
                Some(Value::String(text)) => Ok(if op == Operator::StartsWith {
                    Test::StartsWith(fold(text))
                } else {
                    Test::EndsWith(fold(text))
                }),
                other => Err(self.error(format!("operator \"{op}\" needs a string, found {}", kind_of(other)))),
            },
            Operator::Matches => {
                let Some(Value::String(pattern)) = value else {
                    return Err(self.error(format!(
                        "operator \"matches\" needs a regular expression string, found {}",
                        kind_of(value)
                    )));
                };
                if pattern.len() > MAX_PATTERN_BYTES {
                    return Err(self.error(format!(
                        "regular expression is {} bytes long (at most {MAX_PATTERN_BYTES})",
                        pattern.len()
                    )));
                }
                RegexBuilder::new(pattern)
                    .case_insensitive(ci)
                    .size_limit(REGEX_SIZE_LIMIT)
                    .build()
                    .map(Test::Matches)
                    .map_err(|err| self.error(format!("invalid regular expression: {err}")))
            }
            Operator::Gt | Operator::Gte | Operator::Lt | Operator::Lte => {
                let bound = match value {
                    Some(Value::Number(n)) => n.as_f64().map(Bound::Number),
                    Some(Value::String(text)) => Some(Bound::Text(text.as_str().into())),
                    _ => None,
                };
                let Some(bound) = bound else {
                    return Err(
                        self.error(format!("operator \"{op}\" needs a number or a string, found {}", kind_of(value)))
                    );
                };
                let op = match op {
                    Operator::Gt => OrderOp::Gt,
                    Operator::Gte => OrderOp::Gte,
                    Operator::Lt => OrderOp::Lt,
                    _ => OrderOp::Lte,
                };
                Ok(Test::Order { op, bound })
            }
            Operator::Exists | Operator::NotExists => match value {
                None | Some(Value::Null) => Ok(Test::Exists { negate: op == Operator::NotExists }),
                Some(other) => Err(self.error(format!("operator \"{op}\" takes no value, found {}", kind(other)))),
            },
        }
    }
}

fn push_segment(pointer: &mut String, segment: &str) {
    pointer.push('/');
    for c in segment.chars() {
        match c {
            '~' => pointer.push_str("~0"),
            '/' => pointer.push_str("~1"),
            c => pointer.push(c),
        }
    }
}

fn operator_list() -> String {
    Operator::ALL.iter().map(|op| op.name()).collect::<Vec<_>>().join(", ")
}

fn is_scalar(value: &Value) -> bool {
    matches!(value, Value::String(_) | Value::Number(_) | Value::Bool(_))
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn kind_of(value: Option<&Value>) -> &'static str {
    value.map_or("no value", kind)
}

/// Object keys are left alone: they are matched exactly even in case-insensitive mode.
fn lowercase_strings(value: &Value) -> Value {
    match value {
        Value::String(text) => Value::String(text.to_lowercase()),
        Value::Array(items) => Value::Array(items.iter().map(lowercase_strings).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(key, value)| (key.clone(), lowercase_strings(value))).collect())
        }
        other => other.clone(),
    }
}
