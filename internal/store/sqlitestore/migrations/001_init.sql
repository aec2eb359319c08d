-- Times are Unix microseconds in UTC; 0 means "not set".
CREATE TABLE operations (
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
    PRIMARY KEY (tenant, key)
) WITHOUT ROWID;

-- Lists, newest first, per tenant and optionally per state.
CREATE INDEX operations_tenant_created ON operations (tenant, created_at DESC, key DESC);
CREATE INDEX operations_tenant_state_created ON operations (tenant, state, created_at DESC, key DESC);
-- The lease sweeper and the work-queue claim.
CREATE INDEX operations_lease ON operations (lease_expires_at) WHERE state = 'in_progress';
CREATE INDEX operations_due ON operations (tenant, not_before) WHERE state = 'pending';
-- Retention.
CREATE INDEX operations_final ON operations (updated_at) WHERE state IN ('succeeded', 'failed');

CREATE TABLE attempts (
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
);
CREATE INDEX attempts_operation ON attempts (tenant, key, number);

CREATE TABLE timeline (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
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
CREATE INDEX timeline_operation ON timeline (tenant, key, id);

CREATE TABLE tombstones (
    tenant          TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    fingerprint     TEXT    NOT NULL,
    state           TEXT    NOT NULL,
    failure_kind    TEXT    NOT NULL DEFAULT '',
    destination_ref TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    finished_at     INTEGER NOT NULL,
    compacted_at    INTEGER NOT NULL,
    PRIMARY KEY (tenant, key)
) WITHOUT ROWID;
CREATE INDEX tombstones_compacted ON tombstones (compacted_at);
