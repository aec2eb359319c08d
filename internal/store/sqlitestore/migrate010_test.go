package sqlitestore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// TestMigration010IndexesAllButSucceeded migrates a version-9 database to
// 010: the list index by state and the lease index are gone, the new
// partial index holds every operation but the succeeded ones, and the
// reads that used the old indexes give the same answers: counts by state
// (the succeeded ones being the rest), lists by state page after page,
// with and without succeeded among the states, and expired leases.
func TestMigration010IndexesAllButSucceeded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db, exec := atVersion(t, 9)
	now := time.Now().UTC().Truncate(time.Microsecond)
	type row struct {
		tenant, key, state string
		created            int
		lease              time.Time // in_progress only
	}
	rows := []row{
		{"t", "a", "succeeded", 1, time.Time{}},
		{"t", "b", "held", 2, time.Time{}},
		{"t", "c", "succeeded", 2, time.Time{}},
		{"t", "d", "in_progress", 2, now.Add(-time.Minute)}, // expired
		{"t", "e", "failed", 3, time.Time{}},
		{"t", "f", "succeeded", 4, time.Time{}},
		{"t", "g", "held", 5, time.Time{}},
		{"t", "h", "in_progress", 6, now.Add(time.Hour)}, // running
		{"u", "a", "succeeded", 1, time.Time{}},
		{"u", "b", "in_progress", 1, now.Add(-time.Second)}, // expired
	}
	for _, r := range rows {
		exec(`INSERT INTO operations (tenant, key, action, destination, version, fingerprint, payload, state,
			lease_expires_at, revision, created_at, updated_at) VALUES (?, ?, 'act', 'dest', 1, 'fp', X'7B7D', ?, ?, 1, ?, ?)`,
			r.tenant, r.key, r.state, toMicros(r.lease), r.created, r.created)
	}
	require.NoError(t, db.Close())

	s := openMigrated(t, path, 9, "010_states_but_succeeded.sql")

	var names []string
	q, err := s.reader.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'operations' ORDER BY name`)
	require.NoError(t, err)
	for q.Next() {
		var n string
		require.NoError(t, q.Scan(&n))
		names = append(names, n)
	}
	require.NoError(t, q.Err())
	require.NoError(t, q.Close())
	require.Contains(t, names, "operations_not_succeeded")
	require.NotContains(t, names, "operations_tenant_state_created")
	require.NotContains(t, names, "operations_lease")
	var indexed, check string
	require.NoError(t, s.reader.QueryRowContext(ctx, `SELECT group_concat(key, ',') FROM (SELECT tenant || ':' || key AS key
		FROM operations INDEXED BY operations_not_succeeded WHERE `+notSucceeded+` ORDER BY tenant, key)`).Scan(&indexed))
	require.Equal(t, "t:b,t:d,t:e,t:g,t:h,u:b", indexed)
	require.NoError(t, s.reader.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check))
	require.Equal(t, "ok", check)

	view := func(fn func(r store.Reader) error) {
		t.Helper()
		require.NoError(t, s.View(ctx, func(_ context.Context, r store.Reader) error { return fn(r) }))
	}
	view(func(r store.Reader) error {
		counts, err := r.CountByState(ctx, "t")
		require.NoError(t, err)
		require.Equal(t, map[string]int{"succeeded": 3, "held": 2, "in_progress": 2, "failed": 1}, counts)
		counts, err = r.CountByState(ctx, "nobody")
		require.NoError(t, err)
		require.Empty(t, counts, "no operations, no succeeded ones")
		st, err := r.Stats(ctx, "", nil)
		require.NoError(t, err)
		require.Equal(t, map[string]int{"succeeded": 4, "held": 2, "in_progress": 3, "failed": 1}, st.ByState)
		require.Equal(t, 4, st.ConfirmedEffects)
		expired, err := r.ExpiredLeases(ctx, now, store.OperationID{}, 10)
		require.NoError(t, err)
		require.ElementsMatch(t, []store.OperationID{{Tenant: "t", Key: "d"}, {Tenant: "u", Key: "b"}}, expired)
		return nil
	})

	list := func(states ...string) (keys []string) {
		t.Helper()
		p := store.ListParams{Tenant: "t", States: states, Limit: 2}
		for {
			var page []*store.Operation
			view(func(r store.Reader) error {
				page, err = r.ListOperations(ctx, p)
				return err
			})
			for _, op := range page {
				keys = append(keys, op.Key)
			}
			if len(page) < p.Limit {
				return keys
			}
			last := page[len(page)-1]
			p.AfterAt, p.AfterKey = last.CreatedAt, last.Key
		}
	}
	require.Equal(t, []string{"h", "g", "f", "e", "d", "c", "b", "a"}, list())
	require.Equal(t, []string{"g", "b"}, list("held"))
	require.Equal(t, []string{"f", "c", "a"}, list("succeeded"))
	require.Equal(t, []string{"g", "f", "c", "b", "a"}, list("held", "succeeded"))
	require.Equal(t, []string{"h", "g", "e", "d", "b"}, list("held", "in_progress", "failed"))
}
