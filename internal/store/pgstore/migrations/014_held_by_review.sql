-- PostgreSQL twin of sqlitestore's 014_held_by_review.sql: the held
-- operations by review time, for the exception queue (Ledger.List with
-- OrderReview) and the count of overdue reviews (Stats.ReviewsOverdue,
-- the metric opledger_reviews_overdue). Only held operations have an
-- entry, so a claim or a report of a protected operation adds none.
-- Queries name the state as a literal ('held') so that the planner can
-- prove the index holds every row they want.
CREATE INDEX IF NOT EXISTS operations_held_review ON operations (tenant, review_by, key)
    WHERE state = 'held';
