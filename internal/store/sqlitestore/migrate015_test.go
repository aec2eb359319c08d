package sqlitestore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// TestMigration015CarriesEffects migrates a version-14 database holding
// tombstones to 015: their effects become the running totals and the
// tombstones are marked counted. A tombstone written without the mark, as
// a process of an earlier release writes it, is counted from its row and
// carried into the totals when it is forgotten; forgetting tombstones
// changes no total, and replacing one moves its effects.
func TestMigration015CarriesEffects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db, exec := atVersion(t, 14)
	tombstone := `INSERT INTO tombstones (tenant, key, fingerprint, state, duplicate_effects, created_at, finished_at, compacted_at)
		VALUES (?, ?, 'fp', ?, ?, 1, 1, 1)`
	exec(tombstone, "t", "a", "succeeded", 1)
	exec(tombstone, "t", "b", "failed", 0)
	exec(tombstone, "t", "d", "succeeded", 2)
	exec(tombstone, "u", "c", "succeeded", 0)
	require.NoError(t, db.Close())

	s := openMigrated(t, path, 14, "015_compacted_effects.sql")
	effects := func(tenant string) (confirmed, duplicates int) {
		t.Helper()
		require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
			st, err := r.Stats(ctx, tenant, nil)
			confirmed, duplicates = st.ConfirmedEffects, st.DuplicateEffects
			return err
		}))
		return confirmed, duplicates
	}
	want := func(tenant string, confirmed, duplicates int, msg string) {
		t.Helper()
		c, d := effects(tenant)
		require.Equal(t, [2]int{confirmed, duplicates}, [2]int{c, d}, "%s: tenant %q, confirmed and duplicate effects", msg, tenant)
	}
	want("t", 2, 3, "migrated")
	want("u", 1, 0, "migrated")
	want("", 3, 3, "migrated")
	var uncounted int
	require.NoError(t, s.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM tombstones WHERE counted = 0`).Scan(&uncounted))
	require.Zero(t, uncounted, "the tombstones there were are in the totals")

	// A tombstone of an earlier release: no mark, counted from its row.
	_, err := s.wconn.ExecContext(ctx, tombstone, "t", "e", "succeeded", 1)
	require.NoError(t, err)
	want("t", 3, 4, "with a tombstone of an earlier release")

	// The uncounted part reads the partial index, not every tombstone.
	cond, args := tenantFilter("tenant", "t")
	rows, err := s.reader.QueryContext(ctx, "EXPLAIN QUERY PLAN "+statsCompactedSQL(cond), append(args, args...)...)
	require.NoError(t, err)
	var plan []string
	for rows.Next() {
		var id, parent, notUsed int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &notUsed, &detail))
		plan = append(plan, detail)
	}
	require.NoError(t, rows.Close())
	require.Contains(t, plan, "SEARCH tombstones USING INDEX tombstones_uncounted (tenant=?)")

	update := func(fn func(tx store.Tx) error) {
		t.Helper()
		require.NoError(t, s.Update(ctx, func(_ context.Context, tx store.Tx) error { return fn(tx) }))
	}
	// Forgetting every tombstone keeps every total.
	update(func(tx store.Tx) error {
		n, err := tx.DeleteTombstonesBefore(ctx, time.Now())
		require.Equal(t, 5, n)
		return err
	})
	want("t", 3, 4, "tombstones forgotten")
	want("u", 1, 0, "tombstones forgotten")
	want("", 4, 4, "tombstones forgotten")

	// Compaction writes counted tombstones and carries their effects;
	// replacing one takes the old effects out.
	now := time.Now()
	tb := &store.Tombstone{Tenant: "t", Key: "f", Fingerprint: "fp", State: "succeeded", CreatedAt: now, FinishedAt: now, CompactedAt: now}
	update(func(tx store.Tx) error { return tx.UpsertTombstone(ctx, tb) })
	want("t", 4, 4, "a compacted operation")
	tb.State, tb.DuplicateEffects = "failed", 2
	update(func(tx store.Tx) error { return tx.UpsertTombstone(ctx, tb) })
	want("t", 3, 6, "its tombstone replaced")
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		got, err := r.GetTombstone(ctx, "t", "f")
		require.NoError(t, err)
		require.Equal(t, "failed", got.State)
		return nil
	}))
	update(func(tx store.Tx) error {
		n, err := tx.DeleteTombstonesBefore(ctx, now.Add(time.Hour))
		require.Equal(t, 1, n)
		return err
	})
	want("t", 3, 6, "counted tombstone forgotten")
}
