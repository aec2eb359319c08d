-- PostgreSQL twin of sqlitestore's 001_init.sql: same tables, columns and
-- indexes, same version number. Times are timestamptz in UTC with
-- microsecond precision; NULL means "not set" (Go's zero time). Tenants and
-- keys compare bytewise (COLLATE "C"), as in SQLite, so list order and
-- cursors do not depend on the database's locale.
CREATE TABLE operations (
    tenant              text COLLATE "C" NOT NULL,
    key                 text COLLATE "C" NOT NULL,
    action              text        NOT NULL,
    destination         text        NOT NULL,
    version             bigint      NOT NULL,
    fingerprint         text        NOT NULL,
    payload             bytea       NOT NULL,
    sensitive_fields    text[]      NOT NULL DEFAULT '{}',
    owner               text        NOT NULL DEFAULT '',
    source_event        text        NOT NULL DEFAULT '',
    requires_approval   boolean     NOT NULL DEFAULT false,
    approved_by         text        NOT NULL DEFAULT '',
    state               text        NOT NULL,
    failure_kind        text        NOT NULL DEFAULT '',
    dispatched          boolean     NOT NULL DEFAULT false,
    first_dispatched_at timestamptz,
    attempt_count       integer     NOT NULL DEFAULT 0,
    fencing_token       bigint      NOT NULL DEFAULT 0,
    current_attempt_id  text        NOT NULL DEFAULT '',
    lease_expires_at    timestamptz,
    not_before          timestamptz,
    review_by           timestamptz,
    unresolved_since    timestamptz,
    protected           boolean     NOT NULL DEFAULT false,
    destination_ref     text        NOT NULL DEFAULT '',
    response            bytea,
    last_error          text        NOT NULL DEFAULT '',
    duplicate_effects   integer     NOT NULL DEFAULT 0,
    revision            bigint      NOT NULL,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    PRIMARY KEY (tenant, key)
);

-- Lists, newest first, per tenant and optionally per state.
CREATE INDEX operations_tenant_created ON operations (tenant, created_at DESC, key DESC);
CREATE INDEX operations_tenant_state_created ON operations (tenant, state, created_at DESC, key DESC);
-- The lease sweeper and the work-queue claim. An unset not_before sorts
-- first, as 0 does in SQLite.
CREATE INDEX operations_lease ON operations (lease_expires_at) WHERE state = 'in_progress';
CREATE INDEX operations_due ON operations (tenant, (COALESCE(not_before, '-infinity'::timestamptz)))
    WHERE state = 'pending';
-- Retention.
CREATE INDEX operations_final ON operations (updated_at) WHERE state IN ('succeeded', 'failed');

CREATE TABLE attempts (
    id               text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant           text COLLATE "C" NOT NULL,
    key              text COLLATE "C" NOT NULL,
    number           integer     NOT NULL,
    fencing_token    bigint      NOT NULL,
    worker           text        NOT NULL,
    protected        boolean     NOT NULL DEFAULT false,
    claimed_at       timestamptz NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    dispatched_at    timestamptz,
    finished_at      timestamptz,
    outcome          text        NOT NULL DEFAULT '',
    destination_ref  text        NOT NULL DEFAULT '',
    response         bytea,
    error            text        NOT NULL DEFAULT '',
    stale            boolean     NOT NULL DEFAULT false
);
CREATE INDEX attempts_operation ON attempts (tenant, key, number);

CREATE TABLE timeline (
    id         bigserial   PRIMARY KEY,
    tenant     text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    at         timestamptz NOT NULL,
    actor      text        NOT NULL,
    attempt_id text        NOT NULL DEFAULT '',
    event      text        NOT NULL,
    from_state text        NOT NULL DEFAULT '',
    to_state   text        NOT NULL DEFAULT '',
    evidence   text        NOT NULL DEFAULT ''
);
CREATE INDEX timeline_operation ON timeline (tenant, key, id);

CREATE TABLE tombstones (
    tenant          text COLLATE "C" NOT NULL,
    key             text COLLATE "C" NOT NULL,
    fingerprint     text        NOT NULL,
    state           text        NOT NULL,
    failure_kind    text        NOT NULL DEFAULT '',
    destination_ref text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    finished_at     timestamptz NOT NULL,
    compacted_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX tombstones_compacted ON tombstones (compacted_at);
