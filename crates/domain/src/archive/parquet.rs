//! The execution records' archive files as Parquet, for Athena (the Glue table
//! `switchboard_<stage>.executions` in `template.yaml`) and any Parquet reader: one row per
//! archive line, the columns an analysis groups and sums by, and the whole record as JSON in
//! `record` for anything else. The columns, in file order ([`SCHEMA`]):
//!
//! | column | type | from the record |
//! |---|---|---|
//! | `event_name` | string | the change that archived it (`INSERT`, `MODIFY`) |
//! | `sequence_number` | string, optional | the stream's (AWS) or the row's (embedded) |
//! | `tenant_id`, `execution_id`, `session_id`, `agent_id` | string | the same fields |
//! | `conversation_id`, `channel` | string, optional | the message's (`input.detail.conversationId`, `….channel.platform`) |
//! | `agent_version` | int64, optional | `ranWith.agent`: the agent's version it ran |
//! | `trigger_id`, `variant` | string, optional | `triggerId`; `split.variant` (a traffic split's) |
//! | `status` | string | `success`, `handed_off`, `failed`… |
//! | `error_code` | string, optional | `error.code` |
//! | `iterations`, `model_calls`, `tool_calls`, `tool_failures` | int64 | counts (`isError` tool calls) |
//! | `input_tokens`, `output_tokens` | int64 | `tokenUsage` |
//! | `cost_usd` | double, optional | `costUsd` (absent when a model had no price) |
//! | `latency_ms` | int64 | `latencyMs` |
//! | `created_at` | timestamp (ms, UTC) | `createdAt` |
//! | `record` | string (JSON) | the record as archived |
//!
//! Every column but `event_name` and `record` may be null (a record lacking the field).
//! Snappy-compressed, one row group a file (an archiver batch is at most a few hundred records).

use std::sync::Arc;

use bytes::Bytes;
use parquet::basic::Compression;
use parquet::column::writer::ColumnWriter;
use parquet::data_type::ByteArray;
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::record::Field;
use parquet::schema::parser::parse_message_type;
use serde_json::Value;

/// The files' schema (Parquet's message syntax).
pub const SCHEMA: &str = "message execution {
    required binary event_name (STRING);
    optional binary sequence_number (STRING);
    optional binary tenant_id (STRING);
    optional binary execution_id (STRING);
    optional binary session_id (STRING);
    optional binary conversation_id (STRING);
    optional binary channel (STRING);
    optional binary agent_id (STRING);
    optional int64 agent_version;
    optional binary trigger_id (STRING);
    optional binary variant (STRING);
    optional binary status (STRING);
    optional binary error_code (STRING);
    optional int64 iterations;
    optional int64 model_calls;
    optional int64 tool_calls;
    optional int64 tool_failures;
    optional int64 input_tokens;
    optional int64 output_tokens;
    optional double cost_usd;
    optional int64 latency_ms;
    optional int64 created_at (TIMESTAMP(MILLIS, true));
    required binary record (STRING);
}";

/// Where Parquet is first: a file begins with these bytes.
pub const MAGIC: &[u8] = b"PAR1";

/// One column's values, `None` where an optional column has none.
enum Column {
    Text(Vec<Option<String>>),
    Int(Vec<Option<i64>>),
    Real(Vec<Option<f64>>),
}

