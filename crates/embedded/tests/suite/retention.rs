//! Retention on the embedded profile: the sweep deletes execution records, ended sessions, the
//! event log's events and the conversation log's messages once their period is over, and keeps
//! what a conversation still stands on (an active session, a human's ownership); it archives each
//! batch first, as the AWS archiver's files, when asked; and the database file stays bounded
//! while conversations come and go. Time is a manual clock; every sweep is called by the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::TimeDelta;
use serde_json::{Value, json};
use switchboard_domain::archive::read_lines;
use switchboard_domain::tenant::{MAX_CONCURRENT_SESSIONS, MAX_INVOCATIONS_PER_MINUTE};
use switchboard_domain::{AgentId, Session, SessionStatus, TenantId};
use switchboard_embedded::runtime::DB_FILE;
use switchboard_embedded::{Embedded, EmbeddedOptions, Retention, ScriptedModel, Swept};
use switchboard_engine::{Clock, ConversationLog, ExecutionLog, RouteOutcome, SessionStore};
use switchboard_testkit::ManualClock;

use crate::common::World;

const AGENT: &str = "01JD0000SVPP0RT0AGENT00001";

fn bundle() -> String {
    json!({
        "tenantId": "t-1", "name": "Retention tenant",
        // Every message of a day comes within one minute of the manual clock.
        "limits": { "invocationsPerMinute": MAX_INVOCATIONS_PER_MINUTE, "concurrentSessions": MAX_CONCURRENT_SESSIONS },
        "agents": [{
            "agentId": AGENT, "name": "Front", "systemPrompt": "You help.", "model": "test-model",
            "tools": ["send_message", "handoff_to_human", "end_conversation"],
            "maxTurns": 100, "maxIterations": 4
        }],
        "triggers": [{ "triggerId": "01JD0000TR1GGER0CHAT000001", "name": "all", "agentId": AGENT,
                       "eventType": "message.new", "priority": 10, "conditions": {} }]
    })
    .to_string()
}

/// "bye" ends the conversation (`session.ended`), "human" hands it to a person
/// (`session.handoff.human`); anything else is answered and the session stays active.
fn script() -> Value {
    json!({ "rules": [
        { "when": { "userText": { "contains": "human" } }, "then": { "toolCalls": [
            { "name": "send_message", "input": { "text": "Connecting you." } },
            { "name": "handoff_to_human", "input": { "reason": "asked" } } ] } },
        { "when": { "userText": { "contains": "bye" } }, "then": { "toolCalls": [
            { "name": "send_message", "input": { "text": "Goodbye." } },
            { "name": "end_conversation", "input": {} } ] } },
        { "then": { "text": "You said: {{userText}}" } }
    ] })
}

async fn world(retention: Retention) -> (World, Arc<ManualClock>) {
    let clock = ManualClock::new();
    let model = Arc::new(ScriptedModel::from_json(&script().to_string()).unwrap());
    let options = EmbeddedOptions { retention, ..EmbeddedOptions::default() };
    let w = World::open(model, clock.clone(), options, &[&bundle()]).await;
    (w, clock)
}

/// A second connection to the world's database file, for what the store does not show.
fn sql(w: &World) -> rusqlite::Connection {
    rusqlite::Connection::open(w.dir.path().join(DB_FILE)).unwrap()
}

fn column(w: &World, query: &str) -> BTreeSet<String> {
    let conn = sql(w);
    let mut stmt = conn.prepare(query).unwrap();
    stmt.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
}

/// Every row's id, per kind, as the archive's records name them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Ids {
    executions: BTreeSet<String>,
    sessions: BTreeSet<String>,
    events: BTreeSet<String>,
    messages: BTreeSet<String>,
    content: BTreeSet<String>,
}

