-- When a protected retry is released, the end of the destination's
-- idempotency-key retention: a protected attempt is never claimed or
-- dispatched after it. Unix microseconds in UTC; 0 means "not set".
ALTER TABLE operations ADD COLUMN protected_until INTEGER NOT NULL DEFAULT 0;
