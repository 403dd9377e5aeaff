//! A tenant's triggers compiled for routing: each event is checked only against the triggers
//! whose indexed requirements ([`Conditions::requirements`](crate::condition::Conditions::requirements))
//! it meets, found with one lookup per indexed field: a hash of the texts `eq` / `in` leaves
//! require, one multi-pattern scan for every `contains` literal, one regex set for every
//! `matches` pattern, and sorted numeric bounds. Text is lowercased once per event and field
//! for the case-insensitive leaves. First-match semantics are those of [`first_match`]
//! (`crates/domain/tests/trigger_index.rs` checks it on generated triggers and events).

use std::collections::HashMap;

use aho_corasick::{AhoCorasick, MatchKind};
use regex::RegexSet;
use serde_json::Value;

#[cfg(doc)]
use super::first_match;
use super::{EventType, Trigger, TriggerStatus};
use crate::condition::{Atom, FieldPath, Requirement, regex_set};

/// A requirement of one trigger: its position in [`TriggerIndex::triggers`].
type Owner = u32;

/// A tenant's active triggers for one event type, in evaluation order, indexed.
#[derive(Debug, Clone)]
pub struct TriggerIndex {
    triggers: Vec<Trigger>,
    /// Per trigger: how many of its requirements are indexed.
    required: Vec<u16>,
    /// Per requirement: the trigger it belongs to.
    owners: Vec<Owner>,
    one_of: Vec<OneOfIndex>,
    contains: Vec<ContainsIndex>,
    matches: Vec<MatchesIndex>,
    bounds: Vec<BoundsIndex>,
}

/// Requirement ids by the text a field must equal.
#[derive(Debug, Clone)]
struct OneOfIndex {
    field: FieldPath,
    case_insensitive: bool,
    by_text: HashMap<Box<str>, Vec<u32>>,
}

/// Requirement ids by the literal a field's text must contain.
#[derive(Debug, Clone)]
struct ContainsIndex {
    field: FieldPath,
    case_insensitive: bool,
    matcher: AhoCorasick,
    by_pattern: Vec<Vec<u32>>,
}

/// Requirement ids by the pattern a field's text must match.
#[derive(Debug, Clone)]
struct MatchesIndex {
    field: FieldPath,
    set: RegexSet,
    by_pattern: Vec<Vec<u32>>,
}

/// A numeric bound, whether it is inclusive, and the requirement it belongs to.
type Bound = (f64, bool, u32);

/// Requirement ids by a numeric bound on a field: `above` ascending, `below` descending.
#[derive(Debug, Clone)]
struct BoundsIndex {
    field: FieldPath,
    above: Vec<Bound>,
    below: Vec<Bound>,
}

/// Requirements being gathered, per field, before the indexes are built.
#[derive(Default)]
struct Builder {
    owners: Vec<Owner>,
    one_of: HashMap<(FieldPath, bool), HashMap<Box<str>, Vec<u32>>>,
    contains: HashMap<(FieldPath, bool), HashMap<Box<str>, Vec<u32>>>,
    matches: HashMap<(FieldPath, bool), HashMap<Box<str>, Vec<u32>>>,
    bounds: HashMap<FieldPath, (Vec<Bound>, Vec<Bound>)>,
}

impl Builder {
    fn add(&mut self, atom: Atom, requirement: u32) {
        let push = |list: &mut Vec<u32>| {
            // an `any` group may name the same test twice; a requirement is met once
            if list.last() != Some(&requirement) {
                list.push(requirement);
            }
        };
        match atom {
            Atom::OneOf { field, case_insensitive, values } => {
                let by_text = self.one_of.entry((field, case_insensitive)).or_default();
                for value in values {
                    push(by_text.entry(value).or_default());
                }
            }
            Atom::Contains { field, case_insensitive, needle } => {
                push(self.contains.entry((field, case_insensitive)).or_default().entry(needle).or_default());
            }
            Atom::Matches { field, case_insensitive, pattern } => {
                push(self.matches.entry((field, case_insensitive)).or_default().entry(pattern).or_default());
            }
            Atom::Above { field, bound, inclusive } => {
                self.bounds.entry(field).or_default().0.push((bound, inclusive, requirement));
            }
            Atom::Below { field, bound, inclusive } => {
                self.bounds.entry(field).or_default().1.push((bound, inclusive, requirement));
            }
        }
    }
}

