-- Retention of inbound events and finished workflows (Ledger.Compact):
-- deliveries older than the retention period are deleted; events, tracked
-- objects and finished workflows older than the tombstone retention too.
-- What the events and deliveries counted moves here, so that the totals of
-- EventCounts never go down. Deliveries folded while their event stays are
-- counted under the empty status; a forgotten event under its own status,
-- with the deliveries it still had.
CREATE TABLE IF NOT EXISTS compacted_events (
    tenant               TEXT    NOT NULL,
    status               TEXT    NOT NULL,
    events               INTEGER NOT NULL DEFAULT 0,
    deliveries           INTEGER NOT NULL DEFAULT 0,
    duplicate_deliveries INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, status)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS deliveries_received ON deliveries (received_at);
CREATE INDEX IF NOT EXISTS events_received_all ON events (received_at);
CREATE INDEX IF NOT EXISTS event_objects_updated ON event_objects (updated_at);
CREATE INDEX IF NOT EXISTS workflows_done ON workflows (updated_at) WHERE done = 1;
