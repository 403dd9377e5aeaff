//! Evaluating a compiled condition tree against an event's detail: the semantics the module
//! docs of `condition` spell out, allocating only to lowercase non-ASCII text. It never fails:
//! a type mismatch is a non-match.

use serde_json::Value;

use super::tree::{Bound, Leaf, Node, OrderOp, Test, resolve};

/// The moment a tree is judged at: an instant, or none (`()`). Generic rather than an `Option`
/// so that evaluating at no moment compiles without the time-zone code: a function that never
/// judges time conditions (the agent-executor reads triggers, never routes) does not link it.
pub(super) trait Moment: Copy {
    fn instant(self) -> Option<jiff::Timestamp>;
    /// The tenant's calendars a time condition may name (none: such a condition does not hold).
    fn calendars(&self) -> Option<&crate::calendar::Calendars> {
        None
    }
}

/// An instant with the tenant's calendars.
#[derive(Clone, Copy)]
pub(super) struct InCalendars<'a>(pub(super) jiff::Timestamp, pub(super) &'a crate::calendar::Calendars);

impl Moment for InCalendars<'_> {
    #[inline(always)]
    fn instant(self) -> Option<jiff::Timestamp> {
        Some(self.0)
    }

    fn calendars(&self) -> Option<&crate::calendar::Calendars> {
        Some(self.1)
    }
}

impl Moment for () {
    #[inline(always)]
    fn instant(self) -> Option<jiff::Timestamp> {
        None
    }
}

/// No calendars: what a tree is judged with when the caller has none (one instance of the
/// evaluation with calendars serves both: each instance of the generic code is more code in
/// every function).
pub(super) static NO_CALENDARS: crate::calendar::Calendars = crate::calendar::Calendars::new();

impl Node {
    /// Whether the node holds for `detail` at `now`; a time condition at no moment does not hold
    /// (as a leaf on a missing field does not).
    pub(super) fn matches<M: Moment>(&self, detail: &Value, now: M) -> bool {
        match self {
            Node::Group(group) => {
                group.all.iter().all(|node| node.matches(detail, now))
                    && group.any.as_ref().is_none_or(|any| any.iter().any(|node| node.matches(detail, now)))
            }
            Node::Leaf(leaf) => leaf.matches(detail),
            Node::Time(window) => now.instant().is_some_and(|at| window.holds(at, now.calendars())),
        }
    }
}

impl Leaf {
    fn resolve<'a>(&self, detail: &'a Value) -> Option<&'a Value> {
        resolve(&self.path, detail)
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