impl TriggerIndex {
    /// Indexes the active triggers of `event_type` among `sorted`, which are in evaluation
    /// order (`sort_for_evaluation`), keeping that order.
    pub fn new(sorted: &[Trigger], event_type: EventType) -> Self {
        let triggers: Vec<Trigger> = sorted
            .iter()
            .filter(|t| t.status == TriggerStatus::Active && t.event_type == event_type)
            .cloned()
            .collect();
        let mut required = vec![0u16; triggers.len()];
        let mut b = Builder::default();
        for (position, trigger) in triggers.iter().enumerate() {
            let owner = Owner::try_from(position).unwrap_or(Owner::MAX);
            for requirement in trigger.conditions.requirements() {
                let Ok(id) = u32::try_from(b.owners.len()) else { break };
                let atoms = match requirement {
                    Requirement::Atom(atom) => vec![atom],
                    Requirement::AnyOf(atoms) => atoms,
                };
                b.owners.push(owner);
                required[position] = required[position].saturating_add(1);
                for atom in atoms {
                    b.add(atom, id);
                }
            }
        }
        let mut index = Self {
            triggers,
            required,
            owners: b.owners,
            one_of: b
                .one_of
                .into_iter()
                .map(|((field, case_insensitive), by_text)| OneOfIndex { field, case_insensitive, by_text })
                .collect(),
            contains: Vec::new(),
            matches: Vec::new(),
            bounds: b
                .bounds
                .into_iter()
                .map(|(field, (mut above, mut below))| {
                    above.sort_by(|a, b| a.0.total_cmp(&b.0));
                    below.sort_by(|a, b| b.0.total_cmp(&a.0));
                    BoundsIndex { field, above, below }
                })
                .collect(),
        };
        for ((field, case_insensitive), by_needle) in b.contains {
            let (needles, by_pattern): (Vec<Box<str>>, Vec<Vec<u32>>) = by_needle.into_iter().unzip();
            match AhoCorasick::builder().match_kind(MatchKind::Standard).build(needles.iter().map(|n| n.as_bytes())) {
                Ok(matcher) => index.contains.push(ContainsIndex { field, case_insensitive, matcher, by_pattern }),
                Err(_) => index.unindex(by_pattern),
            }
        }
        for ((field, case_insensitive), by_source) in b.matches {
            let (patterns, by_pattern): (Vec<Box<str>>, Vec<Vec<u32>>) = by_source.into_iter().unzip();
            let sources: Vec<&str> = patterns.iter().map(|p| &**p).collect();
            match regex_set(&sources, case_insensitive) {
                Ok(set) => index.matches.push(MatchesIndex { field, set, by_pattern }),
                Err(_) => index.unindex(by_pattern),
            }
        }
        index
    }

    /// Requirements no index could be built for: their triggers no longer count them (they
    /// are evaluated whenever their other requirements hold).
    fn unindex(&mut self, lists: Vec<Vec<u32>>) {
        let mut dropped: Vec<u32> = lists.into_iter().flatten().collect();
        dropped.sort_unstable();
        dropped.dedup();
        for id in dropped {
            let owner = self.owners[id as usize] as usize;
            if owner == Owner::MAX as usize {
                continue;
            }
            // an `any` requirement is dropped once even if several of its tests were; it may
            // still be met through a test of another kind, which would then count it: mark it
            // as owned by no trigger so that nothing counts it
            self.owners[id as usize] = Owner::MAX;
            self.required[owner] = self.required[owner].saturating_sub(1);
        }
    }

    /// The triggers, in evaluation order.
    pub fn triggers(&self) -> &[Trigger] {
        &self.triggers
    }

