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
-- writes the tombstone, and marks the tombstone counted. The tombstones
-- there are now are counted here; the column's default then becomes false,
-- so that a tombstone written by a process of an earlier release, still
-- compacting while the others are upgraded, is counted from its row until
-- it is forgotten, when its effects are added to the totals. Neither ALTER
-- rewrites the table.
CREATE TABLE compacted_effects (
    tenant     text COLLATE "C" PRIMARY KEY,
    confirmed  bigint NOT NULL,
    duplicates bigint NOT NULL
);

ALTER TABLE tombstones ADD COLUMN counted boolean NOT NULL DEFAULT true;
ALTER TABLE tombstones ALTER COLUMN counted SET DEFAULT false;

INSERT INTO compacted_effects (tenant, confirmed, duplicates)
    SELECT tenant, COUNT(*) FILTER (WHERE state = 'succeeded'), COALESCE(SUM(duplicate_effects), 0)
    FROM tombstones GROUP BY tenant;

CREATE INDEX tombstones_uncounted ON tombstones (tenant) WHERE NOT counted;
