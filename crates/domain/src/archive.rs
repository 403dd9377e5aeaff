//! The archive's files, one format for both profiles: one file per (tenant, UTC day) per batch,
//! at `<kind>/tenant=<id>/date=<yyyy-mm-dd>/<first sequence number>.<extension>`. Execution
//! records are Parquet (`.parquet`, [`parquet`]: columns for analysis, and the whole record);
//! the other kinds gzip-compressed JSON Lines (`.jsonl.gz`), each line
//! `{"eventName", "sequenceNumber", "<record>": …}`. [`read_lines`] reads both as lines. The AWS
//! archiver writes execution records from the table's stream to S3 this way; the embedded
//! profile writes what its retention sweep deletes to a directory. This module only lays the
//! files out and encodes them (in memory); writing them is the profiles' business.
//!
//! A file's name depends only on the lines of its batch (its first line's sequence number), so a
//! batch written again after a failure replaces its file instead of adding a copy.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde_json::Value;

pub mod parquet;

/// What an archive holds: one folder of files per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ArchiveKind {
    /// Execution records (both profiles).
    Executions,
    /// Sessions (embedded profile).
    Sessions,
    /// Outbound events of the event log (embedded profile).
    Events,
    /// Messages of the local conversation log (embedded profile).
    Messages,
    /// Recorded model content the execution records point at (both profiles).
    Content,
}

impl ArchiveKind {
    pub const ALL: [ArchiveKind; 5] = [
        ArchiveKind::Executions,
        ArchiveKind::Sessions,
        ArchiveKind::Events,
        ArchiveKind::Messages,
        ArchiveKind::Content,
    ];

    /// The folder of this kind's files, with its trailing slash (`executions/`).
    pub fn prefix(self) -> &'static str {
        match self {
            ArchiveKind::Executions => "executions/",
            ArchiveKind::Sessions => "sessions/",
            ArchiveKind::Events => "events/",
            ArchiveKind::Messages => "messages/",
            ArchiveKind::Content => "content/",
        }
    }

    /// The key under which a line carries its record (`execution`).
    pub fn field(self) -> &'static str {
        match self {
            ArchiveKind::Executions => "execution",
            ArchiveKind::Sessions => "session",
            ArchiveKind::Events => "event",
            ArchiveKind::Messages => "message",
            ArchiveKind::Content => "content",
        }
    }
}

/// One archive line: the record under its kind's field, with the change that produced it and
/// its sequence number (DynamoDB's stream record's; the embedded store's row number).
pub fn line(kind: ArchiveKind, event_name: &str, sequence: Option<&str>, record: &Value) -> Value {
    let mut line = serde_json::Map::new();
    line.insert("eventName".into(), event_name.into());
    line.insert("sequenceNumber".into(), sequence.map_or(Value::Null, Value::from));
    line.insert(kind.field().into(), record.clone());
    Value::Object(line)
}

/// The UTC day (`yyyy-mm-dd`) of an RFC 3339 time, which names a record's folder.
pub fn day_of(rfc3339: &str) -> Option<&str> {
    let day = rfc3339.get(..10)?;
    let b = day.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    (digits(0..4) && b[4] == b'-' && digits(5..7) && b[7] == b'-' && digits(8..10)).then_some(day)
}

/// The lines of one batch of one kind, sorted into files by (tenant, day).
#[derive(Debug, Clone)]
pub struct ArchiveBatch {
    kind: ArchiveKind,
    /// (tenant, day) → (the first line's sequence number, lines in the order added)
    files: BTreeMap<(String, String), (String, Vec<Value>)>,
}

/// One file of a batch: its key (below the kind's prefix) and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveFile {
    pub key: String,
    pub lines: usize,
    pub bytes: Vec<u8>,
}

impl ArchiveBatch {
    pub fn new(kind: ArchiveKind) -> Self {
        Self { kind, files: BTreeMap::new() }
    }

