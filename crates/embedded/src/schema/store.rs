//! The store's tables, as schema steps (applied in order by `super::migrate`; never edited
//! once released). How the store uses them is `crate::store`'s business.

pub const SCHEMA: &str = r#"
CREATE TABLE tenants (
    tenant_id  TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at TEXT NOT NULL
) STRICT;
-- Agents, triggers, tools and skills: one row per record, the record as JSON. `version` is the
-- optimistic-concurrency token (the API's ETag).
CREATE TABLE config_records (
    tenant_id TEXT NOT NULL REFERENCES tenants (tenant_id),
    kind      TEXT NOT NULL,
    id        TEXT NOT NULL,
    version   INTEGER NOT NULL,
    body      TEXT NOT NULL,
    PRIMARY KEY (tenant_id, kind, id)
) STRICT;
-- Embedded API keys: only a SHA-256 of each key is kept. A NULL tenant is an admin key.
CREATE TABLE api_keys (
    key_hash   TEXT PRIMARY KEY,
    tenant_id  TEXT REFERENCES tenants (tenant_id),
    created_at TEXT NOT NULL
) STRICT;
CREATE TABLE sessions (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id       TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    status          TEXT NOT NULL,
    version         INTEGER NOT NULL,
    body            TEXT NOT NULL,
    UNIQUE (tenant_id, session_id)
) STRICT;
CREATE INDEX sessions_by_conversation ON sessions (tenant_id, conversation_id, seq);
-- At most one active session per conversation: a second concurrent start loses like a stale write.
CREATE UNIQUE INDEX one_active_session ON sessions (tenant_id, conversation_id) WHERE status = 'active';
CREATE TABLE executions (
    tenant_id    TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    source_id    TEXT NOT NULL,
    expires_at   INTEGER NOT NULL,
    body         TEXT NOT NULL,
    PRIMARY KEY (tenant_id, execution_id)
) STRICT;
CREATE UNIQUE INDEX executions_by_source ON executions (tenant_id, source_id);
CREATE INDEX executions_by_session ON executions (tenant_id, session_id, execution_id);
CREATE TABLE messages (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id       TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    message_id      TEXT NOT NULL,
    direction       TEXT NOT NULL,
    text            TEXT NOT NULL,
    idempotency_key TEXT,
    created_at      TEXT NOT NULL,
    UNIQUE (tenant_id, message_id),
    -- Per tenant: two tenants may well see the same event id.
    UNIQUE (tenant_id, idempotency_key)
) STRICT;
CREATE INDEX messages_by_conversation ON messages (tenant_id, conversation_id, seq);
CREATE TABLE events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id    TEXT NOT NULL UNIQUE,
    tenant_id   TEXT NOT NULL,
    detail_type TEXT NOT NULL,
    body        TEXT NOT NULL,
    created_at  TEXT NOT NULL
) STRICT;
CREATE INDEX events_by_tenant ON events (tenant_id, seq);
"#;

/// Schema step 3: ids a client chooses are unique only where the brief's model says so. Message
/// ids per conversation (two conversations of a tenant may both have a message `m-1`), outbound
/// event ids per tenant. SQLite cannot drop a table constraint, so both tables are rebuilt with
/// their rows and sequence numbers (the event stream's `Last-Event-ID` stays valid).
pub const SCOPE_CLIENT_IDS: &str = r#"
CREATE TABLE messages_v3 (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id       TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    message_id      TEXT NOT NULL,
    direction       TEXT NOT NULL,
    text            TEXT NOT NULL,
    idempotency_key TEXT,
    created_at      TEXT NOT NULL,
    UNIQUE (tenant_id, conversation_id, message_id),
    -- Reply keys derive from tenant-scoped source ids.
    UNIQUE (tenant_id, idempotency_key)
) STRICT;
INSERT INTO messages_v3 (seq, tenant_id, conversation_id, message_id, direction, text, idempotency_key, created_at)
    SELECT seq, tenant_id, conversation_id, message_id, direction, text, idempotency_key, created_at FROM messages;
DROP TABLE messages;
ALTER TABLE messages_v3 RENAME TO messages;
CREATE INDEX messages_by_conversation ON messages (tenant_id, conversation_id, seq);
CREATE TABLE events_v3 (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id    TEXT NOT NULL,
    tenant_id   TEXT NOT NULL,
    detail_type TEXT NOT NULL,
    body        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    UNIQUE (tenant_id, event_id)
) STRICT;
INSERT INTO events_v3 (seq, event_id, tenant_id, detail_type, body, created_at)
    SELECT seq, event_id, tenant_id, detail_type, body, created_at FROM events;
