-- When an operation entered its state: the wait of an operation awaiting
-- approval, or failed, is counted from it, where updated_at restarted
-- with every write (an owner a repeat added, a sensitive field). For an
-- operation awaiting approval, a revision counts as entering the state:
-- the version that awaits approval is new.
--
-- The operations not succeeded take it from their timeline: the latest
-- entry into their state (or revision), or, when retention left none,
-- their last change. The succeeded ones, nearly all of a ledger, keep
-- NULL, which the ledger reads as their last change, so that the
-- migration does not write every row.
ALTER TABLE operations ADD COLUMN state_since timestamptz;
UPDATE operations o SET state_since = coalesce((
        SELECT max(t.at) FROM timeline t
        WHERE t.tenant = o.tenant AND t.key = o.key AND t.to_state = o.state
          AND (t.from_state <> t.to_state OR t.event = 'revised')),
    o.updated_at)
WHERE o.state <> 'succeeded';
