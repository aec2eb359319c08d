package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// The loaders below write a ledger that has run for a while directly with
// SQL. They serve the plan tests and benchmarks of package sqlitestore and
// opledger bench --preload; nothing in the ledger itself calls them.

// SyntheticMix describes the operations LoadSynthetic writes, per 100 rows:
// what a ledger that has run for a while holds.
const SyntheticMix = "90 succeeded, 5 pending with a retry scheduled a day ahead, 2 held, 1 failed, " +
	"1 uncertain with its reconciliation deferred a day, 1 in_progress under a lease running for an hour"

// openRawDB opens the database file at path on a connection of its own.
func openRawDB(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", FileURI(path)+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// LoadSynthetic inserts n operations of tenant into the database file at
// path, whose tables the store has created, directly with one
// INSERT … SELECT over a recursive CTE instead of through the ledger, then
// runs ANALYZE. As a bulk load does, it drops the secondary indexes of the
// tables it fills and creates them again from their own definitions
// afterwards. None of the operations is due: claims, lease expiry and
// reconciliation find nothing among them, but every index holds its share.
// With history, each operation also gets one attempt and three timeline
// entries. Keys are "bulk:00000001" and on.
func LoadSynthetic(ctx context.Context, path, tenant string, n int, history bool) error {
	db, err := openRawDB(path)
	if err != nil {
		return err
	}
	defer db.Close()
	now := time.Now().UnixMicro()
	const day, hour, second = 86_400_000_000, 3_600_000_000, 1_000_000
	type stmt struct {
		q    string
		args []any
	}
	stmts := []stmt{{fmt.Sprintf(`WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?2),
		g AS (SELECT i, ?3 - (?2 - i) * %[3]d AS c,
			CASE WHEN i %% 100 < 90 THEN 'succeeded' WHEN i %% 100 < 95 THEN 'pending'
				WHEN i %% 100 < 97 THEN 'held' WHEN i %% 100 = 97 THEN 'failed'
				WHEN i %% 100 = 98 THEN 'uncertain' ELSE 'in_progress' END AS st FROM s)
	INSERT INTO operations (tenant, key, action, destination, version, fingerprint, payload,
		owner, state, failure_kind, dispatched, first_dispatched_at, attempt_count, fencing_token,
		current_attempt_id, lease_expires_at, not_before, review_by, unresolved_since, destination_ref,
		response, last_error, revision, created_at, updated_at, state_since)
	SELECT ?1, printf('bulk:%%08d', i), 'crm.create_record', CASE WHEN i %% 2 = 0 THEN 'crm' ELSE 'mail' END,
		1, printf('sha256:%%064x', i), CAST('{"n":' || i || '}' AS BLOB), 'bulk-team', st,
		CASE WHEN st = 'failed' THEN 'rejected' ELSE '' END,
		st <> 'pending', CASE WHEN st <> 'pending' THEN c + %[3]d ELSE 0 END, 1, 1,
		printf('bulk-%%08d', i),
		CASE WHEN st = 'in_progress' THEN ?3 + %[2]d ELSE 0 END,
		CASE WHEN st IN ('pending', 'uncertain') THEN ?3 + %[1]d + i * 1000 ELSE 0 END,
		CASE WHEN st = 'held' THEN ?3 + %[1]d ELSE 0 END,
		CASE WHEN st IN ('held', 'uncertain') THEN c + 2 * %[3]d ELSE 0 END,
		CASE WHEN st = 'succeeded' THEN 'REF-' || i ELSE '' END,
		CASE WHEN st = 'succeeded' THEN CAST('{"id":"REF-' || i || '"}' AS BLOB) END,
		CASE WHEN st IN ('failed', 'pending', 'uncertain', 'held') THEN 'synthetic' ELSE '' END,
		3, c, c + 2 * %[3]d, c + 2 * %[3]d
	FROM g`, day, hour, second), []any{tenant, n, now}}}
	if history {
		stmts = append(stmts,
			stmt{fmt.Sprintf(`INSERT INTO attempts (operation_id, id, tenant, key, number, fencing_token, worker, claimed_at, lease_expires_at,
				dispatched_at, finished_at, outcome, destination_ref, destination)
			SELECT id, current_attempt_id, tenant, key, 1, 1, 'bulk-worker', created_at, created_at + 30 * %[1]d,
				first_dispatched_at, CASE WHEN state <> 'in_progress' THEN updated_at ELSE 0 END,
				CASE state WHEN 'succeeded' THEN 'succeeded' WHEN 'failed' THEN 'rejected' WHEN 'pending' THEN 'retryable'
					WHEN 'in_progress' THEN '' ELSE 'uncertain' END, destination_ref, destination
			FROM operations WHERE tenant = ?1 AND key LIKE 'bulk:%%'`, second), []any{tenant}},
			stmt{fmt.Sprintf(`INSERT INTO timeline (operation_id, seq, tenant, key, at, actor, attempt_id, event, from_state, to_state, evidence)
			SELECT id, s.n + 1, tenant, key, created_at + s.n * %[1]d, 'bulk-worker', CASE WHEN s.n > 0 THEN current_attempt_id ELSE '' END,
				CASE s.n WHEN 0 THEN 'recorded' WHEN 1 THEN 'claimed' ELSE state END,
				CASE s.n WHEN 0 THEN '' WHEN 1 THEN 'pending' ELSE 'in_progress' END,
				CASE s.n WHEN 0 THEN 'pending' WHEN 1 THEN 'in_progress' ELSE state END, 'synthetic'
			FROM operations CROSS JOIN (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2) AS s
			WHERE tenant = ?1 AND key LIKE 'bulk:%%' AND (s.n < 2 OR state <> 'in_progress')`, second), []any{tenant}})
	}
	type index struct{ name, def string }
	rows, err := db.QueryContext(ctx, `SELECT name, sql FROM sqlite_master
		WHERE type = 'index' AND tbl_name IN ('operations', 'attempts', 'timeline') AND sql IS NOT NULL`)
	if err != nil {
		return fmt.Errorf("list indexes: %w", err)
	}
	var indexes []index
	for rows.Next() {
		var ix index
		if err := rows.Scan(&ix.name, &ix.def); err != nil {
			rows.Close()
			return fmt.Errorf("list indexes: %w", err)
		}
		indexes = append(indexes, ix)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list indexes: %w", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	for _, ix := range indexes {
		if _, err := tx.ExecContext(ctx, `DROP INDEX "`+ix.name+`"`); err != nil {
			return fmt.Errorf("drop index %s: %w", ix.name, err)
		}
	}
	for _, st := range stmts {
		if _, err := tx.ExecContext(ctx, st.q, st.args...); err != nil {
			return fmt.Errorf("load synthetic operations: %w", err)
		}
	}
	for _, ix := range indexes {
		if _, err := tx.ExecContext(ctx, ix.def); err != nil {
			return fmt.Errorf("recreate index %s: %w", ix.name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, `ANALYZE`)
	return err
}

// InsertDue inserts n pending operations of tenant that are due now (a
// new record has no not_before), keyed prefix + "00000001" and on, directly
// with SQL, and returns how long that took.
func InsertDue(ctx context.Context, path, tenant, prefix string, n int) (time.Duration, error) {
	start := time.Now()
	db, err := openRawDB(path)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	now := time.Now().UnixMicro()
	_, err = db.ExecContext(ctx, `WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?3)
	INSERT INTO operations (tenant, key, action, destination, version, fingerprint, payload,
		owner, state, revision, created_at, updated_at, state_since)
	SELECT ?1, ?2 || printf('%08d', i), 'crm.create_record', 'crm', 1, printf('sha256:%064x', i),
		CAST('{"n":' || i || '}' AS BLOB), 'bench-team', 'pending', 1, ?4, ?4, ?4
	FROM s`, tenant, prefix, n, now)
	if err != nil {
		return 0, fmt.Errorf("insert due operations: %w", err)
	}
	return time.Since(start), nil
}

// Analyze refreshes the planner's statistics of the database at path.
func Analyze(ctx context.Context, path string) error {
	db, err := openRawDB(path)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, `ANALYZE`)
	return err
}