    /// Adds `line` (see [`line`]) to the file of (`tenant`, `day`); the first line a file gets
    /// names it by `sequence`.
    pub fn push(&mut self, tenant: &str, day: &str, sequence: &str, line: Value) {
        self.files
            .entry((tenant.to_owned(), day.to_owned()))
            .or_insert_with(|| (sequence.to_owned(), Vec::new()))
            .1
            .push(line);
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The batch's files in key order: `tenant=<id>/date=<day>/<first sequence>.parquet` for
    /// execution records, `….jsonl.gz` (each line followed by a newline, gzip-compressed) for
    /// the other kinds.
    pub fn files(self) -> std::io::Result<Vec<ArchiveFile>> {
        let kind = self.kind;
        self.files
            .into_iter()
            .map(|((tenant, day), (first, lines))| {
                let (extension, bytes) = match kind {
                    ArchiveKind::Executions => ("parquet", parquet::write(&lines)?),
                    _ => {
                        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
                        for l in &lines {
                            serde_json::to_writer(&mut gz, l)?;
                            gz.write_all(b"\n")?;
                        }
                        ("jsonl.gz", gz.finish()?)
                    }
                };
                Ok(ArchiveFile {
                    key: format!("tenant={tenant}/date={day}/{first}.{extension}"),
                    lines: lines.len(),
                    bytes,
                })
            })
            .collect()
    }
}

/// The lines of an archive file, parsed (what a reader of the archive does): a Parquet file's
/// rows as the lines they were written from, or a JSON Lines file's.
pub fn read_lines(file: &[u8]) -> std::io::Result<Vec<Value>> {
    if file.starts_with(parquet::MAGIC) {
        return parquet::read(file);
    }
    let mut text = String::new();
    GzDecoder::new(file).read_to_string(&mut text)?;
    text.lines()
        .map(|l| serde_json::from_str(l).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_batch_is_one_file_per_tenant_and_day_named_by_its_first_line_and_reads_back() {
        let mut batch = ArchiveBatch::new(ArchiveKind::Sessions);
        let rec = |n: u32| json!({"n": n});
        batch.push("t-1", "2026-11-23", "7", line(ArchiveKind::Sessions, "INSERT", Some("7"), &rec(1)));
        batch.push("t-2", "2026-11-23", "8", line(ArchiveKind::Sessions, "INSERT", Some("8"), &rec(2)));
        batch.push("t-1", "2026-11-23", "9", line(ArchiveKind::Sessions, "INSERT", Some("9"), &rec(3)));
        batch.push("t-1", "2026-11-24", "10", line(ArchiveKind::Sessions, "MODIFY", None, &rec(4)));
        let files = batch.files().unwrap();
        let keys: Vec<_> = files.iter().map(|f| (f.key.as_str(), f.lines)).collect();
        assert_eq!(
            keys,
            [
                ("tenant=t-1/date=2026-11-23/7.jsonl.gz", 2),
                ("tenant=t-1/date=2026-11-24/10.jsonl.gz", 1),
                ("tenant=t-2/date=2026-11-23/8.jsonl.gz", 1)
            ]
        );
        assert_eq!(
            read_lines(&files[0].bytes).unwrap(),
            [
                json!({"eventName": "INSERT", "sequenceNumber": "7", "session": {"n": 1}}),
                json!({"eventName": "INSERT", "sequenceNumber": "9", "session": {"n": 3}})
            ]
        );
        assert_eq!(
            read_lines(&files[1].bytes).unwrap(),
            [json!({"eventName": "MODIFY", "sequenceNumber": null, "session": {"n": 4}})]
        );
    }

    fn execution(id: &str, status: &str, cost: Option<f64>) -> Value {
        json!({
            "tenantId": "t-1", "executionId": id, "sessionId": "01JDQA0000000000000000SES1",
            "agentId": "01JDQ8ZJ5V3V7Y9K2M4N6P8R0T", "ranWith": {"agent": 3}, "sourceId": "evt-1",
            "input": {}, "status": status, "iterations": 2, "modelCalls": [{}, {}],
            "toolCalls": [{"isError": false}, {"isError": true}, {"isError": true}], "actions": [],
            "tokenUsage": {"inputTokens": 120, "outputTokens": 30}, "costUsd": cost, "latencyMs": 850,
            "createdAt": "2026-11-23T07:00:01.250Z", "expiresAt": "2026-12-23T07:00:01Z"
        })
    }

    #[test]
    fn execution_records_are_one_parquet_file_a_tenant_and_day_that_reads_back_as_its_lines() {
        let mut batch = ArchiveBatch::new(ArchiveKind::Executions);
        let (first, second) = (execution("01JDQA00000000000000000EX1", "success", Some(0.0012)), {
            let mut r = execution("01JDQA00000000000000000EX2", "handed_off", None);
            r["split"] = json!({"triggerId": "01JDQ8ZJ5V3V7Y9K2M4N6P8R1A", "variant": "b"});
            r
        });
        batch.push("t-1", "2026-11-23", "7", line(ArchiveKind::Executions, "INSERT", Some("7"), &first));
        batch.push("t-1", "2026-11-23", "8", line(ArchiveKind::Executions, "MODIFY", None, &second));
        let files = batch.files().unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!((files[0].key.as_str(), files[0].lines), ("tenant=t-1/date=2026-11-23/7.parquet", 2));
        assert!(files[0].bytes.starts_with(parquet::MAGIC));
        // the lines come back as they went in, the whole record included
        assert_eq!(
            read_lines(&files[0].bytes).unwrap(),
            [
                json!({"eventName": "INSERT", "sequenceNumber": "7", "execution": first}),
                json!({"eventName": "MODIFY", "sequenceNumber": null, "execution": second})
            ]
        );
        // a record that lacks fields the columns read is archived all the same, whole
        let mut sparse = ArchiveBatch::new(ArchiveKind::Executions);
        let record = json!({"executionId": "01JDQA00000000000000000EX3"});
        sparse.push("t-1", "2026-11-23", "9", line(ArchiveKind::Executions, "INSERT", Some("9"), &record));
        let files = sparse.files().unwrap();
        assert_eq!(read_lines(&files[0].bytes).unwrap()[0]["execution"], record);
    }

    #[test]
    fn a_day_is_the_date_of_an_rfc_3339_time() {
        assert_eq!(day_of("2026-11-23T07:00:00Z"), Some("2026-11-23"));
        assert_eq!(day_of("2026-11-23"), Some("2026-11-23"));
        assert_eq!(day_of("yesterday"), None);
        assert_eq!(day_of("20261123T070000Z"), None);
    }

    #[test]
    fn each_kind_has_its_folder_and_field() {
        let folders: Vec<_> = ArchiveKind::ALL.iter().map(|k| (k.prefix(), k.field())).collect();
        assert_eq!(
            folders,
            [
                ("executions/", "execution"),
                ("sessions/", "session"),
                ("events/", "event"),
                ("messages/", "message"),
                ("content/", "content")
            ]
        );
    }
}