DROP TABLE events;
ALTER TABLE events_v3 RENAME TO events;
CREATE INDEX events_by_tenant ON events (tenant_id, seq);
"#;

/// Schema step 4: model usage per tenant, UTC day, agent and model, added to in the transaction
/// that records each execution (so a redelivered message is never counted twice). `cost_nanos`
/// adds up the priced calls only; `unpriced_calls` counts the others.
pub const USAGE: &str = r#"
CREATE TABLE usage_daily (
    tenant_id          TEXT NOT NULL,
    day                TEXT NOT NULL,
    agent_id           TEXT NOT NULL,
    model              TEXT NOT NULL,
    calls              INTEGER NOT NULL,
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    cache_read_tokens  INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cost_nanos         INTEGER NOT NULL,
    unpriced_calls     INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, day, agent_id, model)
) STRICT, WITHOUT ROWID;
"#;

/// Schema step 5: a tenant may be suspended (nothing new runs for it; its data stays).
pub const TENANT_STATUS: &str = r#"
ALTER TABLE tenants ADD COLUMN status TEXT NOT NULL DEFAULT 'active';
"#;

/// Schema step 6: tenant limits (JSON; NULL reads as the defaults) and the windowed counters
/// they are enforced with (`notified`: the window's `tenant.limit.reached` was claimed).
pub const TENANT_LIMITS: &str = r#"
ALTER TABLE tenants ADD COLUMN limits TEXT;
CREATE TABLE tenant_counters (
    tenant_id  TEXT NOT NULL,
    window_key TEXT NOT NULL,
    count      INTEGER NOT NULL,
    notified   INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, window_key)
) STRICT, WITHOUT ROWID;
"#;

/// Schema step 7: session slots, one per conversation an agent is answering, held until
/// `held_until_ms` (renewed by each admitted message; an expired one is freed only when the
/// tenant's slots are all held).
pub const SESSION_SLOTS: &str = r#"
CREATE TABLE session_slots (
    tenant_id       TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    held_until_ms   INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, conversation_id)
) STRICT, WITHOUT ROWID;
"#;

/// Schema step 8: who sent an outbound message when it does not follow from how it was logged
/// (a human operator's reply from the console has an idempotency key, like an agent's); NULL
/// keeps the derived sender.
pub const MESSAGE_SENDER: &str = r#"
ALTER TABLE messages ADD COLUMN sender TEXT;
"#;

/// Schema step 9: executions per tenant, UTC hour (`YYYY-MM-DDTHH:00:00Z`) and status, added to
/// in the transaction that records each execution, for the console's overview; filled from the
/// execution records still kept when the step is applied.
pub const ACTIVITY: &str = r#"
CREATE TABLE activity_hourly (
    tenant_id  TEXT NOT NULL,
    hour       TEXT NOT NULL,
    status     TEXT NOT NULL,
    executions INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, hour, status)
) STRICT, WITHOUT ROWID;
INSERT INTO activity_hourly (tenant_id, hour, status, executions)
    SELECT tenant_id, substr(json_extract(body, '$.createdAt'), 1, 13) || ':00:00Z',
           json_extract(body, '$.status'), count(*)
    FROM executions GROUP BY 1, 2, 3;
"#;

