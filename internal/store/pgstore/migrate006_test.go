package pgstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/store/migrate"
	"github.com/opledger/opledger/internal/testdb"
)

// TestMigration006CopiesDestinations migrates a version-5 schema to 006:
// every attempt gets its operation's destination (one whose operation is
// gone gets none), Stats counts attempts by destination from the attempts
// alone and sums duplicate effects from the new partial index.
func TestMigration006CopiesDestinations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, conn, exec := schemaAtVersion(t, 5)
	for i, op := range []struct{ key, dest string }{{"a", "crm"}, {"b", "email"}} {
		exec(`INSERT INTO operations (tenant, key, action, destination, version, fingerprint, payload, state,
			revision, duplicate_effects, created_at, updated_at) VALUES ('t', $1, 'act', $2, 1, 'fp', '\x7b7d', 'succeeded', 1, $3, now(), now())`,
			op.key, op.dest, i+1)
		for n := 1; n <= 2; n++ {
			exec(`INSERT INTO attempts (id, tenant, key, number, fencing_token, worker, claimed_at, lease_expires_at, outcome)
				VALUES ($1, 't', $2, $3, $4, 'w', now(), now(), 'succeeded')`, "att-"+op.key+string(rune('0'+n)), op.key, n, n)
		}
	}
	exec(`INSERT INTO attempts (id, tenant, key, number, fencing_token, worker, claimed_at, lease_expires_at, outcome)
		VALUES ('att-gone', 't', 'gone', 1, 1, 'w', now(), now(), 'rejected')`)

	s := migrateFrom(t, dsn, 5, "006_stats_without_join.sql")

	dest := map[string]string{}
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		for _, key := range []string{"a", "b", "gone"} {
			as, err := r.ListAttempts(ctx, "t", key)
			if err != nil {
				return err
			}
			for _, a := range as {
				dest[a.ID] = a.Destination
			}
		}
		return nil
	}))
	require.Equal(t, map[string]string{"att-a1": "crm", "att-a2": "crm", "att-b1": "email", "att-b2": "email", "att-gone": ""}, dest)

	var st *store.Stats
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		var err error
		st, err = r.Stats(ctx, "t", []time.Duration{time.Minute})
		return err
	}))
	require.Equal(t, []store.AttemptCount{{Destination: "", Outcome: "rejected", Count: 1},
		{Destination: "crm", Outcome: "succeeded", Count: 2}, {Destination: "email", Outcome: "succeeded", Count: 2}}, st.Attempts)
	require.Equal(t, 3, st.DuplicateEffects, "a has 1, b has 2")
	require.Equal(t, 2, st.ByState["succeeded"])

	// The duplicates' sum reads the partial index, not the table.
	exec(`ANALYZE operations`)
	exec(`SET enable_seqscan = off`)
	rows, err := conn.Query(ctx, `EXPLAIN SELECT COALESCE(SUM(duplicate_effects), 0)::bigint FROM operations
		WHERE ('t' = '' OR tenant = 't') AND duplicate_effects > 0`)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, strings.Join(lines, "\n"), "operations_duplicates")
}

// schemaAtVersion creates a schema as Migrate left it when version last
// was the newest migration, and returns its DSN, a connection to it
// (closed when the test ends) and a runner of statements that fails the
// test on error.
func schemaAtVersion(t *testing.T, last int) (string, *pgx.Conn, func(q string, args ...any)) {
	t.Helper()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := conn.Exec(ctx, q, args...)
		require.NoError(t, err, q)
	}
	migs, err := migrate.Load(migrationsFS, "migrations")
	require.NoError(t, err)
	exec(`CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`)
	for _, m := range migs {
		if m.Version > last {
			break
		}
		exec(m.SQL)
		exec(`INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
	}
	return dsn, conn, exec
}

// migrateFrom opens the store on the schema at dsn, at version last, and
// migrates it: it must apply every newer migration, the first being first.
// The store is closed when the test ends.
func migrateFrom(t *testing.T, dsn string, last int, first string) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	var applied []string
	require.NoError(t, s.Migrate(ctx, func(_, _ int, name string) { applied = append(applied, name) }))
	migs, err := migrate.Load(migrationsFS, "migrations")
	require.NoError(t, err)
	var want []string
	pending, err := migrate.Pending(migs, last)
	require.NoError(t, err)
	for _, m := range pending {
		want = append(want, m.Name)
	}
	require.Equal(t, want, applied)
	require.Equal(t, first, applied[0])
	return s
}
