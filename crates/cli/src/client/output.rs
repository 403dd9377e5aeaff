//! How the client prints an answer: a table of records (a column set per kind, cells cut at 60
//! characters) or the API's JSON. It does not call the API.

use serde_json::Value;

/// Columns for a table of `segment` records: (header, JSON field).
pub fn columns(segment: &str) -> &'static [(&'static str, &'static str)] {
    match segment {
        "agents" => &[("ID", "agentId"), ("NAME", "name"), ("TYPE", "type"), ("STATUS", "status"), ("MODEL", "model")],
        "triggers" => &[
            ("ID", "triggerId"),
            ("NAME", "name"),
            ("AGENT", "agentId"),
            ("PRIORITY", "priority"),
            ("STATUS", "status"),
        ],
        "tools" => &[("ID", "toolId"), ("NAME", "name"), ("TYPE", "type"), ("DESCRIPTION", "description")],
        "skills" => &[("ID", "skillId"), ("NAME", "name"), ("STATUS", "status"), ("DESCRIPTION", "description")],
        "keys" => &[("ID", "keyId"), ("CREATED", "createdAt")],
        "sessions" => &[
            ("ID", "sessionId"),
            ("AGENT", "agentId"),
            ("STATUS", "status"),
            ("TURNS", "turnCount"),
            ("STARTED", "startedAt"),
        ],
        "usage" => &[
            ("DAY", "day"),
            ("AGENT", "agentId"),
            ("MODEL", "model"),
            ("CALLS", "calls"),
            ("INPUT", "inputTokens"),
            ("OUTPUT", "outputTokens"),
            ("CACHED", "cacheReadTokens"),
            ("COST USD", "costUsd"),
        ],
        _ => &[
            ("ID", "executionId"),
            ("STATUS", "status"),
            ("ITERATIONS", "iterations"),
            ("TOKENS", "tokenUsage"),
            ("LATENCY MS", "latencyMs"),
        ],
    }
}

pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        // A table's cell: cut at 60 characters, and said to be cut.
        Value::String(s) if s.chars().nth(60).is_some() => s.chars().take(59).chain(['…']).collect(),
        Value::String(s) => s.clone(),
        Value::Object(o) if o.contains_key("inputTokens") => {
            format!("{}", o["inputTokens"].as_u64().unwrap_or(0) + o["outputTokens"].as_u64().unwrap_or(0))
        }
        other => other.to_string(),
    }
}

pub fn print_table(segment: &str, items: &[Value]) {
    let cols = columns(segment);
    let rows: Vec<Vec<String>> = items.iter().map(|i| cols.iter().map(|(_, f)| cell(&i[*f])).collect()).collect();
    let widths: Vec<usize> = cols
        .iter()
        .enumerate()
        .map(|(c, (h, _))| rows.iter().map(|r| r[c].chars().count()).chain([h.len()]).max().unwrap_or(0))
        .collect();
    let line = |cells: Vec<String>| {
        cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect::<Vec<_>>().join("  ").trim_end().to_owned()
    };
    println!("{}", line(cols.iter().map(|(h, _)| (*h).to_owned()).collect()));
    for r in rows {
        println!("{}", line(r));
    }
}

pub fn print_value(v: &Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}