/// Schema step 10: how many slots each tenant holds, kept by triggers on `session_slots` (every
/// path that takes or frees a slot, tenant deletion included), so that admitting a new
/// conversation reads one row instead of counting the tenant's slots (thousands of rows for a
/// busy tenant, on every new conversation). Written so that applying it again is harmless.
pub const SLOT_COUNTS: &str = r#"
CREATE TABLE IF NOT EXISTS session_slot_counts (
    tenant_id TEXT PRIMARY KEY,
    held      INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
DELETE FROM session_slot_counts;
INSERT INTO session_slot_counts (tenant_id, held)
    SELECT tenant_id, count(*) FROM session_slots GROUP BY tenant_id;
CREATE TRIGGER IF NOT EXISTS session_slot_taken AFTER INSERT ON session_slots BEGIN
    INSERT INTO session_slot_counts (tenant_id, held) VALUES (NEW.tenant_id, 1)
        ON CONFLICT (tenant_id) DO UPDATE SET held = held + 1;
END;
CREATE TRIGGER IF NOT EXISTS session_slot_freed AFTER DELETE ON session_slots BEGIN
    UPDATE session_slot_counts SET held = held - 1 WHERE tenant_id = OLD.tenant_id;
END;
"#;

/// Schema step 12: the conversation log writes fewer pages per message. Its sequence numbers are
/// plain rowids (no `AUTOINCREMENT`, whose counter row in `sqlite_sequence` was rewritten by every
/// transaction that logged a message): a new message still gets a number above every message
/// kept, which is all the log's order needs (the numbers are never shown; the event stream's are,
/// and keep theirs). And only outbound messages have an idempotency key, so its unique index
/// holds those alone (inbound messages added an entry each). SQLite cannot change either in
/// place, so the table is rebuilt with its rows and numbers.
pub const LEANER_MESSAGES: &str = r#"
CREATE TABLE messages_v12 (
    seq             INTEGER PRIMARY KEY,
    tenant_id       TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    message_id      TEXT NOT NULL,
    direction       TEXT NOT NULL,
    text            TEXT NOT NULL,
    idempotency_key TEXT,
    created_at      TEXT NOT NULL,
    sender          TEXT,
    UNIQUE (tenant_id, conversation_id, message_id)
) STRICT;
INSERT INTO messages_v12 (seq, tenant_id, conversation_id, message_id, direction, text, idempotency_key, created_at, sender)
    SELECT seq, tenant_id, conversation_id, message_id, direction, text, idempotency_key, created_at, sender FROM messages;
DROP TABLE messages;
ALTER TABLE messages_v12 RENAME TO messages;
CREATE INDEX messages_by_conversation ON messages (tenant_id, conversation_id, seq);
-- Reply keys derive from tenant-scoped source ids.
CREATE UNIQUE INDEX messages_by_idempotency_key ON messages (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DELETE FROM sqlite_sequence WHERE name = 'messages';
"#;

/// Schema step 13: sessions, like the conversation log in step 12, number their rows with plain
/// rowids: `AUTOINCREMENT`'s counter row in `sqlite_sequence` was rewritten by every transaction
/// that started a session (each new conversation). A new session still gets a number above every
/// session kept, which is all `seq` is for (the newest of a conversation's sessions; it is never
/// shown). SQLite cannot drop `AUTOINCREMENT` in place, so the table is rebuilt with its rows and
/// numbers.
pub const LEANER_SESSIONS: &str = r#"
CREATE TABLE sessions_v13 (
    seq             INTEGER PRIMARY KEY,
    tenant_id       TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    status          TEXT NOT NULL,
    version         INTEGER NOT NULL,
    body            TEXT NOT NULL,
    UNIQUE (tenant_id, session_id)
) STRICT;
INSERT INTO sessions_v13 (seq, tenant_id, session_id, conversation_id, status, version, body)
    SELECT seq, tenant_id, session_id, conversation_id, status, version, body FROM sessions;
DROP TABLE sessions;
ALTER TABLE sessions_v13 RENAME TO sessions;
CREATE INDEX sessions_by_conversation ON sessions (tenant_id, conversation_id, seq);
-- At most one active session per conversation: a second concurrent start loses like a stale write.
CREATE UNIQUE INDEX one_active_session ON sessions (tenant_id, conversation_id) WHERE status = 'active';
DELETE FROM sqlite_sequence WHERE name = 'sessions';
"#;

/// Schema step 14: what the retention sweep finds expired sessions by. `updated_ms` is the
/// session's `updatedAt` (epoch milliseconds), written with the session; the index holds only
/// the sessions that are not active (only those may be deleted), so a turn of an active session,
/// which is most session writes, changes no entry of it: a session enters it once, when it ends
/// or is handed off. Filled here for the sessions that are not active; an active one gets its
/// value at its next write.
pub const SESSION_UPDATES: &str = r#"
ALTER TABLE sessions ADD COLUMN updated_ms INTEGER;
UPDATE sessions
    SET updated_ms = CAST(round((julianday(json_extract(body, '$.updatedAt')) - 2440587.5) * 86400000.0) AS INTEGER)
    WHERE status <> 'active';
CREATE INDEX sessions_by_update ON sessions (updated_ms) WHERE status <> 'active';
"#;

/// Schema step 15: the kept versions of configuration records, one row per write (and one per
/// delete, marked), never updated. Records written before this step have versions from their next
/// write on. (`IF NOT EXISTS`: a database wound back to an earlier step replays it.)
pub const CONFIG_VERSIONS: &str = r#"
CREATE TABLE IF NOT EXISTS config_versions (
    tenant_id  TEXT NOT NULL,
    kind       TEXT NOT NULL,
    id         TEXT NOT NULL,
    version    INTEGER NOT NULL,
    written_at TEXT NOT NULL,
    written_by TEXT NOT NULL,
    deleted    INTEGER NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (tenant_id, kind, id, version)
) STRICT;
"#;

/// Recorded model content (prompts, messages, answers), kept once per session under its SHA-256
/// and pointed at by the execution records; and the tenant's `recording` setting. A piece written
/// again is replaced (a new `seq`), so rows in `seq` order come due in that order, as execution
/// records do, and retention needs no index on the expiry.
pub const RECORDED_CONTENT: &str = r#"
CREATE TABLE IF NOT EXISTS content (
    seq        INTEGER PRIMARY KEY,
    tenant_id  TEXT NOT NULL,
    session_id TEXT NOT NULL,
    sha256     TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    body       BLOB NOT NULL,
    UNIQUE (tenant_id, session_id, sha256)
) STRICT;
CREATE TABLE IF NOT EXISTS tenant_settings (
    tenant_id TEXT PRIMARY KEY,
    recording TEXT NOT NULL
) STRICT;
"#;

/// API keys held by named principals with a role, an optional expiry and the time of last use.
/// Keys made before this step keep what they could do: an admin key is the principal `admin`
/// with the admin role; a tenant key becomes its tenant's owner, named after its id. The table is
/// rebuilt rather than altered, so that the step reads the same on any earlier table.
pub const API_KEY_GRANTS: &str = r#"
CREATE TABLE api_keys_v17 (
    key_hash     TEXT PRIMARY KEY,
    tenant_id    TEXT REFERENCES tenants (tenant_id),
    created_at   TEXT NOT NULL,
    principal    TEXT NOT NULL,
    role         TEXT NOT NULL,
    expires_at   TEXT,
    last_used_at TEXT
) STRICT;
INSERT INTO api_keys_v17 (key_hash, tenant_id, created_at, principal, role)
    SELECT key_hash, tenant_id, created_at,
           CASE WHEN tenant_id IS NULL THEN 'admin' ELSE 'key ' || substr(key_hash, 1, 16) END,
           CASE WHEN tenant_id IS NULL THEN 'admin' ELSE 'owner' END
    FROM api_keys;
DROP TABLE api_keys;
ALTER TABLE api_keys_v17 RENAME TO api_keys;
"#;

/// The next slot of each active schedule trigger, written with the trigger (`spec` is its
/// expression and time zone: a write that keeps them keeps the slot).
pub const SCHEDULES: &str = r#"
CREATE TABLE IF NOT EXISTS schedules (
    tenant_id  TEXT NOT NULL,
    trigger_id TEXT NOT NULL,
    spec       TEXT NOT NULL,
    next_slot  INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, trigger_id)
) STRICT;
CREATE INDEX IF NOT EXISTS schedules_due ON schedules (next_slot);
"#;

/// Schema step 19: executions per tenant, UTC hour, traffic-split variant (its trigger and
/// name) and status, with the tokens, cost and latency they added up to, counted in the
/// transaction that records each execution whose session a split assigned.
pub const SPLIT_ACTIVITY: &str = r#"
CREATE TABLE IF NOT EXISTS variant_hourly (
    tenant_id      TEXT NOT NULL,
    hour           TEXT NOT NULL,
    trigger_id     TEXT NOT NULL,
    variant        TEXT NOT NULL,
    status         TEXT NOT NULL,
    executions     INTEGER NOT NULL,
    tokens         INTEGER NOT NULL,
    cost_nanos     INTEGER NOT NULL,
    unpriced_calls INTEGER NOT NULL,
    latency_ms     INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, hour, trigger_id, variant, status)
) STRICT, WITHOUT ROWID;
"#;

