//! How the client prints an answer in the format `-o` asks for: a table of records (a column set
//! per kind, more with `wide`; cells cut at 60 columns, padded by the width a terminal gives
//! them), or the API's answer as JSON or YAML. It does not call the API.

use std::io::Write as _;

use serde_json::Value;
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

pub use crate::shared::remote::Format;

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
        "keys" => &[
            ("ID", "keyId"),
            ("PRINCIPAL", "principal"),
            ("ROLE", "role"),
            ("EXPIRES", "expiresAt"),
            ("LAST USED", "lastUsedAt"),
        ],
        "versions" => {
            &[("VERSION", "version"), ("WRITTEN AT", "writtenAt"), ("WRITTEN BY", "writtenBy"), ("DELETED", "deleted")]
        }
        "changes" => &[("POINTER", "pointer"), ("BEFORE", "before"), ("AFTER", "after")],
        "approvals" => &[
            ("ID", "approvalId"),
            ("TOOL", "tool"),
            ("STATUS", "status"),
            ("ARGUMENTS", "arguments"),
            ("EXPIRES", "expiresAt"),
        ],
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

/// The columns `-o wide` adds for `segment` records (a dotted field reads into an object).
fn wide_columns(segment: &str) -> &'static [(&'static str, &'static str)] {
    match segment {
        "agents" => &[("VERSION", "version"), ("UPDATED", "updatedAt")],
        "triggers" => &[("EVENT", "eventType"), ("VERSION", "version"), ("UPDATED", "updatedAt")],
        "tools" => &[("URL", "handler.url"), ("VERSION", "version"), ("UPDATED", "updatedAt")],
        "skills" => &[("VERSION", "version"), ("UPDATED", "updatedAt")],
        "keys" => &[("CREATED", "createdAt")],
        "versions" => &[("NAME", "record.name")],
        "changes" => &[],
        "sessions" => &[("CONVERSATION", "conversationId"), ("HANDOFF REASON", "handoffReason")],
        "approvals" => {
            &[("CONVERSATION", "conversationId"), ("EXECUTION", "executionId"), ("REQUESTED", "requestedAt")]
        }
        "usage" => &[],
        _ => &[("SESSION", "sessionId"), ("AGENT", "agentId"), ("TRIGGER", "triggerId"), ("CREATED", "createdAt")],
    }
}

/// The value at a dotted `field` of `item` (`handler.url`), `null` where there is none.
fn field<'a>(item: &'a Value, field: &str) -> &'a Value {
    field.split('.').fold(item, |v, name| &v[name])
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
    table_of(columns(segment), items)
}

/// A table of `items` in the `cols` given as (header, field).
pub fn table_of(cols: &[(&str, &str)], items: &[Value]) -> String {
    let rows: Vec<Vec<String>> = items.iter().map(|i| cols.iter().map(|(_, f)| cell(field(i, f))).collect()).collect();
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

/// A list of `segment` records as `format` asks: a table (wide: with more columns), or the
/// records as a JSON or YAML array.
pub fn list(segment: &str, items: &[Value], format: Format) -> anyhow::Result<String> {
    match format {
        Format::Table => Ok(table(segment, items)),
        Format::Wide => {
            let cols: Vec<_> = columns(segment).iter().chain(wide_columns(segment)).copied().collect();
            Ok(table_of(&cols, items))
        }
        Format::Json | Format::Yaml => Ok(data(&Value::Array(items.to_vec()), format)?.unwrap_or_default()),
    }
}

pub fn print_list(segment: &str, items: &[Value], format: Format) -> anyhow::Result<()> {
    print_text(&list(segment, items, format)?)
}

/// One record: YAML with `-o yaml`, else its JSON (a record has no table).
pub fn print_value(v: &Value, format: Format) -> anyhow::Result<()> {
    match data(v, format)? {
        Some(text) => print_text(&text),
        None => print_text(&serde_json::to_string_pretty(v)?),
    }
}

/// The answer `v` as text when `format` asks for data (JSON or YAML); `None` when the caller
/// prints its own text.
pub fn data(v: &Value, format: Format) -> anyhow::Result<Option<String>> {
    match format {
        Format::Json => Ok(Some(serde_json::to_string_pretty(v)?)),
        Format::Yaml => Ok(Some(yaml(v)?)),
        Format::Table | Format::Wide => Ok(None),
    }
}

/// Prints the answer `v` when `format` asks for data and says so; `false` leaves the caller to
/// print its own text.
pub fn print_data(v: &Value, format: Format) -> anyhow::Result<bool> {
    let text = data(v, format)?;
    if let Some(text) = &text {
        print_text(text)?;
    }
    Ok(text.is_some())
}

/// One event of a stream as `format` asks for data: a line of JSON, or a YAML document (`---`
/// first); `None` when the caller prints its own line.
pub fn event(v: &Value, format: Format) -> anyhow::Result<Option<String>> {
    match format {
        Format::Json => Ok(Some(v.to_string())),
        Format::Yaml => Ok(Some(format!("---\n{}", yaml(v)?))),
        Format::Table | Format::Wide => Ok(None),
    }
}

/// `text` on standard output, ending with one newline, flushed (a follower sees it now).
pub fn print_text(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", text.trim_end_matches('\n'))?;
    out.flush()?;
    Ok(())
}

fn yaml(v: &Value) -> anyhow::Result<String> {
    Ok(serde_saphyr::to_string(v)?)
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

    #[test]
    fn each_format_shows_a_list_its_way() {
        let items = [json!({ "toolId": "t-1", "name": "orders", "type": "webhook", "description": "Look up",
                             "handler": { "url": "https://orders.example/lookup" }, "version": 3 })];
        let table = list("tools", &items, Format::Table).unwrap();
        assert!(!table.contains("URL") && table.contains("orders"), "{table}");
        let wide = list("tools", &items, Format::Wide).unwrap();
        let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(header, ["ID", "NAME", "TYPE", "DESCRIPTION", "URL", "VERSION", "UPDATED"]);
        assert!(
            wide.contains("https://orders.example/lookup") && wide.lines().nth(1).unwrap().ends_with('-'),
            "{wide}"
        );
        let json: Value = serde_json::from_str(&list("tools", &items, Format::Json).unwrap()).unwrap();
        assert_eq!(json, json!(items));
        let yaml: Value = serde_saphyr::from_str(&list("tools", &items, Format::Yaml).unwrap()).unwrap();
        assert_eq!(yaml, json!(items));
    }

    #[test]
    fn a_stream_is_a_line_of_json_or_a_yaml_document_per_event() {
        let e = json!({ "seq": 7, "event": { "detailType": "session.ended", "detail": { "text": "a\nb" } } });
        let line = event(&e, Format::Json).unwrap().unwrap();
        assert!(!line.contains('\n'));
        assert_eq!(serde_json::from_str::<Value>(&line).unwrap(), e);
        let doc = event(&e, Format::Yaml).unwrap().unwrap();
        assert!(doc.starts_with("---\n"), "{doc}");
        assert_eq!(serde_saphyr::from_str::<Value>(&doc).unwrap(), e);
        assert_eq!(event(&e, Format::Table).unwrap(), None);
    }
}
