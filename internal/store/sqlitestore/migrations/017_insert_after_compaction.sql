-- Nothing to do on SQLite: its writes are serialized, so an insert never
-- overlaps the compaction of its key. PostgreSQL's 017 adds the check that
-- an insert made concurrently with a compaction needs; the versions of the
-- two stores stay equal.
SELECT 1;