fn invalid(what: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

/// The columns of `lines` (archive lines of execution records), in [`SCHEMA`]'s order.
fn columns(lines: &[Value]) -> Vec<Column> {
    let text = |f: &dyn Fn(&Value) -> Option<String>| Column::Text(lines.iter().map(f).collect());
    let int = |f: &dyn Fn(&Value) -> Option<i64>| Column::Int(lines.iter().map(f).collect());
    fn record(line: &Value) -> &Value {
        line.get("execution").unwrap_or(&Value::Null)
    }
    let str_at = |pointer: &'static str| move |line: &Value| record(line).pointer(pointer)?.as_str().map(str::to_owned);
    let int_at = |pointer: &'static str| move |line: &Value| record(line).pointer(pointer)?.as_i64();
    let count =
        |pointer: &'static str| move |line: &Value| Some(record(line).pointer(pointer)?.as_array()?.len() as i64);
    let created = |line: &Value| {
        let at = record(line).get("createdAt")?.as_str()?.to_owned();
        chrono::DateTime::parse_from_rfc3339(&at).ok().map(|t| t.timestamp_millis())
    };
    let failures = |line: &Value| {
        let calls = record(line).get("toolCalls")?.as_array()?;
        Some(calls.iter().filter(|c| c.get("isError").and_then(Value::as_bool) == Some(true)).count() as i64)
    };
    vec![
        text(&|l| l.get("eventName")?.as_str().map(str::to_owned)),
        text(&|l| l.get("sequenceNumber")?.as_str().map(str::to_owned)),
        text(&str_at("/tenantId")),
        text(&str_at("/executionId")),
        text(&str_at("/sessionId")),
        text(&str_at("/input/detail/conversationId")),
        text(&str_at("/input/detail/channel/platform")),
        text(&str_at("/agentId")),
        int(&int_at("/ranWith/agent")),
        text(&str_at("/triggerId")),
        text(&str_at("/split/variant")),
        text(&str_at("/status")),
        text(&str_at("/error/code")),
        int(&int_at("/iterations")),
        int(&count("/modelCalls")),
        int(&count("/toolCalls")),
        int(&failures),
        int(&int_at("/tokenUsage/inputTokens")),
        int(&int_at("/tokenUsage/outputTokens")),
        Column::Real(lines.iter().map(|l| record(l).get("costUsd")?.as_f64()).collect()),
        int(&int_at("/latencyMs")),
        int(&created),
        Column::Text(lines.iter().map(|l| Some(record(l).to_string())).collect()),
    ]
}

/// `lines` (archive lines of execution records, in file order) as one Parquet file. Every column
/// but `event_name` and `record` may be null: a record is archived whole whatever it lacks (an
/// archive that refused a record would lose it), and the columns are a reading of it.
pub fn write(lines: &[Value]) -> std::io::Result<Vec<u8>> {
    let schema = Arc::new(parse_message_type(SCHEMA).map_err(invalid)?);
    let required: Vec<(String, bool)> =
        schema.get_fields().iter().map(|f| (f.name().to_owned(), !f.is_optional())).collect();
    let properties = Arc::new(WriterProperties::builder().set_compression(Compression::SNAPPY).build());
    let mut writer = SerializedFileWriter::new(Vec::new(), schema, properties).map_err(invalid)?;
    let mut group = writer.next_row_group().map_err(invalid)?;
    for (column, (name, required)) in columns(lines).into_iter().zip(required) {
        let Some(mut out) = group.next_column().map_err(invalid)? else { break };
        // Definition levels: 1 a value, 0 none (optional columns only).
        fn levels<T>(values: &[Option<T>]) -> Vec<i16> {
            values.iter().map(|v| i16::from(v.is_some())).collect()
        }
        // (A required column short of values fails the row group's close: its row count differs.)
        match (column, out.untyped()) {
            (Column::Text(values), ColumnWriter::ByteArrayColumnWriter(w)) => {
                let present: Vec<ByteArray> = values.iter().flatten().map(|s| ByteArray::from(s.as_str())).collect();
                w.write_batch(&present, (!required).then(|| levels(&values)).as_deref(), None).map_err(invalid)?;
            }
            (Column::Int(values), ColumnWriter::Int64ColumnWriter(w)) => {
                let present: Vec<i64> = values.iter().flatten().copied().collect();
                w.write_batch(&present, (!required).then(|| levels(&values)).as_deref(), None).map_err(invalid)?;
            }
            (Column::Real(values), ColumnWriter::DoubleColumnWriter(w)) => {
                let present: Vec<f64> = values.iter().flatten().copied().collect();
                w.write_batch(&present, (!required).then(|| levels(&values)).as_deref(), None).map_err(invalid)?;
            }
            _ => return Err(invalid(format!("column `{name}` does not have the schema's type"))),
        }
        out.close().map_err(invalid)?;
    }
    group.close().map_err(invalid)?;
    writer.into_inner().map_err(invalid)
}

/// The archive lines of a file [`write`] wrote, from its `event_name`, `sequence_number` and
/// `record` columns.
pub fn read(bytes: &[u8]) -> std::io::Result<Vec<Value>> {
    let reader = SerializedFileReader::new(Bytes::copy_from_slice(bytes)).map_err(invalid)?;
    let mut lines = Vec::new();
    for row in reader.get_row_iter(None).map_err(invalid)? {
        let row = row.map_err(invalid)?;
        let mut line = serde_json::Map::new();
        for (name, field) in row.get_column_iter() {
            let text = match field {
                Field::Str(s) => Some(s.clone()),
                _ => None,
            };
            match name.as_str() {
                "event_name" => line.insert("eventName".into(), text.map_or(Value::Null, Value::from)),
                "sequence_number" => line.insert("sequenceNumber".into(), text.map_or(Value::Null, Value::from)),
                "record" => {
                    let record = serde_json::from_str(&text.unwrap_or_default()).map_err(invalid)?;
                    line.insert("execution".into(), record)
                }
                _ => None,
            };
        }
        lines.push(Value::Object(line));
    }
    Ok(lines)
}
