-- PostgreSQL twin of sqlitestore's 002_tokens_stats.sql.

-- API tokens: only the SHA-256 of the secret is stored.
CREATE TABLE tokens (
    id         text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant     text COLLATE "C" NOT NULL,
    name       text        NOT NULL,
    hash       text        NOT NULL UNIQUE,
    created_at timestamptz NOT NULL,
    revoked_at timestamptz
);
CREATE INDEX tokens_tenant ON tokens (tenant, created_at);

-- Operator decisions on unresolved operations, for the recovery-time figures.
CREATE TABLE recoveries (
    id       bigserial PRIMARY KEY,
    tenant   text COLLATE "C" NOT NULL,
    key      text COLLATE "C" NOT NULL,
    decision text        NOT NULL,
    at       timestamptz NOT NULL,
    waited   bigint      NOT NULL -- microseconds
);
CREATE INDEX recoveries_tenant ON recoveries (tenant, waited);

-- Attempt counts of compacted operations, so that totals never go down.
CREATE TABLE compacted_attempts (
    tenant      text COLLATE "C" NOT NULL,
    destination text   NOT NULL,
    outcome     text   NOT NULL,
    count       bigint NOT NULL,
    PRIMARY KEY (tenant, destination, outcome)
);

ALTER TABLE tombstones ADD COLUMN duplicate_effects integer NOT NULL DEFAULT 0;

-- The reconciler's queue.
CREATE INDEX operations_uncertain ON operations ((COALESCE(not_before, '-infinity'::timestamptz)))
    WHERE state = 'uncertain';
-- Work-queue claims across tenants.
CREATE INDEX operations_due_all ON operations ((COALESCE(not_before, '-infinity'::timestamptz)))
    WHERE state = 'pending';
-- Stats per destination.
CREATE INDEX attempts_outcome ON attempts (tenant, outcome);
