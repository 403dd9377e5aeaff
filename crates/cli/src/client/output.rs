//! How the client prints an answer: a table of records (a column set per kind, cells cut at 60
//! columns, padded by the width a terminal gives them) or the API's JSON. It does not call the
//! API.

use serde_json::Value;
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// The widest a table's cell is shown, in terminal columns.
const MAX_CELL: usize = 60;

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
        Value::String(s) => cut(s),
        Value::Object(o) if o.contains_key("inputTokens") => {
            format!("{}", o["inputTokens"].as_u64().unwrap_or(0) + o["outputTokens"].as_u64().unwrap_or(0))
        }
        other => other.to_string(),
    }
}

/// `s` if a terminal shows it in [`MAX_CELL`] columns, else as much as fits before a '…'.
fn cut(s: &str) -> String {
    if s.width() <= MAX_CELL {
        return s.to_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > MAX_CELL - 1 {
            break;
        }
        used += w;
        out.push(c);
    }
    out.push('…');
    out
}

/// A table of `items` as `segment` records show: a header, then a line per item, each column
/// as wide as its widest cell on a terminal (where a CJK character or an emoji takes two
/// columns), two spaces apart.
pub fn table(segment: &str, items: &[Value]) -> String {
    let cols = columns(segment);
    let rows: Vec<Vec<String>> = items.iter().map(|i| cols.iter().map(|(_, f)| cell(&i[*f])).collect()).collect();
    let widths: Vec<usize> = cols
        .iter()
        .enumerate()
        .map(|(c, (h, _))| rows.iter().map(|r| r[c].width()).chain([h.width()]).max().unwrap_or(0))
        .collect();
    let line = |cells: Vec<String>| {
        let padded = cells.iter().zip(&widths).map(|(c, w)| format!("{c}{}", " ".repeat(w.saturating_sub(c.width()))));
        padded.collect::<Vec<_>>().join("  ").trim_end().to_owned()
    };
    let mut out = line(cols.iter().map(|(h, _)| (*h).to_owned()).collect());
    for r in rows {
        out.push('\n');
        out.push_str(&line(r));
    }
    out
}

pub fn print_table(segment: &str, items: &[Value]) {
    println!("{}", table(segment, items));
}

pub fn print_value(v: &Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;
    use unicode_width::UnicodeWidthStr;

    use super::*;

    /// Where each column starts on a terminal, line by line.
    fn starts(table: &str, headers: &[&str]) -> Vec<Vec<usize>> {
        let header = table.lines().next().unwrap();
        let at: Vec<usize> = headers.iter().map(|h| header[..header.find(h).unwrap()].width()).collect();
        table
            .lines()
            .skip(1)
            .map(|line| {
                let cells: Vec<&str> = line.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
                cells.iter().map(|c| line[..line.find(c).unwrap()].width()).collect::<Vec<_>>()
            })
            .chain([at])
            .collect()
    }

    #[test]
    fn columns_align_by_the_width_a_terminal_gives_cjk_and_emoji() {
        let items = [
            json!({ "agentId": "a-1", "name": "注文の確認", "type": "standard", "status": "active", "model": "m" }),
            json!({ "agentId": "a-2", "name": "Support 🎧", "type": "router", "status": "active", "model": "m" }),
            json!({ "agentId": "a-3", "name": "plain", "type": "standard", "status": "inactive", "model": "m" }),
        ];
        let t = table("agents", &items);
        let lines = starts(&t, &["ID", "NAME", "TYPE", "STATUS", "MODEL"]);
        assert!(lines.windows(2).all(|w| w[0] == w[1]), "{t}\n{lines:?}");
    }

    #[test]
    fn a_long_cell_is_cut_at_sixty_columns_wide_characters_counted_twice() {
        let long = "長".repeat(40);
        let shown = cell(&json!(long));
        assert!(shown.ends_with('…') && shown.width() <= MAX_CELL, "{shown} is {} wide", shown.width());
        assert_eq!(cell(&json!("x".repeat(60))), "x".repeat(60));
        assert_eq!(cell(&json!("x".repeat(61))).width(), 60);
    }
}
