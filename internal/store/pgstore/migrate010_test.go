package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// TestMigration010IndexesAllButSucceeded migrates a version-9 schema to
// 010: the list index by state and the lease index are gone, the new
// partial index holds every operation but the succeeded ones, and counts
// by state (the succeeded ones being the rest) and expired leases are
// what they were.
func TestMigration010IndexesAllButSucceeded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, conn, exec := schemaAtVersion(t, 9)
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, r := range []struct {
		tenant, key, state string
		lease              time.Time // in_progress only
	}{
		{"t", "a", "succeeded", time.Time{}},
		{"t", "b", "held", time.Time{}},
		{"t", "c", "succeeded", time.Time{}},
		{"t", "d", "in_progress", now.Add(-time.Minute)}, // expired
		{"t", "e", "failed", time.Time{}},
		{"t", "h", "in_progress", now.Add(time.Hour)}, // running
		{"u", "a", "succeeded", time.Time{}},
		{"u", "b", "in_progress", now.Add(-time.Second)}, // expired
	} {
		exec(`INSERT INTO operations (tenant, key, action, destination, version, fingerprint, payload, state,
			lease_expires_at, revision, created_at, updated_at) VALUES ($1, $2, 'act', 'dest', 1, 'fp', '\x7b7d', $3, $4, 1, now(), now())`,
			r.tenant, r.key, r.state, ts(r.lease))
	}

	s := migrateFrom(t, dsn, 9, "010_states_but_succeeded.sql")

	rows, err := conn.Query(ctx, `SELECT indexname || ': ' || indexdef FROM pg_indexes WHERE tablename = 'operations'
		AND schemaname = current_schema() AND indexname IN ('operations_not_succeeded', 'operations_tenant_state_created', 'operations_lease')`)
	require.NoError(t, err)
	defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, defs, 1)
	require.Contains(t, defs[0], "operations_not_succeeded: CREATE INDEX")
	require.Contains(t, defs[0], "WHERE (state <> 'succeeded'::text)")

	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		counts, err := r.CountByState(ctx, "t")
		require.NoError(t, err)
		require.Equal(t, map[string]int{"succeeded": 2, "held": 1, "in_progress": 2, "failed": 1}, counts)
		st, err := r.Stats(ctx, "", nil)
		require.NoError(t, err)
		require.Equal(t, map[string]int{"succeeded": 3, "held": 1, "in_progress": 3, "failed": 1}, st.ByState)
		require.Equal(t, 3, st.ConfirmedEffects)
		expired, err := r.ExpiredLeases(ctx, now, store.OperationID{}, 10)
		require.NoError(t, err)
		require.ElementsMatch(t, []store.OperationID{{Tenant: "t", Key: "d"}, {Tenant: "u", Key: "b"}}, expired)
		return nil
	}))
}
