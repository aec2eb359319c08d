-- Less work per operation on the write path (docs/performance.md, "SQLite:
-- a lighter write path"). Every protected operation inserts an attempt and
-- updates it, and appends timeline entries in both of its transactions;
-- each b-tree a statement touches costs at least one page in the WAL at
-- the next commit. Measured with BenchmarkLifecycleWrites (claim with the
-- intent, then report; WAL pages per operation): 24.3 before this
-- migration, 21.4 without attempts_outcome, 19.4 with the timeline
-- without AUTOINCREMENT, 18.8 with attempts WITHOUT ROWID.
--
-- The copies below run once, inside the migration transaction; on a large
-- ledger they take a while (seconds per million timeline rows) and need
-- room for a second copy of both tables until the old ones are dropped.

-- 1. attempts_outcome (tenant, outcome) served only Stats, which reads a
-- tenant's attempts just as well through attempts_operation (tenant, key,
-- number) or, as the planner prefers, through the tenant's operations and
-- attempts_operation; both read every attempt of the tenant either way.
-- It cost an entry on every claim and a delete and an insert on every
-- outcome.
DROP INDEX attempts_outcome;

-- 2. The timeline without AUTOINCREMENT: AUTOINCREMENT writes the table's
-- row in sqlite_sequence on every insert, one more page in each
-- transaction that appends to the timeline (both transactions of an
-- operation). The rowid is still chosen as the largest id in the table
-- plus one, so ids keep growing; what AUTOINCREMENT added is that an id is
-- never reused, even after the rows with the largest ids were deleted.
-- Nothing relies on that: ids order the entries of one operation
-- (ListTimeline ORDER BY id; the index below), and rows are deleted only
-- with their whole operation (DeleteOperation, by retention). A new entry
-- always gets an id larger than every row in the table, so it orders after
-- all entries of its operation. An id can be reused only after retention
-- deleted the operations holding the largest ids, and then it names an
-- entry of another operation than the deleted one had; ids are not exposed
-- outside the store (opledger.TimelineEntry has none). Ids are copied as
-- they are; DROP TABLE removes the table's sqlite_sequence row.
CREATE TABLE timeline_new (
    id         INTEGER PRIMARY KEY,
    tenant     TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    at         INTEGER NOT NULL,
    actor      TEXT    NOT NULL,
    attempt_id TEXT    NOT NULL DEFAULT '',
    event      TEXT    NOT NULL,
    from_state TEXT    NOT NULL DEFAULT '',
    to_state   TEXT    NOT NULL DEFAULT '',
    evidence   TEXT    NOT NULL DEFAULT ''
);
INSERT INTO timeline_new (id, tenant, key, at, actor, attempt_id, event, from_state, to_state, evidence)
    SELECT id, tenant, key, at, actor, attempt_id, event, from_state, to_state, evidence FROM timeline ORDER BY id;
DROP TABLE timeline;
ALTER TABLE timeline_new RENAME TO timeline;
CREATE INDEX timeline_operation ON timeline (tenant, key, id);

-- 3. attempts WITHOUT ROWID: with a TEXT primary key on a rowid table,
-- every attempt went into the table and into the primary key's own index.
-- Clustered on id, it is one b-tree. Ids are ULIDs, so new attempts go to
-- the end of it. Attempt rows are small (the response is the largest part)
-- and attempts_operation now holds the id instead of a rowid.
CREATE TABLE attempts_new (
    id               TEXT    NOT NULL PRIMARY KEY,
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
    stale            INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
INSERT INTO attempts_new (id, tenant, key, number, fencing_token, worker, protected, claimed_at, lease_expires_at,
        dispatched_at, finished_at, outcome, destination_ref, response, error, stale)
    SELECT id, tenant, key, number, fencing_token, worker, protected, claimed_at, lease_expires_at,
        dispatched_at, finished_at, outcome, destination_ref, response, error, stale FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_new RENAME TO attempts;
CREATE INDEX attempts_operation ON attempts (tenant, key, number);
