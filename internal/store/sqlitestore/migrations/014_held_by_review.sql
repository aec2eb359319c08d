-- The held operations by review time: the console's exception queue lists
-- them earliest review first (Ledger.List with OrderReview), and the
-- figures count those whose review time has passed (Stats.ReviewsOverdue,
-- the metric opledger_reviews_overdue). Without it both would read every
-- held operation and sort them. Until now the queue read a bounded page of
-- the newest held operations, which could miss the most urgent ones.
--
-- Only held operations have an entry: a claim or a report never adds one
-- to it, so the write path of a protected operation pays next to nothing.
CREATE INDEX IF NOT EXISTS operations_held_review ON operations (tenant, review_by, key)
    WHERE state = 'held';
