-- The payloads of an operation's earlier versions, kept when a revision
-- replaces the content of an operation with sensitive fields: a worker
-- that called without its dispatch mark may report on an earlier version
-- after the revision, and its error or reference may quote that
-- version's sensitive values, which are masked from what is stored and
-- shown as the current payload's are. A JSON array of payloads, oldest
-- first; NULL for an operation never revised so (nearly all).
ALTER TABLE operations ADD COLUMN earlier_payloads bytea;
