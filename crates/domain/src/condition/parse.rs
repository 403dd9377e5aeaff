//! Parsing and validating the JSON of a condition tree into its compiled form, with a JSON
//! Pointer to the first thing wrong; the limits that keep one tenant's conditions cheap. It does
//! not evaluate.

use std::fmt;

use regex::RegexBuilder;
use serde_json::{Map, Value};

use super::tree::{Bound, Group, Leaf, Node, OrderOp, Segment, Test};

/// Most nodes (groups and leaves, the root included) one condition tree may hold.
pub const MAX_CONDITION_NODES: usize = 256;
/// Deepest a node may sit; the root is at depth 1.
pub const MAX_CONDITION_DEPTH: usize = 8;
/// Most dotted segments in one `field` path.
pub const MAX_FIELD_SEGMENTS: usize = 16;
/// Longest regex pattern accepted by `matches`, in bytes.
pub const MAX_PATTERN_BYTES: usize = 1024;
/// Deepest nesting of groups and repetitions in a `matches` pattern (`a**`, `((a))`: two each).
/// The regex compiler recurses once per level: at the regex crate's default of 250, a pattern
/// such as `a` and 200 `*` overflowed a 2 MB thread stack in a debug build, aborting the process
/// (found by fuzzing; docs/benchmarks.md, "Fuzzing"). No trigger needs a tenth of this.
pub const MAX_PATTERN_NESTING: u32 = 64;
/// Compiled-program budget per regex, so one tenant cannot make routing slow or memory-hungry.
const REGEX_SIZE_LIMIT: usize = 256 * 1024;
/// Budget of a tenant's `matches` patterns compiled together for routing (past it, they are
/// evaluated one by one).
const REGEX_SET_SIZE_LIMIT: usize = 16 * 1024 * 1024;

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

/// The regex options of a `matches` leaf, for a set of patterns compiled together.
pub fn regex_set(patterns: &[&str], case_insensitive: bool) -> Result<regex::RegexSet, regex::Error> {
    regex::RegexSetBuilder::new(patterns)
        .case_insensitive(case_insensitive)
        .nest_limit(MAX_PATTERN_NESTING)
        .size_limit(REGEX_SIZE_LIMIT.saturating_mul(patterns.len().max(1)).min(REGEX_SET_SIZE_LIMIT))
        .build()
}

/// Parses the tree at `value` (the root is at depth 1).
pub(super) fn parse(value: &Value) -> Result<Node, ConditionError> {
    Parser { pointer: String::new(), nodes: 0 }.node(value, 1)
}

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
        if let Some(window) = map.get("time") {
            if let Some(key) = map.keys().find(|k| k.as_str() != "time") {
                return Err(self.error_at(
                    key,
                    format!(
                        "key {key:?} is not allowed beside \"time\": a time condition is an object with \"time\" alone"
                    ),
                ));
            }
            return super::time::TimeWindow::parse(window, &self.pointer).map(Node::Time).map_err(|(key, message)| {
                let mut pointer = self.pointer.clone();
                push_segment(&mut pointer, "time");
                for segment in key.split('/').filter(|s| !s.is_empty()) {
                    push_segment(&mut pointer, segment);
                }
                ConditionError { pointer, message }
            });
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
                Ok(Test::Eq { expected: folded(value, ci), negate: op == Operator::Neq })
            }
            Operator::In | Operator::NotIn => self.options(op, value, ci),
            Operator::Contains | Operator::NotContains => match value {
                Some(item) if is_scalar(item) => {
                    Ok(Test::Contains { needle: folded(item, ci), negate: op == Operator::NotContains })
                }
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
            Operator::Matches => self.pattern(value, ci),
            Operator::Gt | Operator::Gte | Operator::Lt | Operator::Lte => self.order(op, value),
            Operator::Exists | Operator::NotExists => match value {
                None | Some(Value::Null) => Ok(Test::Exists { negate: op == Operator::NotExists }),
                Some(other) => Err(self.error(format!("operator \"{op}\" takes no value, found {}", kind(other)))),
            },
        }
    }

    /// The list of `in` / `not_in`: scalars only, at least one.
    fn options(&self, op: Operator, value: Option<&Value>, ci: bool) -> Result<Test, ConditionError> {
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
            options.push(folded(item, ci));
        }
        Ok(Test::In { options: options.into(), negate: op == Operator::NotIn })
    }

    /// The regular expression of `matches`, compiled within its limits.
    fn pattern(&self, value: Option<&Value>, ci: bool) -> Result<Test, ConditionError> {
        let Some(Value::String(pattern)) = value else {
            return Err(
                self.error(format!("operator \"matches\" needs a regular expression string, found {}", kind_of(value)))
            );
        };
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(
                self.error(format!("regular expression is {} bytes long (at most {MAX_PATTERN_BYTES})", pattern.len()))
            );
        }
        RegexBuilder::new(pattern)
            .case_insensitive(ci)
            .nest_limit(MAX_PATTERN_NESTING)
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map(Test::Matches)
            .map_err(|err| self.error(format!("invalid regular expression: {err}")))
    }

    /// The bound of `gt`, `gte`, `lt` or `lte`: a number or a string.
    fn order(&self, op: Operator, value: Option<&Value>) -> Result<Test, ConditionError> {
        let bound = match value {
            Some(Value::Number(n)) => n.as_f64().map(Bound::Number),
            Some(Value::String(text)) => Some(Bound::Text(text.as_str().into())),
            _ => None,
        };
        let Some(bound) = bound else {
            return Err(self.error(format!("operator \"{op}\" needs a number or a string, found {}", kind_of(value))));
        };
        let op = match op {
            Operator::Gt => OrderOp::Gt,
            Operator::Gte => OrderOp::Gte,
            Operator::Lt => OrderOp::Lt,
            _ => OrderOp::Lte,
        };
        Ok(Test::Order { op, bound })
    }
}

/// A condition's value as evaluation compares it: its strings lowercased when the leaf is
/// case-insensitive.
fn folded(value: &Value, ci: bool) -> Value {
    if ci { lowercase_strings(value) } else { value.clone() }
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
