//! How `switchboard triggers test` prints the trigger tester's answer: the trigger that would
//! answer (or none), then each trigger in evaluation order with its outcome and its conditions,
//! one line per node, `✓` where it held and `✗` where it did not, with the value the event holds
//! at each leaf's field.

use serde_json::Value;

use super::output::cell;

/// The tester's answer (`POST /tenants/{t}/triggers/test`) as text.
pub fn explained(tested: &Value) -> String {
    let mut out = match (tested["matched"].as_str(), tested["agentId"].as_str(), tested["variant"].as_str()) {
        (Some(trigger), Some(agent), None) => vec![format!("trigger {trigger} would answer, with agent {agent}")],
        (Some(trigger), Some(agent), Some(variant)) => {
            vec![format!("trigger {trigger} would answer, with agent {agent} (split variant {variant})")]
        }
        _ => vec!["no trigger would answer".to_owned()],
    };
    for t in tested["triggers"].as_array().into_iter().flatten() {
        out.push(format!(
            "{}  {} ({}) · priority {} · {}",
            mark(t["conditions"]["held"].as_bool()),
            cell(&t["triggerId"]),
            cell(&t["name"]),
            cell(&t["priority"]),
            cell(&t["outcome"]).replace('_', " ")
        ));
        node(&t["conditions"], 1, &mut out);
    }
    out.join("\n")
}

fn mark(held: Option<bool>) -> &'static str {
    if held == Some(true) { "✓" } else { "✗" }
}

/// One line per group member and leaf, indented by depth.
fn node(n: &Value, depth: usize, out: &mut Vec<String>) {
    let indent = "  ".repeat(depth);
    if n.get("field").is_some() {
        let value = if n.get("value").is_some() { format!(" {}", n["value"]) } else { String::new() };
        let seen = if n["missing"] == true { "missing".to_owned() } else { format!("is {}", n["actual"]) };
        let case = if n["caseInsensitive"] == true { " (any case)" } else { "" };
        out.push(format!(
            "{indent}{} {} {}{value}{case}: {seen}",
            mark(n["held"].as_bool()),
            cell(&n["field"]),
            cell(&n["operator"])
        ));
        return;
    }
    for (key, label) in [("all", "all of"), ("any", "any of")] {
        if let Some(members) = n[key].as_array() {
            out.push(format!("{indent}{label}:"));
            for member in members {
                node(member, depth + 1, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_condition_is_a_line_saying_whether_it_held_on_what() {
        let tested = json!({
            "eventType": "message.new", "matched": null, "agentId": null,
            "triggers": [{
                "triggerId": "01JD0000TR1GGER0CHAT000001", "name": "Chats", "agentId": "01JD0000SVPP0RT0AGENT00001",
                "priority": 10, "outcome": "no_match",
                "conditions": { "held": false, "all": [
                    { "field": "channel.platform", "operator": "in", "value": ["webchat"], "held": false, "actual": "sms" },
                    { "field": "message.direction", "operator": "eq", "value": "inbound", "held": false, "missing": true },
                    { "held": true, "any": [{ "field": "message.text", "operator": "contains", "value": "order",
                                              "caseInsensitive": true, "held": true, "actual": "My ORDER" }] }
                ] }
            }]
        });
        let text = explained(&tested);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "no trigger would answer");
        assert_eq!(lines[1], "✗  01JD0000TR1GGER0CHAT000001 (Chats) · priority 10 · no match");
        assert_eq!(lines[2], "  all of:");
        assert_eq!(lines[3], "    ✗ channel.platform in [\"webchat\"]: is \"sms\"");
        assert_eq!(lines[4], "    ✗ message.direction eq \"inbound\": missing");
        assert_eq!(lines[5], "    any of:");
        assert_eq!(lines[6], "      ✓ message.text contains \"order\" (any case): is \"My ORDER\"");
    }

    #[test]
    fn a_split_trigger_names_the_variant_that_would_answer() {
        let tested = json!({ "eventType": "message.new", "matched": "01JD0000TR1GGER0CHAT000001",
            "agentId": "01JD0000SVPP0RT0AGENT00001", "variant": "candidate", "triggers": [] });
        assert_eq!(
            explained(&tested),
            "trigger 01JD0000TR1GGER0CHAT000001 would answer, with agent 01JD0000SVPP0RT0AGENT00001 (split variant candidate)"
        );
    }
}
