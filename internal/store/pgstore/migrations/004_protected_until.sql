-- When a protected retry is released, the end of the destination's
-- idempotency-key retention: a protected attempt is never claimed or
-- dispatched after it.
ALTER TABLE operations ADD COLUMN protected_until timestamptz;
