package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The loaders below write a ledger that has run for a while directly with
// SQL. They serve the plan tests and benchmarks of package pgstore and
// opledger bench --preload; nothing in the ledger itself calls them.

// SyntheticMix describes the operations LoadSynthetic writes, per 100 rows:
// what a ledger that has run for a while holds.
const SyntheticMix = "90 succeeded, 5 pending with a retry scheduled a day ahead, 2 held, 1 failed, " +
	"1 uncertain with its reconciliation deferred a day, 1 in_progress under a lease running for an hour"

// LoadSynthetic inserts n operations of tenant into the schema the store
// created (the DSN's search_path), directly with INSERT … SELECT over
// generate_series instead of through the ledger, then runs ANALYZE. As a
// bulk load does, it drops the secondary indexes of the tables it fills
// and creates them again from their own definitions afterwards, which is
// several times faster than maintaining them row by row. None of
// them is due: claims, lease expiry and reconciliation find nothing among
// them, but every index holds its share. With history, each operation also
// gets one attempt and three timeline entries, as a recorded, claimed and
// finished operation has. Keys are "bulk:00000001" and on.
func LoadSynthetic(ctx context.Context, dsn, tenant string, n int, history bool) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	stmts := []string{`INSERT INTO operations (tenant, key, action, destination, version, fingerprint, payload,
		owner, state, failure_kind, dispatched, first_dispatched_at, attempt_count, fencing_token,
		current_attempt_id, lease_expires_at, not_before, review_by, unresolved_since, destination_ref,
		response, last_error, revision, created_at, updated_at, state_since)
	SELECT $1, 'bulk:' || lpad(i::text, 8, '0'), 'crm.create_record', CASE WHEN i % 2 = 0 THEN 'crm' ELSE 'mail' END,
		1, 'sha256:' || md5(i::text), convert_to('{"n":' || i || '}', 'UTF8'), 'bulk-team', st,
		CASE WHEN st = 'failed' THEN 'rejected' ELSE '' END,
		st <> 'pending', CASE WHEN st <> 'pending' THEN c + interval '1 second' END, 1, 1,
		'bulk-' || lpad(i::text, 8, '0'),
		CASE WHEN st = 'in_progress' THEN now() + interval '1 hour' END,
		CASE WHEN st IN ('pending', 'uncertain') THEN now() + interval '1 day' + i * interval '1 millisecond' END,
		CASE WHEN st = 'held' THEN now() + interval '1 day' END,
		CASE WHEN st IN ('held', 'uncertain') THEN c + interval '2 seconds' END,
		CASE WHEN st = 'succeeded' THEN 'REF-' || i ELSE '' END,
		CASE WHEN st = 'succeeded' THEN convert_to('{"id":"REF-' || i || '"}', 'UTF8') END,
		CASE WHEN st IN ('failed', 'pending', 'uncertain', 'held') THEN 'synthetic' ELSE '' END,
		3, c, c + interval '2 seconds', c + interval '2 seconds'
	FROM (SELECT i, now() - ($2::int - i) * interval '1 second' AS c,
			CASE WHEN i % 100 < 90 THEN 'succeeded' WHEN i % 100 < 95 THEN 'pending'
				WHEN i % 100 < 97 THEN 'held' WHEN i % 100 = 97 THEN 'failed'
				WHEN i % 100 = 98 THEN 'uncertain' ELSE 'in_progress' END AS st
		FROM generate_series(1, $2::int) AS i) g`}
	if history {
		stmts = append(stmts,
			`INSERT INTO attempts (id, tenant, key, number, fencing_token, worker, claimed_at, lease_expires_at,
				dispatched_at, finished_at, outcome, destination_ref, destination)
			SELECT current_attempt_id, tenant, key, 1, 1, 'bulk-worker', created_at, created_at + interval '30 seconds',
				first_dispatched_at, CASE WHEN state <> 'in_progress' THEN updated_at END,
				CASE state WHEN 'succeeded' THEN 'succeeded' WHEN 'failed' THEN 'rejected' WHEN 'pending' THEN 'retryable'
					WHEN 'in_progress' THEN '' ELSE 'uncertain' END, destination_ref, destination
			FROM operations WHERE tenant = $1 AND key LIKE 'bulk:%'`,
			`INSERT INTO timeline (tenant, key, at, actor, attempt_id, event, from_state, to_state, evidence)
			SELECT tenant, key, created_at + s.n * interval '1 second', 'bulk-worker', CASE WHEN s.n > 0 THEN current_attempt_id ELSE '' END,
				(ARRAY['recorded', 'claimed', state])[s.n + 1],
				(ARRAY['', 'pending', 'in_progress'])[s.n + 1],
				(ARRAY['pending', 'in_progress', state])[s.n + 1], 'synthetic'
			FROM operations CROSS JOIN generate_series(0, 2) AS s(n)
			WHERE tenant = $1 AND key LIKE 'bulk:%' AND (s.n < 2 OR state <> 'in_progress')`)
	}
	// Secondary indexes, not those backing a primary key or unique
	// constraint, of the tables loaded.
	rows, err := conn.Query(ctx, `SELECT i.indexname, i.indexdef FROM pg_indexes i
		WHERE i.schemaname = current_schema() AND i.tablename IN ('operations', 'attempts', 'timeline')
		AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname
			AND c.connamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()))`)
	if err != nil {
		return fmt.Errorf("list indexes: %w", err)
	}
	type index struct{ name, def string }
	indexes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (index, error) {
		var ix index
		err := r.Scan(&ix.name, &ix.def)
		return ix, err
	})
	if err != nil {
		return fmt.Errorf("list indexes: %w", err)
	}
	if _, err := conn.Exec(ctx, `SET maintenance_work_mem = '256MB'`); err != nil {
		return err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, ix := range indexes {
		if _, err := tx.Exec(ctx, `DROP INDEX `+pgx.Identifier{ix.name}.Sanitize()); err != nil {
			return fmt.Errorf("drop index %s: %w", ix.name, err)
		}
	}
	for i, q := range stmts {
		args := []any{tenant}
		if i == 0 {
			args = append(args, n)
		}
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			return fmt.Errorf("load synthetic operations: %w", err)
		}
	}
	for _, ix := range indexes {
		if _, err := tx.Exec(ctx, ix.def); err != nil {
			return fmt.Errorf("recreate index %s: %w", ix.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `ANALYZE operations; ANALYZE attempts; ANALYZE timeline`)
	return err
}

// InsertDue inserts n pending operations of tenant that are due now (a
// new record has no not_before), keyed prefix + "00000001" and on, directly
// with SQL, and returns how long that took.
func InsertDue(ctx context.Context, dsn, tenant, prefix string, n int) (time.Duration, error) {
	start := time.Now()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, `INSERT INTO operations (tenant, key, action, destination, version, fingerprint, payload,
		owner, state, revision, created_at, updated_at, state_since)
	SELECT $1, $2 || lpad(i::text, 8, '0'), 'crm.create_record', 'crm', 1, 'sha256:' || md5($2 || i),
		convert_to('{"n":' || i || '}', 'UTF8'), 'bench-team', 'pending', 1, now(), now(), now()
	FROM generate_series(1, $3::int) AS i`, tenant, prefix, n)
	if err != nil {
		return 0, fmt.Errorf("insert due operations: %w", err)
	}
	return time.Since(start), nil
}
