-- Attempts and timeline entries stored in their operation's order
-- (docs/performance.md, "SQLite: history keyed by its operation").
--
-- Since migration 007 both tables carry their operation's row id and were
-- indexed by it: every attempt and every timeline entry went into its
-- table and into that index, two b-trees. Keyed by (operation_id, …)
-- WITHOUT ROWID, each is one b-tree, and an operation's history is stored
-- together. Operation ids are given in the order operations are recorded,
-- so new history still goes to the end of both b-trees.
--
-- The copies run once, inside the migration transaction: a few seconds per
-- million timeline rows, and room for a second copy of both tables until
-- the old ones are dropped (the freed pages are reused; VACUUM returns
-- them). Orphans (operation_id 0, from migration 007) are copied as they
-- are.

-- 1. The timeline, keyed by (operation_id, seq). seq numbers the entries
-- of one operation in the order they were appended; the copy takes the
-- old row ids, which already increased in that order, and new entries
-- continue from the operation's largest seq.
CREATE TABLE timeline_new (
    operation_id INTEGER NOT NULL,
    seq          INTEGER NOT NULL,
    tenant       TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    at           INTEGER NOT NULL,
    actor        TEXT    NOT NULL,
    attempt_id   TEXT    NOT NULL DEFAULT '',
    event        TEXT    NOT NULL,
    from_state   TEXT    NOT NULL DEFAULT '',
    to_state     TEXT    NOT NULL DEFAULT '',
    evidence     TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (operation_id, seq)
) WITHOUT ROWID;
INSERT INTO timeline_new (operation_id, seq, tenant, key, at, actor, attempt_id, event, from_state, to_state, evidence)
    SELECT operation_id, id, tenant, key, at, actor, attempt_id, event, from_state, to_state, evidence
    FROM timeline ORDER BY operation_id, id;
DROP TABLE timeline;
ALTER TABLE timeline_new RENAME TO timeline;

-- 2. Attempts, keyed by (operation_id, id). Every lookup of an attempt
-- names its operation (GetAttempt, UpdateAttempt, ListAttempts); attempt
-- ids are ULIDs made by the ledger, unique across operations.
CREATE TABLE attempts_new (
    operation_id     INTEGER NOT NULL,
    id               TEXT    NOT NULL,
    tenant           TEXT    NOT NULL,
    key              TEXT    NOT NULL,
    number           INTEGER NOT NULL,
    fencing_token    INTEGER NOT NULL,
    worker           TEXT    NOT NULL,
    protected        INTEGER NOT NULL DEFAULT 0,
    claimed_at       INTEGER NOT NULL,
    lease_expires_at INTEGER NOT NULL,
    dispatched_at    INTEGER NOT NULL DEFAULT 0,
    finished_at      INTEGER NOT NULL DEFAULT 0,
    outcome          TEXT    NOT NULL DEFAULT '',
    destination_ref  TEXT    NOT NULL DEFAULT '',
    response         BLOB,
    error            TEXT    NOT NULL DEFAULT '',
    stale            INTEGER NOT NULL DEFAULT 0,
    destination      TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (operation_id, id)
) WITHOUT ROWID;
INSERT INTO attempts_new (operation_id, id, tenant, key, number, fencing_token, worker, protected, claimed_at,
        lease_expires_at, dispatched_at, finished_at, outcome, destination_ref, response, error, stale, destination)
    SELECT operation_id, id, tenant, key, number, fencing_token, worker, protected, claimed_at,
        lease_expires_at, dispatched_at, finished_at, outcome, destination_ref, response, error, stale, destination
    FROM attempts ORDER BY operation_id, id;
DROP TABLE attempts;
ALTER TABLE attempts_new RENAME TO attempts;
