//! Why a condition tree matched an event or not, node by node: what the trigger tester answers.
//! Each node is judged by the same evaluation routing uses (`Node::matches`), so the explanation
//! cannot disagree with the router; it only adds what each leaf saw. It does not decide which
//! trigger wins.

use serde_json::{Map, Value, json};

use super::tree::{Node, resolve};

impl Node {
    /// The explanation of this node against `detail`, where `raw` is the JSON it was parsed from:
    /// a group as `{held, all?, any?}` (each member explained), a leaf as the leaf written
    /// (`field`, `operator`, `value`, `caseInsensitive`) with `held` and the field's `actual`
    /// value, or `missing: true` where the path does not resolve.
    pub(super) fn explain<M: super::eval::Moment>(&self, raw: &Value, detail: &Value, now: M) -> Value {
        let held = self.matches(detail, now);
        match self {
            Node::Group(group) => {
                let mut out = Map::new();
                out.insert("held".into(), json!(held));
                let members = |nodes: &[Node], key: &str| -> Value {
                    let written = raw.get(key).and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
                    nodes.iter().zip(written).map(|(node, raw)| node.explain(raw, detail, now)).collect()
                };
                if raw.get("all").is_some() {
                    out.insert("all".into(), members(&group.all, "all"));
                }
                if let Some(any) = &group.any {
                    out.insert("any".into(), members(any, "any"));
                }
                Value::Object(out)
            }
            Node::Time(window) => {
                let mut out = raw.as_object().cloned().unwrap_or_default();
                out.insert("held".into(), json!(held));
                match now.instant().and_then(|at| window.seen(at, now.calendars())) {
                    Some(seen) => {
                        out.insert("localTime".into(), json!(seen.local));
                        if let Some(open) = seen.open {
                            out.insert("open".into(), json!(open));
                        }
                        if let Some(holiday) = seen.holiday {
                            out.insert("holiday".into(), json!(holiday));
                        }
                    }
                    None => {
                        out.insert("missing".into(), json!(true));
                    }
                };
                Value::Object(out)
            }
            Node::Leaf(leaf) => {
                let mut out = raw.as_object().cloned().unwrap_or_default();
                out.insert("held".into(), json!(held));
                match resolve(&leaf.path, detail) {
                    Some(actual) => out.insert("actual".into(), actual.clone()),
                    None => out.insert("missing".into(), json!(true)),
                };
                Value::Object(out)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::{Value, json};

    use crate::condition::Conditions;

    fn explain(conditions: Value, detail: Value) -> Value {
        Conditions::parse(&conditions).unwrap().explain(&detail)
    }

    #[test]
    fn a_condition_on_a_tenant_calendar_holds_by_its_hours_and_holidays_and_says_why() {
        let calendars: crate::calendar::Calendars = serde_json::from_value(json!({ "support": {
            "timeZone": "Europe/Paris", "hours": { "FRI": ["09:00-17:00"] },
            "holidays": [{ "date": "2026-12-25", "name": "Christmas" }] } }))
        .unwrap();
        let after_hours =
            Conditions::parse(&json!({ "all": [{ "time": { "calendar": "support", "outside": true } }] })).unwrap();
        let at = |t: &str| t.parse::<chrono::DateTime<chrono::Utc>>().unwrap();
        let detail = json!({});
        // Friday 2026-12-18 10:00 in Paris is open; the evening is outside; Christmas is closed all day
        assert!(!after_hours.matches_in(&detail, at("2026-12-18T09:00:00Z"), &calendars));
        assert!(after_hours.matches_in(&detail, at("2026-12-18T17:30:00Z"), &calendars));
        assert!(after_hours.matches_in(&detail, at("2026-12-25T09:00:00Z"), &calendars));
        let why = after_hours.explain_in(&detail, at("2026-12-25T09:00:00Z"), &calendars);
        let node = &why["all"][0];
        assert_eq!(
            (&node["held"], &node["open"], &node["holiday"]),
            (&json!(true), &json!(false), &json!("Christmas"))
        );
        assert_eq!(node["localTime"], "2026-12-25T10:00:00+01:00 Fri");
        // a calendar the tenant does not have never holds, and is explained as missing
        let empty = crate::calendar::Calendars::new();
        assert!(!after_hours.matches_in(&detail, at("2026-12-18T17:30:00Z"), &empty));
        assert_eq!(after_hours.explain_in(&detail, at("2026-12-18T17:30:00Z"), &empty)["all"][0]["missing"], true);
        assert!(!after_hours.matches_at(&detail, at("2026-12-18T17:30:00Z")), "no calendars at all");
        assert_eq!(after_hours.calendar_refs(), [("/all/0/time/calendar".to_owned(), "support".to_owned())]);
        // the calendar has the hours: nothing else goes beside it
        let bad = Conditions::parse(&json!({ "time": { "calendar": "support", "timeZone": "UTC" } })).unwrap_err();
        assert_eq!(bad.pointer, "/time/timeZone");
        let unnamed = Conditions::parse(&json!({ "time": { "calendar": "" } })).unwrap_err();
        assert_eq!(unnamed.pointer, "/time/calendar");
    }

    /// One leaf per operator, each against a detail that makes it hold and one that does not:
    /// the explanation says which, with the value the leaf saw.
    #[test]
    fn every_operator_is_explained_with_the_value_it_saw() {
        let cases: &[(Value, Value, Value)] = &[
            (json!({"field": "x", "operator": "eq", "value": "a"}), json!("a"), json!("b")),
            (json!({"field": "x", "operator": "neq", "value": "a"}), json!("b"), json!("a")),
            (json!({"field": "x", "operator": "in", "value": ["a", "b"]}), json!("b"), json!("c")),
            (json!({"field": "x", "operator": "not_in", "value": ["a", "b"]}), json!("c"), json!("a")),
            (json!({"field": "x", "operator": "contains", "value": "rder"}), json!("order"), json!("refund")),
            (json!({"field": "x", "operator": "not_contains", "value": "rder"}), json!("refund"), json!("order")),
            (
                json!({"field": "x", "operator": "starts_with", "value": "VIP", "caseInsensitive": true}),
                json!("vip-1"),
                json!("x-vip"),
            ),
            (json!({"field": "x", "operator": "ends_with", "value": "!"}), json!("help!"), json!("help")),
            (json!({"field": "x", "operator": "matches", "value": "^#[0-9]+$"}), json!("#1234"), json!("1234")),
            (json!({"field": "x", "operator": "gt", "value": 3}), json!(4), json!(3)),
            (json!({"field": "x", "operator": "gte", "value": 3}), json!(3), json!(2)),
            (json!({"field": "x", "operator": "lt", "value": 3}), json!(2), json!(3)),
            (json!({"field": "x", "operator": "lte", "value": "2026-01-01"}), json!("2025-12-31"), json!("2026-02-01")),
            (json!({"field": "x", "operator": "exists"}), json!(null), json!(null)),
        ];
        for (leaf, holds, fails) in cases {
            let yes = explain(leaf.clone(), json!({ "x": holds }));
            assert_eq!(yes["held"], true, "{leaf} on {holds}: {yes}");
            assert_eq!(yes["actual"], *holds, "{yes}");
            assert_eq!((&yes["field"], &yes["operator"]), (&leaf["field"], &leaf["operator"]), "the leaf as written");
            if leaf["operator"] == "exists" {
                continue;
            }
            let no = explain(leaf.clone(), json!({ "x": fails }));
            assert_eq!((no["held"].clone(), no["actual"].clone()), (json!(false), fails.clone()), "{leaf}: {no}");
        }
        // a missing field: every operator fails but not_exists, and the explanation says it is missing
        let missing = explain(json!({"field": "x", "operator": "neq", "value": "a"}), json!({}));
        assert_eq!(missing, json!({"field": "x", "operator": "neq", "value": "a", "held": false, "missing": true}));
        let absent = explain(json!({"field": "x", "operator": "not_exists"}), json!({}));
        assert_eq!(absent["held"], true);
    }

    #[test]
    fn a_group_explains_each_member_in_the_order_written() {
        let conditions = json!({
            "all": [{"field": "channel.platform", "operator": "eq", "value": "webchat"}],
            "any": [
                {"field": "message.text", "operator": "contains", "value": "order"},
                {"all": [{"field": "conversation.tags", "operator": "contains", "value": "vip"}]}
            ]
        });
        let detail = json!({"channel": {"platform": "webchat"}, "message": {"text": "refund please"},
                            "conversation": {"tags": ["vip"]}});
        let e = explain(conditions.clone(), detail.clone());
        assert_eq!(e["held"], true);
        assert_eq!(e["all"][0]["held"], true);
        assert_eq!(
            (e["any"][0]["held"].clone(), e["any"][0]["actual"].clone()),
            (json!(false), json!("refund please"))
        );
        assert_eq!(e["any"][1]["all"][0]["actual"], json!(["vip"]));
        assert_eq!(e["held"], json!(Conditions::parse(&conditions).unwrap().matches(&detail)));
        // `{}` holds for every event and says nothing more
        assert_eq!(explain(json!({}), json!({"a": 1})), json!({"held": true}));
        // `"any": []` matches nothing
        assert_eq!(explain(json!({"any": []}), json!({})), json!({"held": false, "any": []}));
    }
}