impl Ids {
    fn of(w: &World) -> Self {
        Self {
            executions: column(w, "SELECT execution_id FROM executions"),
            sessions: column(w, "SELECT session_id FROM sessions"),
            events: column(w, "SELECT event_id FROM events"),
            messages: column(w, "SELECT conversation_id || '/' || message_id FROM messages"),
            content: column(w, "SELECT session_id || '/' || sha256 FROM content"),
        }
    }

    fn minus(&self, other: &Ids) -> Ids {
        let minus = |a: &BTreeSet<String>, b: &BTreeSet<String>| a.difference(b).cloned().collect();
        Ids {
            executions: minus(&self.executions, &other.executions),
            sessions: minus(&self.sessions, &other.sessions),
            events: minus(&self.events, &other.events),
            messages: minus(&self.messages, &other.messages),
            content: minus(&self.content, &other.content),
        }
    }

    fn counts(&self) -> [usize; 4] {
        [self.executions.len(), self.sessions.len(), self.events.len(), self.messages.len()]
    }
}

fn deleted(s: &Swept) -> [usize; 4] {
    [s.executions, s.sessions, s.events, s.messages]
}

#[tokio::test]
async fn expired_records_are_deleted_and_what_a_conversation_stands_on_is_kept() {
    // given, on day 0: an ended conversation, one still active and one a human owns
    let (mut w, clock) = world(Retention::default()).await;
    let t = w.tenant.clone();
    w.say("ended", "hi").await;
    let (_, first) = w.say("ended", "bye").await;
    let old_source = crate::common::record(&first[0]).source_id.clone();
    w.say("active", "hi").await;
    w.say("human", "a human please").await;
    let (ended, active, human) = (w.session("ended").await, w.session("active").await, w.session("human").await);
    assert_eq!(ended.status, SessionStatus::Completed);
    assert!(active.is_active() && human.is_human_owned());
    // and 20 days later a conversation that ends too
    clock.advance(TimeDelta::days(20));
    w.say("recent", "hi").await;
    w.say("recent", "bye").await;
    let recent = w.session("recent").await;
    let before = Ids::of(&w);
    // when the sweep runs 31 days after day 0
    clock.advance(TimeDelta::days(11));
    let swept = w.embedded.sweep_expired(clock.now()).await.unwrap();
    // then day 0's records, the ended session, its events and messages are gone …
    let gone = before.minus(&Ids::of(&w));
    assert_eq!(deleted(&swept), gone.counts());
    assert_eq!(gone.counts(), [4, 1, 2, 8], "{gone:?}");
    assert_eq!(gone.sessions, BTreeSet::from([ended.session_id.to_string()]));
    assert!(w.embedded.store.execution_for_source(&t, &old_source).await.unwrap().is_none());
    assert!(w.embedded.store.get_session(&t, ended.session_id).await.unwrap().is_none());
    for conversation in ["ended", "active", "human"] {
        assert!(w.embedded.store.messages(&t, conversation, 100).await.unwrap().is_empty(), "{conversation}");
    }
    // … and the active session, the human's and everything of the recent conversation stay
    assert_eq!(w.session("active").await, active);
    assert_eq!(w.session("human").await, human);
    assert_eq!(w.session("recent").await, recent);
    assert_eq!(w.replies("recent").await, ["You said: hi", "Goodbye."]);
    assert_eq!(w.events().await.iter().map(|e| e.detail_type.as_str()).collect::<Vec<_>>(), ["session.ended"]);
    // the human still owns their conversation, and the active one goes on where it was
    let (routed, _) = w.say("human", "hello?").await;
    assert_eq!(routed, RouteOutcome::HumanOwned { session_id: human.session_id });
    w.say("active", "still there?").await;
    let resumed = w.session("active").await;
    assert_eq!((resumed.session_id, resumed.turn_count), (active.session_id, 2));
    // a sweep finds nothing more to do
    let again = w.embedded.sweep_expired(clock.now()).await.unwrap();
    assert_eq!(again.deleted(), 0);
}

