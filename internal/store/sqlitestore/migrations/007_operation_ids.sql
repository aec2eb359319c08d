-- Operations keyed by a row id, and their attempts and timeline entries
-- found through it (docs/performance.md, "SQLite: random keys").
--
-- Until this migration the operations table was clustered on (tenant,
-- key), and attempts and timeline entries were indexed by (tenant, key,
-- …). Keys that arrive in no particular order (UUIDs, the proxy's hashed
-- keys) then put every operation, and the index entries of its attempts
-- and timeline, on a page of its own: each commit wrote a page to the WAL
-- for almost every row it touched. BenchmarkLifecycleWrites at c=32: 3.3
-- WAL pages per operation with keys in order, 8.5 with random keys.
--
-- Now an operation gets a row id in the order it was recorded, and the
-- unique index on (tenant, key) is the only b-tree where its key decides
-- the place; its row, its attempts' and its timeline's index entries go
-- to the end of theirs, where the rows of the operations recorded just
-- before it already are.
--
-- The copies below run once, inside the migration transaction; on a large
-- ledger they take a while (seconds per million operations) and need room
-- for a second copy of the operations until the old table is dropped.

-- 1. Operations as a rowid table, in the order they were recorded.
CREATE TABLE operations_new (
    id                  INTEGER PRIMARY KEY,
    tenant              TEXT    NOT NULL,
    key                 TEXT    NOT NULL,
    action              TEXT    NOT NULL,
    destination         TEXT    NOT NULL,
    version             INTEGER NOT NULL,
    fingerprint         TEXT    NOT NULL,
    payload             BLOB    NOT NULL,
    sensitive_fields    TEXT    NOT NULL DEFAULT '[]',
    owner               TEXT    NOT NULL DEFAULT '',
    source_event        TEXT    NOT NULL DEFAULT '',
    requires_approval   INTEGER NOT NULL DEFAULT 0,
    approved_by         TEXT    NOT NULL DEFAULT '',
    state               TEXT    NOT NULL,
    failure_kind        TEXT    NOT NULL DEFAULT '',
    dispatched          INTEGER NOT NULL DEFAULT 0,
    first_dispatched_at INTEGER NOT NULL DEFAULT 0,
    attempt_count       INTEGER NOT NULL DEFAULT 0,
    fencing_token       INTEGER NOT NULL DEFAULT 0,
    current_attempt_id  TEXT    NOT NULL DEFAULT '',
    lease_expires_at    INTEGER NOT NULL DEFAULT 0,
    not_before          INTEGER NOT NULL DEFAULT 0,
    review_by           INTEGER NOT NULL DEFAULT 0,
    unresolved_since    INTEGER NOT NULL DEFAULT 0,
    protected           INTEGER NOT NULL DEFAULT 0,
    destination_ref     TEXT    NOT NULL DEFAULT '',
    response            BLOB,
    last_error          TEXT    NOT NULL DEFAULT '',
    duplicate_effects   INTEGER NOT NULL DEFAULT 0,
    revision            INTEGER NOT NULL,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    protected_until     INTEGER NOT NULL DEFAULT 0
);
INSERT INTO operations_new (tenant, key, action, destination, version, fingerprint, payload, sensitive_fields,
        owner, source_event, requires_approval, approved_by, state, failure_kind, dispatched,
        first_dispatched_at, attempt_count, fencing_token, current_attempt_id, lease_expires_at,
        not_before, review_by, unresolved_since, protected, destination_ref, response, last_error,
        duplicate_effects, revision, created_at, updated_at, protected_until)
    SELECT tenant, key, action, destination, version, fingerprint, payload, sensitive_fields,
        owner, source_event, requires_approval, approved_by, state, failure_kind, dispatched,
        first_dispatched_at, attempt_count, fencing_token, current_attempt_id, lease_expires_at,
        not_before, review_by, unresolved_since, protected, destination_ref, response, last_error,
        duplicate_effects, revision, created_at, updated_at, protected_until
    FROM operations ORDER BY created_at, tenant, key;
DROP TABLE operations;
ALTER TABLE operations_new RENAME TO operations;
CREATE UNIQUE INDEX operations_key ON operations (tenant, key);
-- The indexes of migrations 001, 002 and 006, as they were.
CREATE INDEX operations_tenant_created ON operations (tenant, created_at DESC, key DESC);
CREATE INDEX operations_tenant_state_created ON operations (tenant, state, created_at DESC, key DESC);
CREATE INDEX operations_lease ON operations (lease_expires_at) WHERE state = 'in_progress';
CREATE INDEX operations_due ON operations (tenant, not_before) WHERE state = 'pending';
CREATE INDEX operations_final ON operations (updated_at) WHERE state IN ('succeeded', 'failed');
CREATE INDEX operations_uncertain ON operations (not_before) WHERE state = 'uncertain';
CREATE INDEX operations_due_all ON operations (not_before) WHERE state = 'pending';
CREATE INDEX operations_duplicates ON operations (tenant, duplicate_effects) WHERE duplicate_effects > 0;

-- 2. Attempts and timeline entries carry their operation's row id, and
-- are indexed by it. An entry whose operation is gone (none should be:
-- they are deleted together) gets 0, which no operation has.
DROP INDEX timeline_operation;
ALTER TABLE timeline ADD COLUMN operation_id INTEGER NOT NULL DEFAULT 0;
UPDATE timeline SET operation_id = COALESCE(
    (SELECT o.id FROM operations o WHERE o.tenant = timeline.tenant AND o.key = timeline.key), 0);
CREATE INDEX timeline_operation ON timeline (operation_id, id);

DROP INDEX attempts_operation;
ALTER TABLE attempts ADD COLUMN operation_id INTEGER NOT NULL DEFAULT 0;
UPDATE attempts SET operation_id = COALESCE(
    (SELECT o.id FROM operations o WHERE o.tenant = attempts.tenant AND o.key = attempts.key), 0);
CREATE INDEX attempts_operation ON attempts (operation_id, number);