/// Schema step 20: a tenant's business-hours calendars (JSON, the domain's `calendar`); no row
/// until set. A table of its own, so that applying the step again is harmless.
pub const CALENDARS: &str = r#"
CREATE TABLE IF NOT EXISTS tenant_calendars (
    tenant_id TEXT PRIMARY KEY,
    calendars TEXT NOT NULL
) STRICT;
"#;

/// Schema step 21: the time zone a tenant's triggers and calendars are stored with when written
/// without one; no row until set. A table of its own, as step 20's.
pub const TENANT_ZONES: &str = r#"
CREATE TABLE IF NOT EXISTS tenant_zones (
    tenant_id TEXT PRIMARY KEY,
    time_zone TEXT NOT NULL
) STRICT;
"#;

/// Schema step 22: the tenant's insights (`switchboard_domain::insights`), one row per UTC hour,
/// agent, agent version, trigger, split variant and channel (`''` for none), counted in the
/// transaction that records each execution; and the buckets of their latency sketches (`measure`
/// `lat`, `frt`, `ttr`), beside them. Kept and deleted as usage is.
pub const INSIGHTS: &str = r#"
CREATE TABLE IF NOT EXISTS insight_hourly (
    tenant_id       TEXT NOT NULL,
    hour            TEXT NOT NULL,
    agent_id        TEXT NOT NULL,
    agent_version   INTEGER NOT NULL,
    trigger_id      TEXT NOT NULL,
    variant         TEXT NOT NULL,
    channel         TEXT NOT NULL,
    executions      INTEGER NOT NULL,
    failed          INTEGER NOT NULL,
    tool_calls      INTEGER NOT NULL,
    tool_failures   INTEGER NOT NULL,
    tokens          INTEGER NOT NULL,
    cost_nanos      INTEGER NOT NULL,
    unpriced_calls  INTEGER NOT NULL,
    conversations   INTEGER NOT NULL,
    first_responses INTEGER NOT NULL,
    resolved        INTEGER NOT NULL,
    to_agent        INTEGER NOT NULL,
    to_human_agent  INTEGER NOT NULL,
    to_human_failure INTEGER NOT NULL,
    to_human_max_turns INTEGER NOT NULL,
    to_human_session_budget INTEGER NOT NULL,
    to_human_limit  INTEGER NOT NULL,
    to_human_api    INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, hour, agent_id, agent_version, trigger_id, variant, channel)
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS insight_buckets (
    tenant_id     TEXT NOT NULL,
    hour          TEXT NOT NULL,
    agent_id      TEXT NOT NULL,
    agent_version INTEGER NOT NULL,
    trigger_id    TEXT NOT NULL,
    variant       TEXT NOT NULL,
    channel       TEXT NOT NULL,
    measure       TEXT NOT NULL,
    bucket        INTEGER NOT NULL,
    count         INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, hour, agent_id, agent_version, trigger_id, variant, channel, measure, bucket)
) STRICT, WITHOUT ROWID;
"#;

