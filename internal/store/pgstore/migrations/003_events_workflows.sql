-- PostgreSQL twin of sqlitestore's 003_events_workflows.sql: inbound
-- events, their deliveries, tracked objects and workflows.

-- One row per (tenant, source, event_id): the unique key is what makes a
-- repeated delivery a duplicate, even when two arrive at the same moment.
-- Only a digest of the payload is kept.
CREATE TABLE events (
    tenant         text COLLATE "C" NOT NULL,
    source         text COLLATE "C" NOT NULL,
    event_id       text COLLATE "C" NOT NULL,
    type           text        NOT NULL,
    occurred_at    timestamptz,
    payload_sha256 text        NOT NULL,
    rule           text        NOT NULL DEFAULT '',
    status         text        NOT NULL,
    reason         text        NOT NULL DEFAULT '',
    object_key     text        NOT NULL DEFAULT '',
    order_value    text        NOT NULL DEFAULT '',
    operations     text[]      NOT NULL DEFAULT '{}',
    received_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant, source, event_id)
);
CREATE INDEX events_received ON events (tenant, received_at DESC, source DESC, event_id DESC);
CREATE INDEX events_status ON events (tenant, status);

-- Every arrival, the first one included.
CREATE TABLE deliveries (
    id             bigserial   PRIMARY KEY,
    tenant         text COLLATE "C" NOT NULL,
    source         text COLLATE "C" NOT NULL,
    event_id       text COLLATE "C" NOT NULL,
    delivery_id    text        NOT NULL DEFAULT '',
    received_at    timestamptz NOT NULL,
    duplicate      boolean     NOT NULL DEFAULT false,
    payload_sha256 text        NOT NULL
);
CREATE INDEX deliveries_event ON deliveries (tenant, source, event_id, id);
CREATE INDEX deliveries_tenant ON deliveries (tenant, duplicate);

-- The newest applied position of each object that a rule orders.
CREATE TABLE event_objects (
    tenant      text COLLATE "C" NOT NULL,
    source      text COLLATE "C" NOT NULL,
    object_key  text COLLATE "C" NOT NULL,
    order_value text        NOT NULL,
    event_id    text        NOT NULL,
    revision    bigint      NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant, source, object_key)
);

-- Workflows: ordered steps, each an operation keyed <key>/<step>.
CREATE TABLE workflows (
    tenant       text COLLATE "C" NOT NULL,
    key          text COLLATE "C" NOT NULL,
    fingerprint  text        NOT NULL,
    definition   bytea       NOT NULL,
    owner        text        NOT NULL DEFAULT '',
    current_step integer     NOT NULL DEFAULT 0,
    current_key  text COLLATE "C" NOT NULL DEFAULT '',
    done         boolean     NOT NULL DEFAULT false,
    revision     bigint      NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant, key)
);
-- The advance sweeper: open workflows by their current step.
CREATE INDEX workflows_open ON workflows (tenant, current_key) WHERE NOT done;
