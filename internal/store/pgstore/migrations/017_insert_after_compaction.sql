-- The group writer inserts the operation of a key it guessed new with one
-- statement that skips keys with a tombstone. That check reads the
-- statement's snapshot; a compaction of the same key committing while the
-- insert waits on the row it deletes is not in that snapshot, so the
-- insert went ahead and a compacted key got a fresh operation (and its
-- action could run again). The statement now calls this function on the
-- row it inserted: being VOLATILE, it reads with a fresh snapshot, sees a
-- tombstone committed meanwhile, and aborts the transaction with a
-- serialization failure, which the writer treats as a lost race.
CREATE FUNCTION opledger_no_tombstone(p_tenant text, p_key text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM tombstones WHERE tenant = p_tenant AND key = p_key) THEN
		RAISE EXCEPTION 'operation inserted while its key was compacted'
			USING ERRCODE = 'serialization_failure';
	END IF;
	RETURN true;
END
$$;