#[tokio::test]
async fn each_kind_keeps_its_own_period_and_none_keeps_it_forever() {
    // given executions kept 2 days, sessions 5, events forever and messages 1
    let retention = Retention {
        executions: Some(TimeDelta::days(2)),
        sessions: Some(TimeDelta::days(5)),
        events: None,
        messages: Some(TimeDelta::days(1)),
        ..Retention::default()
    };
    let (mut w, clock) = world(retention).await;
    w.say("c-1", "bye").await;
    // then each goes when its own period is over, events never
    let mut seen = vec![];
    for _ in 0..6 {
        clock.advance(TimeDelta::days(1) + TimeDelta::seconds(1));
        seen.push(deleted(&w.embedded.sweep_expired(clock.now()).await.unwrap()));
    }
    assert_eq!(seen, [[0, 0, 0, 2], [1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]]);
    assert_eq!(w.events().await.len(), 1);
}

/// Every archive file under `dir`: its path below `dir`, and its lines.
fn archive_files(dir: &Path) -> Vec<(String, Vec<Value>)> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() { walk(&path, files) } else { files.push(path) }
        }
    }
    let mut files = vec![];
    walk(dir, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            (name, read_lines(&std::fs::read(&p).unwrap()).unwrap())
        })
        .collect()
}

#[tokio::test]
async fn each_batch_is_archived_before_it_is_deleted_in_the_aws_archivers_files() {
    // given an archive directory, batches of 3 rows, and 4 conversations of day 0 beside one of day 40
    let archive = tempfile::tempdir().unwrap();
    let retention = Retention { archive_dir: Some(archive.path().to_owned()), batch: 3, ..Retention::default() };
    let (mut w, clock) = world(retention).await;
    for c in ["c-1", "c-2", "c-3", "c-4"] {
        w.say(c, "hi").await;
        w.say(c, "bye").await;
    }
    clock.advance(TimeDelta::days(40));
    w.say("c-5", "bye").await;
    let before = Ids::of(&w);
    // when the sweep runs
    let swept = w.embedded.sweep_expired(clock.now()).await.unwrap();
    // then the archive holds exactly the rows deleted, each once, in files named as on AWS
    let gone = before.minus(&Ids::of(&w));
    assert_eq!(gone.counts(), [8, 4, 4, 16]);
    // with the recorded model content of the four day-0 sessions (the day-40 one's stays)
    assert!(!gone.content.is_empty());
    assert!(Ids::of(&w).content.iter().all(|c| !gone.content.contains(c)) && !Ids::of(&w).content.is_empty());
    let files = archive_files(archive.path());
    assert_eq!(swept.files, files.len());
    let mut archived = Ids::default();
    let mut lines = 0;
    for (name, file) in &files {
        let parts: Vec<&str> = name.split('/').collect();
        assert_eq!(parts.len(), 4, "{name}");
        assert_eq!((parts[1], parts[2]), ("tenant=t-1", "date=2026-11-23"), "{name}");
        // execution records in Parquet, the other kinds in gzip JSON Lines
        let extension = if parts[0] == "executions" { ".parquet" } else { ".jsonl.gz" };
        let first = parts[3].strip_suffix(extension).unwrap();
        assert!(first.len() == 20 && first.bytes().all(|b| b.is_ascii_digit()), "{name}");
        assert_eq!(file[0]["sequenceNumber"], first, "a file is named by its first line");
        for line in file {
            lines += 1;
            assert_eq!(line["eventName"], "INSERT");
            let (kind, id) = match parts[0] {
                "executions" => (&mut archived.executions, line["execution"]["executionId"].clone()),
                "sessions" => (&mut archived.sessions, line["session"]["sessionId"].clone()),
                "events" => (&mut archived.events, line["event"]["id"].clone()),
                "messages" => {
                    let m = &line["message"];
                    (
                        &mut archived.messages,
                        json!(format!(
                            "{}/{}",
                            m["conversationId"].as_str().unwrap(),
                            m["messageId"].as_str().unwrap()
                        )),
                    )
                }
                "content" => {
                    let c = &line["content"];
                    assert!(
                        c["content"]["role"].is_string() || c["content"].is_string() || c["content"].is_array(),
                        "{c}"
                    );
                    let id = format!("{}/{}", c["sessionId"].as_str().unwrap(), c["sha256"].as_str().unwrap());
                    (&mut archived.content, json!(id))
                }
                other => panic!("unexpected folder {other}"),
            };
            assert!(kind.insert(id.as_str().unwrap().to_owned()), "archived twice: {line}");
        }
    }
    assert_eq!(archived, gone);
    assert_eq!(lines, 32 + gone.content.len());
    // a whole record is kept: an execution reads back as the record it was
    let (_, execution_file) = files.iter().find(|(name, _)| name.starts_with("executions/")).unwrap();
    let record: switchboard_domain::ExecutionRecord =
        serde_json::from_value(execution_file[0]["execution"].clone()).unwrap();
    assert_eq!(record.tenant_id, w.tenant);
}

