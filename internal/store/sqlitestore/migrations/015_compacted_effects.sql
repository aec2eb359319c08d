-- The effects of compacted operations as running totals per tenant, as
-- compacted_attempts already keeps their attempts. Until now Stats counted
-- the confirmed and duplicate effects of compacted operations from their
-- tombstones: each read went through every tombstone (kept 400 days by
-- default, against 30 for full records, so up to thirteen times as many
-- rows as the operations), and when a tombstone was forgotten its effects
-- left the counts, so opledger_confirmed_effects_total and
-- opledger_duplicate_effects_total went down.
--
-- Compaction now adds each tombstone's effects to compacted_effects when it
-- writes the tombstone, and marks the tombstone counted. A tombstone not
-- counted (written by a process of an earlier release) is counted from its
-- row until it is forgotten, when its effects are added to the totals.
CREATE TABLE compacted_effects (
    tenant     TEXT    NOT NULL PRIMARY KEY,
    confirmed  INTEGER NOT NULL,
    duplicates INTEGER NOT NULL
) WITHOUT ROWID;

INSERT INTO compacted_effects (tenant, confirmed, duplicates)
    SELECT tenant, SUM(state = 'succeeded'), SUM(duplicate_effects) FROM tombstones GROUP BY tenant;

ALTER TABLE tombstones ADD COLUMN counted INTEGER NOT NULL DEFAULT 0;
UPDATE tombstones SET counted = 1;
CREATE INDEX tombstones_uncounted ON tombstones (tenant) WHERE counted = 0;