    /// The first trigger at or after position `from` of [`TriggerIndex::triggers`] whose
    /// conditions match `detail` at `now` (what routing asks), with its position.
    pub fn first_match_at(
        &self,
        detail: &Value,
        from: usize,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<(usize, &Trigger)> {
        self.first(detail, from, |t| t.conditions.matches_at(detail, now))
    }

    /// [`first_match_at`](Self::first_match_at) with the tenant's `calendars`, which time
    /// conditions may name: what routing runs.
    pub fn first_match_in(
        &self,
        detail: &Value,
        from: usize,
        now: chrono::DateTime<chrono::Utc>,
        calendars: &crate::calendar::Calendars,
    ) -> Option<(usize, &Trigger)> {
        self.first(detail, from, |t| t.conditions.matches_in(detail, now, calendars))
    }

    /// [`first_match_at`](Self::first_match_at) at no moment: no time condition holds.
    pub fn first_match(&self, detail: &Value, from: usize) -> Option<(usize, &Trigger)> {
        self.first(detail, from, |t| t.conditions.matches(detail))
    }

    /// The first trigger from `from` that the index admits and `holds` confirms.
    fn first(&self, detail: &Value, from: usize, holds: impl Fn(&Trigger) -> bool) -> Option<(usize, &Trigger)> {
        let mut met = vec![false; self.owners.len()];
        let mut hits = vec![0u16; self.triggers.len()];
        let mut meet = |id: u32| {
            let id = id as usize;
            if !met[id] {
                met[id] = true;
                if let Some(h) = hits.get_mut(self.owners[id] as usize) {
                    *h += 1;
                }
            }
        };
        let mut lowered = Lowered::default();
        for ix in &self.one_of {
            if let Some(Value::String(text)) = ix.field.resolve(detail) {
                let key = if ix.case_insensitive { lowered.get(&ix.field, text) } else { text.as_str() };
                ix.by_text.get(key).into_iter().flatten().for_each(|id| meet(*id));
            }
        }
        for ix in &self.contains {
            match ix.field.resolve(detail) {
                Some(Value::String(text)) => {
                    let haystack = if ix.case_insensitive { lowered.get(&ix.field, text) } else { text.as_str() };
                    let mut seen = vec![false; ix.by_pattern.len()];
                    for m in ix.matcher.find_overlapping_iter(haystack) {
                        let p = m.pattern().as_usize();
                        if !std::mem::replace(&mut seen[p], true) {
                            ix.by_pattern[p].iter().for_each(|id| meet(*id));
                        }
                    }
                }
                // membership in an array is left to evaluation
                Some(Value::Array(_)) => ix.by_pattern.iter().flatten().for_each(|id| meet(*id)),
                _ => {}
            }
        }
        for ix in &self.matches {
            if let Some(Value::String(text)) = ix.field.resolve(detail) {
                for p in ix.set.matches(text).iter() {
                    ix.by_pattern[p].iter().for_each(|id| meet(*id));
                }
            }
        }
        for ix in &self.bounds {
            if let Some(v) = ix.field.resolve(detail).and_then(Value::as_f64) {
                for (bound, inclusive, id) in &ix.above {
                    if *bound > v {
                        break;
                    }
                    if *bound < v || *inclusive {
                        meet(*id);
                    }
                }
                for (bound, inclusive, id) in &ix.below {
                    if *bound < v {
                        break;
                    }
                    if *bound > v || *inclusive {
                        meet(*id);
                    }
                }
            }
        }
        (from..self.triggers.len()).find_map(|p| {
            let trigger = &self.triggers[p];
            (hits[p] >= self.required[p] && holds(trigger)).then_some((p, trigger))
        })
    }
}

/// Event text lowercased (`str::to_lowercase`), once per field and event.
#[derive(Default)]
struct Lowered(Vec<(FieldPath, String)>);

impl Lowered {
    fn get(&mut self, field: &FieldPath, text: &str) -> &str {
        let at = match self.0.iter().position(|(f, _)| f == field) {
            Some(at) => at,
            None => {
                self.0.push((field.clone(), text.to_lowercase()));
                self.0.len() - 1
            }
        };
        &self.0[at].1
    }
}
