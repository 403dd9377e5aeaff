//! IAM's evaluation of an identity policy for `execute-api:Invoke`, as far as the role policies
//! of `infra/roles/` use it: `Allow` and `Deny` statements over resource ARNs with IAM's
//! wildcards (`*` any run of characters, `/` included; `?` any one), a `Deny` winning. No
//! conditions, principals or other actions: a policy that uses them is refused.

use serde_json::Value;

/// Whether the resource pattern `pattern` matches `arn`.
pub fn matches(pattern: &str, arn: &str) -> bool {
    fn go(p: &[u8], a: &[u8]) -> bool {
        match (p.first(), a.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], a) || (!a.is_empty() && go(p, &a[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &a[1..]),
            (Some(x), Some(y)) if x == y => go(&p[1..], &a[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), arn.as_bytes())
}

/// Whether `policy` lets its holder `execute-api:Invoke` `arn`: some `Allow` matches and no
/// `Deny` does.
pub fn allows(policy: &Value, arn: &str) -> bool {
    let hits = |effect: &str| {
        policy["Statement"].as_array().unwrap().iter().filter(|s| s["Effect"] == effect).any(|s| {
            assert_eq!(s["Action"], "execute-api:Invoke", "only execute-api:Invoke is evaluated: {s}");
            assert!(s.get("Condition").is_none() && s.get("NotResource").is_none(), "not evaluated: {s}");
            let resources = match &s["Resource"] {
                Value::String(one) => vec![one.as_str()],
                many => many.as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect(),
            };
            resources.iter().any(|r| matches(r, arn))
        })
    };
    hits("Allow") && !hits("Deny")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_cross_slashes_and_a_deny_wins() {
        assert!(matches("a/*/c", "a/b/x/c") && !matches("a/*/c", "a/b/x/d") && matches("a?c", "abc"));
        let policy = serde_json::json!({ "Statement": [
            { "Effect": "Allow", "Action": "execute-api:Invoke", "Resource": "arn:x/GET/*" },
            { "Effect": "Deny", "Action": "execute-api:Invoke", "Resource": ["arn:x/GET/keys*"] }
        ] });
        assert!(allows(&policy, "arn:x/GET/agents") && !allows(&policy, "arn:x/GET/keys/1"));
        assert!(!allows(&policy, "arn:x/POST/agents"));
    }
}
