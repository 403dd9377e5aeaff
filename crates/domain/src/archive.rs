//! The archive's files, one format for both profiles: gzip-compressed JSON Lines, one file per
//! (tenant, UTC day) per batch, at `<kind>/tenant=<id>/date=<yyyy-mm-dd>/<first sequence
//! number>.jsonl.gz`, each line `{"eventName", "sequenceNumber", "<record>": …}`. The AWS
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
pub fn line(kind: ArchiveKind, event_name: &str, sequence: Option<&str>, record: &Value) -> String {
    let mut line = serde_json::Map::new();
    line.insert("eventName".into(), event_name.into());
    line.insert("sequenceNumber".into(), sequence.map_or(Value::Null, Value::from));
    line.insert(kind.field().into(), record.clone());
    Value::Object(line).to_string()
}

/// The UTC day (`yyyy-mm-dd`) of an RFC 3339 time, which names a record's folder.
pub fn day_of(rfc3339: &str) -> Option<&str> {
    let day = rfc3339.get(..10)?;
    let b = day.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    (digits(0..4) && b[4] == b'-' && digits(5..7) && b[7] == b'-' && digits(8..10)).then_some(day)
}

/// The lines of one batch, sorted into files by (tenant, day).
#[derive(Debug, Clone, Default)]
pub struct ArchiveBatch {
    /// (tenant, day) → (the first line's sequence number, lines in the order added)
    files: BTreeMap<(String, String), (String, Vec<String>)>,
}

/// One file of a batch: its key (below the kind's prefix) and its gzip bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveFile {
    pub key: String,
    pub lines: usize,
    pub bytes: Vec<u8>,
}

impl ArchiveBatch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `line` (see [`line`]) to the file of (`tenant`, `day`); the first line a file gets
    /// names it by `sequence`.
    pub fn push(&mut self, tenant: &str, day: &str, sequence: &str, line: String) {
        self.files
            .entry((tenant.to_owned(), day.to_owned()))
            .or_insert_with(|| (sequence.to_owned(), Vec::new()))
            .1
            .push(line);
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The batch's files in key order: `tenant=<id>/date=<day>/<first sequence>.jsonl.gz`, each
    /// line followed by a newline, gzip-compressed.
    pub fn files(self) -> std::io::Result<Vec<ArchiveFile>> {
        self.files
            .into_iter()
            .map(|((tenant, day), (first, lines))| {
                let mut gz = GzEncoder::new(Vec::new(), Compression::default());
                for l in &lines {
                    gz.write_all(l.as_bytes())?;
                    gz.write_all(b"\n")?;
                }
                Ok(ArchiveFile {
                    key: format!("tenant={tenant}/date={day}/{first}.jsonl.gz"),
                    lines: lines.len(),
                    bytes: gz.finish()?,
                })
            })
            .collect()
    }
}

/// The lines of an archive file, parsed (what a reader of the archive does).
pub fn read_lines(gzip: &[u8]) -> std::io::Result<Vec<Value>> {
    let mut text = String::new();
    GzDecoder::new(gzip).read_to_string(&mut text)?;
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
        let mut batch = ArchiveBatch::new();
        let rec = |n: u32| json!({"n": n});
        batch.push("t-1", "2026-11-23", "7", line(ArchiveKind::Executions, "INSERT", Some("7"), &rec(1)));
        batch.push("t-2", "2026-11-23", "8", line(ArchiveKind::Executions, "INSERT", Some("8"), &rec(2)));
        batch.push("t-1", "2026-11-23", "9", line(ArchiveKind::Executions, "INSERT", Some("9"), &rec(3)));
        batch.push("t-1", "2026-11-24", "10", line(ArchiveKind::Executions, "MODIFY", None, &rec(4)));
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
                json!({"eventName": "INSERT", "sequenceNumber": "7", "execution": {"n": 1}}),
                json!({"eventName": "INSERT", "sequenceNumber": "9", "execution": {"n": 3}})
            ]
        );
        assert_eq!(
            read_lines(&files[1].bytes).unwrap(),
            [json!({"eventName": "MODIFY", "sequenceNumber": null, "execution": {"n": 4}})]
        );
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
