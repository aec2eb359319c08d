-- Inbound events, their deliveries, tracked objects and workflows.
-- Times are Unix microseconds in UTC; 0 means "not set".

-- One row per (tenant, source, event_id): the unique key is what makes a
-- repeated delivery a duplicate, even when two arrive at the same moment.
-- Only a digest of the payload is kept.
CREATE TABLE events (
    tenant         TEXT    NOT NULL,
    source         TEXT    NOT NULL,
    event_id       TEXT    NOT NULL,
    type           TEXT    NOT NULL,
    occurred_at    INTEGER NOT NULL DEFAULT 0,
    payload_sha256 TEXT    NOT NULL,
    rule           TEXT    NOT NULL DEFAULT '',
    status         TEXT    NOT NULL,
    reason         TEXT    NOT NULL DEFAULT '',
    object_key     TEXT    NOT NULL DEFAULT '',
    order_value    TEXT    NOT NULL DEFAULT '',
    operations     TEXT    NOT NULL DEFAULT '[]',
    received_at    INTEGER NOT NULL,
    PRIMARY KEY (tenant, source, event_id)
) WITHOUT ROWID;
CREATE INDEX events_received ON events (tenant, received_at DESC, source DESC, event_id DESC);
CREATE INDEX events_status ON events (tenant, status);

-- Every arrival, the first one included.
CREATE TABLE deliveries (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant         TEXT    NOT NULL,
    source         TEXT    NOT NULL,
    event_id       TEXT    NOT NULL,
    delivery_id    TEXT    NOT NULL DEFAULT '',
    received_at    INTEGER NOT NULL,
    duplicate      INTEGER NOT NULL DEFAULT 0,
    payload_sha256 TEXT    NOT NULL
);
CREATE INDEX deliveries_event ON deliveries (tenant, source, event_id, id);
CREATE INDEX deliveries_tenant ON deliveries (tenant, duplicate);

-- The newest applied position of each object that a rule orders.
CREATE TABLE event_objects (
    tenant      TEXT    NOT NULL,
    source      TEXT    NOT NULL,
    object_key  TEXT    NOT NULL,
    order_value TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    revision    INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, source, object_key)
) WITHOUT ROWID;

-- Workflows: ordered steps, each an operation keyed <key>/<step>.
CREATE TABLE workflows (
    tenant       TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    fingerprint  TEXT    NOT NULL,
    definition   BLOB    NOT NULL,
    owner        TEXT    NOT NULL DEFAULT '',
    current_step INTEGER NOT NULL DEFAULT 0,
    current_key  TEXT    NOT NULL DEFAULT '',
    done         INTEGER NOT NULL DEFAULT 0,
    revision     INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (tenant, key)
) WITHOUT ROWID;
-- The advance sweeper: open workflows by their current step.
CREATE INDEX workflows_open ON workflows (tenant, current_key) WHERE done = 0;