/// Schema step 23: sessions closed when their customer goes quiet. `idle_ms` is when an active
/// session waiting on its customer closes as abandoned (epoch milliseconds, its `idle.at`), and
/// only such a session has one, so the partial index holds the sessions the idle sweep reads and
/// nothing else (an expression index on the body would parse every written session's JSON twice:
/// measured, 40 µs a write at 50 KB). The insights' counters added after step 22 (`abandoned` the
/// first) are rows of `insight_counters`, one per counter that is not zero, so that a new counter
/// needs no new column. A test that winds a database back below this step drops `idle_ms` first.
pub const IDLE_SESSIONS: &str = r#"
ALTER TABLE sessions ADD COLUMN idle_ms INTEGER;
CREATE INDEX IF NOT EXISTS sessions_by_idle ON sessions (idle_ms) WHERE idle_ms IS NOT NULL;
CREATE TABLE IF NOT EXISTS insight_counters (
    tenant_id     TEXT NOT NULL,
    hour          TEXT NOT NULL,
    agent_id      TEXT NOT NULL,
    agent_version INTEGER NOT NULL,
    trigger_id    TEXT NOT NULL,
    variant       TEXT NOT NULL,
    channel       TEXT NOT NULL,
    counter       TEXT NOT NULL,
    n             INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, hour, agent_id, agent_version, trigger_id, variant, channel, counter)
) STRICT, WITHOUT ROWID;
"#;
