//! Traffic splits: a trigger that answers with one of several agents, chosen per conversation
//! by weight, so that a builder can compare two prompts or models on live traffic.
//!
//! The choice is a pure function of the tenant, the trigger and the conversation (a SHA-256
//! bucket), so every message of a conversation, on every process, lands on the same variant
//! while the weights stay as they are; the session a variant's agent starts keeps its variant
//! (and hands it on with the conversation), so a running conversation never moves even when
//! the weights change. Changing the weights moves only the conversations not yet started
//! whose bucket falls in a range that changed owner.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Trigger;
use crate::ids::{AgentId, TenantId, TriggerId};
use crate::validation::ValidationErrors;

/// Variants a split holds at most.
pub const MAX_VARIANTS: usize = 8;

/// The largest weight of one variant (weights are relative: 1 and 3 is 25 % and 75 %).
pub const MAX_WEIGHT: u32 = 10_000;

/// One arm of a trigger's split: the agent that answers the conversations its weight takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Variant {
    /// What records and reports call it: 1 to 32 of `a-z`, `0-9`, `-`, `_`, starting with a
    /// letter or digit.
    pub name: String,
    pub agent_id: AgentId,
    /// Its share of the conversations, relative to the others' (0 takes none: a variant rolled
    /// back without losing its name in the reports).
    pub weight: u32,
}

/// The agent a trigger answers a conversation with, and the variant that chose it (`None` for a
/// trigger without a split).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice<'a> {
    pub agent_id: AgentId,
    pub variant: Option<&'a Variant>,
}

impl Choice<'_> {
    /// The variant's name, as work items, sessions and records carry it.
    pub fn variant_name(&self) -> Option<String> {
        self.variant.map(|v| v.name.clone())
    }
}

/// A conversation's assignment to a variant: kept on its sessions, recorded on their
/// executions, counted per variant in the activity report.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Assignment {
    pub trigger_id: TriggerId,
    pub variant: String,
}

impl Trigger {
    /// The agent that answers `conversation` (the split's choice, or `agentId` without one).
    pub fn choose(&self, conversation: &str) -> Choice<'_> {
        let total: u64 = self.split.iter().map(|v| u64::from(v.weight)).sum();
        if total == 0 {
            return Choice { agent_id: self.agent_id, variant: None };
        }
        let mut point = bucket(&self.tenant_id, self.trigger_id, conversation) % total;
        for variant in &self.split {
            let weight = u64::from(variant.weight);
            if point < weight {
                return Choice { agent_id: variant.agent_id, variant: Some(variant) };
            }
            point -= weight;
        }
        unreachable!("the point is below the sum of the weights")
    }

    /// What answers when the chosen variant's agent cannot (missing or not active): the
    /// trigger's own `agentId`, as the variant that names it. `None` when the choice already was
    /// that agent.
    pub fn fallback(&self, chosen: &Choice<'_>) -> Option<Choice<'_>> {
        (chosen.agent_id != self.agent_id).then(|| Choice {
            agent_id: self.agent_id,
            variant: self.split.iter().find(|v| v.agent_id == self.agent_id),
        })
    }

    /// The assignment `choice` of this trigger gives a conversation, if the trigger splits.
    pub fn assignment(&self, choice: &Choice<'_>) -> Option<Assignment> {
        choice.variant.map(|v| Assignment { trigger_id: self.trigger_id, variant: v.name.clone() })
    }

    /// Checks `split` (empty: no split) against the trigger's `agentId`.
    pub(super) fn check_split(&self, errors: &mut ValidationErrors) {
        if self.split.is_empty() {
            return;
        }
        if !(2..=MAX_VARIANTS).contains(&self.split.len()) {
            errors.push("/split", format!("a split has 2 to {MAX_VARIANTS} variants"));
        }
        for (i, v) in self.split.iter().enumerate() {
            let good_name = (1..=32).contains(&v.name.len())
                && v.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
                && v.name.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric());
            if !good_name {
                errors.push(
                    format!("/split/{i}/name"),
                    "must be 1 to 32 of a-z, 0-9, '-' and '_', starting with a letter or digit",
                );
            } else if self.split[..i].iter().any(|w| w.name == v.name) {
                errors.push(format!("/split/{i}/name"), "names another variant of the split already");
            }
            if self.split[..i].iter().any(|w| w.agent_id == v.agent_id) {
                errors.push(format!("/split/{i}/agentId"), "another variant of the split has this agent already");
            }
            if v.weight > MAX_WEIGHT {
                errors.push(format!("/split/{i}/weight"), format!("must be 0 to {MAX_WEIGHT}"));
            }
        }
        if self.split.iter().all(|v| v.weight == 0) {
            errors.push("/split", "at least one variant needs a weight above 0");
        }
        if !self.split.iter().any(|v| v.agent_id == self.agent_id) {
            errors.push("/agentId", "must be one of the split's agents (it answers when a variant's agent cannot)");
        }
    }
}

