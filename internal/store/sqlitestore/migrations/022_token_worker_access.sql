-- A token's access is one of three words: read-write, read-only (021's
-- read_only), or worker, which may do everything an automation does but
-- take no operator's decision (resolve, approve). The words replace the
-- flag, which is kept, true for every token but a read-write one, for the
-- processes of the release before that still run while this migration is
-- made: they go on authenticating (reads answer; their writes are refused
-- by the schema check anyway), and never take a worker token for a
-- read-write one. A later migration may drop it.
ALTER TABLE tokens ADD COLUMN access TEXT NOT NULL DEFAULT 'read-write'
    CHECK (access IN ('read-write', 'read-only', 'worker'));
UPDATE tokens SET access = 'read-only' WHERE read_only <> 0;
