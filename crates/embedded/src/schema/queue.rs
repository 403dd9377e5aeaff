//! The work queue's tables, as schema steps (applied in order by `super::migrate`; never edited
//! once released). How the queue uses them is `crate::queue`'s business.

/// Tables of the queue. `queue_items.seq` orders items (a new item always gets a larger rowid
/// than every item still queued, which is all that group order needs).
pub const SCHEMA: &str = "
CREATE TABLE queue_items (
    seq           INTEGER PRIMARY KEY,
    group_id      TEXT    NOT NULL,
    dedup_id      TEXT    NOT NULL,
    body          TEXT    NOT NULL,
    enqueued_at   INTEGER NOT NULL,
    receive_count INTEGER NOT NULL DEFAULT 0,
    receipt       TEXT
) STRICT;
CREATE INDEX queue_items_by_group ON queue_items (group_id, seq);
CREATE UNIQUE INDEX queue_items_by_receipt ON queue_items (receipt) WHERE receipt IS NOT NULL;

CREATE TABLE queue_groups (
    group_id   TEXT    PRIMARY KEY,
    head_seq   INTEGER NOT NULL,
    visible_at INTEGER NOT NULL,
    state      TEXT    NOT NULL CHECK (state IN ('ready', 'in_flight', 'delayed'))
) STRICT, WITHOUT ROWID;
CREATE INDEX queue_groups_by_visibility ON queue_groups (visible_at, head_seq);

CREATE TABLE queue_dedup (
    dedup_id   TEXT    PRIMARY KEY,
    expires_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX queue_dedup_by_expiry ON queue_dedup (expires_at);

CREATE TABLE queue_dead_letters (
    id            INTEGER PRIMARY KEY,
    group_id      TEXT    NOT NULL,
    dedup_id      TEXT    NOT NULL,
    body          TEXT    NOT NULL,
    receive_count INTEGER NOT NULL,
    enqueued_at   INTEGER NOT NULL,
    dead_at       INTEGER NOT NULL
) STRICT;
";

/// Schema step 11: receipts carry their item's `seq` (see the module docs), so the index of
/// receipts goes. Receipts are held only by the workers of a running process, so none given out
/// before the step is still in use when it is applied.
pub const RECEIPTS_BY_SEQ: &str = "DROP INDEX IF EXISTS queue_items_by_receipt;";
