-- When an operation entered its state: the wait of an operation awaiting
-- approval, or failed, is counted from it, where updated_at restarted
-- with every write (an owner a repeat added, a sensitive field). For an
-- operation awaiting approval, a revision counts as entering the state:
-- the version that awaits approval is new. Unix microseconds in UTC.
--
-- The operations not succeeded take it from their timeline: the latest
-- entry into their state (or revision), or, when retention left none,
-- their last change. The succeeded ones, nearly all of a ledger, keep 0,
-- which the ledger reads as their last change, so that the migration
-- does not write every row.
ALTER TABLE operations ADD COLUMN state_since INTEGER NOT NULL DEFAULT 0;
UPDATE operations SET state_since = coalesce((
        SELECT max(t.at) FROM timeline t
        WHERE t.operation_id = operations.id AND t.to_state = operations.state
          AND (t.from_state <> t.to_state OR t.event = 'revised')),
    updated_at)
WHERE state <> 'succeeded';