#[tokio::test]
async fn the_database_file_stays_bounded_while_conversations_come_and_go() {
    // given records kept 3 days, and every day 30 conversations of two turns that end
    let days = |n| Some(TimeDelta::days(n));
    let retention = Retention {
        executions: days(3),
        sessions: days(3),
        events: days(3),
        messages: days(3),
        ..Retention::default()
    };
    let (mut w, clock) = world(retention).await;
    let mut pages = vec![];
    for day in 0..10 {
        for c in 0..30 {
            let conversation = format!("d{day}-c{c}");
            w.say(&conversation, "hi there, a question about my order").await;
            w.say(&conversation, "thanks, bye").await;
        }
        let swept = w.embedded.sweep_expired(clock.now()).await.unwrap();
        // when the sweep has deleted anything, the pages it freed are handed back
        if swept.deleted() > 0 {
            assert_eq!(swept.pages.free, 0, "day {day}: {swept:?}");
            assert!(swept.pages_freed > 0, "day {day}: {swept:?}");
        }
        pages.push(swept.pages.count);
        clock.advance(TimeDelta::days(1));
    }
    // then, once a full period's conversations are kept (day 3), the file grows no more
    let steady = pages[3];
    for (day, &count) in pages.iter().enumerate().skip(4) {
        assert!(count <= steady + steady / 10, "day {day}: {count} pages, {steady} at day 3: {pages:?}");
    }
    assert!(pages[9] < pages[3] * 2, "{pages:?}");
}

#[tokio::test]
async fn sessions_written_before_the_sweep_existed_are_found_by_their_last_write() {
    use switchboard_embedded::schema::{MIGRATIONS, store::SESSION_UPDATES};
    // given a data directory of the build before schema step 14: an ended session and an active
    // one, both last written on day 0
    let clock = ManualClock::new();
    let dir = tempfile::tempdir().unwrap();
    let t: TenantId = "t-1".parse().unwrap();
    let step = MIGRATIONS.iter().position(|s| *s == SESSION_UPDATES).unwrap();
    let session = |conversation: &str, status: SessionStatus| {
        let mut s = Session::start(t.clone(), conversation.into(), AgentId::generate(), clock.now());
        s.status = status;
        s
    };
    let (ended, active) = (session("c-1", SessionStatus::Completed), session("c-2", SessionStatus::Active));
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        for s in &MIGRATIONS[..step] {
            conn.execute_batch(s).unwrap();
        }
        for (s, status) in [(&ended, "completed"), (&active, "active")] {
            conn.execute(
                "INSERT INTO sessions (tenant_id, session_id, conversation_id, status, version, body)
                 VALUES ('t-1', ?1, ?2, ?3, 0, ?4)",
                rusqlite::params![
                    s.session_id.to_string(),
                    s.conversation_id,
                    status,
                    serde_json::to_string(s).unwrap()
                ],
            )
            .unwrap();
        }
        conn.execute_batch(&format!("PRAGMA user_version = {step};")).unwrap();
    }
    // when this build opens it and sweeps 31 days later
    let model = Arc::new(ScriptedModel::from_json(&script().to_string()).unwrap());
    let e = Embedded::open(dir.path(), model, clock.clone(), EmbeddedOptions::default()).unwrap();
    clock.advance(TimeDelta::days(30));
    assert_eq!(e.sweep_expired(clock.now()).await.unwrap().sessions, 0, "not before their period is over");
    clock.advance(TimeDelta::days(1));
    let swept = e.sweep_expired(clock.now()).await.unwrap();
    // then the ended session goes and the active one stays
    assert_eq!(swept.sessions, 1);
    assert!(e.store.get_session(&t, ended.session_id).await.unwrap().is_none());
    assert_eq!(e.store.get_session(&t, active.session_id).await.unwrap(), Some(active));
}

