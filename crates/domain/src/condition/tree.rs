//! The compiled form of a condition tree (what parsing builds and evaluation walks), and what
//! routing may index it by ([`Requirement`], [`Atom`], [`FieldPath`]). It neither parses nor
//! evaluates.

use regex::Regex;
use serde_json::Value;

/// One necessary test of a condition tree ([`Conditions::requirements`](super::Conditions::requirements)).
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
pub struct FieldPath(pub(super) Box<[Segment]>);

impl FieldPath {
    /// The value at this path, if it resolves.
    pub fn resolve<'a>(&self, detail: &'a Value) -> Option<&'a Value> {
        resolve(&self.0, detail)
    }
}

#[derive(Debug, Clone)]
pub(super) enum Node {
    Group(Group),
    Leaf(Leaf),
    /// A window of local time (`{"time": {...}}`), judged at the moment of evaluation.
    Time(super::time::TimeWindow),
}

#[derive(Debug, Clone)]
pub(super) struct Group {
    pub(super) all: Vec<Node>,
    // `None` (no key) must stay distinct from `Some(vec![])`, which matches nothing.
    pub(super) any: Option<Vec<Node>>,
}

#[derive(Debug, Clone)]
pub(super) struct Leaf {
    pub(super) path: Box<[Segment]>,
    pub(super) case_insensitive: bool,
    pub(super) test: Test,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Segment {
    pub(super) key: Box<str>,
    pub(super) index: Option<usize>,
}

/// Expected values are stored pre-lowercased when the leaf is case-insensitive, so evaluation
/// only ever lowers the event side.
#[derive(Debug, Clone)]
pub(super) enum Test {
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
pub(super) enum OrderOp {
    Gt,
    Gte,
    Lt,
    Lte,
}

#[derive(Debug, Clone)]
pub(super) enum Bound {
    Number(f64),
    Text(Box<str>),
}

/// Why a window written without a zone cannot be stored (its tenant has none).
const MISSING_ZONE: &str = "a time condition needs a \"timeZone\", or the tenant's timeZone to take";

impl Node {
    /// The faults of the zones written (`missing` false), or the windows written without one
    /// (`missing` true), each at its `timeZone`.
    pub(super) fn zone_faults(&self, out: &mut Vec<super::ConditionError>, missing: bool) {
        match self {
            Node::Leaf(_) => {}
            Node::Time(window) => {
                let fault = match missing {
                    false => window.zone_fault(),
                    true => window.unzoned().then(|| MISSING_ZONE.to_owned()),
                };
                out.extend(fault.map(|message| super::ConditionError { pointer: window.pointer.to_string(), message }));
            }
            Node::Group(group) => {
                for node in group.all.iter().chain(group.any.iter().flatten()) {
                    node.zone_faults(out, missing);
                }
            }
        }
    }

    pub(super) fn calendar_refs(&self, out: &mut Vec<(String, String)>) {
        match self {
            Node::Leaf(_) => {}
            Node::Time(window) => {
                out.extend(window.calendar().map(|name| (window.pointer.to_string(), name.to_owned())));
            }
            Node::Group(group) => {
                for node in group.all.iter().chain(group.any.iter().flatten()) {
                    node.calendar_refs(out);
                }
            }
        }
    }

    pub(super) fn requirements(&self, out: &mut Vec<Requirement>) {
        match self {
            Node::Leaf(leaf) => out.extend(leaf.atom().map(Requirement::Atom)),
            // Nothing an index of event fields can answer.
            Node::Time(_) => {}
            Node::Group(group) => {
                for node in &group.all {
                    node.requirements(out);
                }
                if let Some(any) = &group.any {
                    let atoms: Option<Vec<Atom>> = any
                        .iter()
                        .map(|node| match node {
                            Node::Leaf(leaf) => leaf.atom(),
                            Node::Group(_) | Node::Time(_) => None,
                        })
                        .collect();
                    out.extend(atoms.map(Requirement::AnyOf));
                }
            }
        }
    }
}

impl Leaf {
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
}

pub(super) fn resolve<'a>(path: &[Segment], detail: &'a Value) -> Option<&'a Value> {
    path.iter().try_fold(detail, |current, segment| match current {
        Value::Object(map) => map.get(&*segment.key),
        Value::Array(items) => segment.index.and_then(|i| items.get(i)),
        _ => None,
    })
}
