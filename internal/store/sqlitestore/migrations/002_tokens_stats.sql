-- API tokens: only the SHA-256 of the secret is stored.
CREATE TABLE tokens (
    id         TEXT    NOT NULL PRIMARY KEY,
    tenant     TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    hash       TEXT    NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX tokens_tenant ON tokens (tenant, created_at);

-- Operator decisions on unresolved operations, for the recovery-time figures.
-- Kept apart from the timeline so that compaction does not erase them.
CREATE TABLE recoveries (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant   TEXT    NOT NULL,
    key      TEXT    NOT NULL,
    decision TEXT    NOT NULL,
    at       INTEGER NOT NULL,
    waited   INTEGER NOT NULL -- microseconds
);
CREATE INDEX recoveries_tenant ON recoveries (tenant, waited);

-- Attempt counts of compacted operations, so that totals never go down.
CREATE TABLE compacted_attempts (
    tenant      TEXT    NOT NULL,
    destination TEXT    NOT NULL,
    outcome     TEXT    NOT NULL,
    count       INTEGER NOT NULL,
    PRIMARY KEY (tenant, destination, outcome)
) WITHOUT ROWID;

ALTER TABLE tombstones ADD COLUMN duplicate_effects INTEGER NOT NULL DEFAULT 0;

-- The reconciler's queue.
CREATE INDEX operations_uncertain ON operations (not_before) WHERE state = 'uncertain';
-- Work-queue claims across tenants.
CREATE INDEX operations_due_all ON operations (not_before) WHERE state = 'pending';
-- Stats per destination.
CREATE INDEX attempts_outcome ON attempts (tenant, outcome);
