package sqlitestore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// TestMigration006CopiesDestinations migrates a version-5 database to 006:
// every attempt gets its operation's destination (one whose operation is
// gone gets none), Stats counts attempts by destination from the attempts
// alone and sums duplicate effects from the new partial index.
func TestMigration006CopiesDestinations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db, exec := atVersion(t, 5)
	for _, op := range []struct{ key, dest string }{{"a", "crm"}, {"b", "email"}} {
		exec(`INSERT INTO operations (tenant, key, action, destination, version, fingerprint, payload, state,
			revision, duplicate_effects, created_at, updated_at) VALUES ('t', ?, 'act', ?, 1, 'fp', X'7B7D', 'succeeded', 1, ?, 1, 1)`,
			op.key, op.dest, len(op.key))
		for n := 1; n <= 2; n++ {
			exec(`INSERT INTO attempts (id, tenant, key, number, fencing_token, worker, claimed_at, lease_expires_at, outcome)
				VALUES (?, 't', ?, ?, ?, 'w', 1, 2, 'succeeded')`, "att-"+op.key+string(rune('0'+n)), op.key, n, n)
		}
	}
	exec(`INSERT INTO attempts (id, tenant, key, number, fencing_token, worker, claimed_at, lease_expires_at, outcome)
		VALUES ('att-gone', 't', 'gone', 1, 1, 'w', 1, 2, 'rejected')`)
	require.NoError(t, db.Close())

	s := openMigrated(t, path, 5, "006_stats_without_join.sql")

	// Read from the table: the attempt whose operation is gone has no
	// operation to be listed with.
	dest := map[string]string{}
	rows, err := s.reader.QueryContext(ctx, `SELECT id, destination FROM attempts`)
	require.NoError(t, err)
	for rows.Next() {
		var id, d string
		require.NoError(t, rows.Scan(&id, &d))
		dest[id] = d
	}
	require.NoError(t, rows.Err())
	rows.Close()
	require.Equal(t, map[string]string{"att-a1": "crm", "att-a2": "crm", "att-b1": "email", "att-b2": "email", "att-gone": ""}, dest)

	var st *store.Stats
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		var err error
		st, err = r.Stats(ctx, "t", []time.Duration{time.Minute})
		return err
	}))
	require.Equal(t, []store.AttemptCount{{Destination: "", Outcome: "rejected", Count: 1},
		{Destination: "crm", Outcome: "succeeded", Count: 2}, {Destination: "email", Outcome: "succeeded", Count: 2}}, st.Attempts)
	require.Equal(t, 2, st.DuplicateEffects, "a has 1, b has 1")
	require.Equal(t, 2, st.ByState["succeeded"])

	// Both Stats reads of operations stay off the table rows.
	plan := func(q string, args ...any) string {
		t.Helper()
		rows, err := s.reader.QueryContext(ctx, `EXPLAIN QUERY PLAN `+q, args...)
		require.NoError(t, err)
		defer rows.Close()
		var out string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
			out += detail + "\n"
		}
		return out
	}
	for _, tenant := range []string{"t", ""} {
		cond, args := tenantFilter("tenant", tenant)
		require.Contains(t, plan(statsDuplicatesSQL(cond), args...), "USING COVERING INDEX operations_duplicates", "tenant %q", tenant)
		require.Contains(t, plan(countByStateSQL(cond), append(slices.Clone(args), args...)...), "COVERING INDEX operations_not_succeeded", "tenant %q", tenant)
	}
}