/// Where `conversation` of `trigger` falls: the first eight bytes of a SHA-256 over the tenant,
/// the trigger and the conversation. The trigger is part of it, so two splits of one tenant
/// assign independently.
fn bucket(tenant: &TenantId, trigger: TriggerId, conversation: &str) -> u64 {
    let mut h = Sha256::new();
    for part in [tenant.as_str(), &trigger.to_string(), conversation] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let digest = h.finalize();
    u64::from_be_bytes(digest[..8].try_into().unwrap_or([0; 8]))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::json;

    use super::*;

    const A: &str = "01JD0000SVPP0RT0AGENT00001";
    const B: &str = "01JD0000SVPP0RT0AGENT00002";
    const C: &str = "01JD0000SVPP0RT0AGENT00003";

    fn split_trigger(split: serde_json::Value) -> Trigger {
        serde_json::from_value(json!({
            "tenantId": "acme", "triggerId": "01JD0000000000000000TR1G01", "name": "split", "agentId": A,
            "eventType": "message.new", "split": split,
            "createdAt": "2026-12-01T00:00:00Z", "updatedAt": "2026-12-01T00:00:00Z",
        }))
        .expect("a trigger")
    }

    fn half_and_half() -> Trigger {
        split_trigger(json!([
            { "name": "control", "agentId": A, "weight": 50 },
            { "name": "candidate", "agentId": B, "weight": 50 },
        ]))
    }

    #[test]
    fn a_fifty_fifty_split_of_a_thousand_conversations_lands_within_five_points_and_never_moves() {
        let trigger = half_and_half();
        let mut counts: HashMap<String, u32> = HashMap::new();
        for i in 0..1000 {
            let conversation = format!("conv-{i}");
            let first = trigger.choose(&conversation);
            let name = first.variant_name().expect("a split chooses a variant");
            assert_eq!(first.agent_id, if name == "control" { A } else { B }.parse().expect("id"));
            for _ in 0..3 {
                assert_eq!(trigger.choose(&conversation), first, "{conversation} moved");
            }
            *counts.entry(name).or_default() += 1;
        }
        let control = counts["control"];
        assert!((450..=550).contains(&control), "control took {control} of 1000");
        assert_eq!(control + counts["candidate"], 1000);
    }

    #[test]
    fn weights_are_relative_and_a_zero_weight_takes_nothing() {
        let trigger = split_trigger(json!([
            { "name": "a", "agentId": A, "weight": 1 },
            { "name": "b", "agentId": B, "weight": 3 },
            { "name": "off", "agentId": C, "weight": 0 },
        ]));
        let mut counts: HashMap<String, u32> = HashMap::new();
        for i in 0..4000 {
            *counts.entry(trigger.choose(&format!("c{i}")).variant_name().expect("variant")).or_default() += 1;
        }
        assert!((900..=1100).contains(&counts["a"]), "{counts:?}");
        assert!(!counts.contains_key("off"), "{counts:?}");
    }

    #[test]
    fn two_splits_of_a_tenant_assign_independently() {
        let first = half_and_half();
        let mut second = half_and_half();
        second.trigger_id = "01JD0000000000000000TR1G02".parse().expect("id");
        let same = (0..1000)
            .filter(|i| {
                let c = format!("conv-{i}");
                first.choose(&c).variant_name() == second.choose(&c).variant_name()
            })
            .count();
        assert!((400..=600).contains(&same), "{same} of 1000 agreed: the splits are correlated");
    }

    #[test]
    fn the_fallback_is_the_trigger_agent_as_its_variant() {
        let trigger = half_and_half();
        let candidate = (0..100)
            .map(|i| trigger.choose(&format!("c{i}")))
            .find(|c| c.variant_name().as_deref() == Some("candidate"))
            .expect("some conversation takes the candidate");
        let fallback = trigger.fallback(&candidate).expect("the control answers instead");
        assert_eq!((fallback.agent_id, fallback.variant_name().as_deref()), (trigger.agent_id, Some("control")));
        assert_eq!(trigger.fallback(&fallback), None);
        let plain = split_trigger(json!([]));
        assert_eq!(plain.choose("c1"), Choice { agent_id: plain.agent_id, variant: None });
        assert_eq!(plain.assignment(&plain.choose("c1")), None);
    }

    #[test]
    fn a_bad_split_is_refused_at_each_field() {
        let cases = [
            (json!([{ "name": "only", "agentId": A, "weight": 1 }]), "/split"),
            (
                json!([{ "name": "Bad Name", "agentId": A, "weight": 1 }, { "name": "b", "agentId": B, "weight": 1 }]),
                "/split/0/name",
            ),
            (
                json!([{ "name": "a", "agentId": A, "weight": 1 }, { "name": "a", "agentId": B, "weight": 1 }]),
                "/split/1/name",
            ),
            (
                json!([{ "name": "a", "agentId": A, "weight": 1 }, { "name": "b", "agentId": A, "weight": 1 }]),
                "/split/1/agentId",
            ),
            (
                json!([{ "name": "a", "agentId": A, "weight": 10001 }, { "name": "b", "agentId": B, "weight": 1 }]),
                "/split/0/weight",
            ),
            (json!([{ "name": "a", "agentId": A, "weight": 0 }, { "name": "b", "agentId": B, "weight": 0 }]), "/split"),
            (
                json!([{ "name": "b", "agentId": B, "weight": 1 }, { "name": "c", "agentId": C, "weight": 1 }]),
                "/agentId",
            ),
        ];
        for (split, pointer) in cases {
            let errors = split_trigger(split.clone()).validate().expect_err("refused");
            assert!(errors.0.iter().any(|e| e.pointer == pointer), "{split}: {errors:?} lacks {pointer}");
        }
        assert_eq!(half_and_half().validate(), Ok(()));
        let unknown = serde_json::from_value::<Variant>(json!({ "name": "a", "agentId": A, "weight": 1, "extra": 1 }));
        assert!(unknown.is_err(), "unknown fields are refused");
    }
}