#[tokio::test(start_paused = true)]
async fn the_sweeper_sweeps_on_its_period_and_stops_with_the_runtime() {
    // given a conversation of day 0 and a sweeper every hour
    let retention = Retention { every: std::time::Duration::from_secs(3600), ..Retention::default() };
    let (mut w, clock) = world(retention).await;
    w.say("c-1", "bye").await;
    let mut sweeps = w.embedded.sweeps();
    w.embedded.start_sweeper();
    // when its first sweep runs (a minute after it starts) on day 31
    clock.advance(TimeDelta::days(31));
    sweeps.changed().await.unwrap();
    // then the conversation's records are gone
    assert_eq!(Ids::of(&w).counts(), [0, 0, 0, 0]);
    // and shutting down stops it: no sweep runs after
    w.embedded.shutdown().await;
    let ran = *sweeps.borrow_and_update();
    assert!(ran >= 1);
    tokio::time::advance(std::time::Duration::from_secs(7200)).await;
    assert_eq!(*sweeps.borrow(), ran);
}

/// The numbers in docs/benchmarks.md ("Retention"): the file before and after a sweep that
/// deletes everything but one day's conversations. Run with `--ignored --nocapture`.
#[tokio::test]
#[ignore = "a measurement, not a test: prints the file's size"]
async fn measure_the_file_before_and_after_a_sweep() {
    let conversations: usize = std::env::var("RETENTION_CONVERSATIONS").map_or(2000, |v| v.parse().unwrap());
    let (mut w, clock) = world(Retention::default()).await;
    let file = w.dir.path().join(DB_FILE);
    // The file's size once the log is copied into it and cut.
    let on_disk = |w: &World| {
        sql(w).pragma_update(None, "wal_checkpoint", "TRUNCATE").unwrap();
        std::fs::metadata(&file).unwrap().len()
    };
    for day in [0, 31] {
        clock.advance(TimeDelta::days(day));
        for c in 0..conversations {
            let conversation = format!("d{day}-c{c}");
            w.say(&conversation, "hi there, a question about my order").await;
            w.say(&conversation, "thanks, bye").await;
        }
    }
    let (rows, pages, bytes) = (Ids::of(&w).counts(), w.embedded.store.pages().await.unwrap(), on_disk(&w));
    let started = std::time::Instant::now();
    let swept = w.embedded.sweep_expired(clock.now()).await.unwrap();
    let took = started.elapsed();
    let after = on_disk(&w);
    eprintln!(
        "{conversations} conversations a day, 2 days: rows {rows:?} (executions, sessions, events, messages), \
         {} pages, {bytes} bytes on disk; swept {:?} in {took:?}, {} pages moved; after: {} pages, {after} bytes on disk",
        pages.count,
        deleted(&swept),
        swept.pages_freed,
        swept.pages.count
    );
}
